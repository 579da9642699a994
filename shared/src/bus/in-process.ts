import type { KeyValueEntry, KeyValueStore } from './kv.js';
import { type ObjectInfo, type ObjectSource, type ObjectStore, sourceChunks } from './objects.js';
import { subjectMatches } from './subject.js';
import { type GatherWindow, type RawMessage, type RawSubscription, type Transport, TransportError } from './transport.js';

interface Subscriber {
  /** When it subscribed, among all of this transport's subscribers: delivery goes in this order. */
  readonly order: number;
  readonly pattern: string;
  readonly queue: string | undefined;
  readonly handler: (message: RawMessage) => void;
  active: boolean;
}

/**
 * The embedded default: NATS semantics inside one process. Delivery is asynchronous (a
 * macrotask later), as it is over a socket, so code that works here does not silently depend on
 * a handler running before `publish` returns. Queue groups hand each message to one member,
 * round-robin; a request with nobody subscribed fails at once with no-responders, as NATS does.
 */
export class InProcessTransport implements Transport {
  readonly description = 'in-process';
  /** nats-server's default, so a payload that fits here fits on the stack's bus too. */
  readonly maxPayload = 1024 * 1024;
  /**
   * Subscribers by the one subject they name, for patterns without wildcards (nearly all: a
   * session's calls, its events, a command's queue), so a message finds its own without testing
   * every subscription of every session; the few wildcard patterns are tested one by one.
   */
  private literal = new Map<string, Subscriber[]>();
  private wildcard: Subscriber[] = [];
  private subscribed = 0;
  private readonly queueCursor = new Map<string, number>();
  private pending = 0;
  private idleWaiters: Array<() => void> = [];
  private closed = false;
  private readonly buckets = new Map<string, MemoryBucket>();
  private readonly objectBuckets = new Map<string, MemoryObjectStore>();

  publish(subject: string, data: Uint8Array): void {
    this.deliver(subject, data, undefined);
  }

  subscribe(pattern: string, handler: (message: RawMessage) => void, queue?: string): RawSubscription {
    const subscriber: Subscriber = { order: this.subscribed++, pattern, queue, handler, active: true };
    const isLiteral = !pattern.split('.').some((token) => token === '*' || token === '>');
    if (isLiteral) this.literal.set(pattern, [...(this.literal.get(pattern) ?? []), subscriber]);
    else this.wildcard.push(subscriber);
    return {
      unsubscribe: () => {
        if (!subscriber.active) return;
        subscriber.active = false;
        if (!isLiteral) {
          this.wildcard = this.wildcard.filter((candidate) => candidate !== subscriber);
          return;
        }
        const rest = (this.literal.get(pattern) ?? []).filter((candidate) => candidate !== subscriber);
        if (rest.length > 0) this.literal.set(pattern, rest);
        else this.literal.delete(pattern);
      },
    };
  }

  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        if (settled) return;
        settled = true;
        reject(new TransportError('timeout', `no reply on '${subject}' within ${timeoutMs} ms`));
      }, timeoutMs);
      const respond = (reply: Uint8Array): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(Uint8Array.from(reply));
      };
      const delivered = this.deliver(subject, data, respond);
      if (delivered === 0) {
        settled = true;
        clearTimeout(timer);
        reject(new TransportError('no-responders', `no subscriber for '${subject}'`));
      }
    });
  }

  gather(subject: string, data: Uint8Array, window: GatherWindow): Promise<Uint8Array[]> {
    return new Promise((resolve) => {
      const replies: Uint8Array[] = [];
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const settle = (): void => {
        settled = true;
        resolve(replies);
      };
      // Delivery is asynchronous: no reply can come before the timer is set below.
      const delivered = this.deliver(subject, data, (reply) => {
        if (settled) return;
        replies.push(Uint8Array.from(reply));
        clearTimeout(timer);
        timer = setTimeout(settle, window.quietMs);
      });
      if (delivered === 0) settle();
      else timer = setTimeout(settle, window.timeoutMs);
    });
  }

  /** Buckets live as long as this transport: every bus built on it shares them, as on one nats-server. */
  async keyValue(bucket: string): Promise<KeyValueStore> {
    if (this.closed) throw new TransportError('closed', 'the in-process bus is closed');
    let store = this.buckets.get(bucket);
    if (!store) {
      store = new MemoryBucket(bucket, () => this.closed);
      this.buckets.set(bucket, store);
    }
    return store;
  }

  /** Object buckets live as long as this transport, shared by every bus built on it. */
  async objectStore(bucket: string): Promise<ObjectStore> {
    if (this.closed) throw new TransportError('closed', 'the in-process bus is closed');
    let store = this.objectBuckets.get(bucket);
    if (!store) {
      store = new MemoryObjectStore(bucket, () => this.closed);
      this.objectBuckets.set(bucket, store);
    }
    return store;
  }

  /** One process never loses its own bus. */
  onConnectionChange(): void {}

  readonly connected = true;

  flush(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.literal = new Map();
    this.wildcard = [];
    await this.flush();
  }

  /** The subscribers `subject` reaches, in the order they subscribed (as one list scanned in order would give them). */
  private matching(subject: string): Subscriber[] {
    const exact = this.literal.get(subject) ?? [];
    if (this.wildcard.length === 0) return exact;
    const patterned = this.wildcard.filter((subscriber) => subjectMatches(subscriber.pattern, subject));
    if (patterned.length === 0) return exact;
    if (exact.length === 0) return patterned;
    return [...exact, ...patterned].sort((left, right) => left.order - right.order);
  }

  /** Schedules delivery to every matching subscriber (one per queue group); returns how many. */
  private deliver(subject: string, data: Uint8Array, respond: ((reply: Uint8Array) => void) | undefined): number {
    if (this.closed) throw new TransportError('closed', 'the in-process bus is closed');
    const targets: Subscriber[] = [];
    const groups = new Map<string, Subscriber[]>();
    for (const subscriber of this.matching(subject)) {
      if (subscriber.queue === undefined) {
        targets.push(subscriber);
      } else {
        const key = `${subscriber.queue}\u0000${subscriber.pattern}`;
        const members = groups.get(key) ?? [];
        members.push(subscriber);
        groups.set(key, members);
      }
    }
    for (const [key, members] of groups) {
      const cursor = this.queueCursor.get(key) ?? 0;
      targets.push(members[cursor % members.length] as Subscriber);
      this.queueCursor.set(key, cursor + 1);
    }
    for (const target of targets) {
      // Each subscriber gets its own copy, as each would over a socket.
      const message: RawMessage = respond ? { subject, data: Uint8Array.from(data), respond } : { subject, data: Uint8Array.from(data) };
      this.pending += 1;
      setImmediate(() => {
        try {
          if (target.active) target.handler(message);
        } finally {
          this.pending -= 1;
          if (this.pending === 0) for (const wake of this.idleWaiters.splice(0)) wake();
        }
      });
    }
    return targets.length;
  }
}

/**
 * One bucket in memory, with NATS KV's revision semantics: every write takes the bucket's next
 * sequence number, `create` succeeds only on an absent (or deleted) key, `update` only at the
 * revision the caller read. Each call is one synchronous step, so compare-and-set is atomic here.
 */
class MemoryBucket implements KeyValueStore {
  private readonly entries = new Map<string, KeyValueEntry>();
  private sequence = 0;

  constructor(
    readonly bucket: string,
    private readonly isClosed: () => boolean,
  ) {}

  private open(): void {
    if (this.isClosed()) throw new TransportError('closed', 'the in-process bus is closed');
  }

  private write(key: string, value: string): void {
    this.sequence += 1;
    this.entries.set(key, { value, revision: this.sequence });
  }

  async get(key: string): Promise<string | undefined> {
    this.open();
    return this.entries.get(key)?.value;
  }

  async entry(key: string): Promise<KeyValueEntry | undefined> {
    this.open();
    const found = this.entries.get(key);
    return found === undefined ? undefined : { ...found };
  }

  async put(key: string, value: string): Promise<void> {
    this.open();
    this.write(key, value);
  }

  async create(key: string, value: string): Promise<boolean> {
    this.open();
    if (this.entries.has(key)) return false;
    this.write(key, value);
    return true;
  }

  async update(key: string, value: string, revision: number): Promise<boolean> {
    this.open();
    if (this.entries.get(key)?.revision !== revision) return false;
    this.write(key, value);
    return true;
  }

  async delete(key: string): Promise<void> {
    this.open();
    if (this.entries.delete(key)) this.sequence += 1;
  }

  async keys(): Promise<string[]> {
    this.open();
    return [...this.entries.keys()];
  }
}

/**
 * Objects in memory. A source that is opened lazily (a file on this machine) is kept unopened and
 * read when someone asks, so handing a neighbour in the same process a 12 MB component costs
 * nothing until it is read; bytes in hand are copied, as they would be over a socket.
 */
class MemoryObjectStore implements ObjectStore {
  private readonly objects = new Map<string, ObjectSource>();

  constructor(
    readonly bucket: string,
    private readonly isClosed: () => boolean,
  ) {}

  private open(): void {
    if (this.isClosed()) throw new TransportError('closed', 'the in-process bus is closed');
  }

  async info(name: string): Promise<ObjectInfo | undefined> {
    this.open();
    const source = this.objects.get(name);
    if (!source) return undefined;
    return { name, size: 'bytes' in source ? source.bytes.byteLength : source.size };
  }

  async put(name: string, source: ObjectSource): Promise<ObjectInfo> {
    this.open();
    const kept: ObjectSource = 'bytes' in source ? { bytes: Uint8Array.from(source.bytes) } : source;
    this.objects.set(name, kept);
    return { name, size: 'bytes' in kept ? kept.bytes.byteLength : kept.size };
  }

  async get(name: string): Promise<AsyncIterable<Uint8Array> | undefined> {
    this.open();
    const source = this.objects.get(name);
    return source ? sourceChunks(source) : undefined;
  }

  async delete(name: string): Promise<void> {
    this.open();
    this.objects.delete(name);
  }
}
