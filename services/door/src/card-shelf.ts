import type { IncomingMessage, ServerResponse } from 'node:http';
import { sessionUrl } from '@murmur/shared';

/**
 * The cards a door keeps, each as the bytes it is served as: a host writes its session's card
 * once, so the door renders it once and keeps it until it hears the session end. A kept card is
 * answered straight from the HTTP server's request event (`answer`), before the request becomes a
 * fetch `Request` for the router — no routing, no JSON, no fetch objects, the bytes built when
 * the card was kept. What `answer` declines (not a plain GET of a kept card's path, or a
 * `Cache-Control: no-cache`, which asks the host itself) goes on to the router, which answers it
 * exactly as before; the fast answer's status, headers and body are those the router gives.
 *
 * Cards are kept by session and by the URL they name: one rendered under a request's own origin
 * (before the door knows its base URL) is kept under that URL, and only `answer`'s path lookup —
 * which serves cards naming the door's base URL — skips the router.
 */

interface KeptCard {
  readonly sessionId: string;
  /** The card's JSON, for the router's answer; `body` is the same as bytes, for the fast one. */
  readonly text: string;
  readonly body: Buffer;
}

/** The path a session's card is served at below a door's root. */
function cardPath(sessionId: string): string {
  return `/sessions/${sessionId}/.well-known/agent-card.json`;
}

/** Where `mur run`'s own door serves its one session's card too (RFC 8615's well-known location). */
const SOLE_CARD_PATH = '/.well-known/agent-card.json';

export class CardShelf {
  private readonly byKey = new Map<string, KeptCard>();
  /** Kept cards naming the door's base URL, by the request path they answer. */
  private readonly byPath = new Map<string, KeptCard>();
  private baseUrl: string | undefined;

  constructor(
    /** How many cards are kept (one per live session and URL it was asked at); the oldest go first. */
    private readonly capacity: number,
    /** The one session whose card is also served at the origin root (`mur run`'s own door). */
    private readonly soleSession?: string,
  ) {}

  /** The URL the door is reached at: the cards naming it are the ones answered without the router. */
  setBaseUrl(url: string): void {
    this.baseUrl ??= url;
  }

  /** The kept card's JSON for `sessionId` rendered for `url`, if any. */
  get(sessionId: string, url: string): string | undefined {
    return this.byKey.get(`${sessionId} ${url}`)?.text;
  }

  /** Keeps `rendered` (the card's JSON) as `sessionId`'s card naming `url`. */
  keep(sessionId: string, url: string, rendered: string): string {
    const body = Buffer.from(rendered);
    const card: KeptCard = { sessionId, text: rendered, body };
    if (this.byKey.size >= this.capacity) this.drop(this.byKey.keys().next().value as string);
    this.byKey.set(`${sessionId} ${url}`, card);
    if (this.baseUrl !== undefined && url === `${sessionUrl(this.baseUrl, sessionId)}/`) {
      this.byPath.set(cardPath(sessionId), card);
      if (sessionId === this.soleSession) this.byPath.set(SOLE_CARD_PATH, card);
    }
    return rendered;
  }

  /** The session ended: none of its cards is served any more. */
  forget(sessionId: string): void {
    for (const [key, card] of this.byKey) if (card.sessionId === sessionId) this.drop(key);
  }

  /**
   * Answers `request` with a kept card if it is a GET of that card's path (a query string aside)
   * that does not ask for a fresh one; true when it did. Anything else is left untouched.
   */
  answer(request: IncomingMessage, response: ServerResponse): boolean {
    if (request.method !== 'GET' || this.byPath.size === 0) return false;
    const url = request.url ?? '';
    const query = url.indexOf('?');
    const card = this.byPath.get(query < 0 ? url : url.slice(0, query));
    if (!card) return false;
    const cacheControl = request.headers['cache-control'];
    if (cacheControl !== undefined && /no-cache/i.test(cacheControl)) return false;
    // Not `writeHead`: `end` then adds Content-Length after Node's own headers, as the router's answer has it.
    response.statusCode = 200;
    response.setHeader('content-type', 'application/json');
    response.end(card.body);
    return true;
  }

  private drop(key: string): void {
    const card = this.byKey.get(key);
    if (!card) return;
    this.byKey.delete(key);
    const path = cardPath(card.sessionId);
    if (this.byPath.get(path) === card) this.byPath.delete(path);
    if (this.byPath.get(SOLE_CARD_PATH) === card) this.byPath.delete(SOLE_CARD_PATH);
  }
}
