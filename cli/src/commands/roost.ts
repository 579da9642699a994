import { createLogger, healthRoutes, listenHttp } from '@murmur/shared/service';
import { connectBus } from '@murmur/shared/bus';
import { MurmurError, SERVICE_DEFAULT_PORTS, healthOf, loopbackHostGuard, newId, portFromEnv, serveHealth } from '@murmur/shared';
import { startRoostService } from '@murmur/roost';
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { type Output, UsageError } from '../output.js';

/**
 * `mur roost`: roost on 127.0.0.1, upstream's flags. Runs until interrupted; the registry it
 * serves is `--registry-path`, else the global store. `--spawn-allow NAME` (repeatable) names the
 * capsules anyone may spawn without a session credential; without it, `MURMUR_ROOST_SPAWN_ALLOW`.
 * Sessions and approvals live on the bus: in memory without `MURMUR_NATS_URL`, in JetStream with it.
 */
export async function roostCommand(options: { port?: string; registryPath?: string; spawnAllow?: string[] }, output: Output): Promise<number> {
  for (const [flag, value] of [
    ['--port', options.port],
    ['--registry-path', options.registryPath],
  ] as const) {
    // Empty, either named nothing, and roost served the default in its place without a word.
    if (value !== undefined && value.trim() === '')
      throw new UsageError(`${flag} is empty`, { path: flag, hint: `give ${flag} a value, or leave it out for the default` });
  }
  // A file there is no store: roost listened, listed nothing and failed every publish (ENOTDIR in its log).
  if (options.registryPath !== undefined && existsSync(options.registryPath) && !statSync(options.registryPath).isDirectory())
    throw new MurmurError('E-IO-002', `--registry-path names ${path.resolve(options.registryPath)}, which is not a directory`, {
      path: '--registry-path',
      hint: 'name the directory roost keeps its artifacts in (it is made if it is not there), or leave --registry-path out for the global store',
    });
  // A flag that is no port is the command line's misuse (exit 2), as any other bad flag is.
  let port: number;
  try {
    port = portFromEnv(options.port, SERVICE_DEFAULT_PORTS.roost, '--port');
  } catch (error) {
    throw error instanceof MurmurError ? new UsageError(error.message, { ...(error.hint ? { hint: error.hint } : {}), path: '--port' }) : error;
  }
  const log = createLogger('roost');
  const bus = await connectBus({ natsUrl: process.env.MURMUR_NATS_URL, name: 'mur-roost', log });
  const roost = startRoostService({
    bus,
    log,
    listenHost: '127.0.0.1',
    ...(options.registryPath ? { registryPath: options.registryPath } : {}),
    ...(options.spawnAllow && options.spawnAllow.length > 0 ? { spawnAllow: options.spawnAllow } : {}),
  });
  // The same `GET /health` (and bus health) a roost service process answers.
  const identity = { service: 'roost' as const, instanceId: `roost-${newId('request').slice(4, 16)}`, httpPort: null as number | null, startedAt: new Date() };
  const app = healthRoutes(() => healthOf(identity, bus), bus, loopbackHostGuard('http://127.0.0.1', undefined, process.env.MURMUR_ROOST_HOSTS));
  app.route('/', roost.http);
  let listener: Awaited<ReturnType<typeof listenHttp>>;
  try {
    listener = await listenHttp(app, { host: '127.0.0.1', port });
  } catch (error) {
    await bus.close();
    throw new MurmurError('E-IO-003', `failed to bind port ${port}: ${(error as Error).message}`, { hint: 'choose another port with --port' });
  }
  identity.httpPort = listener.port;
  const health = serveHealth(bus, identity);
  output.err(`mur-roost: listening on 127.0.0.1:${listener.port} (registry ${roost.registryPath})`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  health.unsubscribe();
  await listener.close();
  await roost.close();
  await bus.close();
  return 0;
}
