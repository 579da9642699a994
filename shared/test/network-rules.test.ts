import { describe, expect, it } from 'vitest';
import {
  type NetworkAllowRule,
  type RequestTarget,
  ceilingCovers,
  covers,
  parseNetworkAllowRule,
  parseNetworkAllowRules,
  requestTargetOf,
  ruleMatches,
} from '@murmur/shared';
import { refusalOf as refusal } from '../../test/support/refusals.js';

function target(url: string): RequestTarget {
  const parsed = requestTargetOf(url);
  if (parsed === undefined) throw new Error(`expected '${url}' to have a request target`);
  return parsed;
}

const rule = (entry: string): NetworkAllowRule => parseNetworkAllowRule(entry);

describe('parsing a network allow entry (§1.5.1)', () => {
  it('reads an https URL rule as scheme, host and the default port 443', () => {
    expect(rule('https://api.example.com')).toStrictEqual({ scheme: 'https', host: 'api.example.com', port: 443 });
  });

  it('refuses port 0, which names no port a connection can be made to, in either form', () => {
    for (const entry of ['example.com:0', 'http://example.com:0']) {
      expect(() => parseNetworkAllowRule(entry, 'capabilities.network.allow[0]')).toThrow(/port 0 names no port a connection can be made to/);
    }
  });

  it('keeps the explicit port of a URL rule', () => {
    expect(rule('https://api.example.com:8443')).toStrictEqual({ scheme: 'https', host: 'api.example.com', port: 8443 });
  });

  it('reads an http URL rule with the default port 80', () => {
    expect(rule('http://localhost')).toStrictEqual({ scheme: 'http', host: 'localhost', port: 80 });
  });

  it('accepts a URL rule whose path is a lone slash', () => {
    expect(rule('https://api.example.com/')).toStrictEqual({ scheme: 'https', host: 'api.example.com', port: 443 });
  });

  it('reads a bare host as a host rule with neither scheme nor port set', () => {
    expect(rule('api.example.com')).toStrictEqual({ scheme: undefined, host: 'api.example.com', port: undefined });
  });

  it('reads host:port as a host rule pinned to that port and no scheme', () => {
    expect(rule('api.example.com:8443')).toStrictEqual({ scheme: undefined, host: 'api.example.com', port: 8443 });
  });

  it('reads host:80 as a host rule on any port, because URL parsing drops the default port as upstream does', () => {
    expect(rule('example.com:80')).toStrictEqual({ scheme: undefined, host: 'example.com', port: undefined });
  });

  it('keeps port 443 on a host rule, since a host rule is parsed as http and 443 is not its default', () => {
    expect(rule('example.com:443')).toStrictEqual({ scheme: undefined, host: 'example.com', port: 443 });
  });

  it('reads an IPv6 literal with its brackets, as a request to it is addressed', () => {
    expect(rule('[::1]:8080')).toStrictEqual({ scheme: undefined, host: '[::1]', port: 8080 });
    expect(rule('https://[::1]')).toStrictEqual({ scheme: 'https', host: '[::1]', port: 443 });
  });

  it('lowercases the host and the scheme', () => {
    expect(rule('API.Example.COM')).toStrictEqual({ scheme: undefined, host: 'api.example.com', port: undefined });
    expect(rule('HTTPS://API.EXAMPLE.COM')).toStrictEqual({ scheme: 'https', host: 'api.example.com', port: 443 });
  });

  it('trims the entry before reading it', () => {
    expect(rule('  https://api.example.com  ')).toStrictEqual({ scheme: 'https', host: 'api.example.com', port: 443 });
  });
});

describe('refusing a network allow entry', () => {
  it.each([
    ['', 'entry must not be empty'],
    ['   ', 'entry must not be empty'],
    ['ftp://files.example.com', "unsupported URL scheme 'ftp' (expected http or https)"],
    ['https://api.example.com/v1', 'URL allow entries must not include path, query, or fragment'],
    ['https://api.example.com?key=1', 'URL allow entries must not include path, query, or fragment'],
    ['https://api.example.com?', 'URL allow entries must not include path, query, or fragment'],
    ['https://api.example.com#top', 'URL allow entries must not include path, query, or fragment'],
    ['https://api.example.com#', 'URL allow entries must not include path, query, or fragment'],
    ['https://api.example.com/#', 'URL allow entries must not include path, query, or fragment'],
    ['api.example.com/v1', 'host allow entries must be host or host:port only'],
    ['api.example.com?x', 'host allow entries must be host or host:port only'],
    ['api.example.com#', 'host allow entries must be host or host:port only'],
    ['api.example.com:notaport', 'invalid host allow entry: it is not a host or host:port'],
    // What reads as one host and grants another, or grants nothing while reading as everything.
    [
      '127.0.0.1:40039@127.0.0.1:37013',
      "an allow entry names a host, never credentials: what follows the '@' (127.0.0.1:37013) is the host it would grant; write that host alone",
    ],
    [
      'https://api.good.example@evil.example',
      "an allow entry names a host, never credentials: what follows the '@' (evil.example) is the host it would grant; write that host alone",
    ],
    ['*', 'a host matches exactly, so a wildcard grants nothing (not every host, nor every subdomain); list each host the capsule needs'],
    ['https://*.example.com', 'a host matches exactly, so a wildcard grants nothing (not every host, nor every subdomain); list each host the capsule needs'],
  ])('refuses %j with E-CAP-001 and the reason %j', (entry, reason) => {
    const error = refusal(() => parseNetworkAllowRule(entry));
    expect(error.code).toBe('E-CAP-001');
    expect(error.message).toBe(`invalid network capability allow entry '${entry}': ${reason}`);
  });

  it.each(['https://', 'http://:8080'])('refuses the hostless URL %j with E-CAP-001, naming it', (entry) => {
    const error = refusal(() => parseNetworkAllowRule(entry));
    expect(error.code).toBe('E-CAP-001');
    expect(error.message).toBe(`invalid network capability allow entry '${entry}': invalid URL: it does not parse as a URL`);
  });

  it('carries the catalogue hint that says what an entry may look like', () => {
    const error = refusal(() => parseNetworkAllowRule('ftp://x.example.com'));
    expect(error.hint).toBe("write a host ('api.example.com', 'api.example.com:8443') or an origin URL ('https://api.example.com')");
  });

  it('names the entry by its index path capabilities.network.allow[i]', () => {
    const error = refusal(() => parseNetworkAllowRules(['api.example.com', 'https://ok.example.com', 'ftp://bad.example.com']));
    expect(error.code).toBe('E-CAP-001');
    expect(error.path).toBe('capabilities.network.allow[2]');
    expect(error.message).toContain("'ftp://bad.example.com'");
  });

  it('names the entry under the base path it is given', () => {
    const error = refusal(() => parseNetworkAllowRules(['https://x.example.com/p'], 'artifacts[0].capabilities.network.allow'));
    expect(error.path).toBe('artifacts[0].capabilities.network.allow[0]');
  });

  it('parses every entry of a list in order when all are valid', () => {
    expect(parseNetworkAllowRules(['https://a.example.com', 'b.example.com:8443'])).toStrictEqual([
      { scheme: 'https', host: 'a.example.com', port: 443 },
      { scheme: undefined, host: 'b.example.com', port: 8443 },
    ]);
  });
});

describe('matching a request against a rule', () => {
  it('a bare host rule admits both schemes on any port', () => {
    const bare = rule('api.example.com');
    expect(ruleMatches(bare, target('https://api.example.com/v1'))).toBe(true);
    expect(ruleMatches(bare, target('http://api.example.com/'))).toBe(true);
    expect(ruleMatches(bare, target('http://api.example.com:9000/'))).toBe(true);
  });

  it('a rule admits its exact host only, never a subdomain', () => {
    expect(ruleMatches(rule('example.com'), target('https://api.example.com/'))).toBe(false);
    expect(ruleMatches(rule('example.com'), target('https://evilexample.com/'))).toBe(false);
  });

  it('a rule for a subdomain does not admit its parent domain', () => {
    expect(ruleMatches(rule('api.example.com'), target('https://example.com/'))).toBe(false);
  });

  it('compares hosts without regard to case', () => {
    expect(ruleMatches(rule('api.example.com'), { scheme: 'HTTPS', host: 'API.Example.com', port: 443 })).toBe(true);
  });

  it('a URL rule refuses the other scheme on the same host and port', () => {
    expect(ruleMatches(rule('https://api.example.com'), target('http://api.example.com:443/'))).toBe(false);
    expect(ruleMatches(rule('http://api.example.com'), target('https://api.example.com:80/'))).toBe(false);
  });

  it('a port-pinned rule refuses another port', () => {
    expect(ruleMatches(rule('api.example.com:8443'), target('https://api.example.com/'))).toBe(false);
    expect(ruleMatches(rule('https://api.example.com'), target('https://api.example.com:8443/'))).toBe(false);
  });

  it('resolves the target port from its scheme before comparing', () => {
    expect(ruleMatches(rule('api.example.com:443'), target('https://api.example.com/'))).toBe(true);
    expect(ruleMatches(rule('http://api.example.com'), target('http://api.example.com/x'))).toBe(true);
    expect(ruleMatches(rule('https://api.example.com:443'), target('https://api.example.com:443/'))).toBe(true);
    expect(ruleMatches(rule('api.example.com:443'), target('http://api.example.com/'))).toBe(false);
  });

  it('a host:80 rule admits every port, as upstream reads it', () => {
    expect(ruleMatches(rule('example.com:80'), target('https://example.com:8443/'))).toBe(true);
  });

  it('matches an IPv6 literal written in long form against the compressed target', () => {
    expect(ruleMatches(rule('[0:0:0:0:0:0:0:1]:8080'), target('http://[::1]:8080/'))).toBe(true);
  });
});

describe('whether a ceiling covers a narrower rule', () => {
  it('a bare ceiling covers a URL rule for the same host', () => {
    expect(covers(rule('api.example.com'), rule('https://api.example.com'))).toBe(true);
    expect(covers(rule('api.example.com'), rule('http://api.example.com:8080'))).toBe(true);
  });

  it('a URL ceiling does not cover a bare rule for the same host', () => {
    expect(covers(rule('https://api.example.com'), rule('api.example.com'))).toBe(false);
  });

  it('a URL ceiling covers the identical URL rule', () => {
    expect(covers(rule('https://api.example.com'), rule('https://api.example.com:443'))).toBe(true);
  });

  it('a port-pinned ceiling covers only rules pinned to that port', () => {
    const ceiling = rule('api.example.com:8443');
    expect(covers(ceiling, rule('https://api.example.com:8443'))).toBe(true);
    expect(covers(ceiling, rule('https://api.example.com'))).toBe(false);
    expect(covers(ceiling, rule('api.example.com'))).toBe(false);
  });

  it('a ceiling never covers another host, not even a subdomain', () => {
    expect(covers(rule('example.com'), rule('api.example.com'))).toBe(false);
    expect(covers(rule('api.example.com'), rule('other.example.com'))).toBe(false);
  });

  it('a list of ceiling rules covers a rule when any one of them does', () => {
    const ceiling = [rule('https://a.example.com'), rule('b.example.com')];
    expect(ceilingCovers(ceiling, rule('https://b.example.com:8443'))).toBe(true);
    expect(ceilingCovers(ceiling, rule('a.example.com'))).toBe(false);
    expect(ceilingCovers([], rule('a.example.com'))).toBe(false);
  });
});

describe('the target of a request URL', () => {
  it('lowercases scheme and host and defaults the port by scheme', () => {
    expect(requestTargetOf('HTTPS://API.Example.com/v1?q=1#f')).toStrictEqual({ scheme: 'https', host: 'api.example.com', port: 443 });
    expect(requestTargetOf('http://api.example.com/')).toStrictEqual({ scheme: 'http', host: 'api.example.com', port: 80 });
  });

  it('keeps an explicit port, including one written equal to the default', () => {
    expect(requestTargetOf('http://api.example.com:8080/')).toStrictEqual({ scheme: 'http', host: 'api.example.com', port: 8080 });
    expect(requestTargetOf('http://api.example.com:80/')).toStrictEqual({ scheme: 'http', host: 'api.example.com', port: 80 });
  });

  it('gives no target for text that is not a URL or a URL without a host', () => {
    expect(requestTargetOf('not a url')).toBeUndefined();
    expect(requestTargetOf('mailto:someone@example.com')).toBeUndefined();
    expect(requestTargetOf('file:///etc/passwd')).toBeUndefined();
  });

  // Its own contract: "undefined when it has no host or a non-HTTP scheme". A target with a
  // non-HTTP scheme would otherwise be admitted by every bare host rule for that host.
  it('gives no target for a URL whose scheme is not http or https', () => {
    expect(requestTargetOf('ftp://api.example.com/file')).toBeUndefined();
    expect(requestTargetOf('wss://api.example.com/socket')).toBeUndefined();
  });
});
