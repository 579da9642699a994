import type { KeyValueStore } from './kv.js';
import type { ObjectStore } from './objects.js';

/**
 * What a transport must do: move bytes between subjects, with NATS semantics. Validation,
 * encoding and error mapping live above this, in the contract bus, so the two transports cannot
 * differ in what they accept.
 */
export interface RawMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  /** Present when the sender is waiting for a reply. */
  respond?(data: Uint8Array): void;
}

export interface RawSubscription {
  unsubscribe(): void;
}

/** How long a `gather` listens: for the first reply, then for each next one. */
export interface GatherWindow {
  timeoutMs: number;
  quietMs: number;
}

export type TransportFailure = 'timeout' | 'no-responders' | 'closed';

/**
 * What a bus connection says of itself: lost (the client reconnects, for as long as it takes),
 * back, or closed for good (it never will: the server refused it on reconnecting, its credentials
 * revoked). Closed by its own side (`close`) is not said.
 */
export type BusConnectionState = 'disconnected' | 'reconnected' | 'closed';

/** Thrown by `Transport.request` so the bus can map it onto a catalogue code. */
export class TransportError extends Error {
  constructor(
    readonly failure: TransportFailure,
    message: string,
  ) {
    super(message);
  }
}

export interface Transport {
  /** `in-process`, or the server URL the transport is connected to. */
  readonly description: string;
  /** The largest payload the transport carries; the bus refuses bigger ones before sending. */
  readonly maxPayload: number;
  publish(subject: string, data: Uint8Array): void;
  subscribe(pattern: string, handler: (message: RawMessage) => void, queue?: string): RawSubscription;
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
  /**
   * A request every subscriber of `subject` answers (one per queue group): every reply, collected
   * until `quietMs` pass with no new one after the last, or `timeoutMs` with none at all. No
   * subscriber is no reply: an empty list, not a failure.
   */
  gather(subject: string, data: Uint8Array, window: GatherWindow): Promise<Uint8Array[]>;
  /**
   * A key-value bucket, created on first use. Keys and value sizes are checked above this, by the
   * bus; a transport maps a lost connection onto `TransportError` as `request` does.
   */
  keyValue(bucket: string): Promise<KeyValueStore>;
  /**
   * An object store bucket, created on first use. Names are checked above this, by the bus; a lost
   * connection is a `TransportError` as for `request`.
   */
  objectStore(bucket: string): Promise<ObjectStore>;
  /**
   * Told when the connection to the bus is lost and when it is back (never, in-process): a
   * service that judges others by their silence must not judge while it cannot hear.
   */
  onConnectionChange(listener: (state: BusConnectionState, reason?: string) => void): void;
  /** Whether the server is there now (always, in-process). */
  readonly connected: boolean;
  /** Resolves once everything published so far has reached the server (or every local subscriber). */
  flush(): Promise<void>;
  close(): Promise<void>;
}
