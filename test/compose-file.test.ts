import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { natsEndpoint } from '@murmur/shared/bus';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { dashboardAccess } from '../services/watcher/src/dashboard/access.js';
import { natsServerBinary } from './support/nats-server.js';
import { repositoryRoot } from './support/processes.js';

/**
 * `docker-compose.yml` as `docker-compose up` reads it with nothing set, and with the settings an
 * operator adds: what each service is given must be what it starts with. (The container suite runs
 * the stack with its settings given; this reads the defaults, which it does not run.)
 */

type Service = { environment?: Record<string, string>; stop_signal?: string };
const compose = parse(readFileSync(path.join(repositoryRoot, 'docker-compose.yml'), 'utf8')) as { services: Record<string, Service> };

/** Compose's interpolation of `${NAME:-default}` and `${NAME}`, from `settings`. */
function environmentOf(service: string, settings: Record<string, string> = {}): Record<string, string> {
  const interpolate = (value: string): string =>
    value.replace(/\$\{([A-Z0-9_]+)(?::-([^}]*))?\}/g, (_, name: string, fallback: string | undefined) => settings[name] || (fallback ?? ''));
  return Object.fromEntries(Object.entries(compose.services[service]?.environment ?? {}).map(([name, value]) => [name, interpolate(String(value))]));
}

const SERVICES = ['roost', 'stager', 'executor', 'door', 'watcher'];

describe('the compose file', () => {
  it('stops the bus with the signal on which nats-server exits 0, so a docker-compose stop does not read as a failure', async () => {
    const signal = (compose.services.nats?.stop_signal ?? 'SIGTERM') as NodeJS.Signals;
    const server = spawn(natsServerBinary(), ['-a', '127.0.0.1', '-p', '-1'], { stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      let log = '';
      await new Promise<void>((resolve, reject) => {
        server.stderr.on('data', (chunk: Buffer) => {
          log += chunk.toString();
          if (log.includes('Server is ready')) resolve();
        });
        server.once('exit', (code) => reject(new Error(`nats-server exited with ${code}:\n${log}`)));
      });
      const exited = once(server, 'exit') as Promise<[number | null, string | null]>;
      server.kill(signal);
      expect(await exited).toEqual([0, null]);
    } finally {
      server.kill('SIGKILL');
    }
  });

  it('starts the watcher with nothing set: its dashboard stays on the container’s loopback, where no token is asked', () => {
    expect(() => dashboardAccess(environmentOf('watcher'))).not.toThrow();
    expect(dashboardAccess(environmentOf('watcher')).required).toBe(false);
    // Opened as the comment says, it asks the token.
    const opened = environmentOf('watcher', { MURMUR_WATCHER_HOST: '0.0.0.0', MURMUR_DASHBOARD_TOKEN: 'a-dashboard-token-0123456789' });
    expect(dashboardAccess(opened).required).toBe(true);
  });

  it('gives every service the bus, with the stack’s token when one is set and no credentials when none is', () => {
    for (const service of SERVICES) {
      expect(natsEndpoint(environmentOf(service).MURMUR_NATS_URL ?? ''), service).toEqual({ servers: ['nats://nats:4222'], shown: 'nats://nats:4222' });
      const token = 'stack-bus-token-0123456789abcdef';
      expect(natsEndpoint(environmentOf(service, { MURMUR_NATS_TOKEN: token }).MURMUR_NATS_URL ?? '').credentials, service).toEqual({ token });
    }
    expect(environmentOf('nats', { MURMUR_NATS_TOKEN: 'x'.repeat(16) }).MURMUR_NATS_TOKEN).toBe('x'.repeat(16));
  });
});
