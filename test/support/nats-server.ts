import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './ports.js';
import { threadStates } from './proc.js';

/**
 * A real `nats-server` with JetStream on a free loopback port, started and stopped by the test
 * that needs it. JetStream stores in a temporary directory removed by `stop()`; `restart()` stops
 * the server and starts it again on the same port and the same directory, so key-value state
 * written before the restart is there after it.
 */
export interface NatsServer {
  readonly url: string;
  readonly port: number;
  /** JetStream's storage directory. */
  readonly storeDir: string;
  stop(): Promise<void>;
  /** Restarts it on the same port and store; with `token`, requiring that token from then on (null: none). */
  restart(changes?: { token?: string | null }): Promise<void>;
  /** Stops the server for a while, its port and store kept for `up()`: its clients lose their connections meanwhile. */
  down(): Promise<void>;
  up(): Promise<void>;
  /**
   * Stops the server's process where it is (SIGSTOP): its connections stay open and nothing answers,
   * as a hung server's. Resolves once the kernel shows it stopped: on another core the server goes
   * on for a moment after the signal is sent, and could still answer what the test sends next.
   */
  pause(): Promise<void>;
  resume(): void;
}

export function natsServerBinary(): string {
  return process.env.MURMUR_NATS_SERVER_BIN ?? 'nats-server';
}

async function launch(port: number, storeDir: string, token: string | undefined): Promise<ChildProcess> {
  const auth = token === undefined ? [] : ['--auth', token];
  const child = spawn(natsServerBinary(), ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir, ...auth], { stdio: ['ignore', 'ignore', 'pipe'] });
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
  // A paused server would hold its SIGTERM until it is resumed.
  child.kill('SIGCONT');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/** `token`: every client must present it (`nats://<token>@…`), as a stack's bus with `MURMUR_NATS_TOKEN`. */
export async function startNatsServer(options: { token?: string } = {}): Promise<NatsServer> {
  const port = await freePort();
  const storeDir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-nats-'));
  let child: ChildProcess;
  try {
    child = await launch(port, storeDir, options.token);
  } catch (error) {
    await fs.rm(storeDir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    async stop() {
      await terminate(child);
      await fs.rm(storeDir, { recursive: true, force: true });
    },
    async restart(changes = {}) {
      await terminate(child);
      if (changes.token !== undefined) options.token = changes.token ?? undefined;
      child = await launch(port, storeDir, options.token);
    },
    down: () => terminate(child),
    async up() {
      child = await launch(port, storeDir, options.token);
    },
    async pause() {
      child.kill('SIGSTOP');
      await untilStopped(child.pid as number);
    },
    resume: () => void child.kill('SIGCONT'),
  };
}

/** Waits until every thread of `pid` is in the stopped state (`T`), within 5 s. */
async function untilStopped(pid: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!threadStates(pid).every((state) => state === 'T')) {
    if (Date.now() > deadline) throw new Error(`nats-server (pid ${pid}) did not stop within 5 s of SIGSTOP`);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
