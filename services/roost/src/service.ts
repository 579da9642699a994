import path from 'node:path';
import type { Bus } from '@murmur/shared/bus';
import type { Log } from '@murmur/shared';
import { ArtifactStore } from '@murmur/shared/artifacts';
import { globalStoreDir } from '@murmur/shared/node';
import { Hono } from 'hono';
import { registryRoutes } from './registry-routes.js';

export { registryRoutes, type RegistryRoutesOptions } from './registry-routes.js';

export interface RoostServiceOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /** The store roost serves; `MURMUR_ROOST_REGISTRY_PATH`, else the global store. */
  registryPath?: string;
}

export interface RoostService {
  readonly http: Hono;
  readonly registryPath: string;
  close(): Promise<void>;
}

/**
 * roost: the registry over HTTP for a stack whose services do not share a disk. Sessions,
 * credentials and spawn approvals join it with delegation.
 */
export function startRoostService(options: RoostServiceOptions): RoostService {
  const env = options.env ?? process.env;
  const registryPath = path.resolve(options.registryPath ?? (env.MURMUR_ROOST_REGISTRY_PATH?.trim() || globalStoreDir(env)));
  const store = new ArtifactStore(registryPath, 'global');
  const http = new Hono();
  http.route('/', registryRoutes({ store, publishToken: env.MURMUR_ROOST_TOKEN?.trim() || undefined, log: options.log }));
  return { http, registryPath, close: async () => {} };
}
