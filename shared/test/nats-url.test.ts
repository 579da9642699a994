import { describe, expect, it } from 'vitest';
import { natsEndpoint, shownNatsUrl } from '../src/bus/nats-url.js';

/** A bus URL's credentials are given to the client apart, and never printed. */
describe('a NATS URL with credentials', () => {
  it('takes a user name alone as a token, and the URL without it as the server and what is shown', () => {
    expect(natsEndpoint('nats://s3cr3t-token-0123456789@nats:4222')).toEqual({
      servers: ['nats://nats:4222'],
      shown: 'nats://nats:4222',
      credentials: { token: 's3cr3t-token-0123456789' },
    });
  });

  it('takes a user and a password as such, decoded', () => {
    expect(natsEndpoint('nats://svc:p%40ss@127.0.0.1:4222').credentials).toEqual({ user: 'svc', pass: 'p@ss' });
  });

  it('leaves a URL without credentials, or with an empty token (compose without MURMUR_NATS_TOKEN), as it is', () => {
    expect(natsEndpoint('nats://127.0.0.1:4222')).toEqual({ servers: ['nats://127.0.0.1:4222'], shown: 'nats://127.0.0.1:4222' });
    expect(natsEndpoint('nats://@nats:4222')).toEqual({ servers: ['nats://nats:4222'], shown: 'nats://nats:4222' });
    expect(natsEndpoint('127.0.0.1:4222')).toEqual({ servers: ['127.0.0.1:4222'], shown: '127.0.0.1:4222' });
    expect(natsEndpoint('ws://host:8080/nats/').servers).toEqual(['ws://host:8080/nats/']);
    expect(natsEndpoint('tls://[::1]:4222').servers).toEqual(['tls://[::1]:4222']);
  });

  it('takes several servers, with or without a scheme, and shows none of their credentials', () => {
    const token = 'comma-list-token-0123456789';
    const endpoint = natsEndpoint(`nats://${token}@127.0.0.1:14222, nats://${token}@127.0.0.1:14223,${token}@host:4222`);
    expect(endpoint).toEqual({
      servers: ['nats://127.0.0.1:14222', 'nats://127.0.0.1:14223', 'host:4222'],
      shown: 'nats://127.0.0.1:14222,nats://127.0.0.1:14223,host:4222',
      credentials: { token },
    });
  });

  it('shows a server it cannot read without what precedes its @, and never throws', () => {
    expect(natsEndpoint('nats://ab%zz@h:4222').shown).not.toContain('ab%zz');
    expect(shownNatsUrl('nats://secret-token-0123456789@[bad')).toBe('nats://[bad');
  });

  it('shows no credentials', () => {
    expect(shownNatsUrl('nats://token-abcdefghijklmnop@host:4222')).toBe('nats://host:4222');
    expect(shownNatsUrl(undefined)).toBeUndefined();
  });
});
