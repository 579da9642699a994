import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { type WireError, capabilityCategories } from '@murmur/shared';
import { oneLine } from '@murmur/shared/one-line';
import { subprocessEnvironment } from '@murmur/shared/environment';
import { LogFile, type RecordRefused, type TraceSink } from '../records.js';
import { ChannelTrace } from './channel-trace.js';
import type {
  AgentHost,
  DriverCall,
  EgressFailure,
  Fallible,
  HostChannel,
  SessionResult,
  SessionStartRun,
  SessionTotals,
  ShellRun,
  ToolDispatch,
} from './contracts.js';
import { LastEgressFailure } from './egress-failures.js';
import { EscapeeSweep } from './escapees.js';
import { type CallRecord, GuestRunner, type GuestSpec, type RunOutcome, guestSpecOf } from './guest-runner.js';
import { ResponseBodies } from './response-bodies.js';
import type { CeilingMessage, DriverComponentRef, EgressResult, HostComponent, HostTool, HttpCheckVerdict, HttpRequest, StartMessage } from './protocol.js';
import { UPLOAD_PIECE_CHARS, uploadPieces } from './request-body.js';
import type { Task, TaskRegistry } from './task-registry.js';
import { DELEGATE_TOOL } from './tool-inventory.js';
import {
  type HarnessExit,
  type SubprocessContext,
  type ToolResultShape,
  capsuleHome,
  runHarness,
  runNativeTool,
  runShell,
  shellArguments,
  shellToolDescription,
} from './subprocess.js';

/**
 * The capsule host: one per session, inside the session's sandbox. It runs the capsule's
 * component (through its `GuestRunner`), answers the guests' host calls (tools, shell, artifact
 * manager, outgoing HTTP and messages — the last three relayed to the executor, the only way out),
 * and writes the session's trace. An agent's task loop (`AgentSession`) drives it through the
 * `AgentHost` surface; the host itself knows nothing of turns beyond the number it is told.
 */

/** The A2A task a guest's chunks and input requests belong to, while one runs. */
interface TaskContext {
  task: Task;
  registry: TaskRegistry;
  inputTimeoutMs: number | undefined;
  /** Whether anyone can answer an input request: only a task that came over A2A (upstream's rule). */
  answerable: boolean;
  /** Set when the driver emitted a text chunk during the current call. */
  streamedText: boolean;
}

function ok<T>(value: T): Fallible<T> {
  return { ok: true, value };
}

function refused(error: string): Fallible<never> {
  return { ok: false, error };
}

export class CapsuleHost implements AgentHost {
  readonly trace: TraceSink;
  private readonly sessionLog: LogFile;
  readonly recordRefused: RecordRefused;
  readonly tools = new Map<string, HostTool>();
  private readonly allowlist: Set<string>;
  readonly totals: SessionTotals = { turns: 0, inputTokens: 0, outputTokens: 0, toolCalls: 0, shellCalls: 0 };
  private readonly startedAt = Date.now();
  /** The agent turn tool and shell events belong to (0 for a script capsule). */
  private turn = 0;
  private taskContext: TaskContext | undefined;
  /** The guest instances waiting for an answer to their `request-input`, and how each wait is let go should the instance end first. */
  private readonly askingInput = new Map<number, () => void>();
  readonly guests: GuestRunner;
  /** Relayed response bodies, as they arrive from the executor and until the guests have read them. */
  private readonly responseBodies: ResponseBodies;
  private nextUpload = 1;
  private stopSession: (reason: string) => void = () => {};
  /** One completion for a hook's `run-inference`, answered by the agent session that owns the driver. */
  hookInference: ((grant: string, request: unknown) => Promise<Fallible<unknown>>) | undefined;
  /** Only with a pid namespace of the host's own, where every process is the session's. */
  private readonly escapees: EscapeeSweep | undefined;

  constructor(
    private readonly start: StartMessage,
    private readonly channel: HostChannel,
    /** A guest worker started before `start` arrived, for the capsule's own instance. */
    prewarmed?: Worker,
  ) {
    this.trace = new ChannelTrace(start.session_id, (line) => channel.trace(line));
    // Said on the capsule's stderr as the host's other notices are: in-process and on a stack alike
    // it reaches whoever launched the session, which the session's own logs, on the full disk, cannot.
    this.recordRefused = (file, error) =>
      this.notice(
        `[capsule-runtime] logs/${path.basename(file)} could not be written (${(error as NodeJS.ErrnoException).code ?? error.message}${(error as NodeJS.ErrnoException).code === 'ENOSPC' ? ': the disk that holds the workdir is full' : ''}); its later lines are dropped`,
      );
    // Held for the host's life, which is the session's: every line of the guest's output is one.
    this.sessionLog = new LogFile(start.session_dir, 'session.log', undefined, { held: true, refused: this.recordRefused });
    this.responseBodies = new ResponseBodies(channel);
    for (const tool of start.tools) this.tools.set(tool.name, tool);
    this.allowlist = new Set(start.allowlist);
    // Said in the session's log, beside the output of the commands that left them, and to the launcher.
    this.escapees =
      start.pid_namespace === true
        ? new EscapeeSweep((pids) => {
            const line = escapeesEnded(pids);
            this.sessionLog.line(line);
            channel.output('stderr', `${line}\n`);
          })
        : undefined;
    this.guests = new GuestRunner({
      memoryLimitBytes: start.policy.limits.memory_bytes,
      tableElementsLimit: start.policy.limits.table_elements,
      instancesLimit: start.policy.limits.instances,
      deadlineMs: start.policy.limits.deadline_seconds * 1000,
      sessionLog: this.sessionLog,
      capsuleOutput: (stream, text, carried) => channel.output(stream, text, carried),
      answer: (op, payload, grant, instance, record) => this.answer(op, payload, grant, instance, record),
      instanceEnded: (instance) => {
        this.responseBodies.releaseOwnedBy(instance);
        const abandon = this.askingInput.get(instance);
        this.askingInput.delete(instance);
        abandon?.();
      },
      prewarmed,
    });
  }

  /** A line of the runtime's own for the launcher, on the capsule's stderr: kept to its one line, since it may quote strangers' text. */
  notice(line: string): void {
    this.channel.output('stderr', `${oneLine(line)}\n`);
  }

  /** Whoever stops the session (an agent's task loop) is told here. */
  onStop(stop: (reason: string) => void): void {
    this.stopSession = stop;
  }

  /** Aborted (and replaced) when a task is canceled: the subprocesses working for it are killed. */
  private subprocessCancel = new AbortController();

  /** Kills every subprocess running now (a shell command, a native tool, a harness run), with what each forked. */
  killSubprocesses(reason: string): void {
    const canceled = this.subprocessCancel;
    this.subprocessCancel = new AbortController();
    canceled.abort(reason);
  }

  private subprocessContext(): SubprocessContext {
    const sandbox = this.start.sandbox;
    const unsealed = this.start.unsealed_tools;
    const counters = () => this.channel.request({ op: 'tool-counters' }) as Promise<{ oom_kills: number; pids_refusals: number }>;
    return {
      canceled: this.subprocessCancel.signal,
      escapees: this.escapees,
      policy: this.start.policy,
      accessibleWorkdir: this.start.accessible_workdir,
      baseEnv: this.start.subprocess_env,
      identityEnv: this.start.guest_env.filter(([name]) => name.startsWith('MURMUR_')),
      deadlineMs: this.start.policy.limits.deadline_seconds * 1000,
      ...(sandbox
        ? {
            confine: { helper: sandbox.helper, cgroupFds: sandbox.tool_cgroup_fds, executables: sandbox.tool_executables },
            ...(sandbox.tool_cgroup_fds.length > 0 ? { counters } : {}),
          }
        : {}),
      ...(unsealed
        ? {
            unsealed: { cgroupFds: unsealed.cgroup_fds, ...(unsealed.prlimit ? { prlimit: unsealed.prlimit } : {}) },
            ...(unsealed.cgroup_fds.length > 0 ? { counters } : {}),
          }
        : {}),
      breached: () => this.breach?.message,
    };
  }

  /** A ceiling the executor saw crossed (the workdir's size): no subprocess starts after it, and the session ends. */
  breach: CeilingMessage | undefined;
  /** Told once, when a ceiling is crossed, so a waiting session can end at once. */
  onBreach: () => void = () => {};

  ceilingCrossed(message: CeilingMessage): void {
    if (this.breach) return;
    this.breach = message;
    this.channel.output('stderr', `[capsule-runtime] ${message.message}\n`);
    this.onBreach();
  }

  /** The error a session ends with once a ceiling was crossed. */
  breachError(): WireError | undefined {
    const breach = this.breach;
    return breach ? { code: breach.code, message: breach.message, hint: breach.hint, path: `capabilities.resources.${breach.limit}` } : undefined;
  }

  /** A script capsule's session: its component's `run`, once (a failure says the last request that got no answer, if one did). */
  async run(): Promise<SessionResult> {
    this.trace.write(
      'session_start',
      this.sessionStartFields({ model: null, maxTurns: null, toolsDeclared: [...this.allowlist], promptSource: 'none', promptSha256: null, prompt: null }),
    );
    const component = this.start.component;
    if (!component)
      return {
        status: 'failed',
        exitCode: 1,
        error: { code: 'E-RUN-004', message: `${this.start.capsule_name}@${this.start.capsule_version} has no component and no inference: nothing to run` },
      };
    const record: CallRecord = { taskless: false, egress: new LastEgressFailure() };
    const outcome = await this.guests.run({
      role: 'capsule',
      label: `${this.start.capsule_name}@${this.start.capsule_version}`,
      ...guestSpecOf(component),
      preopen: this.start.preopen,
      env: this.start.guest_env,
      grant: 'capsule',
      record,
    });
    const breached = this.breachError();
    const result: SessionResult = breached ? { status: 'failed', exitCode: 1, error: breached } : withEgressClue(this.classify(outcome), record.egress.failure);
    this.writeSessionEnd(result.status === 'ok' ? 'ok' : 'failed', breached ? { error: breached } : {});
    return result;
  }

  /** The executor asked the session to stop: tasks still waiting end now, saying why. */
  stop(reason: string): void {
    this.stopSession(reason);
  }

  /** `session_start`'s fields: who runs, with which grants, under which prompt. */
  sessionStartFields(run: SessionStartRun): Record<string, unknown> {
    const policy = this.start.policy;
    return {
      capsule_name: this.start.capsule_name,
      capsule_version: this.start.capsule_version,
      model: run.model,
      max_turns: run.maxTurns,
      capabilities: capabilityCategories(policy),
      tools_declared: run.toolsDeclared,
      containment_declared: policy.containment,
      containment_achieved: this.start.effective_grants.achieved_containment ?? null,
      workdir_exec: policy.workdir_exec,
      system_prompt_source: run.promptSource,
      system_prompt_sha256: run.promptSha256,
      ...(this.start.trace_include_tool_output && run.prompt !== null ? { system_prompt: run.prompt } : {}),
      ...(this.start.spawned_by ? { spawned_by: this.start.spawned_by } : {}),
      effective_grants: this.start.effective_grants,
    };
  }

  beforeSessionEnd: () => void = () => {};

  get currentTurn(): number {
    return this.turn;
  }

  /** `session_end` with the session's totals so far (the last one written is the whole session's). */
  writeSessionEnd(exitStatus: 'ok' | 'failed' | 'max_turns_reached', extra: Record<string, unknown> = {}): void {
    this.beforeSessionEnd();
    this.trace.write('session_end', {
      total_turns: this.totals.turns,
      total_input_tokens: this.totals.inputTokens,
      total_output_tokens: this.totals.outputTokens,
      total_tool_calls: this.totals.toolCalls,
      total_shell_calls: this.totals.shellCalls,
      duration_ms: Date.now() - this.startedAt,
      exit_status: exitStatus,
      ...extra,
    });
  }

  /** Chunks and input requests from guests go to this task until it is cleared. */
  enterTask(task: Task, registry: TaskRegistry, inputTimeoutMs: number | undefined, answerable: boolean): void {
    this.taskContext = { task, registry, inputTimeoutMs, answerable, streamedText: false };
  }

  leaveTask(): void {
    this.taskContext = undefined;
  }

  setTurn(turn: number): void {
    this.turn = turn;
  }

  keepWorkersWarm(likely?: HostComponent, options?: { othersToCall: boolean }): void {
    this.guests.keepWorkersWarm(likely, options);
  }

  prepareDriver(driver: DriverComponentRef, env: Array<[string, string]>): void {
    this.guests.prepareNext(driverSpec(driver, env));
  }

  /** One call of the driver component with the turn's wire request. */
  async callDriver(driver: DriverComponentRef, env: Array<[string, string]>, data: string, options: { silent?: boolean } = {}): Promise<DriverCall> {
    // A silent call (a hook's completion) streams nothing to the task and asks nobody anything.
    const context = options.silent ? undefined : this.taskContext;
    if (context) context.streamedText = false;
    const record: CallRecord = { taskless: options.silent === true, egress: new LastEgressFailure() };
    const outcome = await this.guests.run({ ...driverSpec(driver, env), record, toolInput: { data } });
    const egressFailure = record.egress.failure;
    const result = this.toolOutcome(`driver '${driver.name}'`, outcome);
    if (!result.ok) {
      const memory = outcome.kind === 'too-small' || (outcome.kind === 'trap' && outcome.memoryExhausted);
      return { ...result, ...(outcome.kind === 'deadline' ? { overran: 'deadline' as const } : memory ? { overran: 'memory' as const } : {}) };
    }
    return {
      ok: true,
      result: result.value,
      streamedText: context?.streamedText ?? false,
      ...(egressFailure ? { egressFailure } : {}),
    };
  }

  private classify(outcome: RunOutcome): SessionResult {
    const limits = this.start.policy.limits;
    switch (outcome.kind) {
      case 'returned':
        return { status: 'ok', exitCode: 0 };
      case 'exit':
        return outcome.code === 0
          ? { status: 'ok', exitCode: 0 }
          : { status: 'failed', exitCode: outcome.code, error: { code: 'E-RUN-001', message: `capsule exited with code ${outcome.code}` } };
      case 'deadline':
        return {
          status: 'trapped',
          exitCode: 1,
          error: {
            code: 'E-RUN-001',
            message: `capsule execution exceeded its ${limits.deadline_seconds}s deadline and was interrupted`,
            hint: 'the capsule ran longer than capabilities.limits.deadline_seconds — check for an unbounded loop, or raise that limit in murmur.yaml if the work genuinely needs longer',
            path: 'capabilities.limits.deadline_seconds',
          },
        };
      case 'too-small': {
        const limit = outcome.limit ?? 'memory_bytes';
        const needs = {
          memory_bytes: 'the memory the component starts with',
          table_elements: 'the table the component starts with',
          instances: 'the core instances the component makes',
        }[limit];
        return {
          status: 'trapped',
          exitCode: 1,
          error: {
            code: 'E-RUN-001',
            message: `capsule execution exceeded its configured resource limits: ${outcome.message} (capabilities.limits.${limit} = ${limits[limit]})`,
            hint: `raise capabilities.limits.${limit} in murmur.yaml to at least ${needs}`,
            path: `capabilities.limits.${limit}`,
          },
        };
      }
      case 'abandoned':
        // A script capsule has no task to cancel; only a stopping session abandons its guest.
        return { status: 'failed', exitCode: 1, error: { code: 'E-SES-005', message: `the capsule was stopped: ${outcome.message}` } };
      case 'link-error':
        return {
          status: 'failed',
          exitCode: 1,
          error: {
            code: 'E-RUN-002',
            message: `capsule requires an interface the runtime has not linked; check that the required capability is declared in murmur.yaml${outcome.missing ? ` (missing interface: ${outcome.missing})` : ` (${outcome.message})`}`,
          },
        };
      case 'trap':
        if (outcome.memoryExhausted) {
          return {
            status: 'trapped',
            exitCode: 1,
            error: {
              code: 'E-RUN-001',
              message: `capsule execution exceeded its configured resource limits: ${outcome.limitMessage ?? `memory reached capabilities.limits.memory_bytes (${limits.memory_bytes} bytes) (${outcome.message})`}`,
              hint: 'the capsule requested more memory than capabilities.limits.memory_bytes allows — check for a runaway allocation, or raise the limit in murmur.yaml',
              path: 'capabilities.limits.memory_bytes',
            },
          };
        }
        return {
          status: 'trapped',
          exitCode: 1,
          error: {
            code: 'E-RUN-001',
            message: `capsule execution trapped: ${outcome.message}`,
            // The capsule's own code failed (an unreachable, a stack overflow, a failed assertion):
            // what it printed before is the clue, and it is kept.
            hint: "the capsule's own code stopped it: what it wrote to stdout and stderr before is in the session's logs/session.log (mur trace show names the session)",
          },
        };
    }
  }

  /**
   * `request` as the executor is sent it: a body larger than one message goes ahead in pieces
   * (`request-body.ts`), each sent once the executor took the one before. A piece the executor
   * refuses ends the upload; the request still goes, naming it, and the executor refuses it with
   * the reason and traces it, as every refused request is.
   */
  private async uploaded(request: HttpRequest): Promise<HttpRequest> {
    const body = request.body_base64;
    if (body === undefined || body.length <= UPLOAD_PIECE_CHARS) return request;
    const upload = this.nextUpload++;
    try {
      for (const piece of uploadPieces(body)) await this.channel.request({ op: 'http-upload', upload, chunk_base64: piece });
    } catch {
      // The executor keeps why; the request below learns it.
    }
    const { body_base64: _sent, ...head } = request;
    return { ...head, upload };
  }

  /** A guest's host call, answered on the main thread. */
  private async answer(op: string, payload: unknown, grant: string, instance: number, record?: CallRecord): Promise<unknown> {
    // The task this call speaks for: none for a hook's completion, whatever task runs meanwhile.
    const taskContext = record?.taskless ? undefined : this.taskContext;
    switch (op) {
      case 'http': {
        const request = await this.uploaded(payload as HttpRequest);
        let result: EgressResult;
        try {
          result = (await this.channel.request({ op: 'http', request })) as EgressResult;
        } catch (error) {
          // Refused before it left (a URL or headers too large to send), or by the executor: an error code, not a trap.
          // A body uploaded for it is let go, rather than held by the executor until the session ends.
          if (request.upload !== undefined) void this.channel.request({ op: 'http-upload-release', upload: request.upload }).catch(() => {});
          const reason = error instanceof Error ? error.message : String(error);
          record?.egress.failed(request.url, 'internal-error', reason);
          return { outcome: 'denied', code: 'internal-error', reason } satisfies EgressResult;
        }
        if (result.outcome === 'denied') record?.egress.failed(request.url, result.code, result.reason);
        else if (result.response.status >= 300 && result.response.status < 400 && result.response.status !== 304)
          record?.egress.redirected(request.url, result.response.status, result.response.headers.find(([name]) => name === 'location')?.[1]);
        else record?.egress.answered();
        // The body starts coming in now, while the guest reads the head.
        if (result.outcome === 'response') this.responseBodies.open(result.response.body, instance, request.url);
        return result;
      }
      case 'http-body-read': {
        const { body, max, wait } = payload as { body: number; max: number; wait: boolean };
        const url = this.responseBodies.urlOf(body);
        const read = await this.responseBodies.read(body, max, wait);
        // A body that broke off (too large, silent too long, cut) is the call's failure to say, as a refused request is.
        if ('error' in read && url !== undefined) record?.egress.failed(url, read.error.code, read.error.reason);
        return read;
      }
      case 'http-body-wait': {
        const { bodies, timeout_ms } = payload as { bodies: number[]; timeout_ms?: number };
        return this.responseBodies.until(bodies, timeout_ms);
      }
      case 'http-body-release':
        this.responseBodies.release((payload as { body: number }).body);
        return null;
      case 'http-check': {
        const request = payload as { url: string; grant: string };
        const verdict = (await this.channel.request({ op: 'http-check', request })) as HttpCheckVerdict;
        if (!verdict.allowed) record?.egress.failed(request.url, verdict.code, verdict.reason);
        return verdict;
      }
      case 'invoke': {
        const { name, input } = payload as { name: string; input: { data?: string; logPath?: string } };
        return this.invoke(name, input);
      }
      case 'shell': {
        const { binary, args, env } = payload as { binary: string; args: string[]; env: Array<[string, string]> };
        return this.shell(binary, args, env);
      }
      case 'send': {
        const { peer_url, message } = payload as { peer_url: string; message: { messageId: string; contextId?: string; text: string } };
        return this.send(peer_url, message);
      }
      case 'manage-list':
        return this.listArtifacts();
      case 'manage-describe':
        return this.describe((payload as { name: string }).name);
      case 'manage-pull':
        return this.pull(payload as { name: string; version: string });
      case 'manage-diagnostics':
        return ok({
          capsuleId: this.start.session_id,
          installed: this.listArtifacts(),
          capabilities: 'artifact-manager/search and remove are not implemented',
        });
      case 'manage-search':
        return refused(`not implemented (query: ${(payload as { query: string }).query})`);
      case 'manage-remove':
        return refused(`not implemented (name: ${(payload as { name: string }).name})`);
      case 'chunk': {
        const { kind, text } = payload as { kind: 'text' | 'thinking'; text: string };
        if (!taskContext) return null;
        if (kind === 'text') taskContext.streamedText = true;
        taskContext.registry.chunk(taskContext.task, kind, text);
        return null;
      }
      case 'run-inference': {
        if (!this.hookInference || !grant.startsWith('hook:'))
          return refused('inference driver is not configured; add inference.driver.artifact to murmur.yaml');
        return this.hookInference(grant, payload);
      }
      case 'request-input': {
        if (!taskContext?.answerable) throw new Error('request-input is not available outside an A2A task context');
        const { registry, task } = taskContext;
        const asker = grant.includes(':') ? `${grant.slice(0, grant.indexOf(':'))} '${grant.slice(grant.indexOf(':') + 1)}'` : `the ${grant}`;
        this.askingInput.set(instance, () => registry.abandonInput(task, `${asker} ended before its request for input was answered`));
        try {
          return await registry.requestInput(task, (payload as { prompt: string }).prompt, taskContext.inputTimeoutMs);
        } finally {
          this.askingInput.delete(instance);
        }
      }
      default:
        throw new Error(`unknown host call '${op}' from ${grant}`);
    }
  }

  /** `murmur:tool-registry/invoke` from a script capsule: only what its manifest declares. */
  private async invoke(name: string, input: { data?: string; logPath?: string }): Promise<Fallible<ToolResultShape>> {
    if (!this.allowlist.has(name) && !this.start.policy.shell_allow.includes(name)) {
      return refused(`tool '${name}' is not declared in manifest allowlist`);
    }
    return (await this.dispatch(name, input)).result;
  }

  /**
   * A tool call from the agent loop. Whatever goes wrong becomes the tool's result, which the
   * model reads and the session survives: an unknown tool is an error result, not a failure.
   */
  async dispatchForAgent(name: string, input: { data: string }): Promise<ToolDispatch> {
    const started = Date.now();
    if (name === DELEGATE_TOOL.name && this.start.policy.spawn_allow.length > 0) return this.delegateTask(input);
    if (!this.allowlist.has(name) && !this.start.policy.shell_allow.includes(name)) {
      const text = `tool '${name}' is not declared in manifest allowlist`;
      this.recordToolCall(name, input, { ok: false, error: text }, 0, 'tool');
      return { text, isError: true, kind: 'tool', durationMs: 0 };
    }
    const { result, kind, shell } = await this.dispatch(name, input);
    const durationMs = Date.now() - started;
    const ran = { kind, durationMs, ...(shell ? { shell } : {}) };
    if (!result.ok) return { text: result.error, isError: true, ...ran };
    return { text: result.value.data ?? result.value.summary ?? 'tool returned no data', isError: result.value.status !== 'passed', ...ran };
  }

  runHarness(
    binary: string,
    args: string[],
    env: Record<string, string>,
    run: { input: string; deadlineMs: number; onLine: (line: string) => void; signal: AbortSignal },
  ): Promise<HarnessExit> {
    const context = this.subprocessContext();
    // A shell tool's environment (credentials stripped), under what the caller adds.
    const base = subprocessEnvironment(context.policy, context.baseEnv, context.identityEnv, capsuleHome(context.accessibleWorkdir));
    return runHarness(context, binary, args, { ...base, ...env }, run);
  }

  /**
   * `delegate-task`: the executor asks roost and has a watcher launch the child with the task;
   * then the calling task awaits the child's completion, whose text is the tool's result. Every
   * refusal is an error result the model reads.
   */
  private async delegateTask(input: { data: string }): Promise<ToolDispatch> {
    const started = Date.now();
    const fail = (text: string): ToolDispatch => {
      this.recordToolCall(DELEGATE_TOOL.name, input, { ok: false, error: text }, Date.now() - started, 'tool');
      return { text, isError: true, kind: 'tool', durationMs: Date.now() - started };
    };
    let request: { capsule: string; version: string; task: string };
    try {
      const parsed = JSON.parse(input.data) as Record<string, unknown>;
      if (typeof parsed.capsule !== 'string' || typeof parsed.version !== 'string' || typeof parsed.task !== 'string')
        throw new Error('expected {"capsule", "version", "task"} strings');
      request = { capsule: parsed.capsule, version: parsed.version, task: parsed.task };
    } catch (error) {
      return fail(`delegate-task input is not valid: ${(error as Error).message}`);
    }
    const context = this.taskContext;
    if (!context) return fail('delegate-task is available only inside a task');
    const launchAnswered = context.registry.beginDelegationLaunch();
    let launched: { ok: true; value: { delegation_id: string; session_id: string; workdir: string } } | { ok: false; error: string };
    try {
      launched = (await this.channel.request({ op: 'delegate', request: { ...request, context_id: context.task.contextId } })) as typeof launched;
    } catch (error) {
      launchAnswered();
      return fail(`the delegation of ${request.capsule}@${request.version} could not be asked for: ${(error as Error).message}`);
    }
    if (!launched.ok) {
      launchAnswered();
      return fail(launched.error);
    }
    this.trace.write('delegation_started', {
      turn: this.turn,
      task_id: context.task.id,
      delegation_id: launched.value.delegation_id,
      capsule: `${request.capsule}@${request.version}`,
      child_session_id: launched.value.session_id,
    });
    let text: string;
    try {
      const completion = context.registry.awaitDelegation(context.task, launched.value.delegation_id, {
        sessionId: launched.value.session_id,
        workdir: launched.value.workdir,
      });
      // Awaited now: a completion that came early, held until this, finds its task.
      launchAnswered();
      text = await completion;
    } catch (error) {
      return fail(`delegation ${launched.value.delegation_id} ended without a completion: ${(error as Error).message}`);
    }
    this.trace.write('delegation_completed', {
      turn: this.turn,
      task_id: context.task.id,
      delegation_id: launched.value.delegation_id,
      child_session_id: launched.value.session_id,
      origin: 'completion',
    });
    const result: Fallible<ToolResultShape> = ok({
      status: 'passed',
      summary: `delegation ${launched.value.delegation_id} completed`,
      data: text,
      dataPath: undefined,
      truncated: false,
      metadata: [],
    });
    this.recordToolCall(DELEGATE_TOOL.name, input, result, Date.now() - started, 'tool');
    return { text, isError: false, kind: 'tool', durationMs: Date.now() - started };
  }

  /** Upstream's dispatch order: native binary, shell binary, skill, WASM tool. */
  private async dispatch(
    name: string,
    input: { data?: string; logPath?: string },
  ): Promise<{ result: Fallible<ToolResultShape>; kind: 'tool' | 'skill'; shell?: ShellRun }> {
    const started = Date.now();
    const tool = this.tools.get(name);
    let result: Fallible<ToolResultShape>;
    let kind: 'tool' | 'skill' = 'tool';
    let shell: ShellRun | undefined;
    let shellRecord: Record<string, unknown> | undefined;
    if (tool?.kind === 'native' && tool.path) {
      // One that cannot start (gone, a ceiling already crossed, its task canceled) is the tool's
      // error, which the model reads, as a shell binary's is; never the task's failure.
      try {
        result = ok(await runNativeTool(this.subprocessContext(), name, tool.path, input));
      } catch (error) {
        result = refused(`native tool '${name}' could not run: ${error instanceof Error ? error.message : String(error)}`);
      }
    } else if (this.start.policy.shell_allow.includes(name)) {
      const ran = await this.shellTool(name, input);
      result = ran.result;
      shell = ran.run;
      shellRecord = ran.record;
    } else if (tool?.kind === 'skill' && tool.path) {
      kind = 'skill';
      try {
        result = ok({
          status: 'passed',
          summary: `Skill ${name} guidance`,
          data: readFileSync(tool.path, 'utf8'),
          dataPath: undefined,
          truncated: false,
          metadata: [],
        });
      } catch (error) {
        result = refused(`failed to read skill '${name}': ${(error as Error).message}`);
      }
    } else if (tool?.kind === 'wasm' && tool.component) {
      const outcome = await this.guests.run({
        role: 'tool',
        label: `tool '${name}'`,
        ...guestSpecOf(tool.component),
        preopen: tool.preopen,
        env: this.start.guest_env,
        grant: `tool:${name}`,
        toolInput: input,
      });
      result = this.toolOutcome(`tool '${name}'`, outcome);
    } else {
      result = refused(`tool '${name}' is not available in this session`);
    }
    this.recordToolCall(name, input, result, Date.now() - started, kind);
    // A shell tool's `shell` record follows its `tool_call` (upstream's trace order).
    if (shellRecord) this.trace.write('shell', shellRecord);
    return { result, kind, ...(shell ? { shell } : {}) };
  }

  /** `tool_call` in the trace — or `skill_call`, which reading a skill is, and which is not counted as a tool call. */
  private recordToolCall(name: string, input: { data?: string }, result: Fallible<ToolResultShape>, durationMs: number, kind: 'tool' | 'skill'): void {
    const output = result.ok ? (result.value.data ?? '') : result.error;
    const status = result.ok && result.value.status === 'passed' ? 'ok' : 'error';
    if (kind === 'skill') {
      this.trace.write('skill_call', { turn: this.turn, skill_name: name, output_bytes: Buffer.byteLength(output), duration_ms: durationMs, status });
      return;
    }
    this.totals.toolCalls += 1;
    const metadata = new Map(result.ok ? result.value.metadata : []);
    this.trace.write('tool_call', {
      turn: this.turn,
      tool_name: name,
      input: parseInput(input.data),
      input_bytes: Buffer.byteLength(input.data ?? ''),
      ...(this.start.trace_include_tool_output ? { output } : {}),
      output_bytes: Buffer.byteLength(output),
      duration_ms: durationMs,
      status,
      ...(metadata.get('state_effect') ? { state_effect: metadata.get('state_effect') } : {}),
      ...(metadata.get('resource_id') ? { resource_id: metadata.get('resource_id') } : {}),
    });
  }

  private toolOutcome(what: string, outcome: RunOutcome): Fallible<ToolResultShape> {
    switch (outcome.kind) {
      case 'returned':
        return ok(outcome.value as ToolResultShape);
      case 'deadline':
        return refused(`${what} exceeded its ${this.start.policy.limits.deadline_seconds}s deadline and was interrupted`);
      case 'abandoned':
        return refused(`${what} was stopped: ${outcome.message}`);
      case 'exit':
        return refused(`${what} exited with code ${outcome.code}`);
      case 'link-error':
        return refused(`failed to instantiate ${what}: ${outcome.message}`);
      case 'too-small':
        return refused(`${what} exceeded its configured resource limits: ${outcome.message}`);
      case 'trap':
        return refused(
          outcome.memoryExhausted
            ? `${what} exceeded its configured resource limits: ${outcome.limitMessage ?? outcome.message}`
            : `${what} trapped: ${outcome.message}`,
        );
    }
  }

  /**
   * A shell binary called as a tool: `{"command": "..."}` in, upstream's text report out; and, when
   * it ran, the run itself (for on-shell) and its `shell` record, which the caller writes after the
   * call's own `tool_call`.
   */
  private async shellTool(
    binary: string,
    input: { data?: string },
  ): Promise<{ result: Fallible<ToolResultShape>; run?: ShellRun; record?: Record<string, unknown> }> {
    const parsed = shellCommandOf(input.data);
    if (!parsed.ok)
      return {
        result: ok({ status: 'error', summary: 'shell command parsing failed', data: parsed.error, dataPath: undefined, truncated: false, metadata: [] }),
      };
    const command = parsed.value;
    const shell = await this.shellRun(binary, shellArguments(binary, command), []);
    if (!shell.ok)
      return { result: ok({ status: 'error', summary: 'shell execution failed', data: shell.error, dataPath: undefined, truncated: false, metadata: [] }) };
    const value = shell.value.outcome;
    const run: ShellRun = {
      binary: value.binaryPath,
      command,
      exitCode: value.exitCode,
      stdout: value.stdout,
      stderr: value.stderr,
      durationMs: value.durationMs,
    };
    let data = `$ ${command}\nExit code: ${value.exitCode}\nStdout:\n${value.stdout}\nStderr:\n${value.stderr}`;
    const metadata: Array<[string, string]> = [];
    if (value.truncated) {
      data += value.fullOutputPath ? `\n\nOutput truncated. Full output written to ${value.fullOutputPath}` : '\n\nOutput truncated.';
      if (value.fullOutputPath) metadata.push(['full_output_path', value.fullOutputPath]);
    }
    return {
      result: ok({
        status: 'passed',
        summary: `Shell command exited with code ${value.exitCode}`,
        data,
        dataPath: undefined,
        truncated: value.truncated,
        metadata,
      }),
      run,
      record: shell.value.record,
    };
  }

  /** `murmur:shell`'s call: a run recorded in the trace as it ends. */
  private async shell(binary: string, args: string[], env: Array<[string, string]>): Promise<Fallible<ShellOutcome>> {
    const ran = await this.shellRun(binary, args, env);
    if (!ran.ok) return ran;
    this.trace.write('shell', ran.value.record);
    return ok(ran.value.outcome);
  }

  /** A shell binary run, counted, with its `shell` trace record for the caller to write where it belongs. */
  private async shellRun(
    binary: string,
    args: string[],
    env: Array<[string, string]>,
  ): Promise<Fallible<{ outcome: ShellOutcome; record: Record<string, unknown> }>> {
    try {
      const result = await runShell(this.subprocessContext(), binary, args, env);
      this.totals.shellCalls += 1;
      const record = {
        turn: this.turn,
        binary: result.binaryPath,
        command: args.join(' '),
        exit_code: result.exitCode,
        stdout_bytes: Buffer.byteLength(result.stdout),
        stderr_bytes: Buffer.byteLength(result.stderr),
        duration_ms: Math.round(result.durationMs),
        ...(result.resourceLimit ? { resource_limit: result.resourceLimit } : {}),
      };
      const outcome: ShellOutcome = {
        exitCode: result.exitCode,
        stdout: result.stdout,
        stderr: result.stderr,
        truncated: result.truncated,
        fullOutputPath: result.fullOutputPath,
        binaryPath: result.binaryPath,
        durationMs: Math.round(result.durationMs),
      };
      return ok({ outcome, record });
    } catch (error) {
      return refused(error instanceof Error ? error.message : String(error));
    }
  }

  private async send(
    peerUrl: string,
    message: { messageId: string; contextId?: string; text: string },
  ): Promise<Fallible<{ taskId: string; contextId: string; state: string }>> {
    let result: Fallible<{ task_id: string; context_id: string; state: string; traceparent?: string | null }>;
    try {
      result = (await this.channel.request({
        op: 'send',
        request: { peer_url: peerUrl, message_id: message.messageId, ...(message.contextId ? { context_id: message.contextId } : {}), text: message.text },
      })) as typeof result;
    } catch (error) {
      // A message too large to send is the guest's error to handle, not a trap.
      return refused(error instanceof Error ? error.message : String(error));
    }
    if (!result.ok) return result;
    this.trace.write('a2a_send', {
      peer_url: peerUrl,
      message_id: message.messageId,
      task_id: result.value.task_id,
      context_id: result.value.context_id,
      traceparent: result.value.traceparent ?? null,
    });
    return ok({ taskId: result.value.task_id, contextId: result.value.context_id, state: result.value.state });
  }

  /** Model-visible artifacts (tools and skills) and the shell binaries, as upstream lists them. */
  private listArtifacts(): Array<{ name: string; version: string; runtime: 'wasm' | 'native' }> {
    const listed = [...this.tools.values()].map((tool) => ({ name: tool.name, version: tool.version, runtime: tool.runtime }));
    for (const binary of this.start.policy.shell_allow) {
      if (!this.tools.has(binary)) listed.push({ name: binary, version: '0.0.0', runtime: 'native' });
    }
    return listed;
  }

  private describe(name: string): Fallible<unknown> {
    const tool = this.tools.get(name);
    const isShell = this.start.policy.shell_allow.includes(name);
    if (!tool && !isShell) return refused(`artifact '${name}' is not installed`);
    const info = tool?.info ?? SHELL_TOOL_INFO;
    return ok({
      name,
      version: tool?.version ?? '0.0.0',
      description: tool ? info.description : shellToolDescription(name),
      tags: info.tags,
      runtime: tool?.runtime ?? 'native',
      inputSchema: info.input_schema,
      outputSchema: info.output_schema,
    });
  }

  private async pull(request: { name: string; version: string }): Promise<Fallible<unknown>> {
    const result = (await this.channel.request({ op: 'pull', request })) as Fallible<{ tool: HostTool }>;
    if (!result.ok) return result;
    const tool = result.value.tool;
    this.tools.set(tool.name, tool);
    // A native tool's executable cannot join a sandbox already made (its binds are fixed at start),
    // so a pulled one is installed and described, as upstream's pull leaves it, and not callable:
    // a call is refused as undeclared, where it was let through to fail in the sandbox (exit 125).
    if (tool.kind !== 'native') this.allowlist.add(tool.name);
    return ok({ name: tool.name, version: tool.version, runtime: tool.runtime });
  }
}

/** What a shell binary's run came to, as `murmur:shell` answers it. */
interface ShellOutcome {
  exitCode: number;
  stdout: string;
  stderr: string;
  truncated: boolean;
  fullOutputPath: string | undefined;
  binaryPath: string;
  durationMs: number;
}

/** What a shell binary is described as: upstream's synthetic manifest. */
const SHELL_TOOL_INFO: HostTool['info'] = {
  description: '',
  tags: [],
  input_schema: JSON.stringify({ type: 'object', properties: { command: { type: 'string' } }, required: ['command'] }),
};

/** A shell tool's command from its input, or what is wrong with the input, in upstream's words for each case. */
function shellCommandOf(data: string | undefined): Fallible<string> {
  if (data === undefined) return refused('shell tool input.data is required');
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch (error) {
    return refused(`shell tool input must be valid JSON: ${(error as Error).message}`);
  }
  const command = parsed !== null && typeof parsed === 'object' ? (parsed as { command?: unknown }).command : undefined;
  if (typeof command !== 'string' || command.trim() === '') return refused("shell tool input must include a non-empty 'command' string");
  return ok(command.trim());
}

function parseInput(data: string | undefined): unknown {
  if (data === undefined) return {};
  try {
    const parsed: unknown = JSON.parse(data);
    return parsed !== null && typeof parsed === 'object' ? parsed : { data };
  } catch {
    return { data };
  }
}

/** What the capsule's author is told when processes its commands left running are ended (`escapees.ts`). */
function escapeesEnded(pids: number[]): string {
  const one = pids.length === 1;
  return `[capsule-runtime] ended ${one ? 'a process' : `${pids.length} processes`} left running after ${one ? 'its' : 'their'} command's call (pid ${pids.join(', ')}): nothing a command starts outlives the calls running with it; run what a tool needs within its call`;
}

/** What every call of the driver is, whatever its request: the instance it runs is made from this alone. */
function driverSpec(driver: DriverComponentRef, env: Array<[string, string]>): GuestSpec {
  return { role: 'tool', label: `driver '${driver.name}'`, ...guestSpecOf(driver.component), preopen: driver.preopen, env, grant: `tool:${driver.name}` };
}

/** The egress codes that are the policy's refusal, not the network's failure. */
const POLICY_REFUSALS = new Set(['HTTP-request-denied', 'destination-IP-prohibited']);

/**
 * A failed script capsule's end with its last unanswered request as a clue: a guest's own error
 * for a refused request says only that the host call failed (`fetch_https: An error occurred while
 * using the host API`), and nothing a user reads named the host or the rule.
 */
function withEgressClue(result: SessionResult, failure: EgressFailure | undefined): SessionResult {
  if (result.status === 'ok' || !failure || !result.error) return result;
  const refused = POLICY_REFUSALS.has(failure.code);
  const clue = `its last request, to ${failure.url}, got no answer: ${failure.reason} (${failure.code})${refused ? '; if the capsule needs that host, add it to capabilities.network.allow' : ''}`;
  return { ...result, error: { ...result.error, hint: result.error.hint ? `${clue}. ${result.error.hint}` : clue } };
}
