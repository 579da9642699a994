import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { freePort } from './ports.js';

/**
 * A real `nats-server` on a free loopback port, started and stopped by the test that needs it.
 * `restart()` stops it and starts it again on the same port, for reconnect tests.
 */
export interface NatsServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
  restart(): Promise<void>;
}

export function natsServerBinary(): string {
  return process.env.MURMUR_NATS_SERVER_BIN ?? 'nats-server';
}

async function launch(port: number): Promise<ChildProcess> {
  const child = spawn(natsServerBinary(), ['-a', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`nats-server did not become ready on port ${port}:\n${log}`)), 10_000);
    child.stderr?.on('data', (chunk: Buffer) => {
      log += chunk.toString();
      if (log.includes('Server is ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`could not start nats-server (${natsServerBinary()}): ${error.message}; install it with 'apt-get install -y nats-server'`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited with ${code} before it was ready:\n${log}`));
    });
  });
  await ready;
  return child;
}

async function terminate(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

export async function startNatsServer(): Promise<NatsServer> {
  const port = await freePort();
  let child = await launch(port);
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop: () => terminate(child),
    async restart() {
      await terminate(child);
      child = await launch(port);
    },
  };
}
