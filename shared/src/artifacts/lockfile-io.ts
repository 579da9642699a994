import { randomUUID } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify as stringifyYaml } from 'yaml';
import { MurmurError } from '../errors.js';
import { LOCKFILE_MAX_BYTES, type LockedArtifact, type MurmurLock, MurmurLockSchema } from '../lockfile.js';
import { removedIfInterrupted, writeFileAtomic } from '../node/atomic.js';
import { processStartToken } from '../node/process.js';
import { readSmallTextFile } from '../node/small-text-file.js';
import { resolvedPath } from '../node/beneath.js';
import { systemFailureCode, systemFailureHint } from '../node/system-failure.js';
import { firstIssueText } from '../manifest/issues.js';
import { parseYamlSource } from '../manifest/yaml-source.js';

function describe(error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> }): string {
  return firstIssueText(error, 'it does not match the lock format');
}

/** `murmur.lock` at `file`, or undefined when there is none. A lock that does not parse is refused. */
export async function readLockfile(file: string): Promise<MurmurLock | undefined> {
  let text: string;
  try {
    text = await readSmallTextFile(file, { what: 'murmur.lock', maxBytes: LOCKFILE_MAX_BYTES });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    if (error instanceof MurmurError) throw error;
    throw new MurmurError(systemFailureCode(error), `failed to read murmur.lock at ${file}: ${(error as Error).message}`, {
      path: file,
      hint: systemFailureHint(error),
    });
  }
  let raw: unknown;
  try {
    // Read like the manifest: `resolved_version: 1.0` stays the text "1.0".
    raw = parseYamlSource(text, 'murmur.lock').value;
  } catch (error) {
    throw new MurmurError('E-RUN-003', `invalid murmur.lock: ${(error as Error).message.replace(/^murmur\.lock: /, '')}`, {
      path: file,
      hint: 'fix or delete murmur.lock; the next run writes a fresh one',
    });
  }
  const parsed = MurmurLockSchema.safeParse(raw);
  if (!parsed.success) {
    throw new MurmurError('E-RUN-003', `invalid murmur.lock: ${describe(parsed.error)}`, {
      path: file,
      hint: 'fix or delete murmur.lock; the next run writes a fresh one',
    });
  }
  return parsed.data;
}

/** Writes the lock through a fsynced temporary file and a rename: never half a lock. */
export async function writeLockfile(file: string, lock: MurmurLock): Promise<void> {
  const parsed = MurmurLockSchema.safeParse(lock);
  if (!parsed.success) throw new MurmurError('E-RUN-003', `refusing to write an invalid murmur.lock: ${describe(parsed.error)}`, { path: file });
  const valid = parsed.data;
  const text = stringifyYaml(valid, { defaultStringType: 'PLAIN', defaultKeyType: 'PLAIN' });
  try {
    // Through a symbolic link, the file it points to is replaced, and the link stays one.
    // A lock is written by a command in the user's project: an interrupt leaves no half of it there.
    await writeFileAtomic(resolvedPath(file), text, { fsync: true, interruptible: true });
  } catch (error) {
    throw new MurmurError(systemFailureCode(error), `failed to write murmur.lock at ${file}: ${(error as Error).message}`, {
      path: file,
      hint: systemFailureHint(error),
    });
  }
}

/**
 * A first run's pins: written when `file` is still absent, in a writer's turn. Staging found no
 * lock, but another `mur` (an install) may have written one since; its pins stand, and only the
 * artifacts it does not name are added — a whole lock written over it lost the install's entry.
 */
export async function pinFirstRun(file: string, entries: readonly LockedArtifact[]): Promise<void> {
  await withLockfileTurn(file, async () => {
    const present = await readLockfile(file);
    const named = new Set(present?.artifacts.map((entry) => entry.name));
    const added = entries.filter((entry) => !named.has(entry.name));
    if (present && added.length === 0) return;
    await writeLockfile(file, { lock_version: 1, artifacts: [...(present?.artifacts ?? []), ...added] });
  });
}

/** How long a writer waits for another to finish with the lock before it gives up. */
const LOCK_TURN_WAIT_MS = 10_000;
/** A reaper's guard is held for a read and an unlink; one older than this was left by a crash. */
const REAP_GUARD_STALE_MS = 5_000;
/** A turn is written within microseconds of its creation; one still empty after this lost its writer between the two. */
const TURN_UNWRITTEN_STALE_MS = 5_000;

interface TurnHolder {
  pid: number;
  host: string;
  token: string;
  /** When the writer's process started (`processStartToken`): with the pid, one process, not whichever holds that pid now. */
  start: string | undefined;
}

/**
 * Runs `change` — read the lock, act, write it — while no other writer of `file` does: without a
 * turn each, two `mur install`s at once both read the same lock and the second write loses the
 * first's entry. The turn is a file beside the lock made with `O_EXCL`, naming the writer's pid,
 * host and a token of its own.
 *
 * A turn whose writer is gone (it crashed) is taken over, and taking over is itself exclusive:
 * two waiters that both judged the same writer dead would otherwise each remove "the stale turn",
 * the second removing the turn the first had just taken, and both would write. So a dead turn is
 * removed only under a second `O_EXCL` guard, and only when it still holds the very token judged
 * dead. A pid means something only on the host that wrote it: another host's turn is waited for,
 * never judged. A writer removes the turn at the end only if it is still its own.
 */
export async function withLockfileTurn<T>(
  file: string,
  change: () => Promise<T>,
  options: {
    waitMs?: number;
    what?: string;
    /** The turn goes with the process on an interrupt (`removedIfInterrupted`): for a command that ends on one, not a service finishing its writes. */
    interruptible?: boolean;
  } = {},
): Promise<T> {
  const waitMs = options.waitMs ?? LOCK_TURN_WAIT_MS;
  /** What the turn guards, for messages: the lock by default, a store's version for a publish. */
  const what = options.what ?? 'murmur.lock';
  const turn = `${file}.writing`;
  const mine: TurnHolder = { pid: process.pid, host: hostname(), token: randomUUID(), start: processStartToken(process.pid) };
  const started = Date.now();
  for (;;) {
    if (await tryCreate(turn, `${mine.pid} ${mine.host} ${mine.token}${mine.start === undefined ? '' : ` ${mine.start}`}\n`, what)) break;
    const text = await fs.readFile(turn, 'utf8').catch(() => undefined);
    const holder = text === undefined ? undefined : parseHolder(text);
    if (text !== undefined && (holder ? holder.host === mine.host && !holderAlive(holder) : await olderThan(turn, TURN_UNWRITTEN_STALE_MS))) {
      // Reaped: try again at once. Another reaper at work: wait like any waiter.
      if (await reapDeadTurn(turn, text, what)) continue;
    }
    if (Date.now() - started > waitMs) {
      const who = holder ? `pid ${holder.pid}${holder.host === mine.host ? '' : ` on ${holder.host}`}` : 'pid unknown';
      throw new MurmurError('E-IO-003', `${what} is being written by another mur (${who}) and was not released within ${waitMs / 1000}s`, {
        path: turn,
        hint: `wait for the other mur to finish; if none is running, remove ${turn}`,
      });
    }
    await sleep(25);
  }
  const release = options.interruptible ? removedIfInterrupted(turn) : () => undefined;
  try {
    return await change();
  } finally {
    release();
    const still = await fs.readFile(turn, 'utf8').catch(() => undefined);
    if (still !== undefined && parseHolder(still)?.token === mine.token) await fs.rm(turn, { force: true });
  }
}

/**
 * Removes `turn` if it still reads `deadText`, under the reaper's guard, and says whether it
 * reaped; another reaper that holds the guard is left to it.
 */
async function reapDeadTurn(turn: string, deadText: string, what: string): Promise<boolean> {
  const guard = `${turn}.reaping`;
  if (!(await tryCreate(guard, String(process.pid), what))) {
    if (await olderThan(guard, REAP_GUARD_STALE_MS)) await fs.rm(guard, { force: true });
    return false;
  }
  try {
    // Only a reaper removes another's turn, and there is one reaper: the turn read here cannot be
    // replaced by a live one before the unlink, since replacing it needs this unlink first.
    const now = await fs.readFile(turn, 'utf8').catch(() => undefined);
    if (now === deadText) await fs.rm(turn, { force: true });
    return true;
  } finally {
    await fs.rm(guard, { force: true });
  }
}

async function olderThan(file: string, ms: number): Promise<boolean> {
  const stats = await fs.stat(file).catch(() => undefined);
  return stats !== undefined && Date.now() - stats.mtimeMs > ms;
}

/** Creates `file` holding `text` if no file is there; false when one is. */
async function tryCreate(file: string, text: string, what: string): Promise<boolean> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, 'wx', 0o644);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw new MurmurError(systemFailureCode(error), `failed to take a turn at writing ${what} (${file}): ${(error as Error).message}`, {
      path: file,
      hint: systemFailureHint(error),
    });
  }
  try {
    await handle.writeFile(text);
  } catch (error) {
    // Not left behind empty (a full disk): another writer would wait out its staleness for nothing.
    await handle.close().catch(() => {});
    await fs.rm(file, { force: true });
    throw new MurmurError(systemFailureCode(error), `failed to take a turn at writing ${what} (${file}): ${(error as Error).message}`, {
      path: file,
      hint: systemFailureHint(error),
    });
  }
  await handle.close();
  return true;
}

/**
 * The writer a turn file names. A turn still being written (empty) names none, and is waited for;
 * a bare pid is what an earlier mur wrote, on this host.
 */
function parseHolder(text: string): TurnHolder | undefined {
  const [pidText, host, token, start] = text.trim().split(' ');
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  return { pid, host: host ?? hostname(), token: token ?? '', start };
}

/**
 * Whether the writer a turn names still runs: its pid is held, and by the process that started
 * when the turn says. A service restarted in a container is given the same small pid as the one
 * that died holding a turn, and would otherwise wait on itself for good.
 */
function holderAlive(holder: TurnHolder): boolean {
  try {
    process.kill(holder.pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (holder.start === undefined) return true;
  const now = processStartToken(holder.pid);
  return now === undefined || now === holder.start;
}
