#!/usr/bin/env node
import { runServiceProcess } from '@murmur/shared/service';
import { DEFAULT_POOL_SIZE, startExecutorService } from './service.js';

await runServiceProcess({
  service: 'executor',
  async start({ bus, log, env, instanceId }) {
    // A long-running executor keeps warm hosts for the launches to come (MURMUR_EXECUTOR_POOL).
    // It also removes the session cgroups that executors which crashed here left behind.
    let listening: (port: number) => void = () => {};
    const listenerPort = new Promise<number>((resolve) => (listening = resolve));
    const service = startExecutorService({
      bus,
      log,
      env,
      instanceId,
      pool: { size: DEFAULT_POOL_SIZE, refill: true },
      sweepAtStartAndHourly: true,
      listenerPort,
    });
    return { close: () => service.close(), onListening: (url) => listening(Number(new URL(url).port)) };
  },
});
