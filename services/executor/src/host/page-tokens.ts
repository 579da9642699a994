import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** Where a `ListTasks` page ended: the last task it listed, by update time and then id. */
export interface ListPosition {
  updated_at_ms: number;
  id: string;
}

/** The longest token read: far past any this issues, well short of what a request may carry. */
const LONGEST_TOKEN = 1024;

/**
 * The session's `ListTasks` cursors: the session and the last task of a page, signed with a key
 * the session's own host drew when it started. Any door in front of the session hands a token
 * back to the host that issued it, so a listing begun at one door goes on at another, and past a
 * door's restart (a door holds no state; a key of each door's own made a token good at that door
 * alone). A token written or rewritten by hand (any position, any session's id) is not read, nor
 * one another session gave: its key is another. A host that restarts is another session. The
 * token names nothing a client could not list.
 */
export class PageTokens {
  private readonly key = randomBytes(32);

  constructor(private readonly sessionId: string) {}

  issue(after: ListPosition): string {
    const payload = Buffer.from(JSON.stringify({ s: this.sessionId, u: after.updated_at_ms, i: after.id })).toString('base64url');
    return `${payload}.${this.signature(payload).toString('base64url')}`;
  }

  /** The position a token of this session's names; undefined for anything else. */
  read(token: string): ListPosition | undefined {
    if (token.length > LONGEST_TOKEN) return undefined;
    const [payload, signature, ...rest] = token.split('.');
    if (payload === undefined || signature === undefined || rest.length > 0) return undefined;
    const given = Buffer.from(signature, 'base64url');
    const expected = this.signature(payload);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    try {
      const decoded = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { s?: unknown; u?: unknown; i?: unknown };
      if (
        decoded.s !== this.sessionId ||
        !Number.isSafeInteger(decoded.u) ||
        (decoded.u as number) < 0 ||
        typeof decoded.i !== 'string' ||
        decoded.i.length > 256
      )
        return undefined;
      return { updated_at_ms: decoded.u as number, id: decoded.i };
    } catch {
      return undefined;
    }
  }

  private signature(payload: string): Buffer {
    return createHmac('sha256', this.key).update(payload).digest().subarray(0, 16);
  }
}
