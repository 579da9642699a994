import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { SessionCall, SessionReply } from '@murmur/shared';
import { type LoopOutcome, runAgentLoop, writeFileAtomic } from './agent-loop.js';
import type { AgentHost, HostChannel, SessionResult } from './contracts.js';
import { EventFeed } from './event-feed.js';
import type { AgentStart, StartMessage } from './protocol.js';
import { type Task, TaskRegistry } from './task-registry.js';

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
 * The trace of each task, hook-free: `a2a_task_received` (A2A only), `task_start`, the attempt's
 * `session_start` … `session_end`, `task_end`.
 */
export class AgentSession {
  private readonly feed: EventFeed;
  readonly registry: TaskRegistry;
  private readonly taskFile: string;

  constructor(
    private readonly host: AgentHost,
    private readonly start: StartMessage,
    private readonly agent: AgentStart,
    private readonly channel: HostChannel,
  ) {
    this.feed = new EventFeed((event) => channel.event(event));
    this.registry = new TaskRegistry(agent.lifecycle, this.feed, start.session_id);
    this.taskFile = path.join(start.accessible_workdir, 'task.md');
    channel.serve((call) => this.answer(call));
  }

  /** A door's call: answered from the registry and the feed, never by waiting on the loop. */
  answer(call: SessionCall): SessionReply {
    switch (call.method) {
      case 'card':
        return { card: this.agent.card };
      case 'send':
        return { ...this.registry.send(call), next_event_id: this.feed.nextEventId };
      case 'get':
        return this.registry.get(call.task_id, call.history_length);
      case 'cancel':
        return this.registry.cancel(call.task_id);
      case 'replay': {
        if (call.task_id !== undefined && !this.registry.has(call.task_id)) {
          return { error: { code: -32001, message: `Task not found: '${call.task_id}'` } };
        }
        const replayed = this.feed.replay(call.after_event_id ?? Number.MAX_SAFE_INTEGER, call.task_id);
        const found = call.task_id === undefined ? undefined : this.registry.get(call.task_id);
        const task = found && 'task' in found ? found.task : undefined;
        return {
          events: replayed.events,
          ...(replayed.firstAvailableId !== undefined ? { first_available_id: replayed.firstAvailableId } : {}),
          next_event_id: this.feed.nextEventId,
          ...(task ? { task } : {}),
        };
      }
    }
  }

  async run(): Promise<SessionResult> {
    this.host.keepWorkersWarm(this.agent.driver.component);
    const { task_acceptance: acceptance, after_task: afterTask } = this.agent.lifecycle;
    const queueSleep = acceptance === 'queue' && afterTask === 'sleep';
    let last: LoopOutcome | undefined;
    // A crossed ceiling ends the session: a task that is waiting or queued will never run.
    this.host.onBreach = () => this.registry.close(this.host.breach?.message ?? 'a resource ceiling was crossed');
    for (;;) {
      if (this.host.breach) break;
      if (existsSync(this.taskFile)) {
        last = await this.runTask(this.registry.adopt(readFileSync(this.taskFile, 'utf8')), 'task_md');
        if (acceptance !== 'queue' || last.status !== 'ok') break;
        rmSync(this.taskFile, { force: true });
        continue;
      }
      if (acceptance === 'none') break;
      const task = await this.registry.next(queueSleep ? undefined : this.agent.idle_timeout_ms);
      if (!task) {
        if (queueSleep || this.registry.isClosed) break;
        this.channel.output('stderr', '[capsule-runtime] no A2A message received within timeout; running with empty task\n');
        last = await runAgentLoop({ host: this.host, start: this.start, agent: this.agent, task: undefined, registry: this.registry });
        break;
      }
      writeFileSync(this.taskFile, task.text);
      last = await this.runTask(task, 'a2a');
      if (afterTask === 'exit' || acceptance === 'single') break;
      rmSync(this.taskFile, { force: true });
    }
    this.registry.close('the session ended before the task ran');
    const breached = this.host.breachError();
    if (breached) return { status: 'failed', exitCode: 1, error: breached };
    if (!last || last.status === 'ok') return { status: 'ok', exitCode: 0 };
    return { status: 'failed', exitCode: 1, error: last.error ?? { code: 'E-RUN-007', message: `agent loop failed: ${last.message}` } };
  }

  /** The session is being stopped: pending and waiting tasks end now, and say why. */
  stop(reason: string): void {
    this.registry.close(reason);
  }

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
    trace.write('task_start', { task_id: task.id, context_id: task.contextId, source, message_parts_bytes: Buffer.byteLength(task.text) });
    this.registry.begin(task);
    this.host.enterTask(
      task,
      this.registry,
      this.agent.lifecycle.input_timeout_secs === undefined ? undefined : this.agent.lifecycle.input_timeout_secs * 1000,
      source === 'a2a',
    );
    let outcome: LoopOutcome;
    try {
      outcome = await runAgentLoop({ host: this.host, start: this.start, agent: this.agent, task, registry: this.registry });
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      outcome = { status: 'failed', message, error: { code: 'E-RUN-007', message: `agent loop failed: ${message}` } };
      this.host.writeSessionEnd('failed');
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
      exit_status: outcome.status === 'ok' ? 'ok' : 'failed',
      duration_ms: Date.now() - started,
      turns: totals.turns - before.turns,
      input_tokens: totals.inputTokens - before.inputTokens,
      output_tokens: totals.outputTokens - before.outputTokens,
      tool_calls: totals.toolCalls - before.toolCalls,
      shell_calls: totals.shellCalls - before.shellCalls,
      reopen_count: 0,
    });
    return outcome;
  }
}
