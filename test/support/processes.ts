import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
/** `mur` as a user runs it: the launcher, which starts node from mur's startup snapshot when there is one. */
export const murBin = path.join(repositoryRoot, 'cli', 'bin', 'mur');

export interface MurResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Every process the support started that may still run. A test that times out is abandoned by
 * vitest without its `finally`, and its process would outlive the test file's worker (which vitest
 * ends with a signal): `stop-leftovers.ts` kills what is left here after each file.
 */
const started = new Set<ChildProcess>();

/** Kills every process the support started that has not ended. */
export function stopLeftovers(): void {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  started.clear();
}

/** Keeps `child` to be killed when its test file ends, if it has not ended by then. */
export function stopAfterFile<T extends ChildProcess>(child: T): T {
  started.add(child);
  child.once('exit', () => started.delete(child));
  return child;
}

export interface MurOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** Another copy of `cli/bin/mur` to start instead of the repository's (the launcher's own test). */
  launcher?: string;
  /** Another user to start it as (a test run as root that needs a refusal root would not meet). */
  user?: { uid: number; gid: number };
  /** In a process group of its own, as a terminal's foreground job is: `process.kill(-pid, signal)` then reaches the whole group. */
  ownGroup?: boolean;
}

/**
 * `mur` started as a user starts it, its stdout and stderr collected as they come (`output`, read
 * at any time), stopped with the test file like every process a test starts.
 */
export function spawnMur(args: string[], options: MurOptions = {}): { child: ChildProcess; output: { stdout: string; stderr: string } } {
  const child = stopAfterFile(
    spawn(options.launcher ?? murBin, args, {
      cwd: options.cwd ?? repositoryRoot,
      // `MURMUR_EXECUTOR_POOL` set for the whole run (`npm run test:fresh-hosts`) reaches every
      // `mur`, so the suites of the sandbox, egress and limits run on fresh hosts as well as pooled.
      env: {
        PATH: process.env.PATH ?? '',
        ...(process.env.MURMUR_EXECUTOR_POOL ? { MURMUR_EXECUTOR_POOL: process.env.MURMUR_EXECUTOR_POOL } : {}),
        ...options.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(options.user ?? {}),
      ...(options.ownGroup ? { detached: true } : {}),
    }),
  );
  const output = { stdout: '', stderr: '' };
  child.stdout.on('data', (chunk: Buffer) => (output.stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output.stderr += chunk.toString()));
  return { child, output };
}

/**
 * Runs the real `mur` (the compiled CLI, as a user runs it) with a clean environment: only what
 * the test passes, plus PATH, so a developer's own MURMUR_* settings never leak into a test; it
 * is killed if it has not exited after `timeoutMs` (two minutes unless told).
 */
export async function runMur(args: string[], options: MurOptions & { timeoutMs?: number } = {}): Promise<MurResult> {
  const { child, output } = spawnMur(args, options);
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, ...output };
}

/**
 * What `child` has written on `stream` once `said` finds what it waits for in it; rejected, with
 * all it wrote, when it exits first or says nothing of the kind within `timeoutMs`.
 */
export function untilSaid<T>(child: ChildProcess, stream: 'stdout' | 'stderr', said: (text: string) => T | undefined, timeoutMs = 20_000): Promise<T> {
  let text = '';
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the process did not say what was waited for within ${timeoutMs} ms:\n${text}`)), timeoutMs);
    child[stream]?.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const found = said(text);
      if (found !== undefined) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the process exited with ${code} before it said what was waited for:\n${text}`));
    });
  });
}

export interface ServiceProcess {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  /** The service's own start line, parsed. */
  readonly ready: Record<string, unknown>;
  logs(): string;
  /** Resolves with the exit code when the process exits, whoever ended it (null for a signal). */
  readonly exited: Promise<number | null>;
  /** Sends a signal and does not wait: what a crash or `docker kill` does to a service. */
  kill(signal: NodeJS.Signals): void;
  stop(): Promise<number | null>;
}

/** Starts `node services/<name>/dist/index.js` and waits for the line that says it is ready. */
export async function startService(name: string, env: Record<string, string | undefined>): Promise<ServiceProcess> {
  const child: ChildProcess = stopAfterFile(
    spawn(process.execPath, [path.join(repositoryRoot, 'services', name, 'dist', 'index.js')], {
      cwd: repositoryRoot,
      env: { PATH: process.env.PATH ?? '', [`MURMUR_${name.toUpperCase()}_PORT`]: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not report ready:\n${output}`)), 20_000);
    const onData = (chunk: Buffer): void => {
      output += chunk.toString();
      for (const line of output.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const parsed = JSON.parse(line) as Record<string, unknown>;
          if (typeof parsed.port === 'number' && typeof parsed.bus === 'string') {
            clearTimeout(timer);
            resolve(parsed);
            return;
          }
        } catch {
          // a partial line; wait for the rest
        }
      }
    };
    // A service logs JSON lines on stdout; what it writes to stderr (a crash) is kept too.
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code} before it was ready:\n${output}`));
    });
  });
  return {
    name,
    port: ready.port as number,
    url: `http://127.0.0.1:${ready.port as number}`,
    ready,
    logs: () => output,
    exited,
    kill: (signal) => void child.kill(signal),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      const exited = once(child, 'exit') as Promise<[number | null]>;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      const [code] = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000, what = 'the condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
}
