import { MurmurError } from './errors.js';

/**
 * One entry of `capabilities.network.allow`, parsed.
 *
 * Two shapes, told apart by `://`:
 * - a **URL rule** (`https://api.example.com`, `http://localhost:8080`) pins scheme, host and
 *   port (the scheme's default when none is written);
 * - a **host rule** (`api.example.com`, `api.example.com:8443`) pins the host and, if written,
 *   the port; any scheme matches.
 *
 * Hosts compare exactly, lowercased: there are no wildcards and a rule for `example.com` does not
 * admit `api.example.com`. A grant a reader cannot predict is not a grant.
 */
export interface NetworkAllowRule {
  readonly scheme: 'http' | 'https' | undefined;
  readonly host: string;
  readonly port: number | undefined;
}

/** Where an outgoing request is going, with the port defaulted by its scheme. */
export interface RequestTarget {
  readonly scheme: string;
  readonly host: string;
  readonly port: number | undefined;
}

function invalidEntry(entry: string, reason: string, path?: string): MurmurError {
  return new MurmurError('E-CAP-001', `invalid network capability allow entry '${entry}': ${reason}`, path === undefined ? {} : { path });
}

function defaultPort(scheme: string): number | undefined {
  if (scheme === 'http') return 80;
  if (scheme === 'https') return 443;
  return undefined;
}

/**
 * WHATWG URL parsing drops a port equal to the scheme's default (`http://h:80` has port ''),
 * exactly as upstream's parser does, so `example.com:80` is a host rule with no port.
 */
function explicitPort(url: URL): number | undefined {
  return url.port === '' ? undefined : Number(url.port);
}

/** Port 0 names no destination (a connection cannot be made to it): refused, naming the entry. */
function refusePortZero(entry: string, url: URL, path: string | undefined): void {
  if (url.port === '0') throw invalidEntry(entry, 'port 0 names no port a connection can be made to', path);
}

function parseUrlRule(entry: string, path: string | undefined): NetworkAllowRule {
  let url: URL;
  try {
    url = new URL(entry);
  } catch {
    throw invalidEntry(entry, 'invalid URL: it does not parse as a URL', path);
  }
  const scheme = url.protocol.slice(0, -1).toLowerCase();
  if (scheme !== 'http' && scheme !== 'https') {
    throw invalidEntry(entry, `unsupported URL scheme '${scheme}' (expected http or https)`, path);
  }
  if (url.search !== '' || url.hash !== '' || entry.endsWith('?') || entry.endsWith('#') || (url.pathname !== '' && url.pathname !== '/')) {
    throw invalidEntry(entry, 'URL allow entries must not include path, query, or fragment', path);
  }
  if (url.hostname === '') throw invalidEntry(entry, 'URL allow entries must include a host', path);
  refusePortZero(entry, url, path);
  return { scheme, host: url.hostname.toLowerCase(), port: explicitPort(url) ?? defaultPort(scheme) };
}

function parseHostRule(entry: string, path: string | undefined): NetworkAllowRule {
  let url: URL;
  try {
    url = new URL(`http://${entry}`);
  } catch {
    throw invalidEntry(entry, 'invalid host allow entry: it is not a host or host:port', path);
  }
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '' || entry.includes('?') || entry.includes('#')) {
    throw invalidEntry(entry, 'host allow entries must be host or host:port only', path);
  }
  if (url.hostname === '') throw invalidEntry(entry, 'host allow entries must include a host', path);
  refusePortZero(entry, url, path);
  return { scheme: undefined, host: url.hostname.toLowerCase(), port: explicitPort(url) };
}

/**
 * Parses one allow entry; `path` names it in the error (`capabilities.network.allow[2]`).
 *
 * Stricter than upstream's parser in two ways, each an entry that reads as something it does not
 * grant: credentials before an `@` (`api.good.example@evil.example` grants `evil.example`, the
 * part a reader skims past; a URL's parser takes what precedes the `@` as a user name), and a
 * `*` (hosts match exactly, so `*.example.com` grants nothing at all, not every subdomain).
 */
export function parseNetworkAllowRule(entry: string, path?: string): NetworkAllowRule {
  const trimmed = entry.trim();
  if (trimmed === '') throw invalidEntry(entry, 'entry must not be empty', path);
  if (trimmed.includes('@')) {
    throw invalidEntry(
      entry,
      `an allow entry names a host, never credentials: what follows the '@' (${trimmed.slice(trimmed.lastIndexOf('@') + 1)}) is the host it would grant; write that host alone`,
      path,
    );
  }
  const rule = trimmed.includes('://') ? parseUrlRule(trimmed, path) : parseHostRule(trimmed, path);
  if (rule.host.includes('*')) {
    throw invalidEntry(
      entry,
      'a host matches exactly, so a wildcard grants nothing (not every host, nor every subdomain); list each host the capsule needs',
      path,
    );
  }
  return rule;
}

export function parseNetworkAllowRules(entries: readonly string[], basePath = 'capabilities.network.allow'): NetworkAllowRule[] {
  return entries.map((entry, index) => parseNetworkAllowRule(entry, `${basePath}[${index}]`));
}

/** Whether `rule` admits a request to `target`. Unset scheme or port on the rule matches any. */
export function ruleMatches(rule: NetworkAllowRule, target: RequestTarget): boolean {
  if (rule.host !== target.host.toLowerCase()) return false;
  if (rule.scheme !== undefined && rule.scheme !== target.scheme.toLowerCase()) return false;
  if (rule.port !== undefined && rule.port !== target.port) return false;
  return true;
}

export function anyRuleMatches(rules: readonly NetworkAllowRule[], target: RequestTarget): boolean {
  return rules.some((rule) => ruleMatches(rule, target));
}

/**
 * Whether the ceiling rule `ceiling` already permits everything `narrower` would.
 *
 * Deliberately asymmetric: an unset scheme or port on the ceiling is a wildcard, so bare
 * `example.com` covers `https://example.com`; but a bare `example.com` asked for under a ceiling of
 * `https://example.com` spans both schemes and every port, so it is not covered. Clamping errs
 * toward denial rather than keeping a rule broader than the ceiling states.
 */
export function covers(ceiling: NetworkAllowRule, narrower: NetworkAllowRule): boolean {
  if (ceiling.host !== narrower.host) return false;
  if (ceiling.scheme !== undefined && narrower.scheme !== ceiling.scheme) return false;
  if (ceiling.port !== undefined && narrower.port !== ceiling.port) return false;
  return true;
}

/** Whether some rule of the ceiling covers `narrower`. */
export function ceilingCovers(ceiling: readonly NetworkAllowRule[], narrower: NetworkAllowRule): boolean {
  return ceiling.some((rule) => covers(rule, narrower));
}

/** The target of a request URL, or undefined when it has no host or a non-HTTP scheme. */
export function requestTargetOf(url: string): RequestTarget | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  const scheme = parsed.protocol.slice(0, -1).toLowerCase();
  // Only HTTP leaves through the policy point: a bare host rule admits any scheme, so an
  // ftp:// or wss:// URL must not even become a target that could match it.
  if (scheme !== 'http' && scheme !== 'https') return undefined;
  if (parsed.hostname === '') return undefined;
  return { scheme, host: parsed.hostname.toLowerCase(), port: explicitPort(parsed) ?? defaultPort(scheme) };
}

export function formatRule(rule: NetworkAllowRule): string {
  const port = rule.port === undefined ? '' : `:${rule.port}`;
  return rule.scheme === undefined ? `${rule.host}${port}` : `${rule.scheme}://${rule.host}${port}`;
}
