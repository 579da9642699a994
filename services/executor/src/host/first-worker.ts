import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { GuestPreload } from './guest-worker.js';

/**
 * Where guest workers come from, and the host's first one, made before anything else of the host
 * is loaded. A worker thread's boot (~25 ms on these machines) is the longest step between a host
 * being told to start and its guest's first instruction, so it is begun first (`boot.ts`), and the
 * host's own modules (~14 ms) load while it boots. Only node's built-ins here, to keep it so.
 */

const here = path.dirname(fileURLToPath(import.meta.url));
/** Beside this file: the bundled worker next to the bundled host, or the module next to the module. */
export const GUEST_WORKER = existsSync(path.join(here, 'guest-worker.cjs'))
  ? path.join(here, 'guest-worker.cjs')
  : path.join(here, '..', '..', 'dist', 'host', 'guest-worker.js');

/** A guest worker with no job yet: it loads the runtime's WASI pieces while the host waits for `start`. */
export function prewarmGuestWorker(preload?: GuestPreload['preload']): Worker {
  return new Worker(GUEST_WORKER, { stdout: true, stderr: true, ...(preload ? { workerData: { preload } satisfies GuestPreload } : {}) });
}

/**
 * The WASI pieces nearly every component imports (a Rust or componentize-js build links all of
 * them), loaded by the first guest worker while the host waits to be told what to run: a pooled
 * host waits long, and a fresh one overlaps this with its start. Loading is not linking: a guest's
 * import object still holds only what its component imports.
 */
const COMMON_WASI = ['wasi:io/streams', 'wasi:cli/stdout', 'wasi:clocks/monotonic-clock', 'wasi:filesystem/types', 'wasi:random/random'];

let first: Worker | undefined;

/** Begins the host's first guest worker. */
export function startFirstGuestWorker(): void {
  first ??= prewarmGuestWorker({ imports: COMMON_WASI });
}

/** The host's first guest worker, begun now if `startFirstGuestWorker` was not called (the host's modules loaded without `boot.ts`). */
export function takeFirstGuestWorker(): Worker {
  startFirstGuestWorker();
  return first as Worker;
}
