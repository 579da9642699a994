#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startWatcherService } from './service.js';

await runServiceProcess({
  service: 'watcher',
  defaultPort: 7740,
  async start({ bus, log, env }) {
    const service = startWatcherService({ bus, log, env });
    return { close: () => service.close() };
  },
});
