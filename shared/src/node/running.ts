import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '../errors.js';
import { type RunningRecord, RunningRecordSchema } from '../running-record.js';
import { murmurHome } from './home.js';
import { startTokenFromStat } from './process.js';

/**
 * The machine-wide map of reachable sessions: one record per session with a door, at
 * `$MURMUR_HOME/running/<session_id>.json`.
 *
 * A record is a hint, never a truth — nothing guarantees it is removed (a SIGKILLed session writes
 * no farewell) — so a reader verifies it in three layers, each insufficient alone:
 *
 * 1. the pid is alive (and not a zombie);
 * 2. its start token (field 22 of `/proc/<pid>/stat`) is the recorded one — pids are reused;
 * 3. the door answers, and its agent card names the session.
 *
 * A record is pruned only on evidence: layer 1 finding no process, or layer 2 a different start
 * time. A reading that could not be taken is not evidence: a live pid whose start time cannot be
 * read is *unverified* — kept, reported unreachable, never signalled. A record that passes 1 and 2
 * and fails 3 is kept too: the process is alive, perhaps only slow.
 *
 * The directory is 0700 and each record 0600: the set of records is a map of reachable capsules
 * to anything on the machine that can read it. Records store nothing from the environment.
 */

const RUNNING_DIR_MODE = 0o700;
const RECORD_FILE_MODE = 0o600;
const PROBE_TIMEOUT_MS = 5_000;

/** `$MURMUR_HOME/running`, created if missing; it and `$MURMUR_HOME` held at 0700. */
export function runningDir(env: NodeJS.ProcessEnv = process.env): string {
  const home = murmurHome(env);
  const dir = path.join(home, 'running');
  for (const each of [home, dir]) {
    mkdirSync(each, { recursive: true, mode: RUNNING_DIR_MODE });
    if ((statSync(each).mode & 0o777) !== RUNNING_DIR_MODE) chmodSync(each, RUNNING_DIR_MODE);
  }
  return dir;
}

/**
 * A session id becomes a file name here, so it must be one: a record named `../../x` (the
 * watcher writes and removes records for ids it hears on the bus) would be written or removed
 * anywhere its user can reach.
 */
const RECORD_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

function recordPath(dir: string, sessionId: string): string {
  if (!RECORD_NAME.test(sessionId)) {
    throw new MurmurError('E-SES-001', `'${sessionId.slice(0, 80)}' cannot name a running session's record: a session id is letters, digits, '_' and '-'`, {
      path: sessionId.slice(0, 80),
    });
  }
  return path.join(dir, `${sessionId}.json`);
}

/**
 * Writes a session's record, staged beside it and renamed onto it: a reader prunes what it cannot
 * parse, so one landing between a create and a write would otherwise unlink a record about to be
 * complete.
 */
export function writeRunningRecord(record: RunningRecord, env: NodeJS.ProcessEnv = process.env): string {
  const checked = RunningRecordSchema.parse(record);
  const dir = runningDir(env);
  const file = recordPath(dir, checked.session_id);
  const staged = path.join(dir, `.${checked.session_id}.${randomBytes(4).toString('hex')}.tmp`);
  writeFileSync(staged, `${JSON.stringify(checked, null, 2)}\n`, { mode: RECORD_FILE_MODE });
  try {
    renameSync(staged, file);
  } catch (error) {
    rmSync(staged, { force: true });
    throw error;
  }
  return file;
}

/** Removes a session's record; an id no record can be named by has none to remove. */
export function removeRunningRecord(sessionId: string, env: NodeJS.ProcessEnv = process.env): void {
  if (!RECORD_NAME.test(sessionId)) return;
  rmSync(recordPath(runningDir(env), sessionId), { force: true });
}

/**
 * Every record that parses, newest session first (ids are time-ordered); a file that does not is
 * unlinked on the way past. Anything else there (a directory, a socket) is not a record and not
 * ours to remove: it is passed by, so one stray entry never stops every `mur ps`.
 */
export function listRunningRecords(env: NodeJS.ProcessEnv = process.env): RunningRecord[] {
  const dir = runningDir(env);
  const records: RunningRecord[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const name = entry.name;
    if (!name.endsWith('.json') || name.startsWith('.') || !entry.isFile()) continue;
    const file = path.join(dir, name);
    const record = readRecord(file);
    if (record) records.push(record);
    else {
      try {
        rmSync(file, { force: true });
      } catch {
        // Not removable by this user: left for whoever can, and still not listed.
      }
    }
  }
  return records.sort((left, right) => (left.session_id < right.session_id ? 1 : left.session_id > right.session_id ? -1 : 0));
}

export function readRunningRecord(sessionId: string, env: NodeJS.ProcessEnv = process.env): RunningRecord | undefined {
  return readRecord(recordPath(runningDir(env), sessionId));
}

function readRecord(file: string): RunningRecord | undefined {
  try {
    const parsed = RunningRecordSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** What layers 1 and 2 say. Only `gone` licenses unlinking the record; `unverified` is a failed reading. */
export type ProcessState = { state: 'alive' } | { state: 'unverified'; reason: string } | { state: 'gone'; reason: string };

/** Layers 1 and 2 over readings already taken: whether the pid is held, and its start token read afterwards. */
export function classifyProcess(record: Pick<RunningRecord, 'pid' | 'process_start'>, pidAlive: boolean, freshToken: string | undefined): ProcessState {
  if (!pidAlive) return { state: 'gone', reason: `no process holds pid ${record.pid}` };
  if (freshToken === undefined) return { state: 'unverified', reason: `pid ${record.pid}'s start time could not be read` };
  // A recorded empty token (a writer that could not read its own) matches nothing the kernel reports.
  if (freshToken !== record.process_start) return { state: 'gone', reason: `pid ${record.pid} is held by a process that started at another time` };
  return { state: 'alive' };
}

/** Whether a pid is held (EPERM counts: held by a process this user may not signal). 0 and negatives would name process groups. */
function pidIsHeld(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0 || pid > 4_194_304) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Layers 1 and 2, read here, from one reading of `/proc/<pid>/stat`: the pid is held and not a
 * zombie (field 3 `Z`: exited, its door closed, only awaiting its parent's wait), and its start
 * token (field 22) is the recorded one. An unreadable stat says nothing about the process: it is
 * not a zombie, and its start time is unverified. Cheap and local — a reader applies it to every
 * record before any network round trip.
 */
export function processState(record: Pick<RunningRecord, 'pid' | 'process_start'>): ProcessState {
  if (!pidIsHeld(record.pid)) return classifyProcess(record, false, undefined);
  let stat: string | undefined;
  try {
    stat = readFileSync(`/proc/${record.pid}/stat`, 'utf8');
  } catch {
    stat = undefined;
  }
  const zombie =
    stat !== undefined &&
    stat
      .slice(stat.lastIndexOf(')') + 1)
      .trim()
      .split(/\s+/)[0] === 'Z';
  return classifyProcess(record, !zombie, stat === undefined ? undefined : startTokenFromStat(stat));
}

export type Liveness = { liveness: 'live' } | { liveness: 'unreachable'; reason: string } | { liveness: 'gone'; reason: string };

/** The agent card URL of a record's door: a full session URL, or upstream's scheme-less `host:port`. */
export function agentCardUrl(url: string): string {
  const base = url.includes('://') ? url : `http://${url}`;
  return new URL('.well-known/agent-card.json', base.endsWith('/') ? base : `${base}/`).href;
}

/** Layer 3: the session id the door at `url` claims on its agent card. */
export async function probeSessionId(url: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<string> {
  const card = agentCardUrl(url);
  let response: Response;
  try {
    // no-cache: a door may keep a card, but only the host answering proves the session lives.
    response = await fetch(card, { headers: { accept: 'application/json', 'cache-control': 'no-cache' }, signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).name;
    throw new Error(`the door at ${card} did not answer (${cause})`);
  }
  if (!response.ok) throw new Error(`the door at ${card} answered ${response.status}`);
  const body = (await response.json().catch(() => undefined)) as { session_id?: unknown } | undefined;
  if (typeof body?.session_id !== 'string') throw new Error(`the agent card from ${card} names no session`);
  return body.session_id;
}

/**
 * All three layers. `state` is layers 1–2 as already read (locally, or by the executor that owns
 * the pid when it is not on this machine); only a process confirmed alive is probed. `answersFor`
 * is layer 3: which session the capsule at the record's door says it is — over HTTP by default;
 * on the stack, where a door's published URL is the host's and not the watcher's, over the bus,
 * as any door would ask it.
 */
export async function verifyRunningRecord(
  record: RunningRecord,
  state: ProcessState = processState(record),
  answersFor: (record: RunningRecord) => Promise<string> = (each) => probeSessionId(each.url),
): Promise<Liveness> {
  if (state.state === 'gone') return { liveness: 'gone', reason: state.reason };
  if (state.state === 'unverified') return { liveness: 'unreachable', reason: state.reason };
  try {
    const sessionId = await answersFor(record);
    return sessionId === record.session_id
      ? { liveness: 'live' }
      : { liveness: 'unreachable', reason: `the capsule at ${record.url} answers for session ${sessionId}` };
  } catch (error) {
    return { liveness: 'unreachable', reason: (error as Error).message };
  }
}

export type SignalOutcome = { outcome: 'sent' } | { outcome: 'already-gone' } | { outcome: 'refused'; reason: string };

/** What a signal comes to without `kill(2)`: nothing for a confirmed process, already gone, or refused for an unverified one. */
export function refusalBeforeSignal(state: ProcessState): SignalOutcome | undefined {
  if (state.state === 'alive') return undefined;
  if (state.state === 'gone') return { outcome: 'already-gone' };
  return { outcome: 'refused', reason: state.reason };
}

/**
 * Re-verifies layers 1 and 2, then signals — in that order, in this one place, so the window
 * between the check and the `kill(2)` is two adjacent calls. A pid whose start time no longer
 * matches names a process that inherited the number; signalling it would end something the
 * operator never launched.
 */
export function signalRunningRecord(record: Pick<RunningRecord, 'pid' | 'process_start'>, signal: 'SIGTERM' | 'SIGKILL'): SignalOutcome {
  const refusal = refusalBeforeSignal(processState(record));
  if (refusal) return refusal;
  try {
    process.kill(record.pid, signal);
    return { outcome: 'sent' };
  } catch (error) {
    // Exited between the check and the call: nothing was signalled, and nothing needed to be.
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return { outcome: 'already-gone' };
    return { outcome: 'refused', reason: (error as Error).message };
  }
}

/** Whether this process has a controlling terminal (`/dev/tty` opens): a session launched from one dies with its window. */
export function hasControllingTerminal(): boolean {
  try {
    closeSync(openSync('/dev/tty', 'r'));
    return true;
  } catch {
    return false;
  }
}
