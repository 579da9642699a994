import { describe, expect, it } from 'vitest';
import { EgressFailures, shownUrl } from '../src/host/egress-failures.js';

describe("a grant's last unanswered request", () => {
  it('is told once, to the driver call that takes it', () => {
    const failures = new EgressFailures();
    failures.failed('tool:driver', 'http://127.0.0.1:9/v1/messages', 'connection-refused', 'connection refused');
    expect(failures.take('tool:driver')).toEqual({ url: 'http://127.0.0.1:9/v1/messages', code: 'connection-refused', reason: 'connection refused' });
    expect(failures.take('tool:driver')).toBeUndefined();
  });

  it('is forgotten when a later request of the same grant is answered (a retry that worked)', () => {
    const failures = new EgressFailures();
    failures.failed('tool:driver', 'http://127.0.0.1:9/v1/messages', 'connection-refused', 'connection refused');
    failures.answered('tool:driver');
    expect(failures.take('tool:driver')).toBeUndefined();
  });

  it('is the last failure of its own grant, whatever another grant did', () => {
    const failures = new EgressFailures();
    failures.failed('tool:driver', 'http://a.example/one', 'connection-refused', 'connection refused');
    failures.failed('tool:driver', 'http://a.example/two', 'HTTP-request-denied', "network policy: 'a.example:80' not in capabilities.network.allow");
    failures.answered('tool:other');
    expect(failures.take('tool:driver')?.url).toBe('http://a.example/two');
  });

  it('keeps no user, password, query or fragment of the URL: they may be credentials', () => {
    expect(shownUrl('https://user:secret@api.example.com:8443/v1/messages?key=sk-123#frag')).toBe('https://api.example.com:8443/v1/messages');
    const failures = new EgressFailures();
    failures.failed('tool:driver', 'https://api.example.com/v1beta/models:generate?key=AIza-secret', 'connection-refused', 'connection refused');
    expect(JSON.stringify(failures.take('tool:driver'))).not.toContain('secret');
    expect(shownUrl('not a url')).toBe('(a URL that does not parse)');
    // Nor does a reason that quotes the URL it refused.
    const mistyped = 'htps://api.example.com/v1?key=sk-secret';
    failures.failed('tool:driver', mistyped, 'HTTP-request-URI-invalid', `'${mistyped}' is not an http(s) URL`);
    expect(JSON.stringify(failures.take('tool:driver'))).not.toContain('secret');
  });
});
