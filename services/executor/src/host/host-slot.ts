import type { Worker } from 'node:worker_threads';

/**
 * What the capsule host holds once per process, whichever copy of a module holds it. A bundled
 * host is two programs that share some modules: its CommonJS entry (`boot.ts`, bundled alone so that
 * it runs before Node's ES module loader starts) and its ES modules (`main.ts` and the rest). Each
 * has its own copy of `first-worker.ts` and `sandbox-sockets.ts`, so what one copy begins and the
 * other takes — the first guest worker, the sandbox's sockets being handed over — is kept here,
 * under a key every copy names alike, rather than in either copy.
 */
export interface HostSlot {
  /** The first guest worker, begun by whichever copy came first (`first-worker.ts`). */
  firstGuestWorker?: Worker;
  /** The sandbox's sockets being handed over, and which (`sandbox-sockets.ts`). */
  handOver?: { sockets: string; done: Promise<void> };
}

const KEY = Symbol.for('murmur.capsule-host');

export function hostSlot(): HostSlot {
  const global = globalThis as { [KEY]?: HostSlot };
  global[KEY] ??= {};
  return global[KEY];
}
