import type { Log } from '../log.js';
import { type Bus, createBus } from './bus.js';
import { InProcessTransport } from './in-process.js';

export interface ConnectBusOptions {
  /** A NATS URL; absent means the embedded in-process bus. */
  natsUrl?: string | undefined;
  /** Which service is connecting, for the server's connection list. */
  name?: string;
  log: Log;
  /** NATS only: how long the first connection may take (a caller that must not hang says so). */
  connectTimeoutMs?: number;
}

/** The bus a process should use: NATS when `MURMUR_NATS_URL` names one, in-process otherwise. */
export async function connectBus(options: ConnectBusOptions): Promise<Bus> {
  const url = options.natsUrl?.trim();
  if (!url) return createBus(new InProcessTransport(), options.log);
  // Loaded only when a NATS URL is given: the embedded default never pays for the client.
  const { NatsTransport } = await import('./nats.js');
  const transport = await NatsTransport.connect(url, {
    log: options.log,
    ...(options.name ? { name: options.name } : {}),
    ...(options.connectTimeoutMs !== undefined ? { connectTimeoutMs: options.connectTimeoutMs } : {}),
  });
  return createBus(transport, options.log);
}
