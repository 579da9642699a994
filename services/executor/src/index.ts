#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startExecutorService } from './service.js';

await runServiceProcess({
  service: 'executor',
  defaultPort: 7720,
  async start({ bus, log, env, instanceId }) {
    const service = startExecutorService({ bus, log, env, instanceId });
    return { close: () => service.close() };
  },
});
