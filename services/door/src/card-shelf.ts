import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sessionUrl } from '@murmur/shared';

/**
 * The cards a door keeps, each as the bytes it is served as, with an entity tag and a lifetime a
 * client may cache it for (A2A 1.0 §8.6; a client holding the card is answered 304): a host
 * writes its session's card once, so the door renders it once and keeps it until it hears the
 * session end. A kept card is
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

interface KeptCard extends RenderedCard {
  readonly sessionId: string;
  /** `text` as bytes, for the fast answer. */
  readonly body: Buffer;
  /** The fast answer's header lines, names and values in one list, for a 200 and for a 304. */
  readonly fullHead: readonly string[];
  readonly heldHead: readonly string[];
}

/** A card as it is served: its JSON and the entity tag naming that JSON. */
export interface RenderedCard {
  readonly text: string;
  readonly etag: string;
}

/**
 * How long a client may keep a card without asking again (A2A 1.0 §8.6): a session's card never
 * changes while it lives, and one kept past the session's end only names a session that answers
 * no more. A client that must know the session lives asks with `Cache-Control: no-cache`.
 */
export const CARD_CACHE_CONTROL = 'max-age=300';

/** A strong entity tag of the card's JSON: what a client's `If-None-Match` is compared with. */
export function cardEtag(text: string): string {
  return `"${createHash('sha256').update(text).digest('base64url').slice(0, 27)}"`;
}

/** Whether an `If-None-Match` header names `etag` (or `*`): the client holds this card already. */
export function holdsCard(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  return ifNoneMatch.split(',').some((tag) => {
    const trimmed = tag.trim();
    return trimmed === '*' || trimmed === etag || trimmed === `W/${etag}`;
  });
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

  /** The kept card for `sessionId` rendered for `url`, if any. */
  get(sessionId: string, url: string): RenderedCard | undefined {
    return this.byKey.get(`${sessionId} ${url}`);
  }

  /** Keeps `rendered` (the card's JSON) as `sessionId`'s card naming `url`. */
  keep(sessionId: string, url: string, rendered: string): RenderedCard {
    const body = Buffer.from(rendered);
    const etag = cardEtag(rendered);
    // The router's answer, header for header: a fetch `Headers` lists its names in order, and its
    // server writes the length before Node's own headers.
    const card: KeptCard = {
      sessionId,
      text: rendered,
      etag,
      body,
      fullHead: ['cache-control', CARD_CACHE_CONTROL, 'content-type', 'application/json', 'etag', etag, 'Content-Length', String(body.length)],
      heldHead: ['cache-control', CARD_CACHE_CONTROL, 'etag', etag],
    };
    if (this.byKey.size >= this.capacity) this.drop(this.byKey.keys().next().value as string);
    this.byKey.set(`${sessionId} ${url}`, card);
    if (this.baseUrl !== undefined && url === `${sessionUrl(this.baseUrl, sessionId)}/`) {
      this.byPath.set(cardPath(sessionId), card);
      if (sessionId === this.soleSession) this.byPath.set(SOLE_CARD_PATH, card);
    }
    return card;
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
    // The head written as one list, built when the card was kept: nothing validated or stored per request.
    if (holdsCard(request.headers['if-none-match'], card.etag)) response.writeHead(304, card.heldHead as string[]).end();
    else response.writeHead(200, card.fullHead as string[]).end(card.body);
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
