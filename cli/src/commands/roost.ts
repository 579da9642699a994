import { createLogger, listenHttp, portFromEnv } from '@murmur/shared/service';
import { connectBus } from '@murmur/shared/bus';
import { MurmurError } from '@murmur/shared';
import { startRoostService } from '@murmur/roost';
import type { Output } from '../output.js';

/**
 * `mur roost`: roost on 127.0.0.1, upstream's flags. Runs until interrupted; the registry it
 * serves is `--registry-path`, else the global store.
 */
export async function roostCommand(options: { port?: string; registryPath?: string }, output: Output): Promise<number> {
  let port: number;
  try {
    port = portFromEnv(options.port, 7700);
  } catch (error) {
    throw new MurmurError('E-IO-003', `invalid --port: ${(error as Error).message}`);
  }
  const log = createLogger('roost');
  const bus = await connectBus({ natsUrl: process.env.MURMUR_NATS_URL, name: 'mur-roost', log });
  const roost = startRoostService({ bus, log, ...(options.registryPath ? { registryPath: options.registryPath } : {}) });
  let listener;
  try {
    listener = await listenHttp(roost.http, { host: '127.0.0.1', port });
  } catch (error) {
    await bus.close();
    throw new MurmurError('E-IO-003', `failed to bind port ${port}: ${(error as Error).message}`, { hint: 'choose another port with --port' });
  }
  output.err(`mur-roost: listening on 127.0.0.1:${listener.port} (registry ${roost.registryPath})`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await listener.close();
  await roost.close();
  await bus.close();
  return 0;
}
