#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { startDashboard } from './dashboard/dashboard.js';
import { startWatcherService } from './service.js';

await runServiceProcess({
  service: 'watcher',
  async start({ bus, log, env, instanceId }) {
    // First: a dashboard that may not be served as configured stops the watcher before it does anything.
    const dashboard = startDashboard({ bus, log, env, watcherId: instanceId });
    const service = startWatcherService({ bus, log, env, instanceId });
    return {
      http: dashboard.http,
      drain: () => dashboard.drain(),
      close: async () => {
        dashboard.close();
        await service.close();
      },
    };
  },
});
