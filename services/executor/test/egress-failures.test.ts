import { describe, expect, it } from 'vitest';
import { shownUrl } from '@murmur/shared';
import { LastEgressFailure } from '../src/host/egress-failures.js';

describe("a guest call's last unanswered request", () => {
  it('is told to the driver call that made it', () => {
    const failures = new LastEgressFailure();
    failures.failed('http://127.0.0.1:9/v1/messages', 'connection-refused', 'connection refused');
    expect(failures.failure).toEqual({ url: 'http://127.0.0.1:9/v1/messages', code: 'connection-refused', reason: 'connection refused' });
  });

  it('is forgotten when a later request is answered (a retry that worked)', () => {
    const failures = new LastEgressFailure();
    failures.failed('http://127.0.0.1:9/v1/messages', 'connection-refused', 'connection refused');
    failures.answered();
    expect(failures.failure).toBeUndefined();
  });

  it('is the last failure, not the first', () => {
    const failures = new LastEgressFailure();
    failures.failed('http://a.example/one', 'connection-refused', 'connection refused');
    failures.failed('http://a.example/two', 'HTTP-request-denied', "network policy: 'a.example:80' not in capabilities.network.allow");
    expect(failures.failure?.url).toBe('http://a.example/two');
  });

  it('keeps a redirect, which is never followed, with where it led, shown without its query', () => {
    const failures = new LastEgressFailure();
    failures.redirected('http://127.0.0.1:8080/v1/messages', 307, '/v2/messages?token=sk-secret');
    expect(failures.failure).toEqual({
      url: 'http://127.0.0.1:8080/v1/messages',
      code: 'HTTP-redirect',
      reason: 'answered 307, a redirect to http://127.0.0.1:8080/v2/messages, which is not followed',
    });
    failures.redirected('http://127.0.0.1:8080/v1/messages', 302, undefined);
    expect(failures.failure?.reason).toBe('answered 302, a redirect to no Location, which is not followed');
    failures.redirected('http://127.0.0.1:8080/v1/messages', 302, 'http://[bad');
    expect(failures.failure?.reason).toBe('answered 302, a redirect to a Location that does not parse, which is not followed');
  });

  it('keeps no user, password, query or fragment of the URL: they may be credentials', () => {
    expect(shownUrl('https://user:secret@api.example.com:8443/v1/messages?key=sk-123#frag')).toBe('https://api.example.com:8443/v1/messages');
    const failures = new LastEgressFailure();
    failures.failed('https://api.example.com/v1beta/models:generate?key=AIza-secret', 'connection-refused', 'connection refused');
    expect(JSON.stringify(failures.failure)).not.toContain('secret');
    expect(shownUrl('not a url')).toBe('(a URL that does not parse)');
    // Nor does a reason that quotes the URL it refused.
    const mistyped = 'htps://api.example.com/v1?key=sk-secret';
    failures.failed(mistyped, 'HTTP-request-URI-invalid', `'${mistyped}' is not an http(s) URL`);
    expect(JSON.stringify(failures.failure)).not.toContain('secret');
  });
});
