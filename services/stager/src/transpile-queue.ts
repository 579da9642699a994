import { Worker } from 'node:worker_threads';
import { TRANSPILE_OPTIONS } from '@murmur/shared';
import { packageFile } from '@murmur/shared/node';
import type { TranspileJob, TranspileWorkerMessage } from './transpile-worker.js';

/** How one transpile ended. */
export type TranspileOutcome =
  | { kind: 'done'; files: Record<string, Uint8Array>; imports: string[]; exports: string[] }
  /** jco refused the bytes: they are not a component it can transpile. */
  | { kind: 'refused'; message: string }
  /** It ran past its deadline and was stopped. */
  | { kind: 'timed-out'; timeoutMs: number }
  /** The transpiler itself failed (its worker died, or could not start) while this job waited or ran. */
  | { kind: 'failed'; message: string };

/** How long a transpiler worker may take to load jco and warm it before it is given up. */
const WORKER_START_BUDGET_MS = 60_000;

/**
 * Past this, the stager's memory after a job ends the worker that ran it: jco's WebAssembly memory
 * grows with the component it transpiles and never shrinks, so a worker kept for good held what its
 * largest job took (~4 GB after a few hostile components) for as long as the stager lived. An
 * honest 12 MB component leaves the stager well under it; a fresh worker costs ~1 s of a later job.
 */
export const WORKER_RECYCLE_RSS_BYTES = 1024 * 1024 * 1024;

interface Queued {
  name: string;
  bytes: Uint8Array;
  settle(outcome: TranspileOutcome): void;
}

/**
 * jco's transpiler in a worker thread, given one component at a time, each with a deadline.
 *
 * A component is untrusted input to jco, whose work is synchronous WebAssembly: a component that
 * keeps it busy (or one that kills its worker) would otherwise hold every later staging on this
 * stager for good. So a job past its deadline has its worker terminated — nothing else can stop
 * it — and is refused alone: the jobs queued behind it go to a fresh worker. One at a time is also
 * what makes a worker's death the running job's, and only its, failure.
 */
export class TranspileQueue {
  private worker: Worker | undefined;
  private ready = false;
  private startTimer: NodeJS.Timeout | undefined;
  private readonly queue: Queued[] = [];
  private running: (Queued & { id: number; timer: NodeJS.Timeout }) | undefined;
  private nextId = 1;
  private closed = false;

  /** Workers started so far (a test reads it: a worker let go after a large job is replaced, not reused). */
  workersStarted = 0;

  constructor(
    private readonly timeoutMs: number,
    private readonly recycleAboveRssBytes = WORKER_RECYCLE_RSS_BYTES,
  ) {}

  transpile(name: string, bytes: Uint8Array): Promise<TranspileOutcome> {
    if (this.closed) return Promise.resolve({ kind: 'failed', message: 'the stager is shutting down' });
    return new Promise((settle) => {
      this.queue.push({ name, bytes, settle });
      this.next();
    });
  }

  /** Every job still waiting or running is answered as failed, and the worker ended. */
  async close(): Promise<void> {
    this.closed = true;
    const waiting = this.queue.splice(0);
    for (const job of waiting) job.settle({ kind: 'failed', message: 'the stager is shutting down' });
    await this.endWorker({ kind: 'failed', message: 'the stager is shutting down' });
  }

  private next(): void {
    if (this.running || this.closed) return;
    if (this.queue.length === 0) {
      // Idle, it must not keep the process alive.
      this.worker?.unref();
      return;
    }
    const worker = this.worker ?? this.startWorker();
    worker.ref();
    if (!this.ready) return;
    const job = this.queue.shift() as Queued;
    const id = this.nextId++;
    const timer = setTimeout(() => void this.endWorker({ kind: 'timed-out', timeoutMs: this.timeoutMs }), this.timeoutMs);
    this.running = { ...job, id, timer };
    const copy = Uint8Array.from(job.bytes);
    worker.postMessage({ id, name: job.name, bytes: copy, options: TRANSPILE_OPTIONS } satisfies TranspileJob, [copy.buffer]);
  }

  private startWorker(): Worker {
    // Always the compiled worker: under a TypeScript test runner `src/` holds no .js to start,
    // and in a bundle this file is not where the worker is.
    const workerFile = packageFile('@murmur/stager', 'dist/transpile-worker.js', import.meta.url, '../dist/transpile-worker.js');
    const worker = new Worker(workerFile);
    this.workersStarted += 1;
    this.worker = worker;
    this.ready = false;
    this.startTimer = setTimeout(() => void this.workerFailed(worker, `it did not start within ${WORKER_START_BUDGET_MS / 1000} s`), WORKER_START_BUDGET_MS);
    worker.on('message', (message: TranspileWorkerMessage) => {
      if (worker !== this.worker) return;
      if ('type' in message) {
        clearTimeout(this.startTimer);
        this.ready = true;
        this.next();
        return;
      }
      if (message.id !== this.running?.id) return;
      this.finish(
        message.ok ? { kind: 'done', files: message.files, imports: message.imports, exports: message.exports } : { kind: 'refused', message: message.message },
      );
    });
    // An error is followed by the exit; whichever comes first answers for the worker.
    worker.on('error', (error) => void this.workerFailed(worker, error.message));
    worker.on('exit', (code) => void this.workerFailed(worker, `it exited with code ${code}`));
    return worker;
  }

  /**
   * The worker died or never started. The job it was running fails with it; one that was only
   * waiting for it to start fails too when it never started (a worker that cannot start would
   * fail each next one the same way), and otherwise goes to a fresh worker.
   */
  private async workerFailed(worker: Worker, why: string): Promise<void> {
    if (worker !== this.worker) return;
    const started = this.ready;
    const failure: TranspileOutcome = { kind: 'failed', message: started ? `the transpiler stopped: ${why}` : `the transpiler could not start: ${why}` };
    if (!started) for (const job of this.queue.splice(0)) job.settle(failure);
    await this.endWorker(failure);
  }

  /** Ends the current worker; the job it was running (if any) ends with `outcome`, and the next one goes to a fresh worker. */
  private async endWorker(outcome: TranspileOutcome): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    this.ready = false;
    clearTimeout(this.startTimer);
    this.finish(outcome);
    if (worker) await worker.terminate();
  }

  private finish(outcome: TranspileOutcome): void {
    const running = this.running;
    if (!running) return;
    clearTimeout(running.timer);
    this.running = undefined;
    running.settle(outcome);
    // A job that left the process this large leaves its worker behind with it (the next job starts a fresh one).
    if (this.worker && process.memoryUsage.rss() > this.recycleAboveRssBytes) void this.letGo(this.worker);
    this.next();
  }

  /** Ends an idle worker without failing anything: its exit is no longer this queue's to hear. */
  private async letGo(worker: Worker): Promise<void> {
    this.worker = undefined;
    this.ready = false;
    await worker.terminate();
  }
}
