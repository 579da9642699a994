#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startExecutorService } from './service.js';

await runServiceProcess({
  service: 'executor',
  defaultPort: 7720,
  async start({ bus, log, env }) {
    const service = startExecutorService({ bus, log, env });
    return { close: () => service.close() };
  },
});
