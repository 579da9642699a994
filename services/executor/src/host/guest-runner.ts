import path from 'node:path';
import { MessageChannel, type MessagePort, type Worker } from 'node:worker_threads';
import type { LogFile } from '../records.js';
import type { LastEgressFailure } from './egress-failures.js';
import { type BridgeHandler, createSignal, serveBridge } from './bridge.js';
import { prewarmGuestWorker, startGuestWorker } from './first-worker.js';
import type { GuestJob, GuestMessage, GuestOutcome, GuestPreload, GuestPrepare } from './guest-worker.js';
import { MemoryLimitError, TableLimitError, compileCoreModule } from './memory-limit.js';
import { createOutputGate, leaveOutputGate } from './output-gate.js';
import { UnpinnablePreopen, pinnedPreopen } from './pinned-preopen.js';
import type { HostComponent } from './protocol.js';

/**
 * Where a session's WebAssembly runs: each instance alone in a worker thread, which is the unit of
 * interruption (the deadline terminates it, whatever the guest is doing) and of isolation (its own
 * imports, its own preopen). The runner compiles each core module once per session, keeps a
 * worker whose guest returned cleanly for that component's next call, and keeps one started worker
 * in reserve so a call skips worker start-up.
 *
 * Two shapes of guest: a **call** (the capsule's own run, a tool, a driver turn) is a fresh instance
 * that ends with its call; a **resident** instance (a hook) is instantiated once and answers many
 * calls, each under its own deadline. A resident that traps or overruns is ended, and the next call
 * instantiates it afresh: a hook never sees a half-unwound instance.
 */

const decoder = new TextDecoder();

let nextPreload = 1;

/**
 * Has a worker born early (`prewarmGuestWorker`) load `component`'s glue and imports before its
 * job names it; a glue it loaded earlier for another component is let go. Settles once the worker
 * says it has loaded them (or failed to: its job will load, and report, afresh), or once it has
 * exited; each preload is answered under its own id, so an earlier one's answer settles only it.
 */
export function preloadInWorker(worker: Worker, component: HostComponent): Promise<'preloaded' | 'exited'> {
  const id = nextPreload++;
  return new Promise((resolve) => {
    const onMessage = (message: GuestMessage): void => {
      if (message.type === 'preloaded' && message.id === id) settle('preloaded');
    };
    const onExit = (): void => settle('exited');
    const settle = (how: 'preloaded' | 'exited'): void => {
      worker.off('message', onMessage).off('exit', onExit);
      resolve(how);
    };
    worker.on('message', onMessage).on('exit', onExit);
    worker.postMessage({ preload: { bundleDir: component.bundle_dir, entry: component.entry, imports: component.imports, id } } satisfies GuestPreload);
  });
}

/**
 * The main thread's end of a worker's bridge: `call` answers the guest call the worker runs now, if
 * any. `outputGate` is the worker's output gate (`output-gate.ts`), one per worker so that what an
 * ended worker left counted on it ends with it.
 */
interface WorkerBridge {
  port: MessagePort;
  call: BridgeHandler | undefined;
  outputGate: Int32Array;
}

/** A bridge for a worker's life; the worker's end (`port`, `signal`, the output gate) goes with its first job. */
function openBridge(): { bridge: WorkerBridge; port: MessagePort; signal: Int32Array } {
  const { port1, port2 } = new MessageChannel();
  const signal = createSignal();
  const bridge: WorkerBridge = { port: port1, call: undefined, outputGate: createOutputGate() };
  serveBridge(port1, signal, (op, payload) =>
    bridge.call ? bridge.call(op, payload) : Promise.reject(new Error(`no guest call is running to ask for '${op}'`)),
  );
  return { bridge, port: port2, signal };
}

/** `abandoned`: its task was canceled while it ran, and its worker ended (`abandonRunning`). */
export type RunOutcome = GuestOutcome | { kind: 'deadline' } | { kind: 'abandoned'; message: string };

/**
 * A guest's host call (`op` from the instance holding `grant`), answered on the main thread.
 * `instance` names the one WebAssembly instance that asked, unique in the session: what it opened
 * (a relayed response body) is let go when `instanceEnded` says it is gone.
 */
export type HostCallHandler = (op: string, payload: unknown, grant: string, instance: number, record?: CallRecord) => Promise<unknown>;

/**
 * The host's own record of one guest call, handed with each host call the call makes and never
 * sent to its worker: whether the call speaks for the running task (a hook's completion through
 * the session's driver does not: it streams nothing to the task and asks nobody for input), and
 * how its requests fared. Per call, not per grant or per host: a hook's completion and the loop's
 * own driver call run at once, under the same grant.
 */
export interface CallRecord {
  taskless: boolean;
  egress: LastEgressFailure;
}

export interface GuestRunnerOptions {
  memoryLimitBytes: number;
  /** `limits.table_elements` and `limits.instances`, as `GuestJob` carries them. */
  tableElementsLimit: number;
  instancesLimit: number;
  deadlineMs: number;
  sessionLog: LogFile;
  /** The capsule's own stdout and stderr, for the launcher; `carried` is to be told once it has left the host. */
  capsuleOutput(stream: 'stdout' | 'stderr', text: string, carried: () => void): void;
  answer: HostCallHandler;
  /** Told once an instance that called `answer` has ended (returned, trapped, overran, was abandoned or closed). */
  instanceEnded?(instance: number): void;
  /** A worker started before the session's plan arrived, for the first guest. */
  prewarmed?: Worker | undefined;
}

/** What a guest job names before the runner compiles its modules and opens its bridge. */
export type GuestSpec = Omit<
  GuestJob,
  'bridgePort' | 'signal' | 'outputGate' | 'memoryLimitBytes' | 'tableElementsLimit' | 'instancesLimit' | 'modules' | 'resident'
> & {
  coreModules: string[];
  record?: CallRecord;
};

export function guestSpecOf(component: HostComponent): Pick<GuestSpec, 'bundleDir' | 'entry' | 'coreModules' | 'imports'> {
  return { bundleDir: component.bundle_dir, entry: component.entry, coreModules: component.core_modules, imports: component.imports };
}

/**
 * The host's compiled core modules, by memory cap and file: compiled once and shared by every
 * instance (an agent calls its driver every turn, and compiling a 12 MB module each time would be
 * most of the turn). A pooled host told what to expect fills it before its runner exists
 * (`precompileCoreModules`). A failed compile is not remembered: the next use compiles, and
 * reports, afresh.
 */
const compiledModules = new Map<string, Promise<WebAssembly.Module>>();

function compiledModule(file: string, caps: CoreCaps): Promise<WebAssembly.Module> {
  const key = `${caps.memoryBytes}:${caps.tableElements}:${file}`;
  let module = compiledModules.get(key);
  if (!module) {
    const compiling = compileCoreModule(file, caps.memoryBytes, caps.tableElements);
    compiledModules.set(key, compiling);
    compiling.catch(() => {
      if (compiledModules.get(key) === compiling) compiledModules.delete(key);
    });
    module = compiling;
  }
  return module;
}

/** Lets go of every module compiled so far: a pooled host told to expect one component and then given another drops what it compiled for the first. */
export function forgetPrecompiled(): void {
  compiledModules.clear();
}

/** Compiles `component`'s core modules ahead of its first use: only a head start, whatever fails here fails again there. */
export function precompileCoreModules(component: HostComponent, caps: CoreCaps): void {
  for (const file of component.core_modules) void compiledModule(path.join(component.bundle_dir, file), caps).catch(() => {});
}

/** What a core module is compiled under: its memories' cap in bytes and its tables' in elements. */
export interface CoreCaps {
  memoryBytes: number;
  tableElements: number;
}

export class GuestRunner {
  /** Workers whose last guest returned cleanly, by component, ready for that component's next call. */
  private readonly idleWorkers = new Map<string, Worker>();
  /** Keep a started worker in reserve after each guest starts, so the next call skips worker start-up (agents make many). */
  private keepSpareWorker = false;
  private spareWorkerPreload: GuestPreload['preload'] | undefined;
  /** Whether the session calls other components than the likely one: a reserve is worth keeping after it took one. */
  private spareForOthers = true;
  private prewarmed: Worker | undefined;
  /** How to end each guest running in a worker of its own now: what a canceled task abandons. */
  private readonly running = new Set<(outcome: RunOutcome) => void>();
  private nextInstance = 1;
  /** The bridge of each worker that runs calls, opened with its first call and closed when it ends. */
  private readonly bridges = new Map<Worker, WorkerBridge>();
  /** How many times `abandonRunning` was called, and with what: a call that began before the last one is abandoned. */
  private abandonments = 0;
  private abandonedWith = '';

  constructor(private readonly options: GuestRunnerOptions) {
    this.prewarmed = options.prewarmed;
  }

  /**
   * From now on a started worker is kept in reserve for the next guest, with `likely` (an agent's
   * driver, which every turn calls) already loaded in it. Once `likely` has taken the reserve, its
   * worker is kept for its next call, so the reserve is started again only for `othersToCall`
   * (an agent with WASM tools), and without `likely` in it: an agent whose every call is its
   * driver's would start a worker — an isolate, the shim, the driver's glue, ~0.25 s of a core —
   * that nothing takes. A call with no worker ready starts one, as the first call would have.
   */
  keepWorkersWarm(likely?: HostComponent, options: { othersToCall: boolean } = { othersToCall: true }): void {
    this.spareWorkerPreload = likely ? { bundleDir: likely.bundle_dir, entry: likely.entry, imports: likely.imports } : undefined;
    this.keepSpareWorker = true;
    this.spareForOthers = options.othersToCall;
    this.prewarmed ??= prewarmGuestWorker(this.spareWorkerPreload);
  }

  /** The reserve to start once `taken` (a job's component) has taken the last one, if any. */
  private nextSpare(taken: string): Worker | undefined {
    if (!this.keepSpareWorker) return undefined;
    const likely = this.spareWorkerPreload;
    if (likely === undefined || likely.bundleDir !== taken) return prewarmGuestWorker(likely);
    return this.spareForOthers ? prewarmGuestWorker(undefined) : undefined;
  }

  /**
   * Lets go of every worker kept for a next call (the idle ones and the spare): each holds a V8
   * isolate, ~8–10 MB, which a session that sleeps between messages should not hold while nobody
   * talks to it. A call after it finds no worker ready and starts one, as a first call with no
   * spare does; a worker whose call returns cleanly is kept for its component's next call again.
   * Returns how many were let go.
   */
  releaseIdleWorkers(): number {
    const idle = [...this.idleWorkers.values(), ...(this.prewarmed ? [this.prewarmed] : [])];
    this.idleWorkers.clear();
    this.prewarmed = undefined;
    for (const worker of idle) this.endWorker(worker);
    return idle.length;
  }

  /**
   * Has the worker kept for `spec`'s component make the instance `spec`'s call will run, now, while
   * the session does something else: an agent's driver between a turn that asked for tools and the
   * next (`GuestPrepare`). Nothing happens when no worker is kept for it. A call that comes with
   * anything else than `spec` names gets an instance of its own, as it would have.
   */
  prepareNext(spec: GuestSpec): void {
    const worker = this.idleWorkers.get(spec.bundleDir);
    if (!worker) return;
    const job = this.jobOrFailure(spec, {});
    // Nothing made ahead for a guest that will not be started: its call says why.
    if ('kind' in job) return;
    worker.postMessage({ type: 'prepare', job } satisfies GuestPrepare);
  }

  /** Ends a worker that runs calls, and closes its bridge. */
  private endWorker(worker: Worker): void {
    this.bridges.get(worker)?.port.close();
    this.bridges.delete(worker);
    void worker.terminate();
  }

  /**
   * Runs one instance in its own worker until it finishes or its deadline passes. The deadline
   * counts while the guest works, not while a person is asked for input: that wait has its own
   * limit (`lifecycle.input_timeout_secs`).
   */
  async run(spec: GuestSpec): Promise<RunOutcome> {
    const asked = this.abandonments;
    const compiled = await this.compiledOrFailure(spec);
    // Abandoned while its modules were being compiled: it never reaches a worker.
    if (this.abandonments !== asked) return { kind: 'abandoned', message: this.abandonedWith };
    if ('failure' in compiled) return compiled.failure;
    const job = this.jobOrFailure(spec, compiled.modules);
    if ('kind' in job) return job;
    return this.runWorker(job, spec.record);
  }

  /**
   * Ends every guest running in a worker of its own (a driver's call, a WASM tool's) at once: each
   * call returns `abandoned` and its worker is terminated, whatever the guest was doing. A call on
   * its way to a worker (its modules still compiling) is abandoned too, before it starts one. Resident
   * hooks are not touched: they belong to the session, not to a task. Returns how many were running.
   */
  abandonRunning(message: string): number {
    this.abandonments += 1;
    this.abandonedWith = message;
    const ending = [...this.running];
    for (const finish of ending) finish({ kind: 'abandoned', message });
    return ending.length;
  }

  /** Opens an instance that stays for many calls (a hook's); nothing is instantiated until the first call. */
  resident(spec: GuestSpec, deadlineMs: number): ResidentGuest {
    return new ResidentGuest(this, spec, deadlineMs);
  }

  /** @internal The pieces a resident guest needs from its runner. */
  async startResident(
    spec: GuestSpec,
  ): Promise<{ worker: Worker; lines: LineBuffers; port: MessageChannel['port1']; instance: number; outputGate: Int32Array } | GuestOutcome> {
    const compiled = await this.compiledOrFailure(spec);
    if ('failure' in compiled) return compiled.failure;
    const { port1, port2 } = new MessageChannel();
    const signal = createSignal();
    const outputGate = createOutputGate();
    const instance = this.nextInstance++;
    serveBridge(port1, signal, (op, payload) => this.options.answer(op, payload, spec.grant, instance));
    const made = this.jobOrFailure(spec, compiled.modules);
    if ('kind' in made) return made;
    const job: GuestJob = { ...made, resident: true, bridgePort: port2, signal, outputGate };
    // A resident gets a worker of its own for its whole life: never an idle one, never the spare.
    const worker = startGuestWorker({ workerData: job, transferList: [port2], stdout: true, stderr: true });
    return { worker, lines: new LineBuffers(), port: port1, instance, outputGate };
  }

  /** @internal An instance is gone: whatever it still held open is let go. */
  instanceEnded(instance: number): void {
    this.options.instanceEnded?.(instance);
  }

  /** @internal A guest's output, into the session log under its label, and out of its gate. */
  logOutput(lines: LineBuffers, label: string, stream: 'stdout' | 'stderr', bytes: Uint8Array, gate: Int32Array): void {
    const prefix = `${label} ${stream}`;
    for (const line of lines.push(prefix, decoder.decode(bytes))) this.options.sessionLog.line(`[${prefix}] ${line}`);
    leaveOutputGate(gate, bytes.byteLength);
  }

  /** @internal */
  drainOutput(lines: LineBuffers): void {
    for (const [prefix, rest] of lines.drain()) this.options.sessionLog.line(`[${prefix}] ${rest}`);
  }

  private async compiledOrFailure(spec: GuestSpec): Promise<{ modules: Record<string, WebAssembly.Module> } | { failure: GuestOutcome }> {
    try {
      return { modules: await this.compiled(spec.bundleDir, spec.coreModules) };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return {
        failure:
          error instanceof MemoryLimitError
            ? { kind: 'too-small', message }
            : error instanceof TableLimitError
              ? { kind: 'too-small', message, limit: 'table_elements' }
              : { kind: 'link-error', message: `the component's core module does not compile: ${message}` },
      };
    }
  }

  /** The component's core modules, under the session's memory cap. */
  private compiled(bundleDir: string, files: string[]): Promise<Record<string, WebAssembly.Module>> {
    const caps = { memoryBytes: this.options.memoryLimitBytes, tableElements: this.options.tableElementsLimit };
    return Promise.all(files.map(async (file) => [file, await compiledModule(path.join(bundleDir, file), caps)] as const)).then((entries) =>
      Object.fromEntries(entries),
    );
  }

  /**
   * The job a worker is sent for `spec`: one shape for a call, a resident and an instance made
   * ahead, whose key (`instanceKey` in the worker) a call's must match to take it.
   */
  private jobOf(spec: GuestSpec, modules: Record<string, WebAssembly.Module>): GuestJob {
    const { coreModules: _files, record: _record, ...rest } = spec;
    // The directory itself, not its path, which a tool of the session could replace with a link (`pinned-preopen.ts`).
    return {
      ...rest,
      preopen: rest.preopen === '' ? '' : pinnedPreopen(rest.preopen),
      modules,
      memoryLimitBytes: this.options.memoryLimitBytes,
      tableElementsLimit: this.options.tableElementsLimit,
      instancesLimit: this.options.instancesLimit,
    };
  }

  /** `jobOf`, or the guest's failure when its preopen cannot be pinned: the guest is not started. */
  private jobOrFailure(spec: GuestSpec, modules: Record<string, WebAssembly.Module>): GuestJob | GuestOutcome {
    try {
      return this.jobOf(spec, modules);
    } catch (error) {
      if (error instanceof UnpinnablePreopen) return { kind: 'link-error', message: error.message };
      throw error;
    }
  }

  private runWorker(job: GuestJob, record: CallRecord | undefined): Promise<RunOutcome> {
    const instance = this.nextInstance++;
    let timer: NodeJS.Timeout | undefined;
    let remainingMs = this.options.deadlineMs;
    let armedAt = 0;
    let onDeadline = (): void => {};
    const arm = (): void => {
      armedAt = Date.now();
      timer = setTimeout(() => onDeadline(), remainingMs);
    };
    const pause = (): void => {
      if (timer) clearTimeout(timer);
      timer = undefined;
      remainingMs = Math.max(0, remainingMs - (Date.now() - armedAt));
    };
    const answer: BridgeHandler = async (op, payload) => {
      if (op !== 'request-input') return this.options.answer(op, payload, job.grant, instance, record);
      pause();
      try {
        return await this.options.answer(op, payload, job.grant, instance, record);
      } finally {
        arm();
      }
    };
    let worker: Worker;
    let bridge: WorkerBridge;
    const idle = this.idleWorkers.get(job.bundleDir);
    const idleBridge = idle && this.bridges.get(idle);
    if (idle) this.idleWorkers.delete(job.bundleDir);
    if (idle && idleBridge) {
      worker = idle;
      bridge = idleBridge;
      // It ran this component last, and keeps its modules and its bridge: posting them again costs
      // the host's thread a fraction of a millisecond a call, which an agent pays every turn.
      worker.postMessage({ ...job, modules: {} } satisfies GuestJob);
    } else {
      if (idle) this.endWorker(idle);
      const opened = openBridge();
      bridge = opened.bridge;
      const first: GuestJob = { ...job, bridgePort: opened.port, signal: opened.signal, outputGate: bridge.outputGate };
      if (this.prewarmed) {
        worker = this.prewarmed;
        this.prewarmed = undefined;
        worker.postMessage(first, [opened.port]);
        this.prewarmed = this.nextSpare(job.bundleDir);
      } else {
        worker = startGuestWorker({ workerData: first, transferList: [opened.port], stdout: true, stderr: true });
      }
      this.bridges.set(worker, bridge);
    }
    // The bridge answers for this call, and this call only: between calls it refuses.
    bridge.call = answer;
    const lines = new LineBuffers();
    return new Promise((resolve) => {
      let settled = false;
      const onMessage = (message: GuestMessage): void => {
        if (message.type === 'output') {
          if (job.role === 'capsule') {
            const text = decoder.decode(message.bytes);
            // The launcher first, then the log: writing the log (opening it, on a session's first
            // line) is a synchronous file write the launcher's reader need not wait behind. Out of
            // the gate once it has left the host: the channel's buffer is the host's memory too.
            this.options.capsuleOutput(message.stream, text, () => leaveOutputGate(bridge.outputGate, message.bytes.byteLength));
            for (const line of lines.push(message.stream, text)) this.options.sessionLog.line(`[${message.stream}] ${line}`);
          } else this.logOutput(lines, job.label, message.stream, message.bytes, bridge.outputGate);
        } else if (message.type === 'done') finish(message.outcome);
        else if (message.type === 'trap') trapped = message.message;
      };
      let trapped: string | undefined;
      const onError = (error: Error): void => finish({ kind: 'trap', message: error.message, memoryExhausted: false });
      const onExit = (): void => finish({ kind: 'trap', message: trapped ?? 'the guest worker exited without a result', memoryExhausted: false });
      const finish = (outcome: RunOutcome): void => {
        if (settled) return;
        settled = true;
        this.running.delete(finish);
        this.drainOutput(lines);
        if (timer) clearTimeout(timer);
        bridge.call = undefined;
        this.options.instanceEnded?.(instance);
        worker.off('message', onMessage).off('error', onError).off('exit', onExit);
        // A worker whose guest returned cleanly is kept for the next call of the same component
        // (an agent calls its driver every turn); anything else — a trap, a deadline — ends it.
        if (outcome.kind === 'returned' && this.keepSpareWorker && !this.idleWorkers.has(job.bundleDir)) this.idleWorkers.set(job.bundleDir, worker);
        else this.endWorker(worker);
        resolve(outcome);
      };
      onDeadline = () => finish({ kind: 'deadline' });
      this.running.add(finish);
      arm();
      worker.on('message', onMessage).on('error', onError).on('exit', onExit);
    });
  }
}

/**
 * One instance that answers many calls, one at a time, in the order they were made. Instantiated
 * at its first call (its instantiation counts against that call's deadline, as upstream's store
 * deadline covers instantiation), and again after any call that did not return cleanly.
 */
export class ResidentGuest {
  private live: { worker: Worker; lines: LineBuffers; port: MessageChannel['port1']; instance: number; outputGate: Int32Array } | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly runner: GuestRunner,
    private readonly spec: GuestSpec,
    private readonly deadlineMs: number,
  ) {}

  /** Calls `fn` of the instance's export with `args`; whatever happens, the outcome says it (this never throws). */
  call(fn: string, args: unknown[]): Promise<RunOutcome> {
    const next = this.queue.then(() => this.callNow(fn, args));
    this.queue = next.catch(() => {});
    return next;
  }

  /** Ends the instance; a call made after this is refused as a trap. */
  close(): void {
    this.closed = true;
    this.end();
  }

  private end(): void {
    const live = this.live;
    this.live = undefined;
    if (!live) return;
    this.runner.drainOutput(live.lines);
    live.port.close();
    this.runner.instanceEnded(live.instance);
    void live.worker.terminate();
  }

  private async callNow(fn: string, args: unknown[]): Promise<RunOutcome> {
    if (this.closed) return { kind: 'trap', message: `${this.spec.label} was closed at the end of the session`, memoryExhausted: false };
    const started = Date.now();
    if (!this.live) {
      const opened = await this.runner.startResident(this.spec);
      if ('kind' in opened) return opened;
      this.live = opened;
    }
    const live = this.live;
    const remaining = Math.max(1, this.deadlineMs - (Date.now() - started));
    return new Promise((resolve) => {
      let settled = false;
      const onMessage = (message: GuestMessage): void => {
        if (message.type === 'output') this.runner.logOutput(live.lines, this.spec.label, message.stream, message.bytes, live.outputGate);
        else if (message.type === 'done') finish(message.outcome);
        else if (message.type === 'trap') trapped = message.message;
      };
      let trapped: string | undefined;
      const onError = (error: Error): void => finish({ kind: 'trap', message: error.message, memoryExhausted: false });
      const onExit = (): void => finish({ kind: 'trap', message: trapped ?? 'the guest worker exited without a result', memoryExhausted: false });
      const timer = setTimeout(() => finish({ kind: 'deadline' }), remaining);
      const finish = (outcome: RunOutcome): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        live.worker.off('message', onMessage).off('error', onError).off('exit', onExit);
        if (outcome.kind !== 'returned') this.end();
        resolve(outcome);
      };
      live.worker.on('message', onMessage).on('error', onError).on('exit', onExit);
      live.worker.postMessage({ type: 'call', fn, args });
    });
  }
}

/**
 * The most of a line not yet ended that is held for the session log: past it, what is held is
 * logged as a piece of the line, ending ` …`. A guest that writes without a newline would
 * otherwise have its whole output held, and split again at every write.
 */
const LONGEST_HELD_LINE = 16 * 1024;

/** Whole lines per stream, so the session log never interleaves half-lines of stdout and stderr. */
class LineBuffers {
  private readonly partial = new Map<string, string>();

  push(stream: string, text: string): string[] {
    const combined = (this.partial.get(stream) ?? '') + text;
    const lines = combined.split('\n');
    let rest = lines.pop() ?? '';
    for (; rest.length > LONGEST_HELD_LINE; rest = rest.slice(LONGEST_HELD_LINE)) lines.push(`${rest.slice(0, LONGEST_HELD_LINE)} …`);
    this.partial.set(stream, rest);
    return lines;
  }

  drain(): Array<[string, string]> {
    const rest = [...this.partial.entries()].filter(([, text]) => text !== '');
    this.partial.clear();
    return rest;
  }
}
