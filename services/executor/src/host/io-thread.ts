import { syncBuiltinESMExports } from 'node:module';
import workerThreads, { type Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * preview2-shim's I/O thread, started when a guest needs it rather than when the shim loads.
 *
 * The shim answers file streams, pollables and sockets on a worker thread of its own, and starts
 * it the moment its io module is evaluated: +15 MB RSS and ~50 ms of CPU in every guest worker
 * (measured in a bare node), whether or not the guest ever makes such a call. A component that
 * only prints and computes never does: its stdout is ours (`streams.ts`), its clocks' `now` and
 * its randomness are answered in-thread.
 *
 * So the shim's io module is evaluated with `worker_threads.Worker` standing in for a deferred
 * one: the shim gets an object it can subscribe to and post to, and the real thread starts at the
 * first post — the shim's first call into it, which blocks until the thread answers, as a call
 * made while the thread was still starting always did. A component whose imports show it will
 * need the thread (`needsIoThread`) has it started while it is loaded and instantiated, so its
 * first file write does not wait for a thread to boot.
 */

/** What the shim's worker-creating call gets: the parts of a `Worker` it uses, real or not yet. */
class DeferredWorker {
  private real: Worker | undefined;
  private readonly listeners: Array<[event: string, listener: (...args: unknown[]) => void]> = [];
  private referenced = true;

  constructor(
    private readonly RealWorker: typeof Worker,
    private readonly filename: string | URL,
    private readonly options: WorkerOptions | undefined,
  ) {}

  get started(): boolean {
    return this.real !== undefined;
  }

  start(): Worker {
    if (!this.real) {
      const real = new this.RealWorker(this.filename, this.options);
      for (const [event, listener] of this.listeners) real.on(event, listener);
      if (!this.referenced) real.unref();
      this.real = real;
    }
    return this.real;
  }

  on(event: string, listener: (...args: unknown[]) => void): this {
    if (this.real) this.real.on(event, listener);
    else this.listeners.push([event, listener]);
    return this;
  }

  postMessage(message: unknown, transfer?: readonly unknown[]): void {
    this.start().postMessage(message, transfer as never);
  }

  unref(): void {
    this.referenced = false;
    this.real?.unref();
  }

  ref(): void {
    this.referenced = true;
    this.real?.ref();
  }
}

let ioThread: DeferredWorker | undefined;
let shimIo: Promise<typeof import('@bytecodealliance/preview2-shim/io')> | undefined;

/**
 * Loads the shim's io module (which every other shim module shares) with its thread deferred.
 * Every shim import in a guest worker waits for this first: a shim module evaluated before it
 * would start the thread at load, as the shim does on its own.
 */
export function loadShimIo(): Promise<typeof import('@bytecodealliance/preview2-shim/io')> {
  shimIo ??= (async () => {
    const RealWorker = workerThreads.Worker;
    (workerThreads as { Worker: unknown }).Worker = function deferredWorker(filename: string | URL, options?: WorkerOptions) {
      // Only the shim's one I/O thread is deferred: anything else made meanwhile is made at once.
      if (ioThread) return new RealWorker(filename, options);
      ioThread = new DeferredWorker(RealWorker, filename, options);
      return ioThread;
    };
    syncBuiltinESMExports();
    try {
      return await import('@bytecodealliance/preview2-shim/io');
    } finally {
      (workerThreads as { Worker: unknown }).Worker = RealWorker;
      syncBuiltinESMExports();
    }
  })();
  return shimIo;
}

/** Whether a component with these imports makes calls only the shim's thread answers (file streams, polls, HTTP bodies). */
export function needsIoThread(imports: readonly string[]): boolean {
  return imports.some((name) => ['wasi:io/poll', 'wasi:filesystem/', 'wasi:http/', 'wasi:sockets/'].some((prefix) => name.startsWith(prefix)));
}

/** Starts the shim's thread now (a component about to run will need it); nothing when it runs already or the shim is not loaded. */
export function startIoThread(): void {
  ioThread?.start();
}

/**
 * The shim's thread in this worker: `deferred` (loaded, not started), `started`, or `unknown`
 * (the shim is not loaded, or made its thread without asking for our stand-in). For tests.
 */
export function ioThreadState(): 'deferred' | 'started' | 'unknown' {
  if (!ioThread) return 'unknown';
  return ioThread.started ? 'started' : 'deferred';
}
