#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startRoostService } from './service.js';

await runServiceProcess({
  service: 'roost',
  defaultPort: 7700,
  async start({ bus, log, env }) {
    const service = startRoostService({ bus, log, env });
    log.info({ registry_path: service.registryPath }, 'roost serving the registry');
    return { http: service.http, close: () => service.close() };
  },
});
