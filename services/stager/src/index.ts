#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startStagerService } from './service.js';

await runServiceProcess({
  service: 'stager',
  defaultPort: 7710,
  async start({ bus, log, env, instanceId }) {
    const service = startStagerService({ bus, log, env, instanceId });
    return { close: () => service.close() };
  },
});
