import { closeSync, fdatasyncSync, fstatSync, fsyncSync, ftruncateSync, futimesSync, readSync, writeSync, type BigIntStats } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { hrtime } from 'node:process';
import workerThreads, { type MessagePort, type WorkerOptions } from 'node:worker_threads';
import { openBeneath } from './beneath-preopen.js';
import * as shimCalls from '../../../../node_modules/@bytecodealliance/preview2-shim/dist/io/calls.js';

/**
 * preview2-shim's I/O calls, answered in the guest's own thread instead of on a thread of the shim's.
 *
 * The shim keeps the parts of WASI a guest sees — its resource classes, and for `wasi:filesystem`
 * every path check against the preopen — on the calling thread, and sends what touches the system
 * (open this resolved path, read this descriptor, is this timer due) to a worker thread of its own,
 * blocking on each call until the thread answers. That thread costs a guest worker ~50 ms of CPU
 * and ~15 MB to start, and each call ~0.1 ms to cross. A guest already runs alone in a worker of
 * ours, so blocking its thread is exactly what a blocking call may do: here the same calls are made
 * synchronously, in place, with no thread at all.
 *
 * The shim is handed, instead of its worker, a responder that speaks the shim's call protocol
 * (synckit's: a message with a shared buffer, an answer on a port, a counter the caller waits on)
 * and answers before the caller waits. It answers only what the interfaces we offer can ask —
 * descriptors, file streams, clocks and polls — so the shim's sockets, its HTTP client and server
 * and its stdin, none of which a guest is given, have nothing behind them: any other call is
 * refused as a trap. The paths it opens are the ones the shim's filesystem resolved within the
 * preopen, opened only if they still lie there (`openBeneath`); it adds no path of its own.
 */

/** The shim's call numbers this responder answers, looked up by name in the shim's own table. */
const CALL_NAMES = [
  'CALL_MASK',
  'CALL_TYPE_MASK',
  'FILE',
  'INPUT_STREAM_CREATE',
  'INPUT_STREAM_READ',
  'INPUT_STREAM_BLOCKING_READ',
  'INPUT_STREAM_SKIP',
  'INPUT_STREAM_BLOCKING_SKIP',
  'INPUT_STREAM_SUBSCRIBE',
  'INPUT_STREAM_DISPOSE',
  'OUTPUT_STREAM_CREATE',
  'OUTPUT_STREAM_CHECK_WRITE',
  'OUTPUT_STREAM_WRITE',
  'OUTPUT_STREAM_BLOCKING_WRITE_AND_FLUSH',
  'OUTPUT_STREAM_FLUSH',
  'OUTPUT_STREAM_BLOCKING_FLUSH',
  'OUTPUT_STREAM_WRITE_ZEROES',
  'OUTPUT_STREAM_BLOCKING_WRITE_ZEROES_AND_FLUSH',
  'OUTPUT_STREAM_SPLICE',
  'OUTPUT_STREAM_BLOCKING_SPLICE',
  'OUTPUT_STREAM_SUBSCRIBE',
  'OUTPUT_STREAM_DISPOSE',
  'FILESYSTEM_DESCRIPTOR_OPEN',
  'FILESYSTEM_DESCRIPTOR_CLOSE',
  'FILESYSTEM_DESCRIPTOR_ADVISE',
  'FILESYSTEM_DESCRIPTOR_SYNC_DATA',
  'FILESYSTEM_DESCRIPTOR_GET_TYPE',
  'FILESYSTEM_DESCRIPTOR_SET_SIZE',
  'FILESYSTEM_DESCRIPTOR_SET_TIMES',
  'FILESYSTEM_DESCRIPTOR_READ',
  'FILESYSTEM_DESCRIPTOR_WRITE',
  'FILESYSTEM_DESCRIPTOR_SYNC',
  'FILESYSTEM_DESCRIPTOR_STAT',
  'FILESYSTEM_DESCRIPTOR_METADATA_HASH',
  'POLL_POLLABLE_READY',
  'POLL_POLLABLE_BLOCK',
  'POLL_POLLABLE_DISPOSE',
  'POLL_POLL_LIST',
  'CLOCKS_DURATION_SUBSCRIBE',
  'CLOCKS_INSTANT_SUBSCRIBE',
] as const;

export type ShimCalls = Record<(typeof CALL_NAMES)[number], number> & Record<string, unknown>;

/**
 * The shim's table of call numbers (`dist/io/calls.js`), the very module the shim's own io module
 * imports. It is not among the package's exports, so it is named by its path in the workspace's
 * `node_modules`; a path import, unlike an `import()` of the resolved URL, is bundled with the
 * guest worker, which then loads no ES module at run time (`scripts/bundle.mjs` says why). A name
 * missing from it (another version of the shim) fails the guest's start, loudly, rather than leave
 * a call answered wrongly.
 */
export function shimCallTable(): ShimCalls {
  const calls = shimCalls as Record<string, unknown>;
  const missing = CALL_NAMES.filter((name) => typeof calls[name] !== 'number');
  if (missing.length > 0)
    throw new Error(`preview2-shim's I/O calls are not the ones this host answers (no ${missing.join(', ')}): rebuild against its pinned version`);
  return calls as ShimCalls;
}

/** How much a file stream takes in one write and gives in one read: the guest asks again for more. */
const STREAM_BUDGET = 1 << 20;
/** A blocked poll wakes at least this often (ms): a worker told to end ends within it. */
const BLOCK_SLICE_MS = 100;

const CLOSED = { tag: 'closed' } as const;
/**
 * Where the pollables' ids split: the shim's (answered here) count up from 1 below it, and
 * `relayed-body.ts`'s own count up from it, since both are reps in jco's one table of host
 * resources and must never collide.
 */
export const FIRST_RELAYED_POLLABLE_REP = 1 << 29;

type FileType = 'regular-file' | 'socket' | 'symbolic-link' | 'fifo' | 'directory' | 'character-device' | 'block-device' | 'unknown';

function typeOf(stats: BigIntStats): FileType {
  if (stats.isFile()) return 'regular-file';
  if (stats.isDirectory()) return 'directory';
  if (stats.isSymbolicLink()) return 'symbolic-link';
  if (stats.isSocket()) return 'socket';
  if (stats.isFIFO()) return 'fifo';
  if (stats.isCharacterDevice()) return 'character-device';
  if (stats.isBlockDevice()) return 'block-device';
  return 'unknown';
}

/** A stream's failure as the shim's worker reports it: the shim's stream classes turn `val` into an io error. */
function streamFailure(error: unknown): { tag: 'last-operation-failed'; val: { code?: string; message: string } } {
  const failure = error as NodeJS.ErrnoException;
  return { tag: 'last-operation-failed', val: { code: failure.code, message: failure.message ?? String(error) } };
}

/**
 * A file offset as node's positioned reads and writes take it. They must be given a number:
 * `writeSync` ignores a bigint position and writes at the file's current offset instead.
 */
function offsetOf(position: bigint): number {
  if (position < 0n || position > BigInt(Number.MAX_SAFE_INTEGER))
    throw Object.assign(new Error(`file offset ${position} is out of range`), { code: 'EINVAL' });
  return Number(position);
}

/**
 * `fn`'s failure as the `wasi:filesystem` error code a guest is given. The shim passes on what
 * these calls throw (`read`, `write`, `set-size`) without turning it into a code, as it does for
 * its other calls: node's own error was a trap, saying `EISDIR` or a descriptor's number.
 */
function asErrorCode<T>(fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (error instanceof RangeError) throw 'file-too-large';
    throw FILESYSTEM_ERROR_CODES[(error as NodeJS.ErrnoException).code ?? ''] ?? 'io';
  }
}

const FILESYSTEM_ERROR_CODES: Readonly<Record<string, string>> = {
  EACCES: 'access',
  EPERM: 'not-permitted',
  EAGAIN: 'would-block',
  EBADF: 'bad-descriptor',
  EFBIG: 'file-too-large',
  EINVAL: 'invalid',
  EIO: 'io',
  EISDIR: 'is-directory',
  ENOSPC: 'insufficient-space',
  EDQUOT: 'quota',
  EROFS: 'read-only',
  ENXIO: 'no-such-device',
  ESPIPE: 'invalid-seek',
  ETXTBSY: 'text-file-busy',
  EOVERFLOW: 'overflow',
};

/** A call the shim made that this host does not answer: the guest traps. */
function refused(what: string): Error {
  return new Error(`wasi-io trap: ${what} is not offered in this sandbox`);
}

interface OpenFile {
  fd: number;
  /** The descriptor and each stream opened on it: the fd is closed when the last lets go. */
  refs: number;
}

interface FileStream {
  direction: 'input' | 'output';
  file: number;
  position: bigint;
}

/** A pollable: ready at once, or when the monotonic clock reaches `due` (ns). */
interface Pollable {
  due: bigint | undefined;
}

/** The state behind one guest worker's WASI: its open files, file streams and pollables. */
export class InThreadIo {
  private readonly files = new Map<number, OpenFile>();
  private readonly streams = new Map<number, FileStream>();
  private readonly pollables = new Map<number, Pollable>();
  private nextFile = 1;
  private nextStream = 1;
  private nextPollable = 1;
  private readonly sleeper = new Int32Array(new SharedArrayBuffer(4));

  constructor(private readonly calls: ShimCalls) {}

  /** Answers one of the shim's calls, or throws what the shim's caller expects to catch. */
  answer(call: number, id: number | null, payload: unknown): unknown {
    const c = this.calls;
    switch (call) {
      case c.FILESYSTEM_DESCRIPTOR_OPEN:
        return this.open(payload as { path: string; flags: number });
      case c.FILESYSTEM_DESCRIPTOR_CLOSE:
        return this.release(id);
      case c.FILESYSTEM_DESCRIPTOR_ADVISE:
        // Advice is a hint (WASI allows ignoring it); it needs only a descriptor that exists.
        this.file(id);
        return undefined;
      case c.FILESYSTEM_DESCRIPTOR_SYNC_DATA:
        return fdatasyncSync(this.file(id).fd);
      case c.FILESYSTEM_DESCRIPTOR_SYNC:
        return fsyncSync(this.file(id).fd);
      case c.FILESYSTEM_DESCRIPTOR_GET_TYPE:
        return typeOf(fstatSync(this.file(id).fd, { bigint: true }));
      case c.FILESYSTEM_DESCRIPTOR_SET_SIZE:
        return asErrorCode(() => ftruncateSync(this.file(id).fd, Number(payload)));
      case c.FILESYSTEM_DESCRIPTOR_SET_TIMES: {
        const { atime, mtime } = payload as { atime: number | Date; mtime: number | Date };
        return futimesSync(this.file(id).fd, atime, mtime);
      }
      case c.FILESYSTEM_DESCRIPTOR_READ: {
        const { length, offset } = payload as { length: number | bigint; offset: number | bigint };
        const bytes = asErrorCode(() => this.readAt(this.file(id).fd, Number(length), BigInt(offset)));
        return { bytes, eof: bytes.byteLength === 0 };
      }
      case c.FILESYSTEM_DESCRIPTOR_WRITE: {
        const { buffer, offset } = payload as { buffer: Uint8Array; offset: number | bigint };
        return asErrorCode(() => this.writeAt(this.file(id).fd, buffer, BigInt(offset)));
      }
      case c.FILESYSTEM_DESCRIPTOR_STAT: {
        const stats = fstatSync(this.file(id).fd, { bigint: true });
        return { type: typeOf(stats), nlink: stats.nlink, size: stats.size, atimeNs: stats.atimeNs, mtimeNs: stats.mtimeNs, ctimeNs: stats.ctimeNs };
      }
      case c.FILESYSTEM_DESCRIPTOR_METADATA_HASH: {
        const stats = fstatSync(this.file(id).fd, { bigint: true });
        return { upper: stats.mtimeNs, lower: stats.ino };
      }
      case c.INPUT_STREAM_CREATE | c.FILE:
        return this.openStream('input', payload as { descriptorId: number; offset: number | bigint });
      case c.OUTPUT_STREAM_CREATE | c.FILE:
        return this.openStream('output', payload as { descriptorId: number; offset: number | bigint });
      case c.CLOCKS_DURATION_SUBSCRIBE:
        return this.pollable(hrtime.bigint() + BigInt(payload as bigint));
      case c.CLOCKS_INSTANT_SUBSCRIBE:
        return this.pollable(BigInt(payload as bigint));
      case c.POLL_POLLABLE_READY:
        return this.ready(this.pollableOf(id));
      case c.POLL_POLLABLE_BLOCK:
        this.poll([id as number]);
        return undefined;
      case c.POLL_POLL_LIST:
        return this.poll(payload as number[]);
      case c.POLL_POLLABLE_DISPOSE:
        this.pollables.delete(id as number);
        return undefined;
    }
    // The remaining calls are the generic stream calls, for file streams only.
    if ((call & c.CALL_TYPE_MASK) !== c.FILE) throw refused(this.nameOf(call));
    return this.streamCall(call & c.CALL_MASK, id, payload);
  }

  private streamCall(operation: number, id: number | null, payload: unknown): unknown {
    const c = this.calls;
    switch (operation) {
      case c.INPUT_STREAM_READ:
      case c.INPUT_STREAM_BLOCKING_READ:
        return this.readStream(id, Number(payload));
      case c.INPUT_STREAM_SKIP:
      case c.INPUT_STREAM_BLOCKING_SKIP:
        return BigInt(this.readStream(id, Number(payload)).byteLength);
      case c.INPUT_STREAM_SUBSCRIBE:
      case c.OUTPUT_STREAM_SUBSCRIBE:
        this.stream(id);
        // A file is always ready to be read or written: the read or write itself may block.
        return this.pollable(undefined);
      case c.INPUT_STREAM_DISPOSE:
      case c.OUTPUT_STREAM_DISPOSE: {
        const stream = this.streams.get(id as number);
        if (!stream) return undefined;
        this.streams.delete(id as number);
        return this.release(stream.file);
      }
      case c.OUTPUT_STREAM_CHECK_WRITE:
        this.stream(id, 'output');
        return BigInt(STREAM_BUDGET);
      case c.OUTPUT_STREAM_WRITE:
      case c.OUTPUT_STREAM_BLOCKING_WRITE_AND_FLUSH:
        this.writeStream(id, payload as Uint8Array);
        return undefined;
      case c.OUTPUT_STREAM_WRITE_ZEROES:
      case c.OUTPUT_STREAM_BLOCKING_WRITE_ZEROES_AND_FLUSH:
        // Held to the permit before the zeroes are made: the length is the guest's to choose.
        if (BigInt(payload as bigint) > BigInt(STREAM_BUDGET))
          throw new Error(`${IO_TRAP} a write of ${payload} zeroes to a file, more than the ${STREAM_BUDGET} check-write permits`);
        this.writeStream(id, new Uint8Array(Number(payload)));
        return undefined;
      case c.OUTPUT_STREAM_FLUSH:
      case c.OUTPUT_STREAM_BLOCKING_FLUSH:
        // Every write is made before it returns: there is nothing left to flush.
        this.stream(id, 'output');
        return undefined;
      case c.OUTPUT_STREAM_SPLICE:
      case c.OUTPUT_STREAM_BLOCKING_SPLICE: {
        const { src, len } = payload as { src: number; len: bigint };
        this.stream(id, 'output');
        const chunk = this.readStream(src, Number(len));
        this.writeStream(id, chunk);
        return BigInt(chunk.byteLength);
      }
    }
    throw refused(this.nameOf(operation | c.FILE));
  }

  /** A call as the shim's table names it (`SOCKET_TCP_CREATE_HANDLE`, `INPUT_STREAM_CREATE of STDIN`), for a refusal. */
  private nameOf(call: number): string {
    const names = (this.calls.reverseMap ?? {}) as Record<number, string | undefined>;
    const operation = names[call & this.calls.CALL_MASK] ?? `call ${(call & this.calls.CALL_MASK).toString(16)}`;
    const type = call & this.calls.CALL_TYPE_MASK;
    return type === 0 ? operation : `${operation} of ${names[type] ?? `type ${type}`}`;
  }

  private open({ path, flags }: { path: string; flags: number }): { id: number; type: FileType } {
    const fd = openBeneath(path, flags);
    let type: FileType;
    try {
      type = typeOf(fstatSync(fd, { bigint: true }));
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    const id = this.nextFile++;
    this.files.set(id, { fd, refs: 1 });
    return { id, type };
  }

  private file(id: number | null): OpenFile {
    const file = this.files.get(id as number);
    if (!file) throw Object.assign(new Error(`no open descriptor ${id}`), { code: 'EBADF' });
    return file;
  }

  /**
   * Closes every file the instance left open, and forgets its streams and pollables: the instance
   * is over, and the descriptors belong to the host's process, which a kept worker's next
   * instance, and the host itself, outlive.
   */
  closeAll(): void {
    for (const file of this.files.values()) {
      try {
        closeSync(file.fd);
      } catch {
        // Already gone: there is nothing left to release.
      }
    }
    this.files.clear();
    this.streams.clear();
    this.pollables.clear();
  }

  /** Lets go of a descriptor; one already closed (`closeAll`, then the shim's finalizer) is nothing to do. */
  private release(id: number | null): undefined {
    const file = this.files.get(id as number);
    if (!file) return undefined;
    file.refs -= 1;
    if (file.refs === 0) {
      this.files.delete(id as number);
      closeSync(file.fd);
    }
    return undefined;
  }

  private openStream(direction: FileStream['direction'], { descriptorId, offset }: { descriptorId: number; offset: number | bigint }): number {
    const file = this.file(descriptorId);
    file.refs += 1;
    const id = this.nextStream++;
    this.streams.set(id, { direction, file: descriptorId, position: BigInt(offset) });
    return id;
  }

  /** A stream the guest holds; one it dropped (or never had) reads as closed, as the shim's does. */
  private stream(id: number | null, direction?: FileStream['direction']): FileStream {
    const stream = this.streams.get(id as number);
    if (!stream) throw CLOSED;
    if (direction && stream.direction !== direction) throw refused(`an ${stream.direction} stream used for ${direction}`);
    return stream;
  }

  private readStream(id: number | null, length: number): Uint8Array {
    const stream = this.stream(id, 'input');
    if (length <= 0) return new Uint8Array(0);
    let bytes: Uint8Array;
    try {
      bytes = this.readAt(this.file(stream.file).fd, length, stream.position);
    } catch (error) {
      throw streamFailure(error);
    }
    if (bytes.byteLength === 0) throw CLOSED;
    stream.position += BigInt(bytes.byteLength);
    return bytes;
  }

  private writeStream(id: number | null, bytes: Uint8Array): void {
    const stream = this.stream(id, 'output');
    // The stream's contract: never more than `check-write` allowed. A guest that writes more is broken.
    if (bytes.byteLength > STREAM_BUDGET)
      throw new Error(`${IO_TRAP} a write of ${bytes.byteLength} bytes to a file, more than the ${STREAM_BUDGET} check-write permits`);
    try {
      stream.position += BigInt(this.writeAt(this.file(stream.file).fd, bytes, stream.position));
    } catch (error) {
      throw streamFailure(error);
    }
  }

  private readAt(fd: number, length: number, position: bigint): Uint8Array {
    const buffer = new Uint8Array(Math.min(Math.max(length, 0), STREAM_BUDGET));
    const read = readSync(fd, buffer, 0, buffer.byteLength, offsetOf(position));
    return buffer.subarray(0, read);
  }

  private writeAt(fd: number, bytes: Uint8Array, position: bigint): number {
    const at = offsetOf(position);
    let written = 0;
    while (written < bytes.byteLength) {
      written += writeSync(fd, bytes, written, bytes.byteLength - written, at + written);
    }
    return written;
  }

  private pollable(due: bigint | undefined): number {
    // Ids from here on are `relayed-body.ts`'s pollables': a guest never gets that many of ours.
    if (this.nextPollable >= FIRST_RELAYED_POLLABLE_REP) throw new Error('wasi-io trap: the guest made more pollables than a worker can number');
    const id = this.nextPollable++;
    this.pollables.set(id, { due });
    return id;
  }

  private pollableOf(id: number | null): Pollable {
    const pollable = this.pollables.get(id as number);
    if (!pollable) throw new Error(`wasi-io trap: no pollable ${id}`);
    return pollable;
  }

  private ready(pollable: Pollable): boolean {
    return pollable.due === undefined || hrtime.bigint() >= pollable.due;
  }

  /** `wasi:io/poll.poll`: the indices ready, waiting for the first when none is (only a timer can be not ready). */
  private poll(ids: number[]): Uint32Array {
    if (ids.length === 0) throw new Error('wasi-io trap: poll on an empty list');
    const list = ids.map((id) => this.pollableOf(id));
    for (;;) {
      const ready = list.flatMap((pollable, index) => (this.ready(pollable) ? [index] : []));
      if (ready.length > 0) return Uint32Array.from(ready);
      // None is ready, so each is a timer: sleep until the soonest is due.
      const now = hrtime.bigint();
      let waitMs = BLOCK_SLICE_MS;
      for (const pollable of list) waitMs = Math.min(waitMs, Number((pollable.due as bigint) - now) / 1e6);
      if (waitMs > 0) Atomics.wait(this.sleeper, 0, 0, waitMs);
    }
  }
}

/**
 * What the shim gets when it makes its I/O worker: the parts of a `Worker` it uses, with an
 * `InThreadIo` behind `postMessage`. The answer is on the caller's port, and the counter the caller
 * is about to wait on already moved, before `postMessage` returns.
 */
class InThreadWorker {
  private readonly port: MessagePort;

  constructor(
    private readonly io: InThreadIo,
    options: WorkerOptions | undefined,
  ) {
    const port = (options?.workerData as { workerPort?: MessagePort } | undefined)?.workerPort;
    if (!port) throw new Error('preview2-shim made its I/O worker without a reply port: rebuild against its pinned version');
    this.port = port;
  }

  postMessage({ sharedBuffer, cid, args }: { sharedBuffer: SharedArrayBuffer; cid: number; args: [number, number | null, unknown] }): void {
    let reply: unknown;
    try {
      reply = { cid, result: this.io.answer(...args) };
    } catch (error) {
      // A trap the shim does not pass on: for what is no stream error it traces and ends the worker
      // (`exit(1)`), and the session said only that its worker exited without a result.
      if (error instanceof Error && error.message.startsWith(IO_TRAP)) ioTrapListener?.(error.message);
      reply = { cid, error, properties: error && typeof error === 'object' ? { ...error } : undefined };
    }
    this.port.postMessage(reply);
    Atomics.add(new Int32Array(sharedBuffer), 0, 1);
  }

  /** The shim listens for calls back from its thread (its HTTP server's); there are none. */
  on(): this {
    return this;
  }

  unref(): void {}

  ref(): void {}
}

let shimIo: Promise<typeof import('@bytecodealliance/preview2-shim/io')> | undefined;
let inThread: InThreadIo | undefined;

/**
 * Loads the shim's io module (which every other shim module shares) with its I/O answered in
 * this thread. Every shim import in a guest worker waits for this first: a shim module evaluated
 * before it would start the shim's own thread.
 */
export function loadShimIo(): Promise<typeof import('@bytecodealliance/preview2-shim/io')> {
  shimIo ??= (async () => {
    const io = new InThreadIo(shimCallTable());
    const RealWorker = workerThreads.Worker;
    (workerThreads as { Worker: unknown }).Worker = function inThreadWorker(filename: string | URL, options?: WorkerOptions) {
      // Only the shim's one I/O worker is answered here: anything else made meanwhile is made as asked.
      if (inThread) return new RealWorker(filename, options);
      inThread = io;
      return new InThreadWorker(io, options);
    };
    syncBuiltinESMExports();
    try {
      return await import('@bytecodealliance/preview2-shim/io');
    } finally {
      (workerThreads as { Worker: unknown }).Worker = RealWorker;
      syncBuiltinESMExports();
    }
  })();
  return shimIo;
}

/** How an error the host throws as a guest's trap begins (`wasi-io trap: a write larger than …`). */
const IO_TRAP = 'wasi-io trap:';
let ioTrapListener: ((message: string) => void) | undefined;

/** Who is told of a trap of the guest's I/O as it is thrown: the worker, which the shim then ends. */
export function onIoTrap(listener: (message: string) => void): void {
  ioTrapListener = listener;
}

/** Closes the files the instance that just ended left open (`InThreadIo.closeAll`). */
export function closeGuestFiles(): void {
  inThread?.closeAll();
}

/** Whether the shim's I/O in this worker is answered in this thread (`false`: the shim is not loaded, or made its own thread). For tests. */
export function shimIoInThread(): boolean {
  return inThread !== undefined;
}
