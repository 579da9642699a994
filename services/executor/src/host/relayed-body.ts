import { error as shimIoError, poll as shimPoll, streams } from '@bytecodealliance/preview2-shim/io';
import type { BodyRead } from './response-bodies.js';
import { FIRST_RELAYED_POLLABLE_REP } from './in-thread-io.js';

/**
 * A relayed response body as the guest reads it (`wasi:io/streams#input-stream`), and the
 * pollables that tell the guest when it has more. Bytes come from the host's main thread as they
 * arrive from the executor (`ResponseBodies`), through synchronous bridge calls: `read` takes what
 * has arrived (possibly nothing), `blocking-read` and a pollable's `block` wait for the next bytes,
 * and `wasi:io/poll.poll` over a list wakes at whichever is ready first. Nothing pretends to be
 * ready: a guest that waits really waits, which is what lets a streamed model reply reach it piece
 * by piece.
 */

/** The host calls a relayed body is read with: each a synchronous bridge call from the guest's worker. */
export interface BodyCalls {
  read(body: number, max: number, wait: boolean): BodyRead;
  /** The ones of `bodies` that have something to say, waiting up to `timeoutMs` (for ever when undefined) for one. */
  wait(bodies: number[], timeoutMs: number | undefined): number[];
  release(body: number): void;
}

const BaseInput = streams.InputStream as unknown as new () => object;
const ShimPollable = shimPoll.Pollable as unknown as new () => { ready(): boolean; block(): void };
const IoError = shimIoError.Error as unknown as new (payload: unknown) => Error;
const CLOSED = { tag: 'closed' } as const;
/** jco keys a host resource by this symbol's value when it has one. */
const REP = Symbol.for('cabiRep');
/** Ours count from where the shim's own pollables' ids stop (`in-thread-io.ts`): jco keeps both in one table. */
let nextRep = FIRST_RELAYED_POLLABLE_REP;
/** How long a wait over our bodies and the shim's own pollables (a timer) sleeps before it looks at the shim's again. */
const MIXED_POLL_SLICE_MS = 5;

export class RelayedBodyStream extends BaseInput {
  /** Set once the guest has read the end or the error: then the host has forgotten the body. */
  private finished: { tag: string; val?: unknown } | undefined;

  constructor(
    private readonly calls: BodyCalls,
    readonly body: number,
  ) {
    super();
  }

  /** Whether a read would answer at once. */
  get settled(): boolean {
    return this.finished !== undefined;
  }

  read(length: bigint): Uint8Array {
    return this.take(length, false);
  }

  blockingRead(length: bigint): Uint8Array {
    return this.take(length, true);
  }

  skip(length: bigint): bigint {
    return BigInt(this.take(length, false).byteLength);
  }

  blockingSkip(length: bigint): bigint {
    return BigInt(this.take(length, true).byteLength);
  }

  subscribe(): unknown {
    return new BodyPollable(this);
  }

  /** @internal For `BodyPollable` and `poll`. */
  get bodyCalls(): BodyCalls {
    return this.calls;
  }

  [Symbol.dispose](): void {
    if (!this.finished) this.calls.release(this.body);
    this.finished ??= CLOSED;
  }

  private take(length: bigint, wait: boolean): Uint8Array {
    if (this.finished) throw this.finished;
    const answer = this.calls.read(this.body, Number(length), wait);
    if ('bytes' in answer) return answer.bytes;
    // A body that failed (too large, timed out, reset) fails the read with its WASI error code,
    // which `wasi:http/types#http-error-code` reads back from the io error.
    this.finished = 'end' in answer ? CLOSED : { tag: 'last-operation-failed', val: new IoError(errorCodeOf(answer.error)) };
    throw this.finished;
  }
}

/** A `wasi:http/types#error-code` for a body's error, with the payload its case needs. */
function errorCodeOf(error: { code: string; reason: string }): { tag: string; val?: unknown } {
  if (error.code === 'internal-error') return { tag: error.code, val: error.reason };
  if (error.code === 'HTTP-response-body-size') return { tag: error.code, val: undefined };
  return { tag: error.code };
}

/** Ready when its body has bytes, its end or its error for the guest. */
class BodyPollable extends ShimPollable {
  constructor(readonly stream: RelayedBodyStream) {
    super();
    (this as unknown as Record<symbol, number>)[REP] = nextRep++;
  }

  override ready(): boolean {
    return this.stream.settled || this.stream.bodyCalls.wait([this.stream.body], 0).length > 0;
  }

  override block(): void {
    if (!this.stream.settled) this.stream.bodyCalls.wait([this.stream.body], undefined);
  }

  [Symbol.dispose](): void {}
}

/**
 * `wasi:io/poll.poll` that also knows relayed bodies. A list of the shim's pollables alone is the
 * shim's; with a body in it, the indices ready now are answered at once, and otherwise it waits
 * for the bodies — in short slices when the shim's pollables (a timer) are in the list too, so a
 * timeout still fires on time.
 */
export function pollWithBodies(list: unknown[]): Uint32Array {
  const ours = list.map((pollable) => (pollable instanceof BodyPollable ? pollable : undefined));
  if (ours.every((pollable) => pollable === undefined)) return shimPoll.poll(list as never) as unknown as Uint32Array;
  const first = ours.find((pollable) => pollable !== undefined) as BodyPollable;
  const calls = first.stream.bodyCalls;
  const mixed = ours.some((pollable) => pollable === undefined);
  for (;;) {
    const ready: number[] = [];
    const waiting: number[] = [];
    list.forEach((pollable, index) => {
      const body = ours[index];
      if (body === undefined) {
        if ((pollable as { ready(): boolean }).ready()) ready.push(index);
      } else if (body.stream.settled) ready.push(index);
      else waiting.push(body.stream.body);
    });
    const arrived = new Set(waiting.length > 0 ? calls.wait(waiting, ready.length > 0 ? 0 : mixed ? MIXED_POLL_SLICE_MS : undefined) : []);
    ours.forEach((body, index) => {
      if (body && !body.stream.settled && arrived.has(body.stream.body)) ready.push(index);
    });
    if (ready.length > 0) return Uint32Array.from(ready.sort((left, right) => left - right));
  }
}
