import path from 'node:path';
import {
  BLOB_BUCKET,
  SUBPROCESS_BASELINE,
  type LaunchReply,
  type LaunchRequestSchema,
  type Log,
  MurmurError,
  QUEUE_GROUPS,
  SESSION_LOCATIONS_BUCKET,
  type SessionLocation,
  SessionLocationSchema,
  WATCHER_BUCKET,
  commands,
  executorLostAfterMs,
  executorLostSetting,
  lostSessionKey,
  newId,
  numberSetting,
  servicePortIn,
  topics,
  runtimeMetrics,
} from '@murmur/shared';
import type { Bus, KeyValueStore, Subscription } from '@murmur/shared/bus';
import type { z } from 'zod';
import { BlobCache, blobCacheMaxBytes, cacheDir, keepBlobsWithin, keepCacheSwept, murmurHome, processState, systemFailureHint } from '@murmur/shared/node';
import { LocalBundles } from './bundles.js';
import { sweepAbandonedGroups } from './cgroup-sweep.js';
import { type ConfineProbe, executeOnlyNode } from './confinement.js';
import { HostPool } from './host-pool.js';
import { assessContainment, effectiveGrants, strongestFloor } from './containment.js';
import { isolationSummary, probeHost } from './host-probe.js';
import { pullForSession } from './pull.js';
import { traceFileInWorkdir } from './records.js';
import { DelegationTrees } from './delegation-trees.js';
import { executorSettings } from './settings.js';
import { readSessionFiles } from './session-files.js';
import { CODE_ROOT, type EndedSession, type ExecutorEnvironment, HOST_ENTRY, SANDBOX_HIDDEN, hostProcessEnv, Session, type SessionEnd } from './session.js';
import { OWN_LISTENERS, type OwnListener, OwnEndpoints } from './own-endpoints.js';
import { keepWorkdirsWithinRetention } from './workdir-retention.js';

export { Session, type SessionEnd } from './session.js';
export { probeNamespaces, bubblewrapArguments, type NamespaceProbe } from './sandbox.js';
export { probeCgroups, type CgroupProbe } from './cgroup.js';
export { probeConfinement, type ConfineProbe } from './confinement.js';
export { EgressPolicy } from './egress.js';
export { probeHost, isolationSummary, canSpawnSubprocesses, subprocessRefusals, type HostProbe } from './host-probe.js';
export { toolchainHelperGaps, toolchainHelperWarning, resolveInvokedBinary, pathDirectories, type ToolchainHelperGap } from './toolchain-helpers.js';
export { assessContainment, containmentRefusal, strongestFloor, type ContainmentAssessment, type EnforcementTier } from './containment.js';
export { readSessionFiles } from './session-files.js';

export interface ExecutorServiceOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /** The id the process announces itself by; one is made up when running inside another process. */
  instanceId?: string;
  /**
   * The warm pool: none unless asked for. The executor service asks for `DEFAULT_POOL_SIZE`; an
   * in-process `mur run` for one host for its own launch's workdir base, started with the executor
   * and not refilled. `MURMUR_EXECUTOR_POOL` sets the size of either (0 turns it off).
   */
  pool?: { base?: string; size: number; refill: boolean } | undefined;
  /**
   * A long-running executor (the service process) removes the session groups crashed executors
   * left behind when it starts and every hour (`cgroup-sweep.ts`); every executor does when it
   * closes, after its own sessions have ended.
   */
  sweepAtStartAndHourly?: boolean;
  /**
   * The capsule host to start instead of the runtime's own: a test's host that breaks its
   * protocol, to show what the executor does when a capsule has broken out of WebAssembly. It
   * must lie under the runtime's code root, which is all a sandbox can read of it.
   */
  hostEntry?: string;
  /**
   * The port of this process's health and metrics listener (the service process's), once it
   * listens: no capsule is connected to it (`own-endpoints.ts`), and a launch waits for it.
   */
  listenerPort?: Promise<number>;
}

export interface ExecutorService {
  readonly instanceId: string;
  /** What this executor found it can do for isolation, decided once at start. */
  readonly isolation: { namespaces: string; containment: string; cgroups: string; io_throttle: string };
  sessions(): Session[];
  /** How many pooled hosts are started and waiting (0 without a pool). */
  warmHosts(): number;
  close(): Promise<void>;
}

/** How far an executor's clock may be ahead of a launcher's before its `launch_by` is judged passed. */
const LAUNCH_CLOCK_SLACK_MS = 2_000;

/** Ended sessions whose workdirs stay readable through this executor (`mur files`), newest kept. */
const ENDED_SESSIONS_KEPT = 10_000;
/**
 * How long a closing executor waits for a host a refused launch killed to be heard ending: its
 * exit, its last frames (up to 2 s) and the records it leaves; a spawn that failed may never say.
 */
const REFUSED_HOST_END_WAIT_MS = 10_000;

/**
 * The listeners on this machine no capsule is connected to: this executor's own once it listens,
 * and a stager's and the watcher's at the ports their settings name here.
 */
async function ownListeners(env: NodeJS.ProcessEnv, listenerPort: Promise<number> | undefined): Promise<Array<{ port: number; what: OwnListener }>> {
  const listeners: Array<{ port: number; what: OwnListener }> = [];
  if (listenerPort) listeners.push({ port: await listenerPort, what: OWN_LISTENERS.executor });
  for (const service of ['stager', 'watcher'] as const) {
    const port = servicePortIn(env, service);
    if (port !== undefined) listeners.push({ port, what: OWN_LISTENERS[service] });
  }
  return listeners;
}

/**
 * The executor on the bus: answers `launch` in the `executor` queue group, so executors scale by
 * adding processes, and `executor.<id>.launch` for launches meant for it (a delegated child goes
 * to its parent's executor). It runs each session's capsule host in a sandbox, answers
 * `session.<id>.stop` for the sessions it owns, reads their workdirs for `mur files`
 * (`executor.<id>.files`), records completions a watcher decided in children's workdirs
 * (`executor.<id>.completion`), says where each session lives (`murmur-sessions`), and tells the
 * stack every second that it is alive and what it holds (`executor.heartbeat`). It probes once, at
 * start, what isolation this host can give, and refuses what needs more than that.
 */
export function startExecutorService(options: ExecutorServiceOptions): ExecutorService {
  const env = options.env ?? process.env;
  const { bus, log } = options;
  // First, before anything is started: a malformed setting refuses the start, naming itself.
  const settings = executorSettings(env);
  const instanceId = options.instanceId ?? `executor-${newId('request').slice(4, 16)}`;
  const probe = probeHost(env);
  const { namespaces, cgroups, confine, containment: host } = probe;
  const cache = cacheDir(env);
  const isolation = isolationSummary(probe);
  log.info({ executor_id: instanceId, ...isolation }, 'executor isolation probed');
  if (process.getuid?.() === 0 && namespaces.tool !== undefined) {
    // The kernel exempts root's own user from RLIMIT_NPROC, and a sandbox a root executor starts is
    // root's user outside its namespace; the tools' cgroup (pids.max) still bounds its tasks.
    log.warn(
      { executor_id: instanceId },
      'the executor runs as root: capabilities.resources.max_processes (RLIMIT_NPROC) does not bind sandboxed processes, which are root outside their namespace; cgroup_pids_max still does. Run the executor as an unprivileged user (the container image does).',
    );
  }
  const sessions = new Map<string, Session>();
  /** What is kept of the sessions that ended here, whose workdirs this machine still holds. */
  const ended = new Map<string, EndedSession>();
  /**
   * The hosts of refused launches, killed and not yet heard ending: no longer sessions of this
   * executor, but their sessions still write their last records into the workdirs, so a close
   * waits for them.
   */
  const refusedHostsEnding = new Set<Promise<unknown>>();
  const subscriptions: Subscription[] = [];
  const blobs = new BlobCache(
    path.join(cache, 'blobs'),
    () => bus.objectStore(BLOB_BUCKET),
    (ref, what) => log.info({ sha256: ref.sha256, bytes: ref.size, what }, 'fetched a blob from the object store'),
  );
  let locations: Promise<KeyValueStore> | undefined;
  /** The bucket, opened once; an open that failed (JetStream away) is tried again next time. */
  const locationStore = (): Promise<KeyValueStore> => {
    if (!locations) {
      locations = bus.keyValue(SESSION_LOCATIONS_BUCKET);
      locations.catch(() => (locations = undefined));
    }
    return locations;
  };
  // On a stack the bucket is opened (made, on a fresh one) now rather than at the first launch:
  // the record is written after the launch is answered, and making the bucket then left a quick
  // first session ended before anyone could find where it lived.
  if (env.MURMUR_NATS_URL?.trim()) void locationStore();
  const resolveOwnEndpoints = async (): Promise<OwnEndpoints> =>
    OwnEndpoints.of(
      { natsUrl: env.MURMUR_NATS_URL, collectorUrl: env.MURMUR_OTEL_ENDPOINT, listeners: await ownListeners(env, options.listenerPort) },
      {
        unresolved: (host, error) =>
          log.warn(
            { executor_id: instanceId, host, err: error },
            `the runtime's own endpoint '${host}' did not resolve: capsules are refused it by that name only, not at its addresses, until it is resolved again (at a launch, at most every ${OWN_ENDPOINTS_RETRY_MS / 1000}s)`,
          ),
      },
    );
  let own = { endpoints: resolveOwnEndpoints(), at: Date.now() };
  /** The runtime's endpoints, resolved again at a launch when a name of them did not resolve last time (a bus not up yet when the executor started). */
  const ownEndpoints = async (): Promise<OwnEndpoints> => {
    const current = await own.endpoints;
    if (!current.unresolved || Date.now() - own.at < OWN_ENDPOINTS_RETRY_MS) return current;
    own = { endpoints: resolveOwnEndpoints(), at: Date.now() };
    return own.endpoints;
  };
  const workdirBase = env.MURMUR_WORKDIR_BASE?.trim() ? path.resolve(env.MURMUR_WORKDIR_BASE.trim()) : murmurHome(env);
  const environment: ExecutorEnvironment = {
    executorId: instanceId,
    bus,
    log,
    namespaces,
    confine,
    cgroups,
    ownEndpoints,
    roostUrl: env.MURMUR_ROOST_URL?.trim() || undefined,
    roostToken: env.MURMUR_ROOST_TOKEN?.trim() || undefined,
    otelEndpoint: env.MURMUR_OTEL_ENDPOINT?.trim() || undefined,
    blobs,
    bundles: new LocalBundles(cache, blobs),
    workdirBase,
    murmurHome: murmurHome(env),
    executorState: [...new Set([murmurHome(env), cache, path.join(workdirBase, 'workdir')])],
    settings,
    hostBaseline: Object.fromEntries(SUBPROCESS_BASELINE.flatMap((name) => (env[name] !== undefined ? [[name, env[name] as string]] : []))),
    pool: undefined,
    hostEntry: options.hostEntry,
    ...unsealedHostNode(confine, cache),
    session: (id) => sessions.get(id),
    delegationTrees: new DelegationTrees(),
    pull: (session, name, version) => pullForSession(bus, session, name, version),
  };

  /** Removes the session groups no executor will (`cgroup-sweep.ts`); never fails what called it. */
  const sweep = (): void => {
    if (!cgroups.support) return;
    try {
      const removed = sweepAbandonedGroups(cgroups.support);
      if (removed.length > 0)
        log.info(
          { executor_id: instanceId, groups: removed.length, first: removed[0] },
          'removed session cgroups that an executor which ended without ending its sessions left behind',
        );
    } catch (error) {
      log.warn({ executor_id: instanceId, err: error }, 'could not sweep abandoned session cgroups');
    }
  };
  let sweeping: NodeJS.Timeout | undefined;
  let stopSweepingCache = (): void => {};
  let stopTrimmingBlobs = (): void => {};
  let stopRemovingWorkdirs = (): void => {};
  // Before the pool makes its hosts' groups: what is swept is never this executor's.
  if (options.sweepAtStartAndHourly) {
    sweep();
    sweeping = setInterval(sweep, SWEEP_INTERVAL_MS);
    sweeping.unref();
    // And what a crashed executor left in its cache (a bundle fetched but never put in place).
    stopSweepingCache = keepCacheSwept(cache, log);
    // And the blobs it fetched for the sessions it ran, least recently used first.
    stopTrimmingBlobs = keepBlobsWithin(blobs, blobCacheMaxBytes(env), log);
  }

  environment.pool = startPool(environment, options.pool, env, log);

  /** Where the session lives, for whoever must find its workdir later; a store that is away costs the session nothing. */
  const locate = (location: SessionLocation): void => {
    void locationStore()
      .then((store) => store.put(`session.${location.session_id}`, JSON.stringify(location)))
      .catch((error: unknown) => log.warn({ session_id: location.session_id, err: error }, 'could not record where the session lives'));
  };

  /**
   * A workdir past its retention is gone: its record says so, so that whoever asks for the session
   * is told why there is nothing to read rather than that no such session ever was.
   */
  const recordWorkdirRemoved = (sessionId: string): void => {
    const key = `session.${sessionId}`;
    void locationStore()
      .then(async (store) => {
        const raw = await store.get(key);
        const parsed = raw === undefined ? undefined : SessionLocationSchema.safeParse(JSON.parse(raw));
        if (parsed?.success)
          await store.put(key, JSON.stringify({ ...parsed.data, workdir_removed_at: new Date().toISOString(), workdir_removed_by: instanceId }));
      })
      .catch((error: unknown) => log.warn({ session_id: sessionId, err: error }, 'could not record that the workdir of a session was removed'));
  };

  // A long-running executor given a retention removes the workdirs of sessions that ended longer ago.
  const retentionHours = options.sweepAtStartAndHourly
    ? numberSetting(env, 'MURMUR_SESSION_RETENTION_HOURS', 0, { unit: 'hours', fractional: true, zero: true })
    : 0;
  if (retentionHours > 0) {
    // Executors on one machine may share a workdir base (each service its own process, one
    // MURMUR_HOME): a session another of them runs, which its heartbeat lists, is running too.
    const heardRunning = new Map<string, { sessions: Set<string>; at: number; intervalMs: number }>();
    subscriptions.push(
      bus.subscribe(topics.executorHeartbeat, (beat) => {
        if (beat.executor_id !== instanceId)
          heardRunning.set(beat.executor_id, {
            sessions: new Set(beat.sessions.map((session) => session.session_id)),
            at: Date.now(),
            intervalMs: beat.interval_ms,
          });
      }),
    );
    // The watcher's bound: an executor silent longer is lost, and its sessions ended with it.
    const lostAfterMs = executorLostSetting(env);
    const runsElsewhere = (sessionId: string): boolean => {
      for (const [executorId, heard] of heardRunning) {
        if (Date.now() - heard.at > executorLostAfterMs(lostAfterMs, heard.intervalMs)) heardRunning.delete(executorId);
        else if (heard.sessions.has(sessionId)) return true;
      }
      return false;
    };
    stopRemovingWorkdirs = keepWorkdirsWithinRetention({
      root: path.join(workdirBase, 'workdir'),
      retentionMs: retentionHours * 3_600_000,
      runsHere: (sessionId) => sessions.has(sessionId) || runsElsewhere(sessionId),
      // Not before the other executors' heartbeats have been heard.
      firstLookAfterMs: lostAfterMs,
      removed: (sessionId) => {
        ended.delete(sessionId);
        recordWorkdirRemoved(sessionId);
      },
      log,
    });
  }

  const launch = async (request: z.output<typeof LaunchRequestSchema>): Promise<LaunchReply> => {
    // Judged on this machine's clock against the launcher's: the stack's services share one, and a
    // skew of LAUNCH_CLOCK_SLACK_MS is taken as none.
    const late = request.launch_by === undefined ? 0 : Date.now() - request.launch_by - LAUNCH_CLOCK_SLACK_MS;
    if (late > 0) {
      runtimeMetrics().launch('refused');
      throw new MurmurError(
        'E-EXE-002',
        `the launch of session ${request.session_id} reached executor ${instanceId} ${Math.ceil(late / 1000)}s after its launcher stopped waiting; nothing was started`,
      );
    }
    // One id, one session: a launch replayed or forged with the id of a session here would start a
    // second in its workdir and end the first (its pooled sandbox's directory is renamed over).
    if (sessions.has(request.session_id) || ended.has(request.session_id)) {
      runtimeMetrics().launch('refused');
      throw new MurmurError(
        'E-EXE-003',
        `session ${request.session_id} ${sessions.has(request.session_id) ? 'runs' : 'ran'} on executor ${instanceId} already; a launch naming it again starts nothing`,
      );
    }
    const session = new Session(environment, request);
    sessions.set(session.id, session);
    const stop = bus.serve(commands.stopSession.at(session.id), ({ reason }) => ({ stopping: session.stop(reason) }));
    let startedAt: string | undefined;
    void session.ended.then((end: SessionEnd) => {
      stop.unsubscribe();
      sessions.delete(session.id);
      // A child ends here, where its parent runs: its place in the delegation tree is free again
      // now, whether or not its end is ever announced (`delegation.completed` is published once).
      const parentId = request.child_of?.session_id;
      const delegationId = request.spawner?.delegation_id;
      if (parentId !== undefined && delegationId !== undefined) sessions.get(parentId)?.delegations.childEnded(delegationId);
      if (startedAt) {
        ended.set(session.id, session.remains());
        if (ended.size > ENDED_SESSIONS_KEPT) ended.delete(ended.keys().next().value as string);
        const plan = request.plan;
        locate({
          session_id: session.id,
          executor_id: instanceId,
          capsule_name: plan.capsule.name,
          capsule_version: plan.capsule.version,
          started_at: startedAt,
          ended_at: new Date().toISOString(),
          trace_file: traceFileInWorkdir(session.paths),
        });
      }
      log.info({ session_id: session.id, status: end.status, code: end.error?.code }, 'session ended');
    });
    try {
      const reply = await session.launch();
      startedAt = reply.started_at;
      runtimeMetrics().launch('launched');
      runtimeMetrics().sessionStarted();
      void session.ended.then(() => runtimeMetrics().sessionEnded());
      locate({
        session_id: session.id,
        executor_id: instanceId,
        capsule_name: request.plan.capsule.name,
        capsule_version: request.plan.capsule.version,
        started_at: reply.started_at,
        trace_file: traceFileInWorkdir(session.paths),
      });
      log.info({ session_id: session.id, capsule: `${request.plan.capsule.name}@${request.plan.capsule.version}`, pid: reply.pid }, 'session started');
      return reply;
    } catch (error) {
      runtimeMetrics().launch('refused');
      stop.unsubscribe();
      sessions.delete(session.id);
      session.kill({ code: 'E-RUN-001', message: 'the launch failed' });
      session.releaseRecords();
      if (session.hostStarted) {
        const hostEnded = Promise.race([session.ended, new Promise((resolve) => setTimeout(resolve, REFUSED_HOST_END_WAIT_MS).unref())]);
        refusedHostsEnding.add(hostEnded);
        void hostEnded.then(() => refusedHostsEnding.delete(hostEnded));
      }
      if (error instanceof MurmurError) throw error;
      // The file system's own refusal (a workdir on a read-only or full disk) says what to mend.
      const failed = systemFailureHint(error);
      throw new MurmurError('E-RUN-001', `the capsule could not be launched: ${error instanceof Error ? error.message : String(error)}`, {
        hint: failed
          ? `nothing of the capsule ran: ${failed} (mur run --workdir <${request.workdir === undefined ? 'dir' : 'another dir'}> puts the session's directory elsewhere)`
          : "nothing of the capsule ran; what refused the launch is named above (the executor's log has the rest): mend it and run again",
        ...(failed && (error as NodeJS.ErrnoException).path ? { path: (error as NodeJS.ErrnoException).path } : {}),
      });
    }
  };

  /** A session this executor holds or held, or the refusal that says it does not. */
  const held = (sessionId: string): Session | EndedSession => {
    const session = sessions.get(sessionId) ?? ended.get(sessionId);
    if (!session?.paths) throw new MurmurError('E-SES-001', `executor ${instanceId} holds no session '${sessionId}'`, { path: sessionId });
    return session;
  };

  subscriptions.push(
    // Layers 1–2 of a running record are readable only where the pid lives: here.
    bus.serve(commands.probeProcess.at(instanceId), (probe) => processState(probe)),
    bus.serve(commands.launch, launch, { queue: QUEUE_GROUPS.executor }),
    bus.serve(
      commands.explainScope,
      ({ policy, containment_floor }) => ({
        executor_id: instanceId,
        effective_grants: effectiveGrants(assessContainment(host, policy, strongestFloor(policy.containment, containment_floor)), policy),
      }),
      { queue: QUEUE_GROUPS.executor },
    ),
    bus.serve(commands.launchOn.at(instanceId), launch),
    bus.serve(commands.sessionFiles.at(instanceId), (request) => readSessionFiles(held(request.session_id).paths.accessible, request)),
    bus.serve(commands.sessionEnd.at(instanceId), ({ session_id }) => {
      if (sessions.has(session_id)) return { state: 'running' as const };
      const announcement = ended.get(session_id)?.announcement;
      return announcement ? { state: 'ended' as const, ended: announcement } : { state: 'unknown' as const };
    }),
    bus.serve(commands.recordCompletion.at(instanceId), async (request) => ({
      outcome: await held(request.session_id).recordCompletion(request.outcome, request.post),
    })),
    // Wherever the child ran and whoever reported for it, its parent's runtime hears of its end here.
    bus.subscribe(topics.delegationCompleted, ({ parent_session_id, outcome }) => {
      sessions
        .get(parent_session_id)
        ?.delegations.completed(outcome)
        .catch((error: unknown) =>
          log.warn({ session_id: parent_session_id, delegation_id: outcome.delegation_id, err: error }, 'could not hand a delegation its end'),
        );
    }),
  );

  /**
   * The sessions a watcher gave up on while this executor did not answer (stopped, starved, or
   * cut off from the bus for longer than `MURMUR_EXECUTOR_LOST_MS`): the stack has announced them
   * ended with it (E-EXE-001), their launchers have left and were told to launch again. Left
   * running, each would go on unseen — `mur ps` shows none of them, and its work would be done
   * twice. So they are ended here too, once this executor hears of it: by the announcement
   * itself when it comes after the executor is back, else by the watchers' record of it
   * (`lost.<session id>`), read when the executor finds it was silent (a late beat) or back on
   * the bus. A store that cannot be read costs nothing: the next occasion reads it again.
   */
  const endGivenUp = (session: Session, why: string): void => {
    log.warn({ session_id: session.id, why }, 'ending a session the stack announced ended with this executor');
    session.kill(
      {
        code: 'E-EXE-001',
        message: `the session was ended: the stack declared executor ${instanceId} lost while it did not answer (${why}) and announced the session ended with it; it is ended here too rather than left running where nobody waits for it`,
        hint: 'launch it again: new launches go to the executors that answer; if this executor stalls often, look at its load and memory',
      },
      { overrule: true },
    );
  };
  let watcherStore: Promise<KeyValueStore> | undefined;
  const endSessionsGivenUp = async (why: string): Promise<void> => {
    if (sessions.size === 0) return;
    watcherStore ??= bus.keyValue(WATCHER_BUCKET);
    watcherStore.catch(() => (watcherStore = undefined));
    const store = await watcherStore;
    for (const session of [...sessions.values()]) if ((await store.get(lostSessionKey(session.id))) !== undefined) endGivenUp(session, why);
  };
  const lookForSessionsGivenUp = (why: string): void =>
    void endSessionsGivenUp(why).catch((error: unknown) => log.warn({ err: error }, 'could not read which sessions the stack gave up on'));
  subscriptions.push(
    bus.subscribe(topics.sessionEnded, (event) => {
      const session = sessions.get(event.session_id);
      if (session && event.executor_id === instanceId && event.error?.code === 'E-EXE-001') endGivenUp(session, 'its loss was announced');
    }),
  );
  bus.onConnectionChange((state) => {
    if (state === 'reconnected') lookForSessionsGivenUp('it was away from the bus');
  });

  let lastBeatAt = performance.now();
  const beat = (): void => {
    const now = performance.now();
    // Three beats late: long enough to have been taken for lost by a watcher that waits less.
    if (now - lastBeatAt > 3 * settings.heartbeatMs) lookForSessionsGivenUp(`it sent no heartbeat for ${((now - lastBeatAt) / 1000).toFixed(1)}s`);
    lastBeatAt = now;
    try {
      bus.publish(topics.executorHeartbeat, {
        executor_id: instanceId,
        sent_at: new Date().toISOString(),
        interval_ms: settings.heartbeatMs,
        sessions: [...sessions.values()].flatMap((session) => {
          const identity = session.identity();
          return identity ? [identity] : [];
        }),
      });
    } catch (error) {
      log.warn({ err: error }, 'could not send the heartbeat');
    }
  };
  beat();
  const heartbeat = setInterval(beat, settings.heartbeatMs);
  heartbeat.unref();

  return {
    instanceId,
    isolation,
    sessions: () => [...sessions.values()],
    warmHosts: () => environment.pool?.idle ?? 0,
    async close() {
      clearInterval(heartbeat);
      // Its hosts' groups are gone before the executor is: a process that exits on this leaves none.
      const poolClosed = environment.pool?.close();
      for (const subscription of subscriptions) subscription.unsubscribe();
      const ending = [...sessions.values()].map((session) => {
        session.stop('the executor is shutting down');
        return session.ended;
      });
      await Promise.all([...ending, ...refusedHostsEnding, poolClosed]);
      clearInterval(sweeping);
      stopSweepingCache();
      stopTrimmingBlobs();
      stopRemovingWorkdirs();
      sweep();
      // Every session's last spans, sent or given up on (each bounded), before the process may exit.
      await Promise.all([...sessions.values(), ...ended.values()].map((session) => session.telemetryDrained));
    },
  };
}

/** How soon the bus's endpoints are resolved again after one of its names did not resolve. */
const OWN_ENDPOINTS_RETRY_MS = 30_000;

/** How often a long-running executor looks for session groups that crashed executors left. */
const SWEEP_INTERVAL_MS = 60 * 60 * 1000;

/** Default warm hosts of a long-running executor: enough for a burst of launches while it refills. */
export const DEFAULT_POOL_SIZE = 2;

/**
 * The warm pool, when this host seals sandboxes (a pooled host is always a sealed one: its helper
 * mounts the session in). `MURMUR_EXECUTOR_POOL=0` turns it off.
 */
/**
 * The node an unsealed host runs (`ExecutorEnvironment.hostNode`): made once, at start. Sealed
 * sandboxes run the helper's copy, and need none here.
 */
function unsealedHostNode(confine: ConfineProbe, cache: string): Pick<ExecutorEnvironment, 'hostNode' | 'hostNodeNote'> {
  if (confine.support) return {};
  try {
    return { hostNode: executeOnlyNode(cache) };
  } catch (error) {
    return {
      hostNodeNote: `the capsule host runs this executor's own node, readable, so its tools can read its memory: the execute-only copy could not be made under ${cache} (${(error as Error).message})`,
    };
  }
}

function startPool(environment: ExecutorEnvironment, wanted: ExecutorServiceOptions['pool'], env: NodeJS.ProcessEnv, log: Log): HostPool | undefined {
  const configured = env.MURMUR_EXECUTOR_POOL?.trim();
  // Only an executor that will launch is given a pool: asked for by its starter, or by the operator.
  if (!wanted && !configured) return undefined;
  const size = numberSetting(env, 'MURMUR_EXECUTOR_POOL', wanted?.size ?? 0, { unit: 'hosts', zero: true });
  if (size === 0) return undefined;
  if (environment.namespaces.tool !== 'bubblewrap' || !environment.confine.support) {
    log.info({ reason: environment.confine.reason ?? environment.namespaces.reason }, 'no warm pool: this host does not seal sandboxes');
    return undefined;
  }
  return new HostPool(
    {
      namespaces: environment.namespaces,
      confine: environment.confine,
      cgroups: environment.cgroups,
      log,
      workdirBase: wanted?.base ?? environment.workdirBase,
      bundlesDir: environment.bundles.transpilerDir,
      codeRoot: CODE_ROOT,
      hidden: SANDBOX_HIDDEN,
      hostEntry: environment.hostEntry ?? HOST_ENTRY,
      hostEnv: hostProcessEnv(),
    },
    size,
    { refill: wanted?.refill ?? true },
  );
}
