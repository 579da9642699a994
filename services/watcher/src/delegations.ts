import { constants } from 'node:os';
import {
  type DelegationControlReply,
  type DelegationLaunchReply,
  type DelegationLaunchRequest,
  DelegationLaunchRequestSchema,
  type DelegationOutcome,
  type Log,
  MurmurError,
  type SessionEnded,
  type SpawnerHandle,
  type StagedPlan,
  boundDetail,
  commands,
  envReferenceName,
  newDelegationId,
  newSessionId,
  secretReferencePaths,
  sessionUrl,
  spawnerHandleToEnv,
  topics,
} from '@murmur/shared';
import type { Bus, Subscription } from '@murmur/shared/bus';
import { deliverCompletion, requestStaging } from '@murmur/shared/node';

/**
 * Delegated children, launched and watched (seeds `delegation.rs`, the launcher's side). A child
 * reports its own ending when it can — its runtime writes `completion.json` and posts it before its
 * session's end is announced — and this watcher reports for one that could not:
 *
 * - `crashed`: the session ended without its runtime reporting (killed, out of memory, its host
 *   died), with the exit status and the child's stderr tail, posted to the parent;
 * - `terminated`, ended by the parent (`shutdown`): recorded, posted to nobody — the only party
 *   to tell is the one that did it;
 * - `terminated` at the completion deadline: the watcher ends the child and posts the outcome,
 *   naming the bound in seconds — the only thing that stops a wedged child running as long as
 *   its parent.
 *
 * A child runs on its parent's executor (`executor.<id>.launch`), under the parent's `children/`,
 * so its workdir — and `completion.json` in it — is on that machine alone: this watcher decides an
 * outcome, and the child's executor records it there and delivers it (`executor.<id>.completion`).
 * When that executor is gone too (a child lost with it), the watcher delivers the outcome itself
 * and keeps the record in the bus (`murmur-completions`): recorded, never dropped.
 */

interface Watched {
  delegationId: string | undefined;
  request: ReturnType<typeof DelegationLaunchRequestSchema.parse>;
  handle: SpawnerHandle | undefined;
  reply: DelegationLaunchReply;
  startedAt: number;
  deadline: NodeJS.Timeout | undefined;
  endedBy: 'parent' | 'deadline' | undefined;
  exited: boolean;
  finished: boolean;
  stderrTail: string[];
  outcome: DelegationOutcome | undefined;
  control: Subscription | undefined;
  /** Resolved once the child's ending is recorded (`onEnded` done). */
  settled: Promise<void>;
  settle: () => void;
}

const STAGE_TIMEOUT_MS = 120_000;
const LAUNCH_TIMEOUT_MS = 60_000;

function exitStatus(event: SessionEnded): string {
  if (event.signal) {
    const number = (constants.signals as Record<string, number>)[event.signal];
    return number === undefined ? `signal: ${event.signal}` : `signal: ${number} (${event.signal})`;
  }
  return `exit status: ${event.exit_code ?? 'unknown'}`;
}

/**
 * What of the values its launcher passed a child is given: those its own `capabilities.env.allow`
 * names (roost has held that list inside the parent's). A launcher passes every value it may read;
 * the rest are not the child's, and a `${VAR}` reference in the child's manifest would otherwise
 * resolve against them — an endpoint whose value its hooks are handed, say. A reference to a
 * variable the child does not allow refuses the child, naming the variable and where it is used.
 */
function childEnvironment(request: Watched['request'], plan: StagedPlan): Record<string, string> {
  const allowed = new Set(plan.policy.env_allow);
  const capsule = `${request.capsule_name}@${request.capsule_version}`;
  for (const { path, value } of secretReferencePaths(plan.capsule.manifest)) {
    const name = envReferenceName(value);
    if (name !== undefined && !allowed.has(name))
      throw new MurmurError(
        'E-DLG-002',
        `${capsule} references \${${name}} at ${path}, which its capabilities.env.allow does not list: a launched capsule's references resolve only against the variables it allows`,
        { path, hint: `the capsule's publisher adds ${name} to its capabilities.env.allow (and the parent must allow it too)` },
      );
  }
  return Object.fromEntries(Object.entries(request.env).filter(([name]) => allowed.has(name)));
}

export class DelegationWatcher {
  private readonly watched = new Map<string, Watched>();
  /**
   * Delegation ids whose launch is under way: claimed before the launch's first await, so two
   * launches naming one id (a replayed request) cannot both pass the check while neither is watched yet.
   */
  private readonly launching = new Set<string>();
  private readonly ended: Subscription;
  private readonly completed: Subscription;

  /**
   * @param executorOf where a session runs, as far as this watcher knows (from `session.started`)
   */
  constructor(
    private readonly bus: Bus,
    private readonly log: Log,
    private readonly executorOf: (sessionId: string) => string | undefined = () => undefined,
  ) {
    this.ended = bus.subscribe(topics.sessionEnded, (event) => {
      const watched = this.watched.get(event.session_id);
      if (watched) void this.onEnded(watched, event);
    });
    // A child that reports for itself says how it ended here, before its session's end is announced.
    this.completed = bus.subscribe(topics.delegationCompleted, ({ outcome }) => {
      const watched = this.watched.get(outcome.session_id);
      if (watched && outcome.reported_by === 'child' && watched.handle?.delegation_id === outcome.delegation_id) watched.outcome = outcome;
    });
  }

  /** Stages the child, composes its spawner handle, launches it under its workdir in the parent's `children/`, and starts watching it. */
  async launch(input: DelegationLaunchRequest): Promise<DelegationLaunchReply> {
    const request = DelegationLaunchRequestSchema.parse(input);
    const delegationId = request.delegated ? (request.delegation_id ?? newDelegationId()) : undefined;
    if (delegationId && (this.launching.has(delegationId) || [...this.watched.values()].some((watched) => watched.delegationId === delegationId)))
      throw new MurmurError('E-DLG-003', `delegation ${delegationId} is launched already: a delegation id names one child`, { path: delegationId });
    if (delegationId) this.launching.add(delegationId);
    try {
      return await this.launchClaimed(request, delegationId);
    } finally {
      if (delegationId) this.launching.delete(delegationId);
    }
  }

  private async launchClaimed(request: Watched['request'], delegationId: string | undefined): Promise<DelegationLaunchReply> {
    const sessionId = newSessionId();
    const parentExecutor = request.parent.executor_id ?? this.executorOf(request.parent.session_id);
    const plan = await requestStaging(
      this.bus,
      {
        source: { kind: 'registry', name: request.capsule_name, version: request.capsule_version },
        env_names: Object.keys(request.env),
        ...(request.traceparent ? { traceparent: request.traceparent } : {}),
      },
      { timeoutMs: STAGE_TIMEOUT_MS },
    );
    const env = childEnvironment(request, plan);
    const url =
      plan.capsule.kind === 'agent' ? `${sessionUrl((await this.bus.request(commands.locateDoor, {}, { timeoutMs: 5_000 })).base_url, sessionId)}/` : undefined;
    const handle: SpawnerHandle | undefined = delegationId
      ? {
          session_id: request.parent.session_id,
          context_id: request.parent.context_id,
          delegation_id: delegationId,
          ...(request.parent.url ? { url: request.parent.url } : {}),
        }
      : undefined;
    // On the parent's executor, under its children/; a parent no executor holds gets its child anywhere.
    // Named by the child's session, never its delegation: a delegation's id is its completion's
    // credential, and a path is on sandboxes' command lines, which every local user may read.
    const launched = await this.bus.request(
      parentExecutor ? commands.launchOn.at(parentExecutor) : commands.launch,
      {
        session_id: sessionId,
        plan,
        ...(parentExecutor ? { child_of: { session_id: request.parent.session_id, name: sessionId } } : {}),
        ...(request.task !== undefined ? { task: request.task } : {}),
        env,
        ...(url ? { url } : {}),
        ...(handle ? { spawner: handle } : {}),
        ...(request.traceparent ? { traceparent: request.traceparent } : {}),
        ...(request.containment_floor ? { containment_floor: request.containment_floor } : {}),
        delegation_lineage: request.lineage ?? { root_session_id: request.parent.session_id, depth: 1 },
        roost: { url: request.roost_url, approval: request.approval },
        outlives_launcher: true,
        relay_output: false,
      },
      { timeoutMs: LAUNCH_TIMEOUT_MS },
    );
    const reply: DelegationLaunchReply = {
      ...(delegationId ? { delegation_id: delegationId } : {}),
      session_id: sessionId,
      url: launched.url,
      pid: launched.pid,
      process_start: launched.process_start,
      executor_id: launched.executor_id,
      workdir: launched.workdir,
      records_dir: launched.session_dir,
      ...(handle ? { spawner: spawnerHandleToEnv(handle) } : {}),
      token: launched.token,
    };
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => (settle = resolve));
    const watched: Watched = {
      settled,
      settle,
      delegationId,
      request,
      handle,
      reply,
      startedAt: Date.now(),
      deadline: undefined,
      endedBy: undefined,
      exited: false,
      finished: false,
      stderrTail: [],
      outcome: undefined,
      control: undefined,
    };
    this.watched.set(sessionId, watched);
    if (delegationId) {
      watched.control = this.bus.serve(commands.controlDelegation.at(delegationId), ({ action }) => this.control(watched, action));
      // Whoever holds the delegation may ask about it as soon as it has the reply.
      await this.bus.flush();
    }
    if (request.completion_deadline_secs !== undefined) {
      watched.deadline = setTimeout(() => void this.end(watched, 'deadline'), request.completion_deadline_secs * 1000);
    }
    this.log.info(
      { delegation_id: delegationId, session_id: sessionId, parent: request.parent.session_id, capsule: `${request.capsule_name}@${request.capsule_version}` },
      'delegation launched',
    );
    return reply;
  }

  private async control(watched: Watched, action: 'status' | 'shutdown'): Promise<DelegationControlReply> {
    if (action === 'shutdown' && !watched.exited) await this.end(watched, 'parent');
    return {
      exited: watched.exited,
      watcher_finished: watched.finished,
      stderr_tail: watched.stderrTail,
      ...(watched.outcome ? { outcome: watched.outcome } : {}),
    };
  }

  /** Ends the child (its executor stops it: TERM, then KILL); what it ended as is decided when its end is announced. */
  private async end(watched: Watched, by: 'parent' | 'deadline'): Promise<void> {
    if (watched.exited || watched.endedBy) return;
    watched.endedBy = by;
    const reason =
      by === 'parent' ? 'its parent ended the delegation' : `the delegation ran past its ${watched.request.completion_deadline_secs}s completion deadline`;
    try {
      await this.bus.request(commands.stopSession.at(watched.reply.session_id), { reason }, { timeoutMs: 10_000 });
    } catch (error) {
      this.log.warn({ session_id: watched.reply.session_id, err: error }, 'could not stop a delegated child');
    }
  }

  /**
   * Has the child's executor record the outcome in the child's workdir (and deliver it, when
   * `post`). An executor that cannot be asked — lost with the child — leaves the watcher to
   * deliver it and keep the record in the bus instead.
   */
  private async record(
    watched: Watched,
    handle: SpawnerHandle,
    outcome: DelegationOutcome,
    post: boolean,
    complain: (line: string) => void,
  ): Promise<DelegationOutcome> {
    try {
      const reply = await this.bus.request(
        commands.recordCompletion.at(watched.reply.executor_id),
        { session_id: watched.reply.session_id, outcome, post },
        { timeoutMs: 30_000 },
      );
      return reply.outcome;
    } catch (error) {
      const reason = error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error);
      complain(
        `[watcher] delegation ${outcome.delegation_id}: the child's executor ${watched.reply.executor_id} could not record its completion (${reason}); it is kept in the bus instead`,
      );
    }
    const recorded: DelegationOutcome = { ...outcome, ...(outcome.detail !== undefined ? { detail: boundDetail(outcome.detail) } : {}), delivered: false };
    let settled = recorded;
    if (post && handle.url) {
      const delivery = await deliverCompletion(handle, recorded, { bus: this.bus });
      settled = delivery.delivered ? { ...recorded, delivered: true } : { ...recorded, delivery_error: delivery.reason };
    }
    try {
      await (await this.bus.keyValue('murmur-completions')).put(settled.delegation_id, JSON.stringify(settled));
    } catch (error) {
      this.log.error({ delegation_id: settled.delegation_id, err: error }, 'could not keep a completion in the bus');
    }
    return settled;
  }

  private async onEnded(watched: Watched, event: SessionEnded): Promise<void> {
    watched.exited = true;
    watched.stderrTail = event.stderr_tail;
    if (watched.deadline) clearTimeout(watched.deadline);
    const handle = watched.handle;
    try {
      if (!handle) return;
      const base: DelegationOutcome = {
        delegation_id: handle.delegation_id,
        capsule_name: watched.request.capsule_name,
        capsule_version: watched.request.capsule_version,
        session_id: watched.reply.session_id,
        status: 'terminated',
        workdir: watched.reply.workdir,
        duration_ms: Date.now() - watched.startedAt,
        reported_by: 'launcher',
        delivered: false,
      };
      const complain = (line: string): void => {
        watched.stderrTail = [...watched.stderrTail, line].slice(-20);
        this.log.warn({ delegation_id: handle.delegation_id }, line);
      };
      if (watched.endedBy === 'parent') {
        // The child may have written its own account as it wound down; the launcher's is the last word.
        watched.outcome = await this.record(watched, handle, { ...base, detail: `ended by its parent (${exitStatus(event)})` }, false, complain);
      } else if (watched.endedBy === 'deadline') {
        const seconds = watched.request.completion_deadline_secs as number;
        watched.outcome = await this.record(
          watched,
          handle,
          { ...base, detail: `ended at its ${seconds}s completion deadline (${seconds}s deadline reached; ${exitStatus(event)})` },
          true,
          complain,
        );
      } else if (event.completion_reported) {
        // The child reported for itself, and said so on the bus (`delegation.completed`) already.
        return;
      } else {
        const tail = event.stderr_tail.length > 0 ? `\nstderr (last ${event.stderr_tail.length} lines):\n${event.stderr_tail.join('\n')}` : '';
        watched.outcome = await this.record(
          watched,
          handle,
          {
            ...base,
            status: 'crashed',
            detail: `the child ended without reporting: ${exitStatus(event)}${event.error ? ` (${event.error.code}: ${event.error.message})` : ''}${tail}`,
          },
          true,
          complain,
        );
      }
      this.bus.publish(topics.delegationCompleted, { parent_session_id: handle.session_id, outcome: watched.outcome });
    } catch (error) {
      this.log.error({ session_id: watched.reply.session_id, err: error }, 'could not record a delegated child’s ending');
    } finally {
      watched.finished = true;
      watched.settle();
      // The control subject stays answerable a while, so whoever holds the delegation can read how it ended.
      setTimeout(() => {
        watched.control?.unsubscribe();
        this.watched.delete(watched.reply.session_id);
      }, 60_000).unref();
    }
  }

  /**
   * Ends every child still running as its parent's doing, and waits (at most `withinMs`) until
   * each one's ending is recorded: for a runtime that is leaving with the parents, as in-process
   * `mur run` does, which had closed the children's executor first, so that a child ended as "the
   * executor is shutting down" and no `completion.json` or outcome was ever recorded.
   */
  async endAll(withinMs: number): Promise<void> {
    const running = [...this.watched.values()].filter((watched) => !watched.finished);
    for (const watched of running) void this.end(watched, 'parent');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(running.map((watched) => watched.settled)),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, withinMs);
      }),
    ]);
    clearTimeout(timer);
  }

  close(): void {
    this.ended.unsubscribe();
    this.completed.unsubscribe();
    for (const watched of this.watched.values()) {
      if (watched.deadline) clearTimeout(watched.deadline);
      watched.control?.unsubscribe();
    }
    this.watched.clear();
  }
}
