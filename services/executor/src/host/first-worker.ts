import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';
import type { GuestPreload } from './guest-worker.js';
import { hostSlot } from './host-slot.js';

/**
 * Where guest workers come from, and the host's first one, made before anything else of the host
 * is loaded. A worker thread's boot (~25 ms on these machines) is the longest step between a host
 * being told to start and its guest's first instruction, so it is begun first (`boot.ts`), and the
 * host's own modules (~14 ms) load while it boots. Only node's built-ins here, to keep it so.
 */

const here = path.dirname(fileURLToPath(import.meta.url));
/** Beside this file: the bundled worker next to the bundled host, or the module next to the module. */
const GUEST_WORKER = existsSync(path.join(here, 'guest-worker.cjs'))
  ? path.join(here, 'guest-worker.cjs')
  : path.join(here, '..', '..', 'dist', 'host', 'guest-worker.js');

/** What a worker is started from: the bundled worker's loader, which compiles it with its code cache (`guest-worker-loader.ts`), or the module. */
const WORKER_ENTRY = existsSync(path.join(here, 'guest-worker-loader.cjs')) ? path.join(here, 'guest-worker-loader.cjs') : GUEST_WORKER;

/** Starts a guest worker: every one, the host's first, a spare, a call's, a resident's. */
export function startGuestWorker(options: WorkerOptions): Worker {
  return new Worker(WORKER_ENTRY, options);
}

/** A guest worker with no job yet: it loads the runtime's WASI pieces while the host waits for `start`. */
export function prewarmGuestWorker(preload?: GuestPreload['preload']): Worker {
  return startGuestWorker({ stdout: true, stderr: true, ...(preload ? { workerData: { preload } satisfies GuestPreload } : {}) });
}

/**
 * The WASI pieces nearly every component imports (a Rust or componentize-js build links all of
 * them), loaded by the first guest worker while the host waits to be told what to run: a pooled
 * host waits long, and a fresh one overlaps this with its start. Loading is not linking: a guest's
 * import object still holds only what its component imports.
 */
const COMMON_WASI = ['wasi:io/streams', 'wasi:cli/stdout', 'wasi:clocks/monotonic-clock', 'wasi:filesystem/types', 'wasi:random/random'];

/** Begins the host's first guest worker, once per process (`host-slot.ts`). */
export function startFirstGuestWorker(): void {
  const slot = hostSlot();
  slot.firstGuestWorker ??= prewarmGuestWorker({ imports: COMMON_WASI });
}

/** The host's first guest worker, begun now if `startFirstGuestWorker` was not called (the host's modules loaded without `boot.ts`). */
export function takeFirstGuestWorker(): Worker {
  startFirstGuestWorker();
  return hostSlot().firstGuestWorker as Worker;
}
