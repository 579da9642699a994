import { type ConnectionOptions, ErrorCode, type NatsConnection, NatsError, connect } from 'nats';
import { MurmurError } from '../errors.js';
import type { Log } from '../log.js';
import { type RawSubscription, type Transport, TransportError } from './transport.js';

export interface NatsTransportOptions {
  /** Shown in the server's connection list: which service this is. */
  name?: string;
  log: Log;
  /** Milliseconds between reconnect attempts after the server goes away. */
  reconnectTimeWaitMs?: number;
}

/**
 * The stack's transport. Reconnects forever: a service outlives a nats-server restart, its
 * subscriptions are re-established by the client, and what it publishes while disconnected is
 * buffered and sent once the server is back.
 */
export class NatsTransport implements Transport {
  private constructor(
    private readonly connection: NatsConnection,
    readonly description: string,
  ) {}

  static async connect(url: string, options: NatsTransportOptions): Promise<NatsTransport> {
    const connectionOptions: ConnectionOptions = {
      servers: url,
      name: options.name,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: options.reconnectTimeWaitMs ?? 250,
      // The first connection must succeed: a service started against a wrong URL should say so.
      waitOnFirstConnect: false,
    };
    let connection: NatsConnection;
    try {
      connection = await connect(connectionOptions);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new MurmurError('E-BUS-005', `cannot connect to the bus at ${url}: ${reason}`, { cause: error });
    }
    void (async () => {
      for await (const status of connection.status()) {
        if (status.type === 'disconnect') options.log.warn({ bus: url }, 'bus disconnected; reconnecting');
        else if (status.type === 'reconnect') options.log.info({ bus: url }, 'bus reconnected');
      }
    })().catch(() => {});
    return new NatsTransport(connection, url);
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

  subscribe(pattern: string, handler: (message: { subject: string; data: Uint8Array; respond?(data: Uint8Array): void }) => void, queue?: string): RawSubscription {
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

  flush(): Promise<void> {
    return this.connection.flush();
  }

  async close(): Promise<void> {
    if (this.connection.isClosed()) return;
    await this.connection.drain().catch(() => this.connection.close());
  }
}
