import type { SessionCall, SessionEvent, SessionReply, WireError } from '@murmur/shared';
import type { RecordRefused, TraceSink } from '../records.js';
import type { GuestRunner } from './guest-runner.js';
import type { DriverComponentRef, HostComponent, HostRequest, HostTool } from './protocol.js';
import type { HarnessExit, ToolResultShape } from './subprocess.js';
import type { Task, TaskRegistry } from './task-registry.js';

/**
 * What the host's parts promise each other. The direction of use is one way: `main` makes a
 * `CapsuleHost` and, for an agent, an `AgentSession` over it; the session drives its task loop,
 * hooks and compaction through `AgentHost`, which the capsule host implements. Nothing here imports
 * the host or the session, so neither imports the other.
 */

export interface HostChannel {
  /** Asks the executor something and waits for its answer. */
  request(request: HostRequest): Promise<unknown>;
  /** A capsule's output, for its launcher; `carried` is told once it has left the host (the guest's output gate, `output-gate.ts`). */
  output(stream: 'stdout' | 'stderr', text: string, carried?: () => void): void;
  /** Hands one event of the session's A2A feed to the executor, for the doors. */
  event(event: SessionEvent): void;
  /** Hands one trace record, as its JSON line, to the executor: it writes `trace.jsonl`, and makes the session's spans from it. */
  trace(line: string): void;
  /** Answers the doors' calls (relayed by the executor) with `handler`: at once, or later (a blocking send waiting for its task to settle). */
  serve(handler: (call: SessionCall) => SessionReply | Promise<SessionReply>): void;
}

export interface SessionResult {
  status: 'ok' | 'failed' | 'trapped';
  exitCode: number;
  error?: WireError;
}

/** A shell binary's run as a tool, as the `on-shell` hook is told it. */
export interface ShellRun {
  /** The binary as it was resolved on PATH (or the bare name). */
  binary: string;
  /** The command the model gave (the script for an interpreter, else the arguments). */
  command: string;
  exitCode: number;
  stdout: string;
  stderr: string;
  durationMs: number;
}

/** One tool call from the agent loop, as the model will see it: the text, and whether it failed. */
export interface ToolDispatch {
  text: string;
  isError: boolean;
  kind: 'tool' | 'skill';
  durationMs: number;
  /** Present when the tool was a shell binary that ran (whatever its exit code). */
  shell?: ShellRun;
}

/** A request of a guest's that did not get an answer: refused by the policy, or failed on its way (`connection refused`). */
export interface EgressFailure {
  url: string;
  /** The WASI error code the guest was given (`HTTP-request-denied` for the policy's refusal). */
  code: string;
  reason: string;
}

/**
 * What one driver call gave: its tool-result, or why the call itself failed (trap, deadline, link).
 * `egressFailure` is the driver's last request of the call, when it got no answer: a driver
 * reports its own failure with whatever its fetch told it (in a JavaScript driver, a bare
 * `NetworkError`), where the runtime knows which URL it was and why (`egress-failures.ts`).
 */
export type DriverCall =
  | { ok: true; result: ToolResultShape; streamedText: boolean; egressFailure?: EgressFailure }
  /** `overran`: the call's limit that ended it (its deadline, its memory), which says what to change. */
  | { ok: false; error: string; overran?: 'deadline' | 'memory' };

/** Counts kept across the whole session: the last `session_end` carries them. */
export interface SessionTotals {
  turns: number;
  inputTokens: number;
  outputTokens: number;
  toolCalls: number;
  shellCalls: number;
}

/**
 * Adds a turn's token counts to the session's. Each count is the provider's to report (a safe
 * integer, or estimated), so their sum is held at the largest safe integer: past it, two reports
 * of 2^53 - 1 summed to a total the trace stated wrongly.
 */
export function countTokens(totals: SessionTotals, input: number, output: number): void {
  totals.inputTokens = Math.min(Number.MAX_SAFE_INTEGER, totals.inputTokens + input);
  totals.outputTokens = Math.min(Number.MAX_SAFE_INTEGER, totals.outputTokens + output);
}

/** Who a `session_start` says runs, and under which prompt. */
export interface SessionStartRun {
  model: string | null;
  maxTurns: number | null;
  toolsDeclared: string[];
  promptSource: 'manifest' | 'cli' | 'none';
  promptSha256: string | null;
  /** The prompt itself: capsule content, so the trace holds it only where the manifest lets it hold tool output. */
  prompt: string | null;
}

export type Fallible<T> = { ok: true; value: T } | { ok: false; error: string };

/** The capsule host as an agent's session uses it. */
export interface AgentHost {
  readonly trace: TraceSink;
  /** Where a log line the host cannot write goes (a disk the guest filled): dropped, and the launcher told once per file. */
  readonly recordRefused: RecordRefused;
  /** Says a line of the runtime's on the capsule's stderr, which reaches whoever launched the session. */
  notice(line: string): void;
  readonly totals: SessionTotals;
  readonly tools: ReadonlyMap<string, HostTool>;
  readonly breach: { message: string } | undefined;
  onBreach: () => void;
  breachError(): WireError | undefined;
  /** The session is being stopped from outside: `stop` is told why. */
  onStop(stop: (reason: string) => void): void;
  /** Told before every `session_end` is written (the hooks' faults go first). */
  beforeSessionEnd: () => void;
  /** The agent turn the session is in (what a hook's completion is traced under). */
  readonly currentTurn: number;
  /** A hook's `run-inference`, answered by whoever holds the driver. */
  hookInference: ((grant: string, request: unknown) => Promise<Fallible<unknown>>) | undefined;
  sessionStartFields(run: SessionStartRun): Record<string, unknown>;
  writeSessionEnd(exitStatus: 'ok' | 'failed' | 'max_turns_reached', extra?: Record<string, unknown>): void;
  enterTask(task: Task, registry: TaskRegistry, inputTimeoutMs: number | undefined, answerable: boolean): void;
  leaveTask(): void;
  setTurn(turn: number): void;
  /** `GuestRunner.keepWorkersWarm`: `othersToCall` when the session may call components other than `likely` (WASM tools). */
  keepWorkersWarm(likely?: HostComponent, options?: { othersToCall: boolean }): void;
  callDriver(driver: DriverComponentRef, env: Array<[string, string]>, data: string, options?: { silent?: boolean }): Promise<DriverCall>;
  /** Has the driver's next instance made now, while the session runs the tools a turn asked for (`GuestRunner.prepareNext`). */
  prepareDriver(driver: DriverComponentRef, env: Array<[string, string]>): void;
  dispatchForAgent(name: string, input: { data: string }): Promise<ToolDispatch>;
  /**
   * A harness CLI run as the capsule's subprocess: the environment a shell tool gets, under `env`
   * (the harness's granted variables, its home and settings).
   */
  runHarness(
    binary: string,
    args: string[],
    env: Record<string, string>,
    run: { input: string; deadlineMs: number; onLine: (line: string) => void; signal: AbortSignal },
  ): Promise<HarnessExit>;
  /** Where the session's guests run (hooks open resident instances here). */
  readonly guests: GuestRunner;
  /** Kills every subprocess running now, with what each forked: its task was canceled. */
  killSubprocesses(reason: string): void;
}
