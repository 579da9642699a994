import type { HttpBodyPiece } from './host/protocol.js';

/**
 * The bodies of allowed HTTP responses, held by the executor while their capsule host reads
 * them piece by piece (`http-body`): a model's streamed reply reaches the guest as the provider
 * sends it, not when it ends. The host asks for the next piece only when it has room for it, so
 * at most one network chunk per response waits here beyond what the fetch itself buffers: the
 * provider is slowed down by a guest that reads slowly, rather than the executor's memory growing.
 *
 * Each body keeps the limits its request had before streaming: it may not grow past
 * `limitBytes` (then it ends with `HTTP-response-body-size`), and the network may not keep it
 * waiting for the next piece longer than `idleMs` (then it ends with `connection-timeout`). Its
 * whole length is not timed here: a model's reply streams for minutes, and the guest call that
 * reads it has its deadline (a request's whole-body timeout cut every reply at 60 s). The body is
 * let go when its guest drops it or ends.
 */

type TransportError = (error: unknown) => { code: string; reason: string };

interface HeldBody {
  reader: ReadableStreamDefaultReader<Uint8Array>;
  received: number;
  /** The piece being read, so that two asks never read concurrently (the host asks one at a time, but need not). */
  pending?: Promise<HttpBodyPiece>;
}

export class ResponseRelays {
  private nextId = 1;
  private readonly bodies = new Map<number, HeldBody>();

  constructor(
    private readonly limitBytes: number,
    private readonly transportError: TransportError,
    /** Bodies held at once: each is a connection, so a guest that opens them without reading them is stopped. */
    private readonly maxOpen: number,
    /** How long a read waits on the network for the next piece. */
    private readonly idleMs: number,
  ) {}

  /**
   * Why no further request may be made while this many bodies are held and `awaited` requests
   * still wait for their heads (each will hold a body, and holds a connection already); undefined
   * while one may.
   */
  refusal(awaited = 0): string | undefined {
    return this.bodies.size + awaited >= this.maxOpen
      ? `this session already has ${this.maxOpen} responses open or awaited: read or drop one first`
      : undefined;
  }

  /** Holds `body` for reading and returns the id the host reads it by. */
  hold(body: ReadableStream<Uint8Array> | null): number {
    const id = this.nextId++;
    const reader = (body ?? new ReadableStream<Uint8Array>({ start: (controller) => controller.close() })).getReader();
    this.bodies.set(id, { reader, received: 0 });
    return id;
  }

  /**
   * The next piece of body `id`: bytes as they arrived, or its end, or why it failed. After an end
   * or an error the body is forgotten; asking again is an error naming the id.
   */
  next(id: number): Promise<HttpBodyPiece> {
    const held = this.bodies.get(id);
    if (!held) return Promise.resolve({ error: { code: 'internal-error', reason: `no response body ${id} is being relayed` } });
    held.pending ??= this.read(id, held).finally(() => {
      held.pending = undefined;
    });
    return held.pending;
  }

  /** The reader has no more use for body `id` (its guest dropped it, or ended): the connection is let go. */
  release(id: number): void {
    const held = this.bodies.get(id);
    if (!held) return;
    this.bodies.delete(id);
    held.reader.cancel().catch(() => {});
  }

  /** Lets go of every body still held (the session ended). */
  releaseAll(): void {
    for (const id of [...this.bodies.keys()]) this.release(id);
  }

  private async read(id: number, held: HeldBody): Promise<HttpBodyPiece> {
    let chunk: Awaited<ReturnType<typeof held.reader.read>>;
    // A cancelled read ends as a body that ended would: the flag says it was the silence.
    let silent = false;
    const timer = setTimeout(() => {
      silent = true;
      held.reader.cancel().catch(() => {});
    }, this.idleMs);
    try {
      chunk = await held.reader.read();
    } catch (error) {
      this.bodies.delete(id);
      return { error: silent ? this.silence() : this.transportError(error) };
    } finally {
      clearTimeout(timer);
    }
    if (silent) {
      this.bodies.delete(id);
      return { error: this.silence() };
    }
    if (chunk.done) {
      this.bodies.delete(id);
      return { end: true };
    }
    held.received += chunk.value.byteLength;
    if (held.received > this.limitBytes) {
      this.release(id);
      return { error: { code: 'HTTP-response-body-size', reason: `the response is larger than ${this.limitBytes} bytes` } };
    }
    return { chunk_base64: Buffer.from(chunk.value).toString('base64') };
  }

  private silence(): { code: string; reason: string } {
    const waited = this.idleMs >= 1000 ? `${Math.round(this.idleMs / 1000)} s` : `${this.idleMs} ms`;
    return { code: 'connection-timeout', reason: `the response sent nothing for ${waited}` };
  }
}
