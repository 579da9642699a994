import {
  type DashboardSession,
  type DashboardSnapshot,
  type EgressDecision,
  type ExecutorHeartbeat,
  type SessionEnded,
  type SessionStarted,
  topics,
} from '@murmur/shared';
import type { Bus, Subscription } from '@murmur/shared/bus';

/**
 * What the dashboard shows, kept from the bus as it is told: every session (from `session.started`,
 * or from an executor's heartbeat for one that started before this watcher), its task
 * (`session.activity`), its end (`session.ended`), its place in a delegation (`spawned_by`,
 * `delegation.completed`), and the recent egress decisions (`egress.decision`). The board holds
 * only what those events carry — ids, names, states, counts — so nothing it hands a browser can be
 * a secret. Ended sessions and decisions are kept to a bound, oldest dropped first, so a watcher
 * that runs for months holds a page's worth, not a history.
 */

export type BoardChange = { kind: 'session'; session: DashboardSession } | { kind: 'egress'; decision: EgressDecision };

/** Where to read a session's trace: what the timeline asks its executor for. */
export interface TraceLocation {
  executorId: string;
  traceFile: string;
}

const ENDED_SESSIONS_KEPT = 200;
const EGRESS_DECISIONS_KEPT = 200;
/** Heartbeats in a row that must leave a running session out before it is shown ended. */
const UNLISTED_BEATS_ENDED = 2;

export class DashboardBoard {
  private readonly sessions = new Map<string, DashboardSession>();
  private readonly traceFiles = new Map<string, string>();
  /** Running sessions their executor's last heartbeats did not list, with how many in a row. */
  private readonly unlisted = new Map<string, number>();
  private readonly egress: EgressDecision[] = [];
  private readonly listeners = new Set<(change: BoardChange) => void>();
  private readonly subscriptions: Subscription[];

  constructor(
    bus: Bus,
    private readonly watcherId: string,
  ) {
    this.subscriptions = [
      bus.subscribe(topics.sessionStarted, (event) => this.started(event)),
      bus.subscribe(topics.sessionEnded, (event) => this.ended(event)),
      bus.subscribe(topics.executorHeartbeat, (beat) => this.heard(beat)),
      bus.subscribe(topics.sessionActivity, (activity) => {
        this.update(activity.session_id, (session) => ({
          ...session,
          task: { task_id: activity.task_id, state: activity.state, turn: activity.turn, at: activity.at },
        }));
      }),
      bus.subscribe(topics.delegationCompleted, ({ parent_session_id, outcome }) => {
        this.update(outcome.session_id, (session) => ({
          ...session,
          parent_session_id: session.parent_session_id ?? parent_session_id,
          completion: { status: outcome.status, reported_by: outcome.reported_by, delivered: outcome.delivered },
        }));
      }),
      bus.subscribe(topics.egressDecision, (decision) => {
        this.egress.push(decision);
        if (this.egress.length > EGRESS_DECISIONS_KEPT) this.egress.shift();
        this.tell({ kind: 'egress', decision });
      }),
    ];
  }

  /** Everything as it stands: what a page is drawn from when it connects. */
  snapshot(): DashboardSnapshot {
    return {
      watcher_id: this.watcherId,
      generated_at: new Date().toISOString(),
      sessions: [...this.sessions.values()],
      egress: [...this.egress],
    };
  }

  session(sessionId: string): DashboardSession | undefined {
    return this.sessions.get(sessionId);
  }

  /** Where the session's trace lies, when this board saw it start. */
  traceOf(sessionId: string): TraceLocation | undefined {
    const session = this.sessions.get(sessionId);
    const traceFile = this.traceFiles.get(sessionId);
    return session && traceFile ? { executorId: session.executor_id, traceFile } : undefined;
  }

  /** Calls `listener` with every change from now on; returns how to stop. */
  listen(listener: (change: BoardChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private started(event: SessionStarted): void {
    const known = this.sessions.get(event.session_id);
    this.sessions.set(event.session_id, {
      session_id: event.session_id,
      capsule_name: event.capsule_name,
      capsule_version: event.capsule_version,
      executor_id: event.executor_id,
      state: known?.state ?? 'running',
      agent: event.url !== null,
      started_at: event.started_at,
      ended_at: known?.ended_at ?? null,
      error_code: known?.error_code ?? null,
      task: known?.task ?? null,
      parent_session_id: event.spawned_by ?? known?.parent_session_id ?? null,
      completion: known?.completion ?? null,
    });
    if (event.trace_file !== undefined) this.traceFiles.set(event.session_id, event.trace_file);
    this.tell({ kind: 'session', session: this.sessions.get(event.session_id) as DashboardSession });
  }

  private ended(event: SessionEnded): void {
    const state = event.error?.code === 'E-EXE-001' ? 'lost' : event.exit_status;
    const known = this.sessions.get(event.session_id);
    const base: DashboardSession =
      known ?? unseenSession({ ...event, started_at: new Date(Date.parse(event.ended_at) - event.duration_ms).toISOString() }, event.executor_id, state);
    this.unlisted.delete(event.session_id);
    this.sessions.set(event.session_id, { ...base, state, ended_at: event.ended_at, error_code: event.error?.code ?? null });
    this.tell({ kind: 'session', session: this.sessions.get(event.session_id) as DashboardSession });
    this.forgetOldest();
  }

  /**
   * A heartbeat lists every session its executor holds: one this board never saw start (it started
   * before this watcher) is added, and a running one it no longer lists has ended unheard (its
   * `session.ended` lost while the bus reconnected), shown `ended` rather than running for ever.
   * Only after two heartbeats in a row without it: an end announced as the session left the list
   * has that long to arrive with its real status.
   */
  private heard(beat: ExecutorHeartbeat): void {
    const held = new Set<string>();
    for (const session of beat.sessions) {
      held.add(session.session_id);
      this.unlisted.delete(session.session_id);
      if (this.sessions.has(session.session_id)) continue;
      this.sessions.set(session.session_id, unseenSession(session, beat.executor_id, 'running'));
      this.tell({ kind: 'session', session: this.sessions.get(session.session_id) as DashboardSession });
    }
    for (const session of [...this.sessions.values()]) {
      if (session.state !== 'running' || session.executor_id !== beat.executor_id || held.has(session.session_id)) continue;
      const misses = (this.unlisted.get(session.session_id) ?? 0) + 1;
      if (misses < UNLISTED_BEATS_ENDED) {
        this.unlisted.set(session.session_id, misses);
        continue;
      }
      this.unlisted.delete(session.session_id);
      this.sessions.set(session.session_id, { ...session, state: 'ended', ended_at: new Date().toISOString() });
      this.tell({ kind: 'session', session: this.sessions.get(session.session_id) as DashboardSession });
      this.forgetOldest();
    }
  }

  private update(sessionId: string, change: (session: DashboardSession) => DashboardSession): void {
    const session = this.sessions.get(sessionId);
    if (!session) return;
    const changed = change(session);
    this.sessions.set(sessionId, changed);
    this.tell({ kind: 'session', session: changed });
  }

  private forgetOldest(): void {
    const ended = [...this.sessions.values()].filter((session) => session.state !== 'running');
    for (const session of ended.slice(0, Math.max(0, ended.length - ENDED_SESSIONS_KEPT))) {
      this.sessions.delete(session.session_id);
      this.traceFiles.delete(session.session_id);
    }
  }

  private tell(change: BoardChange): void {
    for (const listener of this.listeners) listener(change);
  }

  close(): void {
    for (const subscription of this.subscriptions) subscription.unsubscribe();
    this.listeners.clear();
  }
}

/** A session this board never saw start: only what an end or a heartbeat tells of it (a heartbeat says whether it is an agent). */
function unseenSession(
  seen: { session_id: string; capsule_name: string; capsule_version: string; started_at: string; agent?: boolean | undefined },
  executorId: string,
  state: DashboardSession['state'],
): DashboardSession {
  return {
    session_id: seen.session_id,
    capsule_name: seen.capsule_name,
    capsule_version: seen.capsule_version,
    executor_id: executorId,
    state,
    agent: seen.agent === true,
    started_at: seen.started_at,
    ended_at: null,
    error_code: null,
    task: null,
    parent_session_id: null,
    completion: null,
  };
}
