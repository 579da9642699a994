import { type ExecutorHeartbeat, type Log, WATCHER_BUCKET, executorLostAfterMs, lostSessionKey, sessionLostWithExecutor, topics } from '@murmur/shared';
import { type Bus, type KeyValueStore, type Subscription, busRoundTrip } from '@murmur/shared/bus';

/**
 * Which executors are alive, judged by their heartbeats (`executor.heartbeat`, every second), and
 * what becomes of the sessions of one that falls silent: an executor whose container was killed
 * cannot announce its sessions' ends, so after `lostAfterMs` of silence this announces them for
 * it — `session.ended` with `E-EXE-001` naming the executor — and everything that listens for a
 * session's end (a waiting `mur run`, the running records, a delegated child's watcher) hears it
 * as it would any end. New launches need nothing from here: a dead executor's connection is gone,
 * so the queue group no longer offers it work.
 *
 * Silence is judged only while this watcher can hear: while its own bus connection is away no
 * executor is judged, and when it is back every executor gets a fresh allowance. Nor is the time
 * this watcher itself was not running counted: a judgement's lateness (the process paused,
 * stalled or stopped; in `mur run` the executor shares its event loop, so one long stall used to
 * end its own sessions) is added to every executor's last heartbeat. Time is the monotonic
 * clock's, which a suspended machine does not advance. With several watchers, one announcement
 * per session is made (a create-once key decides which watcher).
 */

interface Known {
  lastSeen: number;
  intervalMs: number;
  /** The sessions it holds: its last heartbeat's, and those heard to start since. */
  sessions: Map<string, ExecutorHeartbeat['sessions'][number]>;
}

/**
 * How many lost executors are remembered as lost once their sessions are announced: enough that a
 * `mur ps` soon after a loss reads their sessions as gone without asking them, few enough that a
 * stack whose executors come and go for months (each restart is a new id) does not grow for ever.
 * One forgotten is asked like any executor, and its silence reads as unverified, not gone.
 */
export const LOST_EXECUTORS_REMEMBERED = 1_000;

export interface ExecutorMonitorOptions {
  bus: Bus;
  log: Log;
  /** Silence after which an executor is lost (`MURMUR_EXECUTOR_LOST_MS`, default 5 s). */
  lostAfterMs: number;
  watcherId: string;
}

export class ExecutorMonitor {
  private readonly executors = new Map<string, Known>();
  /** Executors judged lost, their sessions announced, oldest first (see `LOST_EXECUTORS_REMEMBERED`). */
  private readonly lost = new Set<string>();
  private readonly subscriptions: Subscription[];
  private readonly timer: NodeJS.Timeout;
  private hearing = true;
  private announcements: Promise<KeyValueStore> | undefined;
  private readonly judgeEveryMs: number;
  private lastJudged = performance.now();
  private readonly startedAt = performance.now();

  constructor(private readonly options: ExecutorMonitorOptions) {
    const { bus } = options;
    this.subscriptions = [
      bus.subscribe(topics.executorHeartbeat, (beat) => this.heard(beat)),
      bus.subscribe(topics.sessionStarted, (event) => {
        const known = this.known(event.executor_id);
        known.sessions.set(event.session_id, {
          session_id: event.session_id,
          capsule_name: event.capsule_name,
          capsule_version: event.capsule_version,
          pid: event.pid,
          process_start: event.process_start,
          started_at: event.started_at,
        });
      }),
      bus.subscribe(topics.sessionEnded, (event) => this.executors.get(event.executor_id)?.sessions.delete(event.session_id)),
    ];
    bus.onConnectionChange((state) => {
      this.hearing = state === 'reconnected';
      if (this.hearing) this.refreshAllowances();
    });
    this.judgeEveryMs = Math.min(1_000, options.lostAfterMs / 2);
    this.timer = setInterval(() => void this.judge(), this.judgeEveryMs);
    this.timer.unref();
  }

  /** Whether the executor is known to be lost (its sessions then are gone). */
  isLost(executorId: string): boolean {
    return this.lost.has(executorId);
  }

  /** The executor whose heartbeat (or start announcement) names the session, if one does. */
  ownerOf(sessionId: string): string | undefined {
    for (const [executorId, known] of this.executors) if (known.sessions.has(sessionId)) return executorId;
    return undefined;
  }

  /**
   * Whether every executor alive has had time to be heard since this watcher started: before that,
   * a session no heartbeat names yet may still be one a live executor holds.
   */
  get heardEveryone(): boolean {
    return performance.now() - this.startedAt >= this.options.lostAfterMs;
  }

  private known(executorId: string): Known {
    let known = this.executors.get(executorId);
    if (!known) {
      if (this.lost.delete(executorId))
        this.options.log.warn(
          { executor_id: executorId },
          'an executor reported lost is answering again; the sessions announced ended with it are not revived',
        );
      known = { lastSeen: performance.now(), intervalMs: 1_000, sessions: new Map() };
      this.executors.set(executorId, known);
    }
    return known;
  }

  private heard(beat: ExecutorHeartbeat): void {
    const known = this.known(beat.executor_id);
    known.lastSeen = performance.now();
    known.intervalMs = beat.interval_ms;
    // A heartbeat lists every session its executor holds (from the moment it announced the start),
    // and arrives after anything the executor announced before it: a session it no longer lists
    // has ended, whether or not this watcher heard that end (a reconnecting bus drops messages).
    // Kept, it would be announced lost with its executor long after it ended.
    known.sessions = new Map(beat.sessions.map((session) => [session.session_id, session]));
  }

  /** Every executor's silence counted from now. */
  private refreshAllowances(): void {
    const now = performance.now();
    for (const known of this.executors.values()) known.lastSeen = now;
  }

  /** A judgement is under way (it may wait on the bus): the next is skipped, not stacked. */
  private judging = false;

  private async judge(): Promise<void> {
    if (this.judging) return;
    this.judging = true;
    try {
      await this.judgeNow();
    } finally {
      this.judging = false;
    }
  }

  /** Asks the bus itself at each judgement and forgives every executor the time that took (`busRoundTrip`); false when it did not answer. */
  private async busAnswered(): Promise<boolean> {
    const { answered, waitedMs: waited } = await busRoundTrip(this.options.bus);
    if (waited > this.judgeEveryMs)
      this.options.log.warn({ waited_ms: Math.round(waited) }, 'the bus did not answer for a while; no executor is judged by that silence');
    const now = performance.now();
    for (const known of this.executors.values()) known.lastSeen = Math.min(now, known.lastSeen + waited);
    // Forgiven once: not again below as this process being late to judge.
    this.lastJudged += waited;
    return answered;
  }

  private async judgeNow(): Promise<void> {
    if (this.hearing && !(await this.busAnswered())) return;
    const now = performance.now();
    // However late this judgement comes, that much of every silence is this process's own (it was
    // not running, or not on time): it is forgiven, so silence counts only time kept on schedule.
    // A watcher that is always somewhat late still declares a dead executor, a little later.
    const late = Math.max(0, now - this.lastJudged - this.judgeEveryMs);
    this.lastJudged = now;
    if (late > 0) for (const known of this.executors.values()) known.lastSeen = Math.min(now, known.lastSeen + late);
    if (late > this.options.lostAfterMs / 2)
      this.options.log.warn({ late_ms: Math.round(late) }, 'the watcher was not running for a while; that time is not counted as any executor’s silence');
    if (!this.hearing) return;
    for (const [executorId, known] of [...this.executors]) {
      // A judgement still announcing (a slow key-value store) is overtaken by the next: an executor
      // one of them declared lost and that has answered since is another entry, not this one.
      if (this.executors.get(executorId) !== known || now - known.lastSeen < executorLostAfterMs(this.options.lostAfterMs, known.intervalMs)) continue;
      // Lost: it leaves the executors judged, and is remembered as lost (a bounded memory).
      this.executors.delete(executorId);
      this.lost.add(executorId);
      if (this.lost.size > LOST_EXECUTORS_REMEMBERED) this.lost.delete(this.lost.values().next().value as string);
      const silentFor = now - known.lastSeen;
      this.options.log.warn({ executor_id: executorId, silent_ms: silentFor, sessions: known.sessions.size }, 'executor lost');
      for (const session of [...known.sessions.values()]) {
        known.sessions.delete(session.session_id);
        await this.announce(executorId, session, silentFor).catch((error: unknown) =>
          this.options.log.error({ session_id: session.session_id, err: error }, 'could not announce the end of a lost session'),
        );
      }
    }
  }

  private async announce(executorId: string, session: ExecutorHeartbeat['sessions'][number], silentFor: number): Promise<void> {
    if (!this.announcements) {
      this.announcements = this.options.bus.keyValue(WATCHER_BUCKET);
      this.announcements.catch(() => (this.announcements = undefined));
    }
    const store = await this.announcements;
    if (!(await store.create(lostSessionKey(session.session_id), this.options.watcherId))) return;
    const event = sessionLostWithExecutor(session, executorId, silentFor);
    this.options.bus.publish(topics.sessionEnded, event);
  }

  close(): void {
    clearInterval(this.timer);
    for (const subscription of this.subscriptions) subscription.unsubscribe();
  }
}
