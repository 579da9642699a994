import type { ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { FrameChannel, HOST_CHANNEL_FD } from './host/frame-channel.js';
import { HOST_MESSAGE_LIMIT } from './host/message-fit.js';
import type { SandboxNetworkStart } from './host/protocol.js';
import { closeHandle } from './sandbox-network.js';

/**
 * The most bytes one frame from a host may hold. The host fits what it sends to
 * `HOST_MESSAGE_LIMIT` characters of JSON, and a character is at most three bytes of UTF-8 (one
 * outside the BMP is two characters and four bytes); a frame announcing more is a broken host.
 */
export const HOST_FRAME_LIMIT_BYTES = 3 * HOST_MESSAGE_LIMIT;

/**
 * The most the executor holds of what it sent a host and the host has not read. Its replies are
 * what the host asks for (a conversation of up to 8 MiB, a response body's pieces), so a host that
 * asks and never reads would otherwise have the executor keep every reply until it runs out of
 * memory; a host that reads keeps this near empty.
 */
export const HOST_BACKLOG_LIMIT_BYTES = 64 * 1024 * 1024;

/** A host's message's `type`, as a record may name it: at most 40 characters, or what it is when not a string. */
export function messageType(raw: unknown): string {
  const type = (raw as { type?: unknown } | null)?.type;
  return typeof type === 'string' ? type.slice(0, 40) : typeof type;
}

/** How many of the last frames' types a link remembers. */
const LAST_TYPES_KEPT = 8;

export interface HostLinkEvents {
  /** A message from the host, with the socket it handed over when it is a `listener`. */
  message: [raw: unknown, handle?: unknown];
  /** The host broke its channel's framing: nothing more is read from it. */
  violation: [why: string];
  /** The host said `ready`, and its sandbox's sockets are out if it was asked for them: it may be sent `start`. Told once. */
  startable: [];
}

/**
 * The executor's side of one capsule host's connection: its messages, framed on descriptor 3
 * (`host/frame-channel.ts`), and — from a sealed sandbox, only until its sockets are out — Node's
 * IPC channel, which carries those sockets and nothing else.
 *
 * Node's IPC is the only way a child can hand the executor a descriptor, but its reader trusts its
 * peer (a line that is not JSON ends the reading process). So it is used only before the host has
 * run any of the capsule's code, and closed by both sides after the last socket
 * (`listeners-done`). The executor sends a host its session's `start`, before which no guest code
 * runs, only once the hand-over channel is closed on its side (`startable`): whatever a guest
 * that broke out of WebAssembly writes from then on reaches only the framed channel's reader.
 */
export class HostLink extends EventEmitter<HostLinkEvents> {
  private readonly frames: FrameChannel;
  private saidReady = false;
  private handOverAsked = false;
  private handOverEnding = false;
  /** The hand-over is over: its channel is closed on this side. */
  private handedOver = false;
  private toldStartable = false;
  /** Resolves once the framed channel has closed: everything the host wrote has been read. */
  private readonly channelClosed: Promise<void>;
  private markClosed: () => void = () => {};
  private closed = false;
  private framesRead = 0;
  /** The types of the last frames read, oldest first: what a session that ends without a result says it last heard. */
  private readonly lastTypes: string[] = [];

  constructor(readonly child: ChildProcess) {
    super();
    this.channelClosed = new Promise((resolve) => {
      this.markClosed = () => {
        this.closed = true;
        resolve();
      };
    });
    const socket = (child.stdio as ReadonlyArray<unknown>)[HOST_CHANNEL_FD] as Duplex | null | undefined;
    if (!socket) throw new Error('the capsule host was started without its channel');
    this.frames = new FrameChannel(
      socket,
      HOST_FRAME_LIMIT_BYTES,
      {
        message: (raw) => {
          const type = messageType(raw);
          this.framesRead += 1;
          this.lastTypes.push(type);
          if (this.lastTypes.length > LAST_TYPES_KEPT) this.lastTypes.shift();
          if (type === 'ready') {
            this.saidReady = true;
            this.tellIfStartable();
          }
          this.emit('message', raw);
          // Heard, whoever holds the host (a session, or the pool when it failed before one took
          // it) and whether or not it is well formed: the host waits for this to exit (`finish`
          // in `host/main.ts` says why).
          if (type === 'result') this.frames.end();
        },
        violation: (why) => {
          this.closeHandOver();
          this.emit('violation', why);
        },
        close: () => this.markClosed(),
      },
      HOST_BACKLOG_LIMIT_BYTES,
    );
    child.on('message', (raw: unknown, handle: unknown) => this.onHandOver(raw, handle));
  }

  /** The host has said `ready`, and handed its sandbox's sockets over if it was asked to. */
  get startable(): boolean {
    return this.saidReady && (!this.handOverAsked || this.handedOver);
  }

  /** Asks a sealed host for its sandbox's sockets (`hand-over`): it is `startable` once they are out. */
  askHandOver(sandbox: SandboxNetworkStart): void {
    this.handOverAsked = true;
    this.send({ type: 'hand-over', sandbox });
  }

  /** The host can still be told something: its channel is open. */
  get open(): boolean {
    return this.frames.open;
  }

  /** Sends `message`; `undelivered` is told when it cannot be (the channel is closed or breaks). */
  send(message: object, undelivered?: () => void): void {
    this.frames.send(message, (error) => {
      if (error) undelivered?.();
    });
  }

  /**
   * Resolves once everything the host wrote has been read (its channel is closed, by its end or by
   * this side), or after `waitMs`, whichever comes first. A host's exit can be heard before its
   * last frames are read: the executor reads the channel a slice at a time, and may hear the exit
   * between two slices, with the host's result still in the socket.
   */
  async everythingRead(waitMs: number): Promise<'closed' | 'waited'> {
    let timer: NodeJS.Timeout | undefined;
    // A process the host left behind could hold the channel open: the end is not held for it.
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, waitMs);
    });
    await Promise.race([this.channelClosed, waited]);
    clearTimeout(timer);
    return this.closed ? 'closed' : 'waited';
  }

  /** What was read from the host: how many frames, the types of the last few (oldest first), and whether its channel has closed. */
  get heard(): { frames: number; lastTypes: string[]; closed: boolean } {
    return { frames: this.framesRead, lastTypes: [...this.lastTypes], closed: this.closed };
  }

  /** Closes this side of both channels at once. */
  close(): void {
    this.frames.destroy();
    this.closeHandOver();
  }

  private onHandOver(raw: unknown, handle: unknown): void {
    const type = (raw as { type?: unknown } | null)?.type;
    if (type === 'listener' && handle !== undefined) {
      this.emit('message', raw, handle);
      return;
    }
    // Nothing but sockets crosses here: anything else is dropped, a descriptor with it closed.
    if (handle !== undefined) closeHandle(handle);
    if (type === 'listeners-done' && !this.handOverEnding) {
      this.handOverEnding = true;
      // Told once the channel is closed on this side, not when it is asked to close (Node closes
      // it a tick later): a host sent its start from then on finds nothing to write to.
      const over = (): void => {
        this.handedOver = true;
        this.tellIfStartable();
      };
      if (!this.child.connected) over();
      else {
        this.child.once('disconnect', over);
        this.child.disconnect();
      }
    }
  }

  private tellIfStartable(): void {
    if (this.toldStartable || !this.startable) return;
    this.toldStartable = true;
    this.emit('startable');
  }

  private closeHandOver(): void {
    if (this.child.connected) this.child.disconnect();
  }
}
