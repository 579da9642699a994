import { createConnection } from 'node:net';
import {
  type ConnectionOptions,
  ErrorCode,
  type KV,
  type NatsConnection,
  NatsError,
  type ObjectStore as NatsObjectStore,
  RequestStrategy,
  StorageType,
  connect,
} from 'nats';
import { MurmurError } from '../errors.js';
import { natsEndpoint } from './nats-url.js';
import type { Log } from '../log.js';
import type { KeyValueEntry, KeyValueStore } from './kv.js';
import { type ObjectInfo, type ObjectSource, type ObjectStore, sourceChunks } from './objects.js';
import { type BusConnectionState, type GatherWindow, type RawSubscription, type Transport, TransportError } from './transport.js';

export interface NatsTransportOptions {
  /** Shown in the server's connection list: which service this is. */
  name?: string;
  log: Log;
  /** Milliseconds between reconnect attempts after the server goes away. */
  reconnectTimeWaitMs?: number;
  /** How long the first connection may take before it is given up (the client's default: 20 s). */
  connectTimeoutMs?: number;
}

/**
 * The stack's transport. Reconnects forever: a service outlives a nats-server restart, its
 * subscriptions are re-established by the client, and what it publishes while disconnected is
 * buffered and sent once the server is back.
 */
export class NatsTransport implements Transport {
  private readonly buckets = new Map<string, Promise<KV>>();
  private readonly objectBuckets = new Map<string, Promise<NatsObjectStore>>();
  private readonly connectionListeners: Array<(state: BusConnectionState, reason?: string) => void> = [];
  /** Whether the server is there, as the connection's status last said. */
  connected = true;
  /** This side is closing the connection (`close`): its end is not news. */
  private closing = false;
  /** Why the server closed the connection for good, once it has: a listener that comes later is told at once. */
  private closedFor: string | undefined;

  private constructor(
    private readonly connection: NatsConnection,
    readonly description: string,
  ) {}

  private announce(state: BusConnectionState, reason?: string): void {
    for (const listener of this.connectionListeners) {
      try {
        listener(state, reason);
      } catch {
        // a listener's failure is its own
      }
    }
  }

  static async connect(url: string, options: NatsTransportOptions): Promise<NatsTransport> {
    const endpoint = natsEndpoint(url);
    // From here on the bus is named without its credentials (`nats-url.ts`): the URL is logged.
    url = endpoint.shown;
    const connectionOptions: ConnectionOptions = {
      servers: endpoint.servers,
      ...endpoint.credentials,
      name: options.name,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: options.reconnectTimeWaitMs ?? 250,
      // The first connection must succeed: a service started against a wrong URL should say so.
      waitOnFirstConnect: false,
      ...(options.connectTimeoutMs !== undefined ? { timeout: options.connectTimeoutMs } : {}),
    };
    let connection: NatsConnection;
    try {
      if (endpoint.servers.length === 1) {
        const silent = await notNats(endpoint.servers[0] as string, options.connectTimeoutMs ?? CLIENT_CONNECT_TIMEOUT_MS);
        if (silent)
          throw new MurmurError('E-BUS-005', `cannot connect to the bus at ${url}: ${silent}`, {
            hint: silent.startsWith('TIMEOUT') ? SILENT_HINT : NOT_NATS_HINT,
          });
      }
      connection = await connect(connectionOptions);
    } catch (error) {
      if (error instanceof MurmurError) throw error;
      const reason = error instanceof Error ? error.message : String(error);
      throw new MurmurError('E-BUS-005', `cannot connect to the bus at ${url}: ${reason}`, { cause: error, ...connectHint(error) });
    }
    const transport = new NatsTransport(connection, url);
    void (async () => {
      for await (const status of connection.status()) {
        if (status.type === 'disconnect') {
          transport.connected = false;
          options.log.warn({ bus: url }, 'bus disconnected; reconnecting');
          transport.announce('disconnected');
        } else if (status.type === 'reconnect') {
          transport.connected = true;
          options.log.info({ bus: url }, 'bus reconnected');
          transport.announce('reconnected');
        }
      }
    })().catch(() => {});
    // Closed by the client itself while this side still holds it: the server refused the
    // reconnection (credentials revoked or changed), and it never reconnects from there.
    void connection.closed().then((error) => {
      if (transport.closing) return;
      transport.connected = false;
      const reason = error instanceof Error ? error.message : 'the connection was closed';
      transport.closedFor = reason;
      options.log.error({ bus: url, reason }, 'the bus connection is closed for good');
      transport.announce('closed', reason);
    });
    return transport;
  }

  onConnectionChange(listener: (state: BusConnectionState, reason?: string) => void): void {
    this.connectionListeners.push(listener);
    // Closed for good before this listener came (while a service was starting): it is told now, not never.
    const closedFor = this.closedFor;
    if (closedFor !== undefined)
      queueMicrotask(() => {
        try {
          listener('closed', closedFor);
        } catch {
          // a listener's failure is its own
        }
      });
  }

  get maxPayload(): number {
    return this.connection.info?.max_payload ?? 1024 * 1024;
  }

  publish(subject: string, data: Uint8Array): void {
    try {
      this.connection.publish(subject, data);
    } catch (error) {
      if (error instanceof NatsError && error.code === ErrorCode.ConnectionClosed) throw new TransportError('closed', error.message);
      throw error;
    }
  }

  subscribe(
    pattern: string,
    handler: (message: { subject: string; data: Uint8Array; respond?(data: Uint8Array): void }) => void,
    queue?: string,
  ): RawSubscription {
    const subscription = this.connection.subscribe(pattern, {
      ...(queue === undefined ? {} : { queue }),
      callback: (error, message) => {
        if (error) return;
        const respondable = message.reply !== undefined && message.reply !== '';
        handler({
          subject: message.subject,
          data: message.data,
          ...(respondable ? { respond: (data: Uint8Array) => void message.respond(data) } : {}),
        });
      },
    });
    return { unsubscribe: () => subscription.unsubscribe() };
  }

  async request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    try {
      const reply = await this.connection.request(subject, data, { timeout: timeoutMs });
      return reply.data;
    } catch (error) {
      if (error instanceof NatsError) {
        if (error.code === ErrorCode.NoResponders) throw new TransportError('no-responders', error.message);
        if (error.code === ErrorCode.Timeout) throw new TransportError('timeout', error.message);
        if (error.code === ErrorCode.ConnectionClosed) throw new TransportError('closed', error.message);
      }
      throw error;
    }
  }

  async gather(subject: string, data: Uint8Array, window: GatherWindow): Promise<Uint8Array[]> {
    const replies: Uint8Array[] = [];
    try {
      const messages = await this.connection.requestMany(subject, data, {
        strategy: RequestStrategy.JitterTimer,
        maxWait: window.timeoutMs,
        jitter: window.quietMs,
      });
      for await (const message of messages) replies.push(message.data);
    } catch (error) {
      // Nobody subscribed is no reply; the replies that came before any other failure are kept,
      // unless the connection is gone (nats ends a gathering it closes under with a timeout).
      if (this.connection.isClosed()) throw new TransportError('closed', 'the connection to the bus is closed');
      if (error instanceof NatsError && error.code === ErrorCode.NoResponders) return replies;
      throw error;
    }
    return replies;
  }

  /**
   * A JetStream KV bucket keeping one value per key (`history: 1`), file-backed as the server's
   * JetStream is configured: it survives this process and a nats-server restart that reuses its
   * storage directory.
   */
  async keyValue(bucket: string): Promise<KeyValueStore> {
    let opening = this.buckets.get(bucket);
    if (!opening) {
      opening = (async () => {
        try {
          return await this.connection.jetstream().views.kv(bucket, { history: 1 });
        } catch (error) {
          throw transportFailure(error);
        }
      })();
      this.buckets.set(bucket, opening);
      // A failed open is not remembered: the next call tries again (JetStream may be back).
      opening.catch(() => this.buckets.delete(bucket));
    }
    return new NatsBucket(bucket, await opening);
  }

  /**
   * A JetStream object store, file-backed as the server's JetStream is configured. Its size is
   * bounded by the server's JetStream limits (`max_file_store`), which is where an operator sets it.
   */
  async objectStore(bucket: string): Promise<ObjectStore> {
    let opening = this.objectBuckets.get(bucket);
    if (!opening) {
      opening = (async () => {
        try {
          return await this.connection.jetstream().views.os(bucket, { storage: StorageType.File });
        } catch (error) {
          throw transportFailure(error);
        }
      })();
      this.objectBuckets.set(bucket, opening);
      opening.catch(() => this.objectBuckets.delete(bucket));
    }
    return new NatsObjects(bucket, await opening);
  }

  flush(): Promise<void> {
    return this.connection.flush();
  }

  /**
   * Drains the connection (what was published reaches the server, subscriptions end cleanly) when
   * the server is there, and closes it outright when it is not: nats.js's drain waits for the
   * server's answer, so a drain begun while it reconnects never ends, and its reconnect timers then
   * hold the process for good. A drain the server stops answering is cut short the same way.
   *
   * nats.js's drain also gives up at once, neither flushing nor closing, when one of the
   * connection's subscriptions has already ended without being let go (one that timed out, say):
   * what was published is then flushed here, within the same wait, so a close never skips the
   * server's word that it has everything.
   */
  async close(): Promise<void> {
    this.closing = true;
    if (this.connection.isClosed()) return;
    if (this.connected) {
      let timer: NodeJS.Timeout | undefined;
      const cutShort = new Promise<void>((resolve) => (timer = setTimeout(resolve, DRAIN_WAIT_MS)));
      await Promise.race([this.connection.drain().catch(() => {}), cutShort]);
      if (!this.connection.isClosed()) await Promise.race([this.connection.flush().catch(() => {}), cutShort]);
      clearTimeout(timer);
    }
    if (!this.connection.isClosed()) await this.connection.close();
  }
}

/** The client's own limit on a first connection, when none is given. */
const CLIENT_CONNECT_TIMEOUT_MS = 20_000;

/**
 * Why `server` is not a NATS server, or undefined when it greeted as one (or could not be reached,
 * which the client then says itself). A NATS server sends its INFO line as soon as it accepts a
 * connection; the client (nats.js 2.29) waits for it without a limit of its own, and when its
 * connect times out it leaves that socket open — so a process given the port of something else (a
 * door) printed its error and then lingered for as long as the other end held the connection.
 * Asked here first, on a socket this side always closes, nothing is left open.
 */
function notNats(server: string, timeoutMs: number): Promise<string | undefined> {
  let target: URL;
  try {
    target = new URL(server.includes('://') ? server : `nats://${server}`);
  } catch {
    return Promise.resolve(undefined);
  }
  const host = target.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = Number(target.port || 4222);
  return new Promise((resolve) => {
    let greeting = '';
    const socket = createConnection({ host, port });
    const settle = (why: string | undefined): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(why);
    };
    const timer = setTimeout(() => settle(`TIMEOUT: it accepted the connection but sent no NATS greeting within ${timeoutMs / 1000} s`), timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      greeting += chunk.toString('latin1');
      if (greeting.startsWith('INFO ')) settle(undefined);
      else if (greeting.length >= 5 || !'INFO '.startsWith(greeting))
        settle(`it answered, but not as a NATS server does (${JSON.stringify(greeting.slice(0, 40))})`);
    });
    socket.on('error', () => settle(undefined));
    socket.on('close', () => settle(greeting === '' ? undefined : `it closed the connection after ${JSON.stringify(greeting.slice(0, 40))}`));
  });
}

/** What to do about a first connection that failed, where the catalogue's hint would mislead. */
function connectHint(error: unknown): { hint?: string } {
  const code = error instanceof NatsError ? error.code : undefined;
  if (code === ErrorCode.AuthorizationViolation || code === ErrorCode.AuthenticationExpired)
    return {
      hint: 'the server wants other credentials: give its token in the URL (nats://<token>@host:4222); the compose stack uses MURMUR_NATS_TOKEN',
    };
  if (code === ErrorCode.Timeout) return { hint: SILENT_HINT };
  return {};
}

const NOT_NATS_HINT = 'what answers there is not a nats-server: check that MURMUR_NATS_URL names the nats-server port (4222), not another service';
/** A server that takes the connection and says nothing: another service, or a nats-server that is stopped or swamped. */
const SILENT_HINT =
  'what answers there said nothing: either it is not a nats-server (check that MURMUR_NATS_URL names the nats-server port, 4222), or the nats-server there is stopped or overloaded (check its process and its load)';

/** The longest a closing connection waits for the server to take what it drains. */
const DRAIN_WAIT_MS = 2_000;

/** JetStream's "wrong last sequence": a create on an existing key, an update at a stale revision. */
const WRONG_LAST_SEQUENCE = 10071;

function isWrongLastSequence(error: unknown): boolean {
  return error instanceof NatsError && error.api_error?.err_code === WRONG_LAST_SEQUENCE;
}

/** What the contract bus maps onto the catalogue; anything else passes through unchanged. */
function transportFailure(error: unknown): unknown {
  if (error instanceof NatsError) {
    if (error.code === ErrorCode.ConnectionClosed || error.code === ErrorCode.ConnectionDraining) return new TransportError('closed', error.message);
    if (error.code === ErrorCode.Timeout || error.code === ErrorCode.JetStream408RequestTimeout) return new TransportError('timeout', error.message);
    // 503: no responders, which for the JetStream API means JetStream is not enabled (or not yet back).
    if (error.code === ErrorCode.JetStreamNotEnabled) return new TransportError('no-responders', 'JetStream is not available on this server');
  }
  return error;
}

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

class NatsBucket implements KeyValueStore {
  constructor(
    readonly bucket: string,
    private readonly kv: KV,
  ) {}

  private async run<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      throw transportFailure(error);
    }
  }

  async get(key: string): Promise<string | undefined> {
    return (await this.entry(key))?.value;
  }

  entry(key: string): Promise<KeyValueEntry | undefined> {
    return this.run(async () => {
      const found = await this.kv.get(key);
      if (found === null || found.operation !== 'PUT') return undefined;
      return { value: textDecoder.decode(found.value), revision: found.revision };
    });
  }

  put(key: string, value: string): Promise<void> {
    return this.run(async () => {
      await this.kv.put(key, textEncoder.encode(value));
    });
  }

  create(key: string, value: string): Promise<boolean> {
    return this.run(async () => {
      try {
        await this.kv.create(key, textEncoder.encode(value));
        return true;
      } catch (error) {
        if (isWrongLastSequence(error)) return false;
        throw error;
      }
    });
  }

  update(key: string, value: string, revision: number): Promise<boolean> {
    return this.run(async () => {
      if (!Number.isInteger(revision) || revision <= 0) return false;
      try {
        await this.kv.update(key, textEncoder.encode(value), revision);
        return true;
      } catch (error) {
        if (isWrongLastSequence(error)) return false;
        throw error;
      }
    });
  }

  delete(key: string): Promise<void> {
    return this.run(() => this.kv.delete(key));
  }

  keys(): Promise<string[]> {
    return this.run(async () => {
      const keys: string[] = [];
      for await (const key of await this.kv.keys()) keys.push(key);
      return keys;
    });
  }
}

class NatsObjects implements ObjectStore {
  constructor(
    readonly bucket: string,
    private readonly store: NatsObjectStore,
  ) {}

  private async run<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      throw transportFailure(error);
    }
  }

  info(name: string): Promise<ObjectInfo | undefined> {
    return this.run(async () => {
      const info = await this.store.info(name);
      return info === null || info.deleted ? undefined : { name, size: info.size };
    });
  }

  put(name: string, source: ObjectSource): Promise<ObjectInfo> {
    return this.run(async () => {
      const info =
        'bytes' in source ? await this.store.putBlob({ name }, source.bytes) : await this.store.put({ name }, ReadableStream.from(sourceChunks(source)));
      return { name, size: info.size };
    });
  }

  get(name: string): Promise<AsyncIterable<Uint8Array> | undefined> {
    return this.run(async () => {
      const result = await this.store.get(name);
      if (result === null || result.info.deleted) return undefined;
      return (async function* () {
        try {
          for await (const chunk of result.data) yield chunk;
        } catch (error) {
          throw transportFailure(error);
        }
        // The stream ends early, without throwing, when the store could not deliver every chunk.
        const failed = await result.error;
        if (failed) throw transportFailure(failed);
      })();
    });
  }

  delete(name: string): Promise<void> {
    return this.run(async () => {
      await this.store.delete(name);
    });
  }
}
