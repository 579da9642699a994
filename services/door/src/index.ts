#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startDoorService } from './service.js';

await runServiceProcess({
  service: 'door',
  async start({ bus, log }) {
    const service = startDoorService({ bus, log });
    return {
      http: service.http,
      ahead: service.ahead,
      onListening: (url) => service.setBaseUrl(url),
      drain: () => service.drain(),
      close: () => service.close(),
    };
  },
});
