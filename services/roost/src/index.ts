#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startRoostService } from './service.js';

await runServiceProcess({
  service: 'roost',
  async start({ bus, log, env }) {
    const service = startRoostService({ bus, log, env });
    log.info({ registry_path: service.registryPath, spawn_allow: service.spawnAllow }, 'roost serving the registry, sessions and spawn approvals');
    return { http: service.http, close: () => service.close() };
  },
});
