import {
  type Containment,
  type DelegationLineage,
  type DelegationOutcome,
  type LaunchRequestSchema,
  MurmurError,
  SPAWN_APPROVAL_HEADER,
  SPAWN_CREDENTIAL_HEADER,
  type SessionCall,
  type SessionReply,
  boundDetail,
  commands,
  completionMessageText,
  harnessEnvironment,
  newDelegationId,
  newMessageId,
} from '@murmur/shared';
import type { z } from 'zod';
import type { ExecutorEnvironment } from './session.js';

/** What a session lends its delegations: who it is, what it was launched with, and its host and records. */
export interface DelegatingSession {
  readonly id: string;
  readonly request: z.output<typeof LaunchRequestSchema>;
  readonly environment: Pick<ExecutorEnvironment, 'bus' | 'log' | 'executorId' | 'roostUrl' | 'roostToken' | 'settings' | 'delegationTrees'>;
  /** The containment floor the session runs at, which binds its children too. */
  floor(): Containment;
  /** The session's trace context, when it exports spans: a child's launch continues it. */
  traceparent(): string | undefined;
  /** A line of the runtime's about the session, kept with its stderr (the tail its end reports). */
  warn(line: string): void;
  /** A line for the session's `bootstrap.log`. */
  note(line: string): void;
  callHost(call: SessionCall): Promise<SessionReply>;
}

export type DelegateResult = { ok: true; value: { delegation_id: string; session_id: string; workdir: string } } | { ok: false; error: string };

/**
 * The parent's side of delegation for one session: its registration with roost (the credential
 * roost hands back, which the guest never sees), the children its model delegates to
 * (`delegate-task`), and their end with it — no child outlives its parent. A child's own side (its
 * completion, recorded and posted) stays with its session, which holds its result.
 */
export class SessionDelegations {
  /** roost's credential for this session, never given to the guest. */
  private roostCredential: string | undefined;
  /** Why the session holds no roost credential, when roost would not register it: said to a model that delegates. */
  private unregistered: string | undefined;
  /**
   * Every delegation this session launched (or is launching) that has not been heard to end: the
   * conversation it was for, its place in the delegation tree, and when its launch was answered.
   * Each is ended with the session, so no child outlives its parent.
   */
  private readonly running = new Map<string, { contextId: string; release: () => void; launched: Promise<unknown> }>();
  /** The session's delegations have been ended (it is ending): none is launched any more. */
  private ended = false;

  constructor(private readonly session: DelegatingSession) {}

  /** The roost this session registers with and delegates through: its launch's, else the executor's. */
  get roostUrl(): string | undefined {
    return this.session.request.roost?.url ?? this.session.environment.roostUrl;
  }

  /** Where a child this session delegates to sits: under this session's root, one delegation deeper. */
  private childLineage(): DelegationLineage {
    const own = this.session.request.delegation_lineage;
    return own ? { root_session_id: own.root_session_id, depth: own.depth + 1 } : { root_session_id: this.session.id, depth: 1 };
  }

  /**
   * roost's token, as a bearer, only for the roost this executor was configured with: a launch may
   * name another roost (`mur run` passes its own `MURMUR_ROOST_URL`), and a token sent wherever a
   * launcher points would hand it to any bus client with a server of its own.
   */
  private roostTokenFor(url: string): Record<string, string> {
    const { roostToken: token, roostUrl: own } = this.session.environment;
    if (token === undefined || own === undefined) return {};
    try {
      return new URL(url).origin === new URL(own).origin ? { authorization: `Bearer ${token}` } : {};
    } catch {
      return {};
    }
  }

  /**
   * A session that may spawn, or was spawned, registers with roost and keeps the credential roost
   * hands back (the guest never sees it). A child registers under its approval, and is not run
   * when roost refuses it: a child roost did not referee does not run.
   */
  async register(): Promise<void> {
    const { request } = this.session;
    const plan = request.plan;
    const approval = request.roost?.approval;
    const roostUrl = this.roostUrl;
    if (!roostUrl || (approval === undefined && plan.policy.spawn_allow.length === 0)) return;
    const refused = (reason: string): MurmurError =>
      new MurmurError('E-DLG-002', `roost at ${roostUrl} refused to register ${plan.capsule.name}@${plan.capsule.version}: ${reason}`, {
        hint: approval
          ? 'the approval may have expired (60 s) or been used already: ask roost for a new one'
          : 'check MURMUR_ROOST_URL and that roost is running',
      });
    let response: Response;
    try {
      response = await fetch(new URL('/v1/sessions', roostUrl), {
        method: 'POST',
        // Under an approval the approval is the credential; without one, roost's token when it has one.
        headers: {
          'content-type': 'application/json',
          ...(approval ? { [SPAWN_APPROVAL_HEADER]: approval } : this.roostTokenFor(roostUrl)),
        },
        body: JSON.stringify({
          session_id: this.session.id,
          capsule_name: plan.capsule.name,
          capsule_version: plan.capsule.version,
          policy: plan.policy,
          ...(plan.capsule.origin.kind === 'registry' ? { capsule_sha256: plan.capsule.origin.sha256 } : {}),
        }),
        signal: AbortSignal.timeout(10_000),
      });
    } catch (error) {
      if (approval) throw refused(`roost did not answer (${(error as Error).message})`);
      this.unregistered = `roost at ${roostUrl} did not answer its registration (${(error as Error).message})`;
      this.session.warn(`warning: could not register with roost at ${roostUrl}; this session cannot delegate: ${(error as Error).message}`);
      return;
    }
    const body = (await response.json().catch(() => ({}))) as { credential?: string; error?: string };
    if (!response.ok || !body.credential) {
      if (approval) throw refused(body.error ?? `HTTP ${response.status}`);
      const why = `${body.error ?? `HTTP ${response.status}`}${response.status === 401 ? '; a roost that takes a token is given it in MURMUR_ROOST_TOKEN' : ''}`;
      this.unregistered = `roost at ${roostUrl} refused to register it (${why})`;
      this.session.warn(`warning: roost at ${roostUrl} refused to register this session (${why}); it cannot delegate`);
      return;
    }
    this.roostCredential = body.credential;
  }

  /** Tells roost the session has ended, so its credential approves nothing more. Best effort: roost may be away. */
  async deregister(): Promise<void> {
    const roostUrl = this.roostUrl;
    if (!roostUrl || !this.roostCredential) return;
    await fetch(new URL(`/v1/sessions/${this.session.id}`, roostUrl), {
      method: 'DELETE',
      headers: { [SPAWN_CREDENTIAL_HEADER]: this.roostCredential },
      signal: AbortSignal.timeout(5_000),
    }).catch(() => undefined);
  }

  /**
   * The model's `delegate-task`: roost approves the child against this session's envelope, a
   * watcher launches it with the task, and the host awaits the completion the child will post to
   * this session's door. Every refusal is the tool's error text, which the model reads.
   */
  async delegate(request: { capsule: string; version: string; task: string; context_id: string }): Promise<DelegateResult> {
    const { environment } = this.session;
    const roostUrl = this.roostUrl;
    if (!roostUrl)
      return {
        ok: false,
        error:
          'E-DLG-003: delegation needs roost, and MURMUR_ROOST_URL is not set for this session; its launcher sets it to a roost that holds the capsules it may delegate to',
      };
    if (!this.roostCredential)
      return {
        ok: false,
        error: `E-DLG-003: this session is not registered with roost, so it cannot delegate: ${this.unregistered ?? `roost at ${roostUrl} gave it no credential`}`,
      };
    // Bounds roost cannot see (a capsule allowed to spawn itself fits its own ceiling), checked
    // before an approval is asked for, so a refused child costs roost nothing.
    const { delegationMaxDepth, delegationMaxTree } = environment.settings;
    const lineage = this.childLineage();
    if (lineage.depth > delegationMaxDepth)
      return {
        ok: false,
        error: `E-DLG-003: the delegation of ${request.capsule}@${request.version} is refused: it would run ${lineage.depth} delegation${lineage.depth === 1 ? '' : 's'} deep, and this executor allows ${delegationMaxDepth} (MURMUR_DELEGATION_MAX_DEPTH); do the work in this session instead`,
      };
    const release = environment.delegationTrees.take(lineage.root_session_id, delegationMaxTree);
    if (!release)
      return {
        ok: false,
        error: `E-DLG-003: the delegation of ${request.capsule}@${request.version} is refused: the delegation tree this session belongs to already has ${delegationMaxTree} delegated session${delegationMaxTree === 1 ? '' : 's'} running, the most this executor allows (MURMUR_DELEGATION_MAX_TREE); wait for a delegation to complete, or do the work in this session`,
      };
    const refused = (error: string) => {
      release();
      return { ok: false as const, error };
    };
    let approval: string;
    try {
      const response = await fetch(new URL('/spawn', roostUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/json', [SPAWN_CREDENTIAL_HEADER]: this.roostCredential },
        body: JSON.stringify({ name: request.capsule, version: request.version }),
        signal: AbortSignal.timeout(10_000),
      });
      const body = (await response.json().catch(() => ({}))) as { approval?: string; error?: string; code?: string };
      if (!response.ok || !body.approval)
        return refused(
          `roost refused the delegation of ${request.capsule}@${request.version}: ${typeof body.code === 'string' ? `${body.code}: ` : ''}${body.error ?? `HTTP ${response.status}`}`,
        );
      approval = body.approval;
    } catch (error) {
      return refused(`E-DLG-003: roost at ${roostUrl} did not answer the delegation of ${request.capsule}@${request.version}: ${(error as Error).message}`);
    }
    if (this.ended) return refused(`E-DLG-003: the delegation of ${request.capsule}@${request.version} is refused: this session is ending`);
    const launch = this.session.request;
    // What the parent's launcher gave it, as far as its env.allow and strip_env let anything of it through.
    const values = harnessEnvironment(launch.plan.policy, launch.env);
    const traceparent = this.session.traceparent();
    // The id is minted here, and the delegation held, before the child exists: a child that ends
    // at once is heard of (`ended`) while its launch is still being answered.
    const delegationId = newDelegationId();
    const launching = environment.bus.request(
      commands.launchDelegation,
      {
        approval,
        delegation_id: delegationId,
        roost_url: roostUrl,
        capsule_name: request.capsule,
        capsule_version: request.version,
        parent: {
          session_id: this.session.id,
          context_id: request.context_id,
          ...(launch.url ? { url: launch.url } : {}),
          executor_id: environment.executorId,
        },
        env: values,
        task: request.task,
        completion_deadline_secs: environment.settings.delegationDeadlineSecs,
        ...(traceparent ? { traceparent } : {}),
        containment_floor: this.session.floor(),
        lineage,
      },
      { timeoutMs: 120_000 },
    );
    this.running.set(delegationId, { contextId: request.context_id, release, launched: launching.catch(() => undefined) });
    try {
      const launched = await launching;
      // The session began to end while the launch was answered: the child does not outlive it.
      if (this.ended) {
        release();
        await this.shutDown(delegationId);
        return { ok: false, error: `the delegation of ${request.capsule}@${request.version} was ended as it launched: this session is ending` };
      }
      return { ok: true, value: { delegation_id: delegationId, session_id: launched.session_id, workdir: launched.workdir } };
    } catch (error) {
      this.running.delete(delegationId);
      release();
      return {
        ok: false,
        error: `the delegation of ${request.capsule}@${request.version} could not be launched: ${error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error)}`,
      };
    }
  }

  /**
   * The session is ending: each delegation it leaves running is ended with it (one that has
   * ended already is left as it is): a child runs on its parent's grants, for its parent's task,
   * and neither is there any more. A watcher that does not answer is said in the executor's log.
   */
  async endAll(): Promise<void> {
    // From here no delegation is launched, and one whose launch is still being answered is ended
    // as soon as it has been (`delegate`).
    this.ended = true;
    const ids = [...this.running.keys()];
    for (const delegation of this.running.values()) delegation.release();
    this.running.clear();
    await Promise.all(ids.map((id) => this.shutDown(id)));
  }

  private async shutDown(id: string): Promise<void> {
    try {
      await this.session.environment.bus.request(commands.controlDelegation.at(id), { action: 'shutdown' }, { timeoutMs: 10_000 });
    } catch (error) {
      this.session.environment.log.warn({ session_id: this.session.id, delegation_id: id, err: error }, 'could not end a delegation its parent left running');
    }
  }

  /**
   * A child of this session ended on this executor: its place in the delegation tree is given back.
   * The delegation stays held until its outcome is heard (`completed`), which may yet need
   * delivering to the task awaiting it.
   */
  childEnded(delegationId: string): void {
    this.running.get(delegationId)?.release();
  }

  /**
   * One of this session's delegations has ended (`delegation.completed`): it is no longer one to end
   * with the session. A completion whose post failed (the bus timed out, the door was away) is
   * delivered here by the parent's own runtime, to the task that awaits it — else that task waits
   * until the session ends. One the task no longer awaits (it was delivered after all, or the task
   * was canceled) is refused by the host as any late completion is, and only said in the records.
   */
  async completed(outcome: DelegationOutcome): Promise<void> {
    const delegation = this.running.get(outcome.delegation_id);
    if (!delegation) return;
    this.running.delete(outcome.delegation_id);
    delegation.release();
    if (outcome.delivered || outcome.delivery_error === undefined) return;
    // A child that ended at once may be heard of before its task awaits it: not before the launch is answered.
    await delegation.launched;
    const reply = await this.session.callHost({
      method: 'send',
      message_id: newMessageId(),
      context_id: delegation.contextId,
      text: completionMessageText(outcome),
      delegation_id: outcome.delegation_id,
      completion_session: this.session.id,
    });
    const refusal =
      reply.error?.message ?? (reply.task?.state === 'rejected' ? 'the session rejected it: its queue is full or it has stopped taking work' : undefined);
    this.session.note(
      `[executor] delegation ${outcome.delegation_id}: its completion was not delivered (${boundDetail(outcome.delivery_error)}); ${
        refusal !== undefined ? `delivering it from this executor was refused too: ${boundDetail(refusal)}` : 'delivered from this executor instead'
      }`,
    );
  }
}
