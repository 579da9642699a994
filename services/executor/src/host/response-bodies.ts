import type { HostChannel } from './contracts.js';
import type { HttpBodyPiece } from './protocol.js';

/**
 * The capsule host's side of relayed response bodies: what the executor has sent of each body
 * and its guest has not read yet. The host asks the executor for the next piece while less than
 * `WINDOW_BYTES` waits here, one ask at a time, so a body streams in as it arrives without the
 * host ever holding much more than the window of it; a guest that stops reading stops the asking.
 *
 * A guest's read takes what has arrived (a blocking read waits for at least one byte, or the
 * end); a guest waiting on several bodies (`wasi:io/poll`) is woken by the first that has
 * something to say. Data that arrived before an end or an error is read before it.
 */

const WINDOW_BYTES = 1024 * 1024;

/** What a guest's read of a body gets: bytes (possibly none yet, for a read that does not wait), its end, or its error. */
export type BodyRead = { bytes: Uint8Array } | { end: true } | { error: { code: string; reason: string } };

interface ArrivingBody {
  /** The guest instance that asked for it: when that instance ends, the body is let go. */
  owner: number;
  /** The request it answers, for what a failure of it says. */
  url: string | undefined;
  pieces: Uint8Array[];
  buffered: number;
  /** How it ended, once the executor said so. */
  finished?: { end: true } | { error: { code: string; reason: string } };
  asking: boolean;
  /** Guests waiting for this body to have something to say. */
  waiters: Set<() => void>;
}

export class ResponseBodies {
  private readonly bodies = new Map<number, ArrivingBody>();

  constructor(private readonly channel: Pick<HostChannel, 'request'>) {}

  /** Starts taking in body `id`, whose head the guest instance `owner` is about to get. */
  open(id: number, owner: number, url?: string): void {
    if (this.bodies.has(id)) return;
    this.bodies.set(id, { owner, url, pieces: [], buffered: 0, asking: false, waiters: new Set() });
    this.askMore(id);
  }

  /** The URL whose response body `id` is, while it is open. */
  urlOf(id: number): string | undefined {
    return this.bodies.get(id)?.url;
  }

  /** Up to `max` bytes of body `id`; with `wait`, not before there is at least one, or its end. */
  async read(id: number, max: number, wait: boolean): Promise<BodyRead> {
    const body = this.bodies.get(id);
    if (!body) return { error: { code: 'internal-error', reason: `response body ${id} is not open` } };
    if (wait && !this.hasNews(body)) await this.until([id], undefined);
    if (body.buffered === 0) {
      if (!body.finished) return { bytes: new Uint8Array() };
      // Read to its end (or its error): the executor has forgotten it already.
      this.bodies.delete(id);
      return body.finished;
    }
    const bytes = this.take(body, Math.max(1, max));
    this.askMore(id);
    return { bytes };
  }

  /** Which of `ids` have something to say now: bytes, an end or an error. An id not open counts (its read answers at once). */
  ready(ids: number[]): number[] {
    return ids.filter((id) => {
      const body = this.bodies.get(id);
      return !body || this.hasNews(body);
    });
  }

  /** Waits until one of `ids` is ready, or `timeoutMs` passed (never, when undefined); answers the ready ones. */
  async until(ids: number[], timeoutMs: number | undefined): Promise<number[]> {
    const now = this.ready(ids);
    if (now.length > 0 || timeoutMs === 0) return now;
    await new Promise<void>((resolve) => {
      const watching = ids.map((id) => this.bodies.get(id)).filter((body): body is ArrivingBody => body !== undefined);
      let timer: NodeJS.Timeout | undefined;
      const wake = (): void => {
        if (timer) clearTimeout(timer);
        for (const body of watching) body.waiters.delete(wake);
        resolve();
      };
      for (const body of watching) body.waiters.add(wake);
      if (timeoutMs !== undefined) timer = setTimeout(wake, timeoutMs);
    });
    return this.ready(ids);
  }

  /** The guest is done with body `id` before its end: the executor lets it go. */
  release(id: number): void {
    const body = this.bodies.get(id);
    if (!body) return;
    this.bodies.delete(id);
    this.wake(body);
    if (!body.finished) this.channel.request({ op: 'http-body-release', body: id }).catch(() => {});
  }

  /**
   * Lets go of every body instance `owner` still had open: an instance that ended (its call
   * returned, or it was stopped at its deadline) reads no more, whether or not it dropped them.
   */
  releaseOwnedBy(owner: number): void {
    for (const [id, body] of [...this.bodies]) if (body.owner === owner) this.release(id);
  }

  private hasNews(body: ArrivingBody): boolean {
    return body.buffered > 0 || body.finished !== undefined;
  }

  private take(body: ArrivingBody, max: number): Uint8Array {
    const parts: Uint8Array[] = [];
    let taken = 0;
    while (taken < max && body.pieces.length > 0) {
      const piece = body.pieces[0] as Uint8Array;
      const room = max - taken;
      if (piece.byteLength <= room) {
        parts.push(piece);
        body.pieces.shift();
        taken += piece.byteLength;
      } else {
        parts.push(piece.subarray(0, room));
        body.pieces[0] = piece.subarray(room);
        taken += room;
      }
    }
    body.buffered -= taken;
    return parts.length === 1 ? (parts[0] as Uint8Array) : Buffer.concat(parts, taken);
  }

  private askMore(id: number): void {
    const body = this.bodies.get(id);
    if (!body || body.asking || body.finished || body.buffered >= WINDOW_BYTES) return;
    body.asking = true;
    this.channel.request({ op: 'http-body', body: id }).then(
      (answer) => this.arrived(id, body, answer as HttpBodyPiece),
      (error: unknown) => this.arrived(id, body, { error: { code: 'internal-error', reason: error instanceof Error ? error.message : String(error) } }),
    );
  }

  private arrived(id: number, body: ArrivingBody, piece: HttpBodyPiece): void {
    body.asking = false;
    if ('chunk_base64' in piece) {
      const bytes = Buffer.from(piece.chunk_base64, 'base64');
      if (bytes.byteLength > 0) {
        body.pieces.push(bytes);
        body.buffered += bytes.byteLength;
      }
    } else body.finished = piece;
    this.wake(body);
    if (this.bodies.get(id) === body) this.askMore(id);
  }

  private wake(body: ArrivingBody): void {
    for (const waiter of [...body.waiters]) waiter();
  }
}
