import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  EVAL_FILE,
  EVAL_HOOK,
  type ForgetAsker,
  type SessionCall,
  type SessionEvent,
  type SessionReply,
  type WireError,
  capabilityCategories,
  hasSettled,
  settlesItsTask,
} from '@murmur/shared';
import { type AgentLoopRun, type LoopOutcome, runAgentLoop } from './agent-loop.js';
import { DriverContinuation } from './driver-continuation.js';
import { writeFileAtomic } from './atomic-file.js';
import { type AgentHost, type HostChannel, type SessionResult, countTokens } from './contracts.js';
import { type WireMessage, driverRequestData, estimateTokens, readDriverReply } from './driver-wire.js';
import { EventFeed } from './event-feed.js';
import { type HarnessLoopRun, type HarnessScene, runHarnessLoop } from './harness-loop.js';
import { HookLaunchError, HookRuntime } from './hooks.js';
import type { AgentStart, StartMessage } from './protocol.js';
import { CANCELED_BY_REQUEST, type Task, TaskRegistry, fitTaskView } from './task-registry.js';
import { callTool } from './tool-call.js';
import { agentTools } from './tool-inventory.js';
import { uploadPieces } from './request-body.js';
import { writeToolManifests } from './tool-manifests.js';
import { ToolServer } from './tool-server.js';

/** How long a waiting session keeps the guest workers it warmed for its next message. */
const IDLE_WORKERS_KEPT_MS = 2_000;
/** A replay's task, beside up to `REPLAY_BUDGET_BYTES` of events: the two under the bus's 1 MiB, with room for the envelope. */
const REPLAY_TASK_BUDGET_BYTES = 320 * 1024;
/** A hook's completion is capped at upstream's fixed output budget, whatever `inference.max_tokens` says. */
const HOOK_COMPLETION_MAX_TOKENS = 8192;

/**
 * An agent capsule's session: the task loop of upstream's `launch_session`, and the A2A calls a
 * door relays to it.
 *
 * - A `task.md` present when the loop looks runs first: `none` and `single` then end, `queue`
 *   deletes it and goes on.
 * - `none` with no `task.md` ends at once. `queue` + `sleep` waits for tasks for ever (until it
 *   is stopped); every other combination waits `MURMUR_A2A_TIMEOUT_SECS` (30 s) for a task, and
 *   when none came runs once with an empty task and ends.
 * - After an A2A task, `after_task: exit` (and `single` always) ends the session; `queue` +
 *   `sleep` clears `task.md` and waits for the next.
 *
 * The trace of each task: `a2a_task_received` (A2A only), `task_start`, each attempt's
 * `session_start` … `session_end` (with `task_reopened` between attempts), `task_end`. The hooks
 * hear the session's events in upstream's order: on-stage and on-session-start once, on-task-start
 * and on-task-end around each task (on-task-end after each attempt), on-session-end once, then the
 * async queues drain.
 */
export class AgentSession {
  private readonly feed: EventFeed;
  readonly registry: TaskRegistry;
  private readonly taskFile: string;
  private readonly evalFile: string;
  private readonly hooks: HookRuntime;
  /** Shell tools' descriptions from manifests an on-stage hook wrote. */
  private shellDescriptions = new Map<string, string>();
  /** `transport: process`: the MCP server the harness reaches the capsule's tools through, and the task its calls serve. */
  private toolServer: ToolServer | undefined;
  private harnessScene: HarnessScene | undefined;
  /** The last id a harness transcript's upload was sent under. */
  private transcriptUploads = 0;
  /** A stateful driver's continuation: it outlives an attempt, so the next task of its context resends nothing the driver knows. */
  private readonly continuation = new DriverContinuation();
  /** `mur run --forget-session`'s context, until its first task has forgotten it. */
  private forgetContext: string | undefined;

  constructor(
    private readonly host: AgentHost,
    private readonly start: StartMessage,
    private readonly agent: AgentStart,
    private readonly channel: HostChannel,
  ) {
    this.feed = new EventFeed((event) => {
      channel.event(event);
      this.settling(event);
    });
    this.registry = new TaskRegistry(agent.lifecycle, this.feed, start.session_id);
    this.taskFile = path.join(start.accessible_workdir, 'task.md');
    this.evalFile = path.join(start.accessible_workdir, EVAL_FILE);
    this.hooks = new HookRuntime(agent.hooks, host.guests, host.trace, start.session_dir, host.recordRefused);
    this.forgetContext = agent.harness?.forget_context;
    // The canceled task's work stops at once: the guest calls in flight, and the commands they ran.
    this.registry.whenRunningCanceled(() => {
      host.guests.abandonRunning('its task was canceled');
      host.killSubprocesses('its task was canceled');
    });
    channel.serve((call) => this.answer(call));
  }

  /**
   * A door's call: answered from the registry and the feed, never by waiting on the loop — a
   * blocking send (`settle_within_ms`) waits only for the feed to say its task settled.
   */
  answer(call: SessionCall): SessionReply | Promise<SessionReply> {
    switch (call.method) {
      case 'card':
        return { card: this.agent.card };
      case 'send': {
        // A completion that came before its delegation's launch was answered waits for it.
        if (call.delegation_id !== undefined && this.registry.holdsEarly(call.delegation_id))
          return this.registry.afterLaunches().then(() => this.answer(call));
        const accepted = this.registry.send(call);
        // The history the client asked for: the registry's answer holds its default. A completion's
        // poster (perhaps the child's own guest) gets its acknowledgement alone, never the parent's task.
        const asked = call.history_length !== undefined && call.delegation_id === undefined && 'task' in accepted;
        const sent = asked ? this.registry.get(accepted.task.id, call.history_length) : accepted;
        if (call.settle_within_ms === undefined || !('task' in sent) || hasSettled(sent.task.state)) return { ...sent, next_event_id: this.feed.nextEventId };
        return this.settled(sent.task.id, call.settle_within_ms, call.history_length);
      }
      case 'get':
        return this.registry.get(call.task_id, call.history_length);
      case 'cancel':
        return this.registry.cancel(call.task_id);
      case 'list':
        return this.registry.list(call);
      case 'replay': {
        if (call.task_id !== undefined && !this.registry.has(call.task_id)) {
          return { error: { code: -32001, message: `Task not found: '${call.task_id}'` } };
        }
        const replayed = this.feed.replay(call.after_event_id ?? Number.MAX_SAFE_INTEGER, call.task_id);
        const found = call.task_id === undefined ? undefined : this.registry.get(call.task_id);
        const task = found && 'task' in found ? found.task : undefined;
        // A client resuming one task's stream (Last-Event-ID) already holds the streams it saw begin.
        const begun = call.task_id !== undefined && call.after_event_id !== undefined ? this.feed.streamsBegun(call.task_id, call.after_event_id) : [];
        return {
          events: replayed.events,
          ...(begun.length > 0 ? { streams_begun: begun } : {}),
          ...(replayed.firstAvailableId !== undefined ? { first_available_id: replayed.firstAvailableId } : {}),
          next_event_id: this.feed.nextEventId,
          // With the replayed events, under the bus's 1 MiB.
          ...(task ? { task: fitTaskView(task, REPLAY_TASK_BUDGET_BYTES) } : {}),
        };
      }
      case 'authorize':
        // The executor answers this one; a host never holds a token to compare.
        return { error: { code: -32603, message: 'Internal error: a capsule host does not judge tokens' } };
    }
  }

  async run(): Promise<SessionResult> {
    // Every turn calls the driver, which keeps a worker of its own after its first call: a reserve
    // after that serves only the session's WASM tools.
    this.host.keepWorkersWarm(this.agent.driver?.component, { othersToCall: this.start.tools.some((tool) => tool.kind === 'wasm') });
    const hooks = this.hooks;
    this.host.beforeSessionEnd = () => hooks.flushFaults();
    this.host.hookInference = (grant, request) => this.hookCompletion(grant.slice('hook:'.length), request);
    try {
      const refused = await this.openHooks();
      if (refused) return { status: 'failed', exitCode: 1, error: refused };
      if (this.agent.harness) this.toolServer = await this.startToolServer();
      return await this.runTasks();
    } finally {
      hooks.close();
      await this.toolServer?.close();
    }
  }

  /** The capsule's tools for the harness: the inventory a driver would be offered, dispatched the same way. */
  private startToolServer(): Promise<ToolServer> {
    const { host, start, agent } = this;
    return ToolServer.start({
      tools: () => agentTools({ host, start, agent, shellDescriptions: this.shellDescriptions }),
      call: async (name, input) => {
        const scene = this.harnessScene;
        if (!scene) return { text: `tool '${name}' was called while no task runs`, isError: true, kind: 'tool', durationMs: 0 };
        await scene.beforeToolCall();
        return callTool({ host, hooks: this.hooks, registry: this.registry, task: scene.task, turn: scene.turn() }, name, input);
      },
    });
  }

  /** Instantiates the hooks and runs on-stage, before anything of the session happens; a failure is the launch's refusal. */
  private async openHooks(): Promise<WireError | undefined> {
    const hooks = this.hooks;
    if (hooks.isEmpty) return undefined;
    try {
      await hooks.open();
    } catch (error) {
      if (!(error instanceof HookLaunchError)) throw error;
      return {
        code: 'E-HOOK-001',
        message: error.message,
        hint: "rebuild the hook against murmur:hook@0.5.0 (the WIT in the runtime's wit/ package)",
        path: 'artifacts',
      };
    }
    const staged = await hooks.stage(this.start.policy.shell_allow);
    if (staged.error) {
      return {
        code: 'E-HOOK-002',
        message: `on-stage hook failed: ${staged.error.hook}: ${staged.error.message}`,
        hint: `see logs/hook-${staged.error.hook}.log in the session directory`,
        path: 'artifacts',
      };
    }
    if (staged.writeManifests) {
      const written = writeToolManifests(this.start.session_dir, staged.writeManifests.manifests, this.start.policy.shell_allow);
      if (!written.ok)
        return {
          code: 'E-HOOK-002',
          message: `on-stage hook '${staged.writeManifests.hook}' wrote a manifest the runtime refuses: ${written.reason}`,
          path: 'artifacts',
        };
      this.shellDescriptions = written.descriptions;
    }
    return undefined;
  }

  private async runTasks(): Promise<SessionResult> {
    const hooks = this.hooks;
    const { task_acceptance: acceptance, after_task: afterTask } = this.agent.lifecycle;
    const queueSleep = acceptance === 'queue' && afterTask === 'sleep';
    let last: LoopOutcome | undefined;
    const started = Date.now();
    await hooks.dispatch('on-session-start', () => ({
      capsuleName: this.start.capsule_name,
      capsuleVersion: this.start.capsule_version,
      sessionId: this.start.session_id,
      model: this.agent.model,
      capabilities: capabilityCategories(this.start.policy),
    }));
    // A crossed ceiling ends the session: a task that is waiting or queued will never run.
    this.host.onBreach = () => this.registry.close(this.host.breach?.message ?? 'a resource ceiling was crossed');
    for (;;) {
      if (this.host.breach) break;
      if (existsSync(this.taskFile)) {
        last = await this.runTask(this.registry.adopt(readFileSync(this.taskFile, 'utf8'), this.agent.context_id), 'task_md');
        if (acceptance !== 'queue' || last.status !== 'ok') break;
        rmSync(this.taskFile, { force: true });
        continue;
      }
      if (acceptance === 'none') break;
      // A session left waiting lets its spare guest workers go: sleeping, it holds only what it must.
      const release = setTimeout(() => this.host.guests.releaseIdleWorkers(), IDLE_WORKERS_KEPT_MS);
      const task = await this.registry.next(queueSleep ? undefined : this.agent.idle_timeout_ms);
      clearTimeout(release);
      if (!task) {
        if (queueSleep || this.registry.isClosed) break;
        this.channel.output('stderr', '[capsule-runtime] no A2A message received within timeout; running with empty task\n');
        last = await this.attempt(undefined, this.agent.max_turns, undefined);
        break;
      }
      writeFileSync(this.taskFile, task.text);
      last = await this.runTask(task, 'a2a');
      if (afterTask === 'exit' || acceptance === 'single') break;
      rmSync(this.taskFile, { force: true });
    }
    this.registry.close('the session ended before the task ran');
    const breached = this.host.breachError();
    const totals = this.host.totals;
    const ok = !breached && (!last || last.status === 'ok');
    // What the eval hook writes next is the session's score: an eval.jsonl the capsule wrote itself
    // (its guest writes the workdir) must not stand in for it should the hook's write fail.
    if (this.agent.hooks.some((hook) => hook.name === EVAL_HOOK)) rmSync(this.evalFile, { force: true, recursive: true });
    await hooks.dispatch('on-session-end', () => ({
      totalTurns: totals.turns,
      totalInputTokens: BigInt(totals.inputTokens),
      totalOutputTokens: BigInt(totals.outputTokens),
      totalToolCalls: totals.toolCalls,
      totalShellCalls: totals.shellCalls,
      durationMs: BigInt(Date.now() - started),
      exitStatus: ok ? 'ok' : 'failed',
    }));
    await hooks.drain();
    hooks.flushFaults();
    if (breached) return { status: 'failed', exitCode: 1, error: breached };
    if (!last || last.status === 'ok') return { status: 'ok', exitCode: 0 };
    return { status: 'failed', exitCode: 1, error: last.error ?? { code: 'E-RUN-007', message: `agent loop failed: ${last.message}` } };
  }

  /** One attempt, by a driver's turns or by the harness. */
  private loop(task: Task | undefined, maxTurns: number, forget: ForgetAsker | undefined): Promise<LoopOutcome> {
    const run = this.loopRun(task, maxTurns);
    const harness = this.agent.harness;
    if (!harness || !this.toolServer) return runAgentLoop(run);
    const channel = this.channel;
    const scope = contextScope(task);
    const harnessRun: HarnessLoopRun = {
      ...run,
      harness,
      forget,
      mcpConfig: this.toolServer.config(),
      serve: (scene) => {
        this.harnessScene = scene;
      },
      sessions: {
        get: async (contextId) => ((await channel.request({ op: 'harness-session-get', context_id: contextId, ...scope })) as string | null) ?? undefined,
        put: async (contextId, sessionId) => {
          await channel.request({ op: 'harness-session-put', context_id: contextId, session_id: sessionId, ...scope });
        },
        forget: async (contextId) => ((await channel.request({ op: 'harness-session-forget', context_id: contextId, ...scope })) as string | null) ?? undefined,
        transcript: async (contextId, sessionId) => {
          const kept = (await channel.request({ op: 'harness-transcript-load', context_id: contextId, session_id: sessionId })) as string | null;
          return kept === null ? undefined : Buffer.from(kept, 'base64');
        },
        keepTranscript: async (contextId, sessionId, transcript) => {
          // Its bytes go ahead in pieces (none for an empty one); one too large to keep, by its size alone.
          const pieces = 'oversizedBytes' in transcript ? [] : uploadPieces(transcript.toString('base64'));
          const upload = pieces.length > 0 ? ++this.transcriptUploads : undefined;
          for (const piece of pieces) await channel.request({ op: 'harness-transcript-upload', upload: upload as number, chunk_base64: piece });
          const reply = await channel.request({
            op: 'harness-transcript-save',
            context_id: contextId,
            session_id: sessionId,
            ...(upload !== undefined ? { upload } : {}),
            ...('oversizedBytes' in transcript ? { oversized_bytes: transcript.oversizedBytes } : {}),
          });
          return (reply as { kept: boolean }).kept;
        },
      },
    };
    return runHarnessLoop(harnessRun);
  }

  private loopRun(task: Task | undefined, maxTurns: number): AgentLoopRun {
    const scope = contextScope(task);
    return {
      host: this.host,
      start: this.start,
      agent: this.agent,
      task,
      registry: this.registry,
      hooks: this.hooks,
      maxTurns,
      shellDescriptions: this.shellDescriptions,
      continuation: this.continuation,
      conversation: {
        load: async (contextId) => (await this.channel.request({ op: 'conversation-load', context_id: contextId, ...scope })) as WireMessage[],
        save: async (contextId, messages) => {
          await this.channel.request({ op: 'conversation-save', context_id: contextId, messages, ...scope });
        },
      },
    };
  }

  /**
   * A hook's `run-inference`: one completion through the session's driver, silent (nothing streams
   * to a task, nothing asks for input), at upstream's fixed 8192-token cap, traced as an
   * `inference` with `origin: hook:<name>`. A hook's completion is not an agent turn: it adds its
   * tokens to the session's totals, not a turn.
   */
  private async hookCompletion(hook: string, raw: unknown): Promise<{ ok: true; value: unknown } | { ok: false; error: string }> {
    const driver = this.agent.driver;
    // On transport: process the harness is the only inference, and it answers nobody but its task.
    if (!driver) return { ok: false, error: 'run-inference is not available under inference.transport: process (the harness holds the model)' };
    const request = raw as { messages: Array<{ role: string; content: string }>; systemPrompt?: string; model?: string };
    const model = request.model ?? this.agent.model;
    const data = driverRequestData({
      model,
      maxTokens: HOOK_COMPLETION_MAX_TOKENS,
      messages: request.messages.map((message) => ({ role: message.role, content: [{ type: 'text', text: message.content }] }) as WireMessage),
      tools: [],
      system: request.systemPrompt ?? '',
    });
    const call = await this.host.callDriver(driver, this.agent.driver_env, data, { silent: true });
    // A completion that failed made no inference worth recording, as an agent turn's does not: the
    // hook hears why, and the trace's `decision` keeps to the values it has (no `error`).
    if (!call.ok) return { ok: false, error: `inference driver '${driver.name}' failed: ${call.error}` };
    const replyText = call.result.data ?? call.result.summary;
    const reply = readDriverReply(call.result);
    if (reply.kind === 'error') return { ok: false, error: `inference driver returned an error: ${reply.message}` };
    // Counted as an agent turn's are: what the provider reported, else estimated.
    const inputTokens = reply.usage?.input_tokens ?? estimateTokens(data);
    const outputTokens = reply.usage?.output_tokens ?? estimateTokens(replyText ?? '');
    countTokens(this.host.totals, inputTokens, outputTokens);
    this.host.trace.write('inference', {
      turn: this.host.currentTurn,
      input_tokens: inputTokens,
      output_tokens: outputTokens,
      decision: 'end_turn',
      tool_name: null,
      origin: `hook:${hook}`,
      model,
    });
    const text = reply.content
      .filter((block) => block.type === 'text' && typeof block.text === 'string')
      .map((block) => block.text as string)
      .join('');
    return { ok: true, value: { text, modelUsed: model, inputTokens: BigInt(inputTokens), outputTokens: BigInt(outputTokens) } };
  }

  /** Blocking sends waiting for their task to settle, by task id. */
  private readonly settleWaiters = new Map<string, Array<() => void>>();

  /**
   * The task as it stands once the feed says it settled (a final status, or input-required), or
   * after `withinMs`: what a door's blocking send answers with.
   */
  private settled(taskId: string, withinMs: number, historyLength: number | undefined): Promise<SessionReply> {
    return new Promise((resolve) => {
      const answer = (): void => {
        clearTimeout(timer);
        const waiting = (this.settleWaiters.get(taskId) ?? []).filter((waiter) => waiter !== answer);
        if (waiting.length > 0) this.settleWaiters.set(taskId, waiting);
        else this.settleWaiters.delete(taskId);
        resolve({ ...this.registry.get(taskId, historyLength), next_event_id: this.feed.nextEventId });
      };
      const timer = setTimeout(answer, withinMs);
      this.settleWaiters.set(taskId, [...(this.settleWaiters.get(taskId) ?? []), answer]);
    });
  }

  /** Told every event the feed publishes: a settling status answers the sends waiting on its task. */
  private settling(event: SessionEvent): void {
    if (!settlesItsTask(event) || event.task_id === null) return;
    for (const answer of this.settleWaiters.get(event.task_id) ?? []) answer();
  }

  /** The session is being stopped: pending and waiting tasks end now, and say why. */
  stop(reason: string): void {
    this.registry.close(reason);
  }

  /**
   * One task, with its reopens: each attempt is an agent loop on what is left of the task's
   * `max_turns`; after each, on-task-end may send it back (`reopen-task`) with a reason that is
   * added to `task.md` under the original, until `max_task_reopens` is spent
   * (`reopen_budget_exhausted`).
   */
  private async runTask(task: Task, source: 'a2a' | 'task_md'): Promise<LoopOutcome> {
    const trace = this.host.trace;
    const before = { ...this.host.totals };
    const started = Date.now();
    if (source === 'a2a') {
      trace.write('a2a_task_received', {
        task_id: task.id,
        context_id: task.contextId,
        message_id: task.messageId,
        traceparent_from_caller: task.traceparent ?? null,
      });
    }
    const inputBytes = Buffer.byteLength(task.text);
    trace.write('task_start', { task_id: task.id, context_id: task.contextId, source, message_parts_bytes: inputBytes });
    this.registry.begin(task);
    this.host.enterTask(
      task,
      this.registry,
      this.agent.lifecycle.input_timeout_secs === undefined ? undefined : this.agent.lifecycle.input_timeout_secs * 1000,
      source === 'a2a',
    );
    await this.hooks.dispatch('on-task-start', () => ({ taskId: task.id, contextId: task.contextId, source, inputBytes: BigInt(inputBytes) }));
    const original = existsSync(this.taskFile) ? readFileSync(this.taskFile, 'utf8') : task.text;
    const feedback: Array<{ hook: string; reason: string }> = [];
    let outcome: LoopOutcome;
    let exitStatus: 'ok' | 'failed' | 'reopen_budget_exhausted';
    // Asked once, on the request that starts the task: a reopen continues the conversation the first attempt started.
    let forget: ForgetAsker | undefined = task.forgetSession ? 'a2a' : undefined;
    // `mur run --forget-session` names the operator's context, never one a session's token named.
    if (this.forgetContext !== undefined && this.forgetContext === task.contextId && !task.sessionScoped) {
      forget = 'cli';
      this.forgetContext = undefined;
    }
    try {
      for (;;) {
        const used = this.host.totals.turns - before.turns;
        outcome = await this.attempt(task, Math.max(1, this.agent.max_turns - used), forget);
        forget = undefined;
        exitStatus = outcome.status === 'ok' ? 'ok' : 'failed';
        const ended = await this.hooks.dispatch('on-task-end', () => ({ taskId: task.id, exitStatus }));
        // A task its client canceled (or whose input timed out) is over: no hook sends it back.
        if (!ended.reopen || task.abortedWith !== undefined) break;
        const turnsLeft = this.agent.max_turns - (this.host.totals.turns - before.turns);
        if (feedback.length >= this.agent.max_task_reopens || turnsLeft <= 0) {
          exitStatus = 'reopen_budget_exhausted';
          // Which budget ran out: a hook that always reopens is stopped by the turns as often as by its reopens.
          const spent =
            turnsLeft <= 0
              ? `the task's ${this.agent.max_turns} turns (inference.max_turns) are used up`
              : `inference.max_task_reopens allows ${this.agent.max_task_reopens}`;
          const message = `task reopen budget exhausted after ${feedback.length} reopen(s): hook '${ended.reopen.hook}' still requested another reopen, and ${spent}`;
          outcome = {
            status: 'failed',
            message,
            error: {
              code: 'E-RUN-007',
              message: `agent loop failed: ${message}`,
              hint: `the hook was not satisfied with the answer: read its reasons in the trace (task_reopened), then change the task or the hook, or raise ${turnsLeft <= 0 ? 'inference.max_turns' : 'inference.max_task_reopens'} in murmur.yaml`,
              path: turnsLeft <= 0 ? 'inference.max_turns' : 'inference.max_task_reopens',
            },
          };
          break;
        }
        feedback.push({ hook: ended.reopen.hook, reason: ended.reopen.reason });
        trace.write('task_reopened', { task_id: task.id, hook_name: ended.reopen.hook, reason: ended.reopen.reason, reopen_number: feedback.length });
        writeFileAtomic(this.taskFile, reopenedTask(original, feedback));
      }
    } finally {
      this.host.leaveTask();
    }
    if (outcome.status === 'ok') this.registry.finish(task, { state: 'completed', response: outcome.response });
    else this.registry.finish(task, { state: 'failed', message: outcome.message });
    // A threaded conversation keeps each task's answer apart (upstream's rule): out/result.txt is
    // overwritten by the next task of the session.
    if (source === 'a2a' && this.agent.lifecycle.conversation === 'threaded') {
      writeFileAtomic(
        path.join(this.start.session_dir, 'out', `result_${task.id}.txt`),
        outcome.status === 'ok' ? outcome.response : `error: ${outcome.message}`,
      );
    }
    const totals = this.host.totals;
    trace.write('task_end', {
      task_id: task.id,
      exit_status: exitStatus,
      duration_ms: Date.now() - started,
      turns: totals.turns - before.turns,
      input_tokens: totals.inputTokens - before.inputTokens,
      output_tokens: totals.outputTokens - before.outputTokens,
      tool_calls: totals.toolCalls - before.toolCalls,
      shell_calls: totals.shellCalls - before.shellCalls,
      reopen_count: feedback.length,
    });
    // A client's cancel is not the loop failing: a session that ends with its task says so.
    if (task.abortedWith === CANCELED_BY_REQUEST && outcome.status !== 'ok') {
      return {
        ...outcome,
        error: {
          code: 'E-RUN-007',
          message: `its task ${task.id} was canceled by a client (tasks/cancel) before it was done`,
          hint: 'nothing in the capsule failed; a session with one task (task_acceptance: single, or after_task: exit) ends with it: send the task again to a new session',
        },
      };
    }
    return outcome;
  }

  /** One run of the loop; what escapes it fails the attempt (its session end written), never the host. */
  private async attempt(task: Task | undefined, maxTurns: number, forget: ForgetAsker | undefined): Promise<LoopOutcome> {
    try {
      return await this.loop(task, maxTurns, forget);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.host.writeSessionEnd('failed');
      return { status: 'failed', message, error: { code: 'E-RUN-007', message: `agent loop failed: ${message}` } };
    }
  }
}

/** `task.md` for a reopened attempt: the original, then every reason so far (upstream's text). */
export function reopenedTask(original: string, feedback: ReadonlyArray<{ hook: string; reason: string }>): string {
  let text = `${original.trimEnd()}\n\n---\n\n# Reopen feedback\n\nThe previous attempt was not accepted. Address the following feedback, then continue.\n`;
  for (const [index, item] of feedback.entries()) text += `\n## Reopen ${index + 1} — from hook \`${item.hook}\`\n\n${item.reason.trim()}\n`;
  return text;
}

/** How the executor is asked to keep a task's context: apart, for this session alone, when the task came under the session's own token. */
function contextScope(task: Task | undefined): { session_scoped?: true } {
  return task?.sessionScoped ? { session_scoped: true } : {};
}
