#!/usr/bin/env node
import { cacheDir, keepCacheSwept } from '@murmur/shared/node';
import { runServiceProcess } from '@murmur/shared/service';
import { startStagerService } from './service.js';

await runServiceProcess({
  service: 'stager',
  async start({ bus, log, env, instanceId }) {
    const service = startStagerService({ bus, log, env, instanceId, trimBlobCache: true });
    // What a crashed stager left in the cache (a transpile, a project's scratch copy).
    const stopSweeping = keepCacheSwept(cacheDir(env), log);
    return {
      close: () => {
        stopSweeping();
        return service.close();
      },
    };
  },
});
