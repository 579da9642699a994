import { MurmurError, SessionIdSchema, type SessionListReply, commands, notASessionId, numberSetting } from '@murmur/shared';
import { listRunningRecords, readRunningRecord, removeRunningRecord, signalRunningRecord, processState, verifyRunningRecord } from '@murmur/shared/node';
import { type Output, table } from '../output.js';
import { openRuntime } from '../runtime.js';

type Listed = SessionListReply['sessions'][number];

/**
 * The machine's running sessions, each verified in three layers. On the stack (`MURMUR_NATS_URL`)
 * the watcher answers, asking each pid's executor; otherwise the records under `MURMUR_HOME` are
 * read and verified here. A record whose process is gone is pruned as it is read.
 */
async function listSessions(): Promise<Listed[]> {
  if (process.env.MURMUR_NATS_URL?.trim()) {
    const runtime = await openRuntime();
    try {
      return (await runtime.bus.request(commands.listSessions, {}, { timeoutMs: 15_000 })).sessions;
    } finally {
      await runtime.close();
    }
  }
  return Promise.all(
    listRunningRecords().map(async (record) => {
      const liveness = await verifyRunningRecord(record);
      if (liveness.liveness === 'gone') removeRunningRecord(record.session_id);
      return { ...record, liveness: liveness.liveness, ...('reason' in liveness ? { reason: liveness.reason } : {}) };
    }),
  );
}

/** `mur ps`: a table, or with `--json` an array of the records, each with its `liveness` and reason. */
export async function psCommand(options: { json?: boolean }, output: Output): Promise<number> {
  const sessions = await listSessions();
  if (options.json) {
    output.out(JSON.stringify(sessions));
    return 0;
  }
  if (sessions.length === 0) {
    output.out('no running sessions');
    return 0;
  }
  // On the stack a pid means something only on its executor: say which.
  const onStack = sessions.some((session) => session.executor_id !== undefined);
  const rows = sessions.map((session) => [
    session.session_id,
    `${session.capsule_name}@${session.capsule_version}`,
    ...(onStack ? [session.executor_id ?? '-'] : []),
    String(session.pid),
    session.liveness + (session.reason ? ` (${session.reason})` : ''),
    session.url,
  ]);
  for (const line of table(['SESSION', 'CAPSULE', ...(onStack ? ['EXECUTOR'] : []), 'PID', 'LIVENESS', 'URL'], rows)) output.out(line);
  return 0;
}

/** `MURMUR_STOP_GRACE_MS`, read when a stop is asked for (never at load: `mur` runs from a build-time snapshot). */
const stopGraceMs = (): number => numberSetting(process.env, 'MURMUR_STOP_GRACE_MS', 5_000, { unit: 'milliseconds' });

async function gone(record: { pid: number; process_start: string }, withinMs: number): Promise<boolean> {
  const until = Date.now() + withinMs;
  while (Date.now() < until) {
    if (processState(record).state === 'gone') return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return processState(record).state === 'gone';
}

/**
 * `mur stop <session>`: SIGTERM, then SIGKILL after a grace period — each signal sent only after
 * the record's process is re-verified, so a pid that now belongs to another process is never
 * signalled.
 */
export async function stopCommand(sessionId: string, output: Output): Promise<number> {
  if (!SessionIdSchema.safeParse(sessionId).success) {
    throw new MurmurError('E-SES-001', notASessionId(sessionId), {
      hint: "'mur ps' lists the running sessions with their ids",
    });
  }
  if (process.env.MURMUR_NATS_URL?.trim()) return stopOnStack(sessionId, output);
  const record = readRunningRecord(sessionId);
  if (!record) {
    throw new MurmurError('E-IO-001', `no running record for session '${sessionId}' on this machine`, { hint: "list the machine's sessions with 'mur ps'" });
  }
  // Read before anything is sent: a malformed setting refuses the stop, not its second half.
  const graceMs = stopGraceMs();
  const term = signalRunningRecord(record, 'SIGTERM');
  if (term.outcome === 'already-gone') {
    removeRunningRecord(sessionId);
    output.out(`${sessionId}: already gone`);
    return 0;
  }
  if (term.outcome === 'refused')
    throw new MurmurError('E-IO-003', `session '${sessionId}' (pid ${record.pid}) was not signalled: ${term.reason}`, {
      hint: 'nothing was sent to a process that could not be confirmed as the session',
    });
  if (await gone(record, graceMs)) {
    output.out(`${sessionId}: stopped`);
    return 0;
  }
  const kill = signalRunningRecord(record, 'SIGKILL');
  if (kill.outcome === 'refused')
    throw new MurmurError('E-IO-003', `session '${sessionId}' (pid ${record.pid}) outlived SIGTERM and SIGKILL was refused: ${kill.reason}`, {
      hint: `nothing more was sent; 'mur ps' shows whether it still runs, and 'mur stop ${sessionId}' tries again`,
    });
  await gone(record, graceMs);
  removeRunningRecord(sessionId);
  output.out(`${sessionId}: killed after ${graceMs / 1000}s`);
  return 0;
}

/** How long an executor is given to answer a stop (it answers as soon as it has sent TERM). */
const STOP_ANSWER_MS = 5_000;

/**
 * On the stack a session's process is on its executor's machine, where no signal from here can
 * reach: the executor that owns it is asked (`session.<id>.stop`: TERM, then KILL after its grace).
 */
async function stopOnStack(sessionId: string, output: Output): Promise<number> {
  const runtime = await openRuntime();
  try {
    let reply: { stopping: boolean };
    try {
      reply = await runtime.bus.request(commands.stopSession.at(sessionId), { reason: 'stopped with mur stop' }, { timeoutMs: STOP_ANSWER_MS });
    } catch (error) {
      if (error instanceof MurmurError && error.code === 'E-BUS-004') {
        throw new MurmurError('E-SES-001', `no executor on ${runtime.bus.description} runs session '${sessionId}'`, {
          hint: "list the stack's sessions with 'mur ps'",
        });
      }
      // An executor that holds the session answers at once; silence is mostly a session that is
      // not there, heard by something that listens to every session's subjects (a 'mur events').
      if (error instanceof MurmurError && error.code === 'E-BUS-003') {
        throw new MurmurError(
          'E-SES-001',
          `no executor on ${runtime.bus.description} answered for session '${sessionId}' within ${STOP_ANSWER_MS / 1000} s: it is not running there, or its executor does not answer`,
          { hint: "'mur ps' lists the stack's running sessions; 'mur health' shows whether its executors answer" },
        );
      }
      throw error;
    }
    output.out(`${sessionId}: ${reply.stopping ? 'stopping' : 'already gone'}`);
    return 0;
  } finally {
    await runtime.close();
  }
}
