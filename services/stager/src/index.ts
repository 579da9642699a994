#!/usr/bin/env node
import { LEFTOVER_SWEEP_EVERY_MS, cacheDir, sweepCacheLeftoversIfDue } from '@murmur/shared/node';
import { runServiceProcess } from '@murmur/shared/service';
import { startStagerService } from './service.js';

await runServiceProcess({
  service: 'stager',
  defaultPort: 7710,
  async start({ bus, log, env, instanceId }) {
    const service = startStagerService({ bus, log, env, instanceId });
    // What a crashed stager left in the cache (a transpile, a project's scratch copy), hourly.
    const sweep = (): void => void sweepCacheLeftoversIfDue(cacheDir(env), LEFTOVER_SWEEP_EVERY_MS, log);
    sweep();
    const sweeping = setInterval(sweep, LEFTOVER_SWEEP_EVERY_MS);
    sweeping.unref();
    return {
      close: () => {
        clearInterval(sweeping);
        return service.close();
      },
    };
  },
});
