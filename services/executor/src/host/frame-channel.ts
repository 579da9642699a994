import { readSync } from 'node:fs';
import type { Duplex } from 'node:stream';

/**
 * One JSON message per frame: four bytes of length (big-endian), then that many bytes of UTF-8.
 *
 * The executor and each capsule host talk over this, not over Node's IPC channel, because the
 * host runs a capsule's code, and Node's IPC reader trusts its peer: a line that is not JSON is
 * thrown out of the reader's event loop, and a line has no bound on its length. A host whose guest
 * broke out of WebAssembly could end the executor, and every session it runs, with a few bytes.
 * Here a frame over the reader's limit, or one that does not parse, is a violation the reader's
 * owner is told of: nothing more is read from that peer, and the executor ends that host alone.
 */

/** The descriptor a capsule host finds its channel to the executor on. */
export const HOST_CHANNEL_FD = 3;

/**
 * The most a host reads in one frame from the executor, which it trusts: a bound only so that a
 * frame whose header was damaged fails as a broken channel rather than as an allocation.
 */
export const EXECUTOR_FRAME_LIMIT_BYTES = 512 * 1024 * 1024;

const HEADER_BYTES = 4;
/** The most read after a failed write (`drainAfterError`): far more than a socket's buffer holds. */
const DRAIN_LIMIT_BYTES = 16 * 1024 * 1024;
const LARGEST_FRAME = 0xffff_ffff;
const NOTHING = Buffer.alloc(0);

export interface FrameChannelHandlers {
  message(value: unknown): void;
  /** The peer sent what is not a frame: the channel is closed, and nothing after it was read. */
  violation(why: string): void;
  /** The channel closed, from either side; told once. */
  close?(): void;
  /**
   * The peer ended its side, and everything it sent has been read: told as its end of file is
   * read, before the channel has closed (a side with nothing left to do need not wait for that).
   */
  ended?(): void;
}

export class FrameChannel {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** The body length of the frame being read; -1 until its header is in. */
  private bodyBytes = -1;
  private ended = false;
  /** The frames after this turn's first are being gathered for one write at the turn's end (`send`). */
  private gathering = false;

  constructor(
    private readonly socket: Duplex,
    /** The largest body this side reads: a peer that announces more is refused before it is buffered. */
    private readonly limitBytes: number,
    private readonly handlers: FrameChannelHandlers,
    /**
     * The most this side holds unwritten because the peer does not read: a peer that asks for
     * replies it never reads would otherwise have them all kept in this side's memory.
     */
    private readonly backlogLimitBytes = Number.POSITIVE_INFINITY,
  ) {
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    // A write that fails because the peer has gone (EPIPE) must not cost this side what the peer
    // wrote before it went: Node would destroy the socket on the failed write, and with it
    // whatever the kernel still held unread — a host's last output, or its result. So a failed
    // write does not destroy the socket on its own: what is left is read first
    // (`drainAfterError`), and only then is it closed; at the peer's end of file it is closed as
    // before, and a failed read (Node destroys the socket itself) loses nothing the kernel had.
    const states = socket as unknown as { _readableState?: { autoDestroy: boolean }; _writableState?: { autoDestroy: boolean } };
    if (states._readableState) states._readableState.autoDestroy = false;
    if (states._writableState) states._writableState.autoDestroy = false;
    socket.once('end', () => {
      this.handlers.ended?.();
      socket.destroy();
    });
    // A reset from a peer that died is told by 'close' after the drain; an error event nobody
    // hears would be thrown.
    socket.on('error', () => this.drainAfterError());
    socket.once('close', () => {
      this.ended = true;
      this.handlers.close?.();
    });
  }

  /** Neither side has closed it, and its peer has broken nothing. */
  get open(): boolean {
    return !this.ended && this.socket.writable;
  }

  /**
   * Sends `message` as one frame: at once when it is the first of this turn of the event loop, else
   * with the turn's others, in one write; `done` is told when it is handed to the kernel, or why it
   * was not (the channel closed). A message that cannot be encoded throws: that is the sender's bug.
   */
  send(message: unknown, done?: (error?: Error) => void): void {
    if (!this.open) {
      done?.(new Error('the channel is closed'));
      return;
    }
    const body = JSON.stringify(message);
    const size = Buffer.byteLength(body);
    if (size > LARGEST_FRAME) throw new RangeError(`a message of ${size} bytes does not fit a frame`);
    const frame = Buffer.allocUnsafe(HEADER_BYTES + size);
    frame.writeUInt32BE(size, 0);
    frame.write(body, HEADER_BYTES, 'utf8');
    // A frame that starts a turn of the event loop goes at once: a lone one (a launch's start, a
    // guest's first output) is not held back. Those that follow it in the same turn are gathered
    // into one write at the turn's end: an echo task sends a dozen (its trace events, its task's
    // progress, its reply), and each write of its own woke the peer for that frame alone.
    this.socket.write(frame, done ? (error) => done(error ?? undefined) : undefined);
    if (!this.gathering) {
      this.gathering = true;
      this.socket.cork();
      setImmediate(() => {
        this.gathering = false;
        this.socket.uncork();
      });
    }
    const backlog = this.socket.writableLength;
    if (backlog > this.backlogLimitBytes) {
      this.violate(`it left ${backlog} bytes sent to it unread, more than the ${this.backlogLimitBytes} this channel holds for it`);
    }
  }

  /** Closes this side once what was sent is written. */
  end(): void {
    this.socket.end();
  }

  /** Closes at once, dropping what is unsent and unread. */
  destroy(): void {
    this.ended = true;
    this.chunks = [];
    this.socket.destroy();
  }

  private read(chunk: Buffer): void {
    if (this.ended) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    while (!this.ended) {
      if (this.bodyBytes < 0) {
        if (this.buffered < HEADER_BYTES) return;
        const size = this.take(HEADER_BYTES).readUInt32BE(0);
        if (size > this.limitBytes) {
          this.violate(`it announced a message of ${size} bytes, more than the ${this.limitBytes} this channel takes`);
          return;
        }
        this.bodyBytes = size;
      }
      if (this.buffered < this.bodyBytes) return;
      const body = this.take(this.bodyBytes);
      this.bodyBytes = -1;
      let value: unknown;
      try {
        value = JSON.parse(body.toString('utf8'));
      } catch (error) {
        this.violate(`it sent a message that is not JSON (${error instanceof Error ? error.message : String(error)})`);
        return;
      }
      this.handlers.message(value);
    }
  }

  /**
   * What the peer wrote before a failed write, read straight from the descriptor and then the
   * socket closed. Node's stream stops reading once it has an error, but the kernel still holds
   * what the peer sent before it went; the peer has closed its side, so this ends at its end of
   * file, or when nothing more is there. Bounded all the same: a peer that closed only its
   * reading side and keeps writing cannot hold this side in the loop.
   */
  private drainAfterError(): void {
    if (this.socket.destroyed) return;
    const fd = (this.socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
    try {
      if (typeof fd !== 'number' || fd < 0) return;
      const piece = Buffer.allocUnsafe(64 * 1024);
      // Stops as soon as the socket is closed by anyone (a handler, a violation): its descriptor
      // may then be closed, or already another file's.
      for (let drained = 0; drained < DRAIN_LIMIT_BYTES && !this.ended && !this.socket.destroyed; ) {
        let bytes: number;
        try {
          bytes = readSync(fd, piece);
        } catch {
          break;
        }
        if (bytes === 0) break;
        drained += bytes;
        this.read(Buffer.from(piece.subarray(0, bytes)));
      }
    } finally {
      this.socket.destroy();
    }
  }

  private violate(why: string): void {
    this.destroy();
    this.handlers.violation(why);
  }

  /** The next `bytes` buffered, as one buffer; copied only when they span chunks. */
  private take(bytes: number): Buffer {
    if (bytes === 0) return NOTHING;
    this.buffered -= bytes;
    const first = this.chunks[0] as Buffer;
    if (first.length === bytes) {
      this.chunks.shift();
      return first;
    }
    if (first.length > bytes) {
      this.chunks[0] = first.subarray(bytes);
      return first.subarray(0, bytes);
    }
    const joined = Buffer.allocUnsafe(bytes);
    let offset = 0;
    while (offset < bytes) {
      const piece = this.chunks[0] as Buffer;
      const wanted = bytes - offset;
      if (piece.length <= wanted) {
        piece.copy(joined, offset);
        offset += piece.length;
        this.chunks.shift();
      } else {
        piece.copy(joined, offset, 0, wanted);
        this.chunks[0] = piece.subarray(wanted);
        offset += wanted;
      }
    }
    return joined;
  }
}
