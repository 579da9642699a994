import { tokenDigest } from '@murmur/shared/node';
import { SessionUnreachable, type SessionLink } from './session-link.js';

/**
 * The session tokens a door has seen proven, so that a session's token costs one question to its
 * executor (`authorize`) per door, not one per request. A token is proven only by the executor
 * that minted it; what is kept is its SHA-256, never the token, and only until the door hears the
 * session end — a token is good for its session's life and for nothing after.
 *
 * Looking a digest up in a map is not constant-time, which is harmless here: what the timing could
 * tell is how much of a SHA-256 matched, and no one can choose a token by its digest.
 */
export class SessionTokens {
  private readonly proven = new Map<string, Set<string>>();
  /**
   * Tokens refused lately, by session and digest, with when: a client repeating a wrong token is
   * answered from here for `REFUSAL_KEPT_MS`, not by asking the executor each time.
   */
  private readonly refused = new Map<string, number>();

  constructor(private readonly sessionsKept = 10_000) {}

  /** Whether `token` is the session's own; false for a session that does not answer. */
  async admits(link: SessionLink, token: string): Promise<boolean> {
    const digest = tokenDigest(token);
    if (this.proven.get(link.sessionId)?.has(digest)) return true;
    // Whoever reaches the door may send tokens: one sent again and again costs its session's
    // executor one question, not one a request. (Not a bound on questions at once: a flood of wrong
    // ones would then have refused the session's own token on its first use.)
    const key = `${link.sessionId} ${digest}`;
    const refusedAt = this.refused.get(key);
    if (refusedAt !== undefined && Date.now() - refusedAt < REFUSAL_KEPT_MS) return false;
    try {
      const reply = await link.call({ method: 'authorize', session_token_sha256: digest });
      if (reply.error) {
        this.remember(key);
        return false;
      }
    } catch (error) {
      if (error instanceof SessionUnreachable) return false;
      throw error;
    }
    let digests = this.proven.get(link.sessionId);
    if (!digests) {
      if (this.proven.size >= this.sessionsKept) this.proven.delete(this.proven.keys().next().value as string);
      digests = new Set();
      this.proven.set(link.sessionId, digests);
    }
    digests.add(digest);
    return true;
  }

  forget(sessionId: string): void {
    this.proven.delete(sessionId);
  }

  private remember(key: string): void {
    this.refused.delete(key);
    if (this.refused.size >= REFUSALS_KEPT) this.refused.delete(this.refused.keys().next().value as string);
    this.refused.set(key, Date.now());
  }
}

/** How long a refused token is answered without asking again. */
const REFUSAL_KEPT_MS = 30_000;
/** How many refused tokens a door remembers (the oldest goes first). */
const REFUSALS_KEPT = 4_096;
