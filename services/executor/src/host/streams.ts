import { monotonicClock } from '@bytecodealliance/preview2-shim/clocks';
import { streams } from '@bytecodealliance/preview2-shim/io';

/**
 * `wasi:io/streams` backed by memory, for the streams the runtime owns outright: a guest's
 * stdout and stderr (captured, never the host's), an empty stdin, HTTP bodies relayed through
 * the executor. They subclass the shim's classes so the component model's resource checks accept
 * them, and override every method, so nothing reaches the shim's process-wide I/O.
 */

const BaseInput = streams.InputStream as unknown as new () => object;
const BaseOutput = streams.OutputStream as unknown as new () => object;

/** A pollable that is always ready: what every in-memory stream and settled future returns. */
export function readyPollable(): unknown {
  return monotonicClock.subscribeDuration(0n);
}

/** A stream's end, as WASI's stream-error says it. */
export const CLOSED = { tag: 'closed' } as const;

export class MemoryInputStream extends BaseInput {
  private offset = 0;

  constructor(private readonly bytes: Uint8Array) {
    super();
  }

  read(length: bigint): Uint8Array {
    if (this.offset >= this.bytes.length) throw CLOSED;
    const end = Math.min(this.bytes.length, this.offset + Number(length));
    const chunk = this.bytes.slice(this.offset, end);
    this.offset = end;
    return chunk;
  }

  blockingRead(length: bigint): Uint8Array {
    return this.read(length);
  }

  skip(length: bigint): bigint {
    if (this.offset >= this.bytes.length) throw CLOSED;
    const end = Math.min(this.bytes.length, this.offset + Number(length));
    const skipped = end - this.offset;
    this.offset = end;
    return BigInt(skipped);
  }

  blockingSkip(length: bigint): bigint {
    return this.skip(length);
  }

  subscribe(): unknown {
    return readyPollable();
  }

  [Symbol.dispose](): void {}
}

/** What `check-write` permits a write at once. */
const WRITE_PERMIT = 1 << 20;

/** An output stream that hands every write to `sink`, optionally capped at `limit` bytes. */
export class SinkOutputStream extends BaseOutput {
  private written = 0;

  constructor(
    private readonly sink: (bytes: Uint8Array) => void,
    private readonly limit = Number.POSITIVE_INFINITY,
  ) {
    super();
  }

  checkWrite(): bigint {
    return BigInt(WRITE_PERMIT);
  }

  write(contents: Uint8Array): void {
    this.written += contents.byteLength;
    if (this.written > this.limit) throw CLOSED;
    this.sink(Uint8Array.from(contents));
  }

  blockingWriteAndFlush(contents: Uint8Array): void {
    this.write(contents);
  }

  flush(): void {}

  blockingFlush(): void {}

  writeZeroes(length: bigint): void {
    // The stream's contract: no more than `check-write` permits. A length is the guest's to choose,
    // and allocated before anything else looked at it, so it is held to the permit first.
    if (length > BigInt(WRITE_PERMIT)) throw new Error(`wasi-io trap: a write of ${length} zeroes, more than the ${WRITE_PERMIT} check-write permits`);
    this.write(new Uint8Array(Number(length)));
  }

  blockingWriteZeroesAndFlush(length: bigint): void {
    this.writeZeroes(length);
  }

  splice(source: { read(length: bigint): Uint8Array }, length: bigint): bigint {
    const chunk = source.read(length);
    this.write(chunk);
    return BigInt(chunk.byteLength);
  }

  blockingSplice(source: { read(length: bigint): Uint8Array }, length: bigint): bigint {
    return this.splice(source, length);
  }

  subscribe(): unknown {
    return readyPollable();
  }

  [Symbol.dispose](): void {}
}
