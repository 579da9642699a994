import { describe, expect, it } from 'vitest';
import { SessionCallSchema } from '../src/session-rpc.js';
import { newSessionToken, tokenDigest, tokenMatcher } from '../src/node/bearer.js';

describe('a bearer token check', () => {
  it('admits a token, or its SHA-256, and nothing else', () => {
    const token = newSessionToken();
    const matcher = tokenMatcher([token]);
    expect(matcher.admits(token)).toBe(true);
    expect(matcher.admitsDigest(tokenDigest(token))).toBe(true);
    expect(matcher.admits(`${token}x`)).toBe(false);
    expect(matcher.admitsDigest(tokenDigest(`${token}x`))).toBe(false);
    // The digest's digest, a digest cut short, and what is not hex at all.
    expect(matcher.admitsDigest(tokenDigest(tokenDigest(token)))).toBe(false);
    expect(matcher.admitsDigest(tokenDigest(token).slice(0, 62))).toBe(false);
    expect(matcher.admitsDigest(`${tokenDigest(token).slice(0, 62)}zz`)).toBe(false);
  });

  it('is asked of a session over the bus by its digest only: a call carrying the token itself is refused', () => {
    const token = newSessionToken();
    expect(SessionCallSchema.safeParse({ method: 'authorize', session_token_sha256: tokenDigest(token) }).success).toBe(true);
    expect(SessionCallSchema.safeParse({ method: 'authorize', session_token: token }).success).toBe(false);
    expect(SessionCallSchema.safeParse({ method: 'authorize', session_token_sha256: token }).success).toBe(false);
  });
});
