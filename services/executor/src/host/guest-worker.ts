import path from 'node:path';
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { BridgeClient } from './bridge.js';
import { loadGlue } from './glue.js';
import { GuestExit, buildImports, preloadImports } from './imports.js';
import { GROW_DENIED_EXPORT } from './grow-watch.js';
import { closeGuestFiles, onIoTrap } from './in-thread-io.js';
import { InstanceLimitError, MemoryLimitError, TableLimitError, compileCoreModule } from './memory-limit.js';
import { enterOutputGate } from './output-gate.js';

/**
 * One WebAssembly instance, alone in a worker thread: the capsule's own component, or one tool
 * call. The worker is the unit of interruption — the host terminates it at the deadline, whatever
 * the guest is doing — and of isolation between instances: each has its own import object, its
 * own preopen and its own copy of the shim's classes.
 */

export interface GuestJob {
  role: 'capsule' | 'tool' | 'hook';
  /** Instantiated once, then answers `{type: 'call', fn, args}` messages one at a time (a hook). */
  resident?: boolean;
  label: string;
  bundleDir: string;
  entry: string;
  /** The interfaces the component imports (from its transpiled bundle): all that is built for it. */
  imports: string[];
  memoryLimitBytes: number;
  /** `limits.table_elements`: each table's cap, written into its module as the memory cap is. */
  tableElementsLimit: number;
  /** `limits.instances`: the most core instances one instance of the component may make. */
  instancesLimit: number;
  preopen: string;
  env: Array<[string, string]>;
  grant: string;
  /**
   * The worker's bridge to the host's main thread (`bridge.ts`), given with its first job only: a
   * worker kept for its component's next call keeps it. A new port for every call cost the host's
   * thread a transfer each time (a tenth of a millisecond or more to post, on every driver turn).
   */
  bridgePort?: MessagePort;
  signal?: Int32Array;
  /** The worker's output gate (`output-gate.ts`), given with its first job as its bridge is. */
  outputGate?: Int32Array;
  toolInput?: { data?: string | undefined; logPath?: string | undefined };
  /**
   * The component's core modules, compiled (with their memory capped) by the host once per
   * component and shared by every instance: an agent calls its driver every turn, and compiling
   * a 12 MB module each time would be most of the turn. Empty for a worker that ran this
   * component last: it kept them.
   */
  modules: Record<string, WebAssembly.Module>;
}

export type GuestOutcome =
  /** `madeAhead`: the call ran the instance its worker made before the call came (`prepare`). */
  | { kind: 'returned'; value?: unknown; madeAhead?: true }
  | { kind: 'exit'; code: number }
  /** `limitMessage`: what the memory limit refused, when a watched module recorded it. */
  | { kind: 'trap'; message: string; memoryExhausted: boolean; limitMessage?: string }
  | { kind: 'link-error'; message: string; missing?: string }
  /** A limit refused the instance before it ran: `limit` names which (`memory_bytes` when absent). */
  | { kind: 'too-small'; message: string; limit?: 'table_elements' | 'instances' };

/** `preloaded`: what the `preload` with this id named is loaded, or failed to load (its job will say so). */
export type GuestMessage =
  | { type: 'output'; stream: 'stdout' | 'stderr'; bytes: Uint8Array }
  | { type: 'done'; outcome: GuestOutcome }
  | { type: 'preloaded'; id: number }
  /** Why the worker is about to end without a result: a trap of its I/O that the shim ends the worker for. */
  | { type: 'trap'; message: string };

const CAPSULE_EXPORT = 'murmur:capsule/run@0.1.0';
const TOOL_EXPORT = 'murmur:tool/run@0.1.0';
const HOOK_EXPORT = 'murmur:hook/lifecycle@0.5.0';
const PAGE = 65_536;

function post(message: GuestMessage): void {
  parentPort?.postMessage(message);
}

// Said before the shim ends this worker for it, so that the session says why its guest stopped.
onIoTrap((message) => post({ type: 'trap', message }));

/** This worker's output gate, from its first job on. */
let keptOutputGate: Int32Array | undefined;

/**
 * The most of one write posted at once. A guest may hand one write of what its memory holds, and
 * every piece crosses to the executor as JSON, in which a control character takes six: one 90 MB
 * write of NULs made a string past V8's bound and ended the capsule host with it.
 */
const OUTPUT_PIECE_BYTES = 64 * 1024;

/** A guest's write, piece by piece, each once the host has room for it, as a write to a pipe waits for the reader. */
function postOutput(stream: 'stdout' | 'stderr', bytes: Uint8Array): void {
  for (let start = 0; start < bytes.byteLength; start += OUTPUT_PIECE_BYTES) {
    // A copy of the piece: a view would post the whole buffer under it.
    const piece = bytes.byteLength <= OUTPUT_PIECE_BYTES ? bytes : bytes.slice(start, start + OUTPUT_PIECE_BYTES);
    if (keptOutputGate) enterOutputGate(keptOutputGate, piece.byteLength);
    post({ type: 'output', stream, bytes: piece });
  }
}

/**
 * Whether a trap happened with some memory within one allocation step of its cap: the limit, not
 * a bug. An allocator that cannot grow aborts (a trap), having asked for up to a quarter of what
 * remains or a few tens of MiB; memory that close to the cap is read as the limit's doing.
 */
function nearCap(memories: WebAssembly.Memory[], limit: number): boolean {
  const slack = Math.max(2 * PAGE, Math.min(32 * 1024 * 1024, limit / 4));
  return memories.some((memory) => memory.buffer.byteLength + slack >= limit);
}

/**
 * What a trap is judged by: the refusals a watched module recorded (`grow-watch`), and for the
 * memories of modules that could not be watched, how close they came to the cap.
 */
interface WatchedMemories {
  unwatched: WebAssembly.Memory[];
  denials: WebAssembly.Global[];
}

function watchInstance(memories: WatchedMemories, instance: WebAssembly.Instance): void {
  const denial = instance.exports[GROW_DENIED_EXPORT];
  if (denial instanceof WebAssembly.Global) {
    memories.denials.push(denial);
    return;
  }
  for (const value of Object.values(instance.exports)) if (value instanceof WebAssembly.Memory) memories.unwatched.push(value);
}

/**
 * Whether a trap was the memory limit's doing. A recorded refusal is authoritative (upstream's
 * limiter wins over the trap code the same way) and says what was asked for.
 */
function memoryVerdict(memories: WatchedMemories, limit: number): { memoryExhausted: boolean; limitMessage?: string } {
  const refusedPages = memories.denials.map((global) => (global.value as number) >>> 0).find((pages) => pages !== 0);
  if (refusedPages !== undefined) {
    return {
      memoryExhausted: true,
      limitMessage: `linear memory growth to ${refusedPages * PAGE} bytes exceeds capabilities.limits.memory_bytes (${limit})`,
    };
  }
  return { memoryExhausted: nearCap(memories.unwatched, limit) };
}

type InstantiateCore = (module: WebAssembly.Module, coreImports?: WebAssembly.Imports) => Promise<WebAssembly.Instance>;

interface TranspiledBundle {
  instantiate(
    getCoreModule: (file: string) => Promise<WebAssembly.Module>,
    imports: Record<string, unknown>,
    instantiateCore: InstantiateCore,
  ): Promise<Record<string, Record<string, (...args: unknown[]) => unknown>>>;
}

/**
 * The compiled core modules this worker was given, by file: a worker kept for its component's
 * next call is sent them once (the host posts none to a worker that ran the component last).
 * One session's worker, so one memory cap.
 */
const keptModules = new Map<string, WebAssembly.Module>();

/**
 * A worker kept for the next call of its component loads the component's glue once. A load that
 * failed is not remembered (a head start's failure says nothing of the job's): the job loads, and
 * reports, afresh.
 */
const bundles = new Map<string, Promise<TranspiledBundle>>();

function loadBundle(file: string): Promise<TranspiledBundle> {
  let bundle = bundles.get(file);
  if (!bundle) {
    const loading = loadGlue<TranspiledBundle>(file);
    loading.catch(() => {
      if (bundles.get(file) === loading) bundles.delete(file);
    });
    bundles.set(file, loading);
    bundle = loading;
  }
  return bundle;
}

/** This worker's end of its bridge, from its first job on. */
let keptBridge: BridgeClient | undefined;

/** An instance linked and ready for its call, with the memories its trap would be judged by. */
interface Instantiated {
  instance: Record<string, Record<string, (...args: unknown[]) => unknown>>;
  memories: WatchedMemories;
}

/** A fresh instance of `job`'s component, with an import object of its own: every call's, or the one made ahead for it. */
async function instantiate(job: GuestJob, bridge: BridgeClient): Promise<Instantiated | GuestOutcome> {
  const imports = await buildImports(
    {
      preopen: job.preopen,
      env: job.env,
      grant: job.grant,
      bridge,
      capsuleImports: job.role === 'capsule',
      hookImports: job.role === 'hook',
      stdout: (bytes) => postOutput('stdout', bytes),
      stderr: (bytes) => postOutput('stderr', bytes),
      memoryLimitBytes: job.memoryLimitBytes,
    },
    job.imports,
  );
  // Whatever the component imports that this runtime does not offer (wasi:sockets, a murmur
  // interface a tool may not use) is a link failure, named, before any of it runs.
  const missing = job.imports.find((name) => !(name in imports));
  if (missing !== undefined) return { kind: 'link-error', message: `the runtime offers no ${missing}`, missing };
  const memories: WatchedMemories = { unwatched: [], denials: [] };
  for (const [file, module] of Object.entries(job.modules)) keptModules.set(path.join(job.bundleDir, file), module);
  const getCoreModule = async (file: string): Promise<WebAssembly.Module> => {
    const compiled = keptModules.get(path.join(job.bundleDir, file));
    if (compiled) return compiled;
    return compileCoreModule(path.join(job.bundleDir, file), job.memoryLimitBytes, job.tableElementsLimit);
  };
  let coreInstances = 0;
  // Synchronous on purpose: the module is already compiled, this thread has nothing else to do,
  // and the asynchronous form costs a round trip through the event loop per core module.
  const instantiateCore: InstantiateCore = async (module, coreImports) => {
    // Upstream's limiter counts a store's instances: a component that instantiates one module
    // many times has a memory (capped alone) in each, and took the host past 800 MB that way.
    coreInstances += 1;
    if (coreInstances > job.instancesLimit) throw new InstanceLimitError(coreInstances, job.instancesLimit);
    const instance = new WebAssembly.Instance(module, coreImports);
    watchInstance(memories, instance);
    return instance;
  };
  const bundle = await loadBundle(path.join(job.bundleDir, job.entry));
  try {
    return { instance: await bundle.instantiate(getCoreModule, imports, instantiateCore), memories };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (error instanceof MemoryLimitError) return { kind: 'too-small', message };
    if (error instanceof TableLimitError) return { kind: 'too-small', message, limit: 'table_elements' };
    if (error instanceof InstanceLimitError) return { kind: 'too-small', message, limit: 'instances' };
    if (error instanceof WebAssembly.RuntimeError) return { kind: 'trap', message, ...memoryVerdict(memories, job.memoryLimitBytes) };
    const missing = /imports\.([\w:/.-]+)|instance import '([^']+)'/.exec(message);
    return { kind: 'link-error', message, ...(missing ? { missing: (missing[1] ?? missing[2]) as string } : {}) };
  }
}

/**
 * The instance a kept worker made ahead for its component's next call (`prepare`), and what it was
 * made for. A call that names anything else — another environment, preopen or grant — gets an
 * instance of its own, and this one is let go unused.
 */
let madeAhead: { key: string; instance: Promise<Instantiated | GuestOutcome> } | undefined;

/** What an instance is made from: two jobs with the same key get instances no call could tell apart. */
function instanceKey(job: GuestJob): string {
  return JSON.stringify([
    job.role,
    job.bundleDir,
    job.entry,
    job.imports,
    job.memoryLimitBytes,
    job.tableElementsLimit,
    job.instancesLimit,
    job.preopen,
    job.env,
    job.grant,
  ]);
}

/**
 * Makes the instance of `job`'s component that its next call will run, while the host does
 * something else (an agent's tools, between two turns of its driver), so the call does not wait
 * for it: 45–100 ms for a 12 MB componentize-js driver. The instance is as fresh as a call's own —
 * made after the last call ended, with its own import object — and only a head start: one that
 * fails to instantiate is made again, and reported, by the call. Between calls the bridge refuses
 * every host call, so nothing made ahead acts for anyone.
 */
function prepare(job: GuestJob): void {
  const bridge = keptBridge;
  if (bridge === undefined || job.resident) return;
  madeAhead = {
    key: instanceKey(job),
    instance: instantiate(job, bridge).catch((error: unknown): GuestOutcome => ({ kind: 'trap', message: String(error), memoryExhausted: false })),
  };
}

async function run(job: GuestJob): Promise<GuestOutcome> {
  if (job.bridgePort && job.signal) keptBridge = new BridgeClient(job.bridgePort, job.signal);
  if (job.outputGate) keptOutputGate = job.outputGate;
  const bridge = keptBridge;
  if (bridge === undefined) return { kind: 'trap', message: 'the host gave this worker no bridge', memoryExhausted: false };
  const ahead = madeAhead?.key === instanceKey(job) ? await madeAhead.instance : undefined;
  madeAhead = undefined;
  const made = ahead !== undefined && 'instance' in ahead ? ahead : await instantiate(job, bridge);
  if (!('instance' in made)) return made;
  const { instance, memories } = made;
  if (job.resident) {
    resident = { instance: instance[HOOK_EXPORT] ?? {}, memories, limit: job.memoryLimitBytes };
    return { kind: 'returned' };
  }
  const exportName = job.role === 'capsule' ? CAPSULE_EXPORT : TOOL_EXPORT;
  const run = instance[exportName]?.run;
  if (typeof run !== 'function') return { kind: 'link-error', message: `the component does not export ${exportName}#run` };
  try {
    const value = job.role === 'capsule' ? run() : run(job.toolInput ?? {});
    return { kind: 'returned', value: await value, ...(made === ahead ? { madeAhead: true } : {}) };
  } catch (error) {
    if (error instanceof GuestExit) return { kind: 'exit', code: error.code };
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return { kind: 'trap', message, ...memoryVerdict(memories, job.memoryLimitBytes) };
  }
}

/** A resident guest's instance (a hook's lifecycle export), kept for the calls that follow its instantiation. */
let resident: { instance: Record<string, (...args: unknown[]) => unknown>; memories: WatchedMemories; limit: number } | undefined;
let residentReady: Promise<GuestOutcome> | undefined;

/** WIT's kebab-case name as jco exports it: `on-session-start` → `onSessionStart`. */
function exportedName(fn: string): string {
  return fn.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase());
}

/**
 * One call of a resident instance. A function the component does not export is `missing-export`
 * (the host decides whether that matters); the guest's own `err` arm comes back as a value, since
 * jco raises it as the bare value or an error carrying `payload`; an Error thrown is a trap.
 */
async function callResident(fn: string, args: unknown[]): Promise<GuestOutcome> {
  const ready = await (residentReady ?? Promise.resolve<GuestOutcome>({ kind: 'trap', message: 'the instance was never started', memoryExhausted: false }));
  if (ready.kind !== 'returned' || !resident) return ready;
  // The empty name asks what the instance exports, in WIT's spelling (the host checks required functions at launch).
  if (fn === '')
    return { kind: 'returned', value: { exports: Object.keys(resident.instance).map((name) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)) } };
  const target = resident.instance[exportedName(fn)];
  if (typeof target !== 'function') return { kind: 'returned', value: { missingExport: fn } };
  try {
    return { kind: 'returned', value: { ok: await target(...args) } };
  } catch (error) {
    if (error instanceof GuestExit) return { kind: 'exit', code: error.code };
    // The guest's `err` arm: jco raises its value as is (a string) or wrapped with `payload`; a trap is an Error.
    if (!(error instanceof Error)) return { kind: 'returned', value: { err: String(error) } };
    if ('payload' in error) return { kind: 'returned', value: { err: String((error as { payload: unknown }).payload) } };
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return { kind: 'trap', message, ...memoryVerdict(resident.memories, resident.limit) };
  }
}

function start(job: GuestJob): void {
  if (job.resident) {
    residentReady = run(job).catch(
      (error: unknown): GuestOutcome => ({ kind: 'trap', message: error instanceof Error ? error.message : String(error), memoryExhausted: false }),
    );
    return;
  }
  run(job)
    .catch((error: unknown): GuestOutcome => ({ kind: 'trap', message: error instanceof Error ? error.message : String(error), memoryExhausted: false }))
    .then((outcome) => {
      closeGuestFiles();
      post({ type: 'done', outcome });
    });
}

/**
 * Only a head start: whatever fails here fails again, reported, when the job runs. A worker told
 * to load another component than it loaded before (a pooled host's anticipation was wrong) lets
 * the earlier glue go: only what its job runs stays.
 */
function preload({ bundleDir, entry, imports, id }: GuestPreload['preload']): void {
  const loading: Array<Promise<unknown>> = [preloadImports(imports)];
  if (bundleDir && entry) {
    const file = path.join(bundleDir, entry);
    for (const loaded of bundles.keys()) if (loaded !== file) bundles.delete(loaded);
    loading.push(loadBundle(file));
  }
  // Answered only when asked (`preloadInWorker`); a preload given at birth has nobody waiting.
  if (id !== undefined) void Promise.allSettled(loading).then(() => post({ type: 'preloaded', id }));
}

/** Tells a kept worker to make the instance its next call, `job`, will run (`prepare`). */
export interface GuestPrepare {
  type: 'prepare';
  job: GuestJob;
}

/** What a spare worker can load before its job arrives: the component it will most likely run. */
export interface GuestPreload {
  preload: {
    bundleDir?: string | undefined;
    entry?: string | undefined;
    imports: string[];
    /** Set by `preloadInWorker`: the worker answers `preloaded` with it. */
    id?: number | undefined;
  };
}

// A worker is either given its job at birth, or born early (while the host is still being told
// what to run, or while the previous call runs, so its start-up overlaps that) and given the job
// as its first message. A worker born early may be told what to load meanwhile.
if (parentPort) {
  const data = workerData as GuestJob | GuestPreload | undefined;
  if (data && 'role' in data) {
    start(data);
    parentPort.on('message', (message: GuestJob | GuestPrepare | { type: 'call'; fn: string; args: unknown[] }) => {
      if ('type' in message && message.type === 'call') {
        void callResident(message.fn, message.args).then((outcome) => post({ type: 'done', outcome }));
      } else if ('type' in message && message.type === 'prepare') prepare(message.job);
      else start(message as GuestJob);
    });
  } else {
    if (data?.preload) preload(data.preload);
    // A worker runs one job at a time, and — kept by the host after a clean return — may be
    // given the next call of the same component: a fresh instance, with its own imports, each time.
    // Before its first job it may be told what that job will load (`preloadInWorker`).
    parentPort.on('message', (message: GuestJob | GuestPreload | GuestPrepare) => {
      if ('preload' in message) preload(message.preload);
      else if ('type' in message) prepare(message.job);
      else start(message);
    });
  }
}
