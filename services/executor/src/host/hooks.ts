import { LogFile, type RecordRefused, type TraceSink } from '../records.js';
import { type GuestRunner, type ResidentGuest, type RunOutcome, guestSpecOf } from './guest-runner.js';
import type { HookStart } from './protocol.js';

/**
 * The capsule's hooks over one session (upstream's `HookRuntime`), WIT `murmur:hook/lifecycle@0.5.0`.
 *
 * - Every hook is one resident instance for the session, instantiated at launch in manifest order;
 *   a missing required export fails the launch there. A call that traps or overruns its deadline
 *   ends the instance, and the hook's next event instantiates it afresh (upstream keeps the
 *   trapped instance, whose later calls then fail too).
 * - An event goes to the hooks bound to it, or unbound (every session event; on-stage only to
 *   hooks bound to it). Blocking hooks run in manifest order, each to completion, before the
 *   runtime goes on; then the event joins each matching async hook's queue (1024 deep, one
 *   worker, in order; `drop` or `block` when full).
 * - Each event honours one output arm (on-stage `write-manifests`, on-inference `artifact`,
 *   on-compaction `replace-context`, on-task-end `reopen-task`); only blocking hooks' outputs are
 *   applied. Any other arm, and every failed call — a trap, an overrun, the guest's own `err` — is
 *   logged to `logs/hook-<name>.log` and kept as a `hook_dispatch_error` fault, written before the
 *   next `session_end` (upstream traces only bad arms and async failures; a blocking hook that traps
 *   is just as worth seeing).
 */

export const HOOK_QUEUE_DEPTH = 1024;
export const HOOK_DRAIN_BUDGET_MS = 15_000;

export type HookFunction =
  | 'on-stage'
  | 'on-session-start'
  | 'on-task-start'
  | 'on-inference'
  | 'on-tool-call'
  | 'on-shell'
  | 'on-compaction'
  | 'on-task-end'
  | 'on-session-end';

/** The exports a hook must have (upstream's list); task start and end are optional, on-stage is looked for only when bound. */
const REQUIRED_EXPORTS: HookFunction[] = ['on-session-start', 'on-inference', 'on-tool-call', 'on-shell', 'on-compaction', 'on-session-end'];

const HONORED_ARM: Partial<Record<HookFunction, HookOutput['tag']>> = {
  'on-stage': 'write-manifests',
  'on-inference': 'artifact',
  'on-compaction': 'replace-context',
  'on-task-end': 'reopen-task',
};

export interface HookMessage {
  role: string;
  content: string;
}

/** `hook-output`, as jco lifts the variant. */
export type HookOutput =
  | { tag: 'none' }
  | { tag: 'replace-context'; val: HookMessage[] }
  | { tag: 'write-manifests'; val: Array<{ binaryName: string; content: string }> }
  | { tag: 'artifact'; val: string }
  | { tag: 'reopen-task'; val: string };

/** What the blocking hooks of one event asked for (the first of each kind wins, in manifest order). */
export interface DispatchResult {
  replaceContext?: { hook: string; messages: HookMessage[] };
  reopen?: { hook: string; reason: string };
  writeManifests?: { hook: string; manifests: Array<{ binaryName: string; content: string }> };
  artifacts: Array<{ hook: string; payload: string }>;
  /** The first blocking hook's failure (fatal only for compaction and on-stage). */
  error?: { hook: string; message: string };
}

interface Fault {
  hook_name: string;
  event: string;
  arm: string;
}

interface QueuedCall {
  fn: HookFunction;
  payload: unknown;
}

/** One async hook's ordered queue and the worker that empties it. */
class AsyncQueue {
  private readonly jobs: QueuedCall[] = [];
  private readonly spaceWaiters: Array<() => void> = [];
  private wake: (() => void) | undefined;
  private closed = false;
  /** Set when the drain gave up: the call in flight, ended with its instance, is not this hook's fault. */
  abandoned = false;
  dropped = 0;
  readonly done: Promise<void>;

  constructor(private readonly run: (job: QueuedCall) => Promise<void>) {
    this.done = this.work();
  }

  /** Queued, or false when the queue is full (the caller decides: drop, or wait for `space()`). */
  offer(job: QueuedCall): boolean {
    if (this.closed) return true;
    if (this.jobs.length >= HOOK_QUEUE_DEPTH) return false;
    this.jobs.push(job);
    this.wake?.();
    return true;
  }

  space(): Promise<void> {
    return new Promise((resolve) => this.spaceWaiters.push(resolve));
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  /** The drain ran out: what is still queued is dropped unrun, and nothing more is taken. */
  abandon(): void {
    this.abandoned = true;
    this.jobs.length = 0;
    this.close();
  }

  private async work(): Promise<void> {
    for (;;) {
      const job = this.jobs.shift();
      if (job) {
        this.spaceWaiters.shift()?.();
        await this.run(job);
        continue;
      }
      if (this.closed) return;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
  }
}

interface LiveHook {
  spec: HookStart;
  guest: ResidentGuest;
  queue: AsyncQueue | undefined;
  /** `logs/hook-<name>.log`: created only when there is something to say. */
  log: LogFile;
}

export class HookLaunchError extends Error {}

export class HookRuntime {
  private readonly hooks: LiveHook[];
  private readonly faults: Fault[] = [];
  private drained = false;

  constructor(
    specs: readonly HookStart[],
    guests: GuestRunner,
    private readonly trace: TraceSink,
    sessionDir: string,
    /** Where a hook's log line that cannot be written goes (`AgentHost.recordRefused`). */
    refused: RecordRefused,
  ) {
    this.hooks = specs.map((spec) => {
      const guest = guests.resident(
        { role: 'hook', label: `hook '${spec.name}'`, ...guestSpecOf(spec.component), preopen: spec.preopen, env: spec.env, grant: `hook:${spec.name}` },
        spec.deadline_ms,
      );
      const live: LiveHook = { spec, guest, queue: undefined, log: new LogFile(sessionDir, `hook-${spec.name}.log`, undefined, { refused }) };
      if (spec.mode === 'async') live.queue = new AsyncQueue((job) => this.runAsync(live, job));
      return live;
    });
  }

  get isEmpty(): boolean {
    return this.hooks.length === 0;
  }

  /**
   * Instantiates every hook in manifest order and checks its exports; the first that cannot be
   * instantiated, or lacks a required function, is the launch's refusal.
   */
  async open(): Promise<void> {
    for (const hook of this.hooks) {
      const { name, version } = hook.spec;
      const outcome = await hook.guest.call('', []);
      if (outcome.kind !== 'returned') throw new HookLaunchError(`failed to instantiate hook ${name}@${version}: ${describeFailure(outcome)}`);
      const exports = (outcome.value as { exports?: string[] } | undefined)?.exports;
      if (!exports || exports.length === 0) {
        throw new HookLaunchError(
          `hook ${name}@${version} does not export murmur:hook/lifecycle@0.5.0; rebuild the hook against the current WIT (murmur:hook@0.5.0)`,
        );
      }
      const missing = REQUIRED_EXPORTS.find((fn) => !exports.includes(fn));
      if (missing) throw new HookLaunchError(`hook ${name}@${version} missing function murmur:hook/lifecycle@0.5.0#${missing}`);
    }
  }

  /**
   * One session event to every matching hook; resolves when the blocking ones have answered (and
   * `block` queues have room). The payload is built only when some hook listens: a session
   * without hooks pays nothing per event.
   */
  async dispatch(fn: Exclude<HookFunction, 'on-stage'>, payload: () => unknown): Promise<DispatchResult> {
    return this.dispatchTo(
      this.hooks.filter((hook) => matches(hook.spec, fn)),
      fn,
      payload,
    );
  }

  /** on-stage: blocking hooks bound to it, before the session starts. */
  async stage(shellAllow: string[]): Promise<DispatchResult> {
    const bound = this.hooks.filter((hook) => hook.spec.binding === 'on-stage' && hook.spec.mode === 'blocking');
    return this.dispatchTo(bound, 'on-stage', () => ({ shellAllow }));
  }

  /** `hook_dispatch_error` for every fault so far: called before each `session_end` is written. */
  flushFaults(): void {
    for (const fault of this.faults.splice(0)) this.trace.write('hook_dispatch_error', { ...fault });
  }

  /** After on-session-end: every async queue finishes within one shared 15 s budget, or is abandoned (`drain` / `timeout`). */
  async drain(budgetMs = HOOK_DRAIN_BUDGET_MS): Promise<void> {
    if (this.drained) return;
    this.drained = true;
    const deadline = Date.now() + budgetMs;
    for (const hook of this.hooks) {
      const queue = hook.queue;
      if (!queue) continue;
      queue.close();
      if (queue.dropped > 0) {
        hook.log.line(
          `hook '${hook.spec.name}' discarded ${queue.dropped} lifecycle event(s): its queue (${HOOK_QUEUE_DEPTH} deep) was full and the capsule manifest declares 'on_overflow: drop' for this hook`,
        );
      }
      const remaining = Math.max(0, deadline - Date.now());
      let timer: NodeJS.Timeout | undefined;
      const finished = await Promise.race([
        queue.done.then(() => true),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), remaining);
        }),
      ]);
      clearTimeout(timer);
      if (!finished) {
        queue.abandon();
        hook.guest.close();
        hook.log.line(
          `hook '${hook.spec.name}' did not finish its queued lifecycle calls within the ${budgetMs}ms session-end drain budget; the remaining calls were abandoned`,
        );
        this.faults.push({ hook_name: hook.spec.name, event: 'drain', arm: 'timeout' });
      }
    }
  }

  /** Ends every instance (after the drain). */
  close(): void {
    for (const hook of this.hooks) hook.guest.close();
  }

  private async dispatchTo(targets: LiveHook[], fn: HookFunction, build: () => unknown): Promise<DispatchResult> {
    const result: DispatchResult = { artifacts: [] };
    if (targets.length === 0) return result;
    const payload = build();
    for (const hook of targets) {
      if (hook.spec.mode !== 'blocking') continue;
      const { name } = hook.spec;
      const outcome = await hook.guest.call(fn, [payload]);
      const answer = this.readOutcome(hook, fn, outcome);
      if (answer.kind === 'failed') {
        result.error ??= { hook: name, message: answer.message };
        continue;
      }
      const output = answer.output;
      if (!output || output.tag === 'none') continue;
      if (HONORED_ARM[fn] !== output.tag) {
        this.unsupportedArm(hook, fn, output.tag);
        continue;
      }
      if (output.tag === 'replace-context') result.replaceContext ??= { hook: name, messages: output.val };
      else if (output.tag === 'reopen-task') result.reopen ??= { hook: name, reason: output.val };
      else if (output.tag === 'write-manifests') result.writeManifests ??= { hook: name, manifests: output.val };
      else if (output.tag === 'artifact') result.artifacts.push({ hook: name, payload: output.val });
    }
    for (const hook of targets) {
      const queue = hook.queue;
      if (!queue || this.drained) continue;
      const job = { fn, payload };
      if (queue.offer(job)) continue;
      if (hook.spec.on_overflow === 'block') {
        while (!queue.offer(job)) await queue.space();
      } else {
        queue.dropped += 1;
        this.faults.push({ hook_name: hook.spec.name, event: fn, arm: 'queue-overflow' });
      }
    }
    return result;
  }

  private async runAsync(hook: LiveHook, job: QueuedCall): Promise<void> {
    const outcome = await hook.guest.call(job.fn, [job.payload]);
    if (hook.queue?.abandoned) return;
    const answer = this.readOutcome(hook, job.fn, outcome);
    // An async hook's output is never applied; an arm its event does not honour is still a fault.
    if (answer.kind === 'answered' && answer.output && answer.output.tag !== 'none' && HONORED_ARM[job.fn] !== answer.output.tag) {
      this.unsupportedArm(hook, job.fn, answer.output.tag);
    }
  }

  /** A call's outcome as an output or a failure; a failure is logged and kept as a fault here. */
  private readOutcome(hook: LiveHook, fn: HookFunction, outcome: RunOutcome): { kind: 'answered'; output?: HookOutput } | { kind: 'failed'; message: string } {
    const { name } = hook.spec;
    const subject = `hook '${name}' ${fn}`;
    const fail = (message: string, arm: 'error' | 'timeout'): { kind: 'failed'; message: string } => {
      hook.log.line(message);
      this.faults.push({ hook_name: name, event: fn, arm });
      return { kind: 'failed', message };
    };
    if (outcome.kind === 'deadline') {
      return fail(
        `${subject} exceeded its ${hook.spec.deadline_ms / 1000}s execution deadline (capabilities.limits.deadline_seconds) and was interrupted`,
        'timeout',
      );
    }
    if (outcome.kind !== 'returned') return fail(`${subject} ${describeFailure(outcome)}`, 'error');
    const value = outcome.value as { ok?: unknown; err?: string; missingExport?: string } | undefined;
    if (value?.missingExport !== undefined) {
      // task start and end are optional exports: a hook without them is simply not told.
      if (fn === 'on-task-start' || fn === 'on-task-end') return { kind: 'answered' };
      return fail(`hook ${name}@${hook.spec.version} missing function murmur:hook/lifecycle@0.5.0#${fn}`, 'error');
    }
    if (value?.err !== undefined) return fail(value.err, 'error');
    const output = value?.ok as HookOutput | undefined;
    if (!output || typeof output !== 'object' || typeof output.tag !== 'string') return fail(`${subject} returned no hook-output`, 'error');
    return { kind: 'answered', output };
  }

  private unsupportedArm(hook: LiveHook, fn: HookFunction, arm: string): void {
    const name = hook.spec.name;
    hook.log.line(`hook '${name}' returned unsupported hook-output arm '${arm}' from '${fn}'; this event does not honor that arm, so the value was discarded`);
    // on-stage runs before the trace exists (upstream logs it only); ours is traced at the first flush like any other.
    this.faults.push({ hook_name: name, event: fn, arm });
  }
}

function matches(spec: HookStart, fn: HookFunction): boolean {
  if (fn === 'on-stage') return spec.binding === 'on-stage';
  return spec.binding === undefined || spec.binding === fn;
}

function describeFailure(outcome: Exclude<RunOutcome, { kind: 'returned' }>): string {
  switch (outcome.kind) {
    case 'deadline':
      return 'exceeded its execution deadline';
    case 'abandoned':
      return `was stopped: ${outcome.message}`;
    case 'exit':
      return `exited with code ${outcome.code}`;
    case 'link-error':
      return `could not be linked: ${outcome.message}`;
    case 'too-small':
      return `exceeded its configured resource limits: ${outcome.message}`;
    case 'trap':
      return outcome.memoryExhausted ? `exceeded its configured resource limits: ${outcome.limitMessage ?? outcome.message}` : `trapped: ${outcome.message}`;
  }
}
