import {
  type Log,
  QUEUE_GROUPS,
  type RunningRecord,
  type SessionListReply,
  type SessionStarted,
  commands,
  executorLostSetting,
  newId,
  topics,
} from '@murmur/shared';
import { DelegationWatcher } from './delegations.js';
import { ExecutorMonitor } from './executors.js';

export { DelegationWatcher } from './delegations.js';
export { ExecutorMonitor, LOST_EXECUTORS_REMEMBERED } from './executors.js';
import type { Bus, Subscription } from '@murmur/shared/bus';
import { type ProcessState, listRunningRecords, processState, removeRunningRecord, verifyRunningRecord, writeRunningRecord } from '@murmur/shared/node';

/**
 * The watcher launches and watches delegated children (`delegations.ts`), and keeps the machine's
 * map of running sessions: a running record for every session
 * with a door, written when the session starts and removed when it ends, in `$MURMUR_HOME/running`
 * (seeds `running.rs`). It answers `watcher.sessions` with the records verified in three layers —
 * layers 1–2 asked of the executor that owns the pid, since only that machine can read it — and
 * prunes a record only on evidence that its process is gone. It also judges executors by their
 * heartbeats (`executors.ts`) and ends the sessions of one that is lost.
 */
export interface WatcherService {
  /** Ends the delegated children it watches as their parents' doing, and waits until their endings are recorded (`DelegationWatcher.endAll`). */
  endDelegations(withinMs: number): Promise<void>;
  close(): Promise<void>;
}

export interface WatcherOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  instanceId?: string;
}

const PROBE_TIMEOUT_MS = 3_000;

export function startWatcherService(options: WatcherOptions): WatcherService {
  const { bus, log } = options;
  const env = options.env ?? process.env;
  const instanceId = options.instanceId ?? `watcher-${newId('request').slice(4, 16)}`;
  /** Which executor holds each session's pid, learnt from `session.started`. */
  const owners = new Map<string, string>();
  const executors = new ExecutorMonitor({
    bus,
    log,
    lostAfterMs: executorLostSetting(env),
    watcherId: instanceId,
  });

  const recordOf = (event: SessionStarted): RunningRecord | undefined => {
    if (!event.url) return undefined;
    return {
      session_id: event.session_id,
      url: event.url,
      pid: event.pid,
      process_start: event.process_start,
      capsule_name: event.capsule_name,
      capsule_version: event.capsule_version,
      workdir: event.workdir,
      outlives_launcher: event.outlives_launcher,
      started_at: event.started_at,
    };
  };

  /**
   * Which executor holds a session: heard from its start, or — for a watcher that started after
   * it (a restart, a new replica) — from the executors' heartbeats, which name every session each holds.
   */
  const ownerOf = (sessionId: string): string | undefined => owners.get(sessionId) ?? executors.ownerOf(sessionId);

  /** Layers 1–2, read by the owning executor when one is known, else here. */
  const layersOneAndTwo = async (record: RunningRecord): Promise<ProcessState> => {
    const owner = ownerOf(record.session_id);
    if (owner && executors.isLost(owner)) return { state: 'gone', reason: `its executor ${owner} was lost` };
    // Just started, this watcher may not have heard yet from the executor that holds it: its own
    // process table (another container's, on a stack) is no evidence, and a live session judged
    // gone by it was dropped from every later mur ps.
    if (!owner && !executors.heardEveryone)
      return { state: 'unverified', reason: 'this watcher has only just started and has not yet heard which executor holds it: ask again in a few seconds' };
    if (owner) {
      try {
        return await bus.request(commands.probeProcess.at(owner), { pid: record.pid, process_start: record.process_start }, { timeoutMs: PROBE_TIMEOUT_MS });
      } catch (error) {
        // An executor that does not answer says nothing about the process: unverified, not gone.
        return { state: 'unverified', reason: `executor ${owner} did not answer for pid ${record.pid}: ${(error as Error).message}` };
      }
    }
    return processState(record);
  };

  /** Layer 3 on the stack: the session's own card, asked over the bus as any door asks it. */
  const cardOverBus = async (record: RunningRecord): Promise<string> => {
    const reply = await bus.request(commands.sessionRpc.at(record.session_id), { method: 'card' }, { timeoutMs: PROBE_TIMEOUT_MS }).catch((error: unknown) => {
      throw new Error(`session ${record.session_id} did not answer for its card on the bus (${error instanceof Error ? error.message : String(error)})`);
    });
    if (!reply.card) throw new Error(`session ${record.session_id} answered without a card`);
    return reply.card.session_id;
  };

  const delegations = new DelegationWatcher(bus, log, (sessionId) => owners.get(sessionId));
  const subscriptions: Subscription[] = [
    bus.serve(commands.launchDelegation, (request) => delegations.launch(request), { queue: QUEUE_GROUPS.watcher }),
    bus.subscribe(topics.sessionStarted, (event) => {
      owners.set(event.session_id, event.executor_id);
      const record = recordOf(event);
      if (!record) return;
      try {
        writeRunningRecord(record, env);
      } catch (error) {
        // Failing to record never fails a session: it only cannot be addressed by `mur ps`.
        log.warn({ session_id: event.session_id, err: error }, 'could not write the running record');
      }
    }),
    bus.subscribe(topics.sessionEnded, (event) => {
      // A session lost with its executor keeps its record until 'mur ps' has shown it gone (and pruned it).
      if (event.error?.code === 'E-EXE-001') return;
      owners.delete(event.session_id);
      try {
        removeRunningRecord(event.session_id, env);
      } catch (error) {
        log.warn({ session_id: event.session_id, err: error }, 'could not remove the running record');
      }
    }),
    bus.serve(commands.listSessions, async (): Promise<SessionListReply> => {
      const records = listRunningRecords(env);
      const sessions = await Promise.all(
        records.map(async (record) => {
          const liveness = await verifyRunningRecord(record, await layersOneAndTwo(record), cardOverBus);
          const owner = ownerOf(record.session_id);
          if (liveness.liveness === 'gone') {
            removeRunningRecord(record.session_id, env);
            owners.delete(record.session_id);
          }
          return {
            ...record,
            liveness: liveness.liveness,
            ...('reason' in liveness ? { reason: liveness.reason } : {}),
            ...(owner ? { executor_id: owner } : {}),
          };
        }),
      );
      return { sessions };
    }),
  ];

  return {
    endDelegations: (withinMs) => delegations.endAll(withinMs),
    async close() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      executors.close();
      delegations.close();
    },
  };
}
