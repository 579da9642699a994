import { type Log, MurmurError, QUEUE_GROUPS, commands, newId } from '@murmur/shared';
import type { Bus, Subscription } from '@murmur/shared/bus';
import { processState } from '@murmur/shared/node';
import { probeCgroups } from './cgroup.js';
import { pullForSession } from './pull.js';
import { probeNamespaces } from './sandbox.js';
import { Session, type SessionEnd } from './session.js';

export { Session, type SessionEnd } from './session.js';
export { probeNamespaces, bubblewrapArguments, type NamespaceProbe } from './sandbox.js';
export { probeCgroups, type CgroupProbe } from './cgroup.js';
export { EgressPolicy } from './egress.js';

export interface ExecutorServiceOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /** The id the process announces itself by; one is made up when running inside another process. */
  instanceId?: string;
}

export interface ExecutorService {
  readonly instanceId: string;
  /** What this executor found it can do for isolation, decided once at start. */
  readonly isolation: { namespaces: string; cgroups: string };
  sessions(): Session[];
  close(): Promise<void>;
}

/**
 * The executor on the bus: answers `launch` in the `executor` queue group, so executors scale by
 * adding processes, runs each session's capsule host in a sandbox, and answers
 * `session.<id>.stop` for the sessions it owns. It probes once, at start, what isolation this host
 * can give, and refuses what needs more than that.
 */
export function startExecutorService(options: ExecutorServiceOptions): ExecutorService {
  const env = options.env ?? process.env;
  const instanceId = options.instanceId ?? `executor-${newId('request').slice(4, 16)}`;
  const namespaces = probeNamespaces({ bwrap: env.MURMUR_BWRAP?.trim() || undefined, unshare: env.MURMUR_UNSHARE?.trim() || undefined });
  const cgroups = probeCgroups(env.MURMUR_CGROUP_ROOT?.trim() || undefined);
  const isolation = {
    namespaces: namespaces.tool ?? `none (${namespaces.reason})`,
    cgroups: cgroups.support ? `${cgroups.support.version}` : `none (${cgroups.reason})`,
  };
  options.log.info({ executor_id: instanceId, ...isolation }, 'executor isolation probed');
  const sessions = new Map<string, Session>();
  const subscriptions: Subscription[] = [];
  const environment = { executorId: instanceId, bus: options.bus, log: options.log, namespaces, cgroups, roostUrl: env.MURMUR_ROOST_URL?.trim() || undefined, pull: (session: Session, name: string, version: string) => pullForSession(options.bus, session, name, version) };

  subscriptions.push(
    // Layers 1–2 of a running record are readable only where the pid lives: here.
    options.bus.serve(commands.probeProcess.at(instanceId), (probe) => processState(probe)),
    options.bus.serve(
      commands.launch,
      async (request) => {
        const session = new Session(environment, request);
        sessions.set(session.id, session);
        const stop = options.bus.serve(commands.stopSession.at(session.id), ({ reason }) => ({ stopping: session.stop(reason) }));
        void session.ended.then((end: SessionEnd) => {
          stop.unsubscribe();
          sessions.delete(session.id);
          options.log.info({ session_id: session.id, status: end.status, code: end.error?.code }, 'session ended');
        });
        try {
          const reply = await session.launch();
          options.log.info({ session_id: session.id, capsule: `${request.plan.capsule.name}@${request.plan.capsule.version}`, pid: reply.pid }, 'session started');
          return reply;
        } catch (error) {
          stop.unsubscribe();
          sessions.delete(session.id);
          session.kill({ code: 'E-RUN-001', message: 'the launch failed' });
          if (error instanceof MurmurError) throw error;
          throw new MurmurError('E-RUN-001', `the capsule could not be launched: ${error instanceof Error ? error.message : String(error)}`);
        }
      },
      { queue: QUEUE_GROUPS.executor },
    ),
  );

  return {
    instanceId,
    isolation,
    sessions: () => [...sessions.values()],
    async close() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      const ending = [...sessions.values()].map((session) => {
        session.stop('the executor is shutting down');
        return session.ended;
      });
      await Promise.all(ending);
    },
  };
}
