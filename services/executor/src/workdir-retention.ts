import { promises as fs } from 'node:fs';
import path from 'node:path';
import { type Log, SessionIdSchema } from '@murmur/shared';

/**
 * The workdirs of the sessions that ended on an executor's machine, removed once they are older
 * than the operator's retention (`MURMUR_SESSION_RETENTION_HOURS`; unset or 0 keeps every one, as
 * upstream keeps every workdir). A long-running executor outlives thousands of sessions, each of
 * which leaves its records and whatever its guest wrote (up to its `workdir_max_bytes`): unbounded,
 * that fills the disk, in a container's writable layer where nobody looks.
 *
 * Only what the executor made is removed: a directory named as a session id directly under its
 * own `<workdir base>/workdir`, never a `--workdir` (the user's), and never the workdir of a session
 * that still runs. A session's age is counted from the last change of its directory or of an
 * entry directly in it, by change time (`ctime`): its end writes its last records there, and a
 * guest can set a file's modification time (`utimes`) but never its change time, so a guest that
 * dates its files in the future is not kept for ever, nor one that dates them in the past removed
 * early.
 */

export interface WorkdirRetentionOptions {
  /** `<workdir base>/workdir`: where the executor makes its sessions' workdirs. */
  root: string;
  retentionMs: number;
  /** Whether the session runs now, on this executor or (as far as it has heard) another sharing its base: its workdir is never removed. */
  runsHere(sessionId: string): boolean;
  /** Said of each workdir removed, once it is gone. */
  removed(sessionId: string): void;
  /** How long after the start the first look is made (what `runsHere` knows may take a while to learn). */
  firstLookAfterMs?: number;
  log: Log;
}

/** An entry count past which a workdir's own change time stands for its entries': adding or removing one changes it. */
const ENTRIES_LOOKED_AT = 1_000;

/** How often the workdirs are looked at: a tenth of the retention, at least every second and at most every hour. */
export function retentionSweepEveryMs(retentionMs: number): number {
  return Math.min(Math.max(retentionMs / 10, 1_000), 60 * 60 * 1000);
}

/** Removes the workdirs past the retention now and then every `retentionSweepEveryMs`, never holding the process open; returns how to stop. */
export function keepWorkdirsWithinRetention(options: WorkdirRetentionOptions): () => void {
  let sweeping = false;
  const run = (): void => {
    if (sweeping) return;
    sweeping = true;
    void removeExpiredWorkdirs(options)
      .catch((error: unknown) => options.log.warn({ dir: options.root, err: error }, 'could not look for workdirs past their retention'))
      .finally(() => (sweeping = false));
  };
  // The looks begin with the first: none before it, whatever the interval.
  let timer: NodeJS.Timeout | undefined;
  const first = setTimeout(() => {
    run();
    timer = setInterval(run, retentionSweepEveryMs(options.retentionMs));
    timer.unref();
  }, options.firstLookAfterMs ?? 0);
  first.unref();
  return () => {
    clearTimeout(first);
    clearInterval(timer);
  };
}

/** One pass: every ended session's workdir under `root` last changed more than the retention ago is removed. Returns the sessions removed. */
export async function removeExpiredWorkdirs(options: WorkdirRetentionOptions): Promise<string[]> {
  const names = await fs.readdir(options.root).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return [] as string[];
    throw error;
  });
  const removed: string[] = [];
  for (const name of names) {
    if (!SessionIdSchema.safeParse(name).success || options.runsHere(name)) continue;
    const dir = path.join(options.root, name);
    try {
      const changedAt = await lastChanged(dir);
      if (changedAt === undefined || Date.now() - changedAt < options.retentionMs) continue;
      // Looked at again just before: a session launched with this id since is not this one's to lose.
      if (options.runsHere(name)) continue;
      await removeTree(dir);
      removed.push(name);
      options.removed(name);
    } catch (error) {
      options.log.warn({ session_id: name, dir, err: error }, 'could not remove a workdir past its retention; it is tried again at the next look');
    }
  }
  if (removed.length > 0)
    options.log.info(
      { dir: options.root, sessions: removed.length, first: removed[0], retention_hours: options.retentionMs / 3_600_000 },
      'removed the workdirs of sessions that ended longer ago than MURMUR_SESSION_RETENTION_HOURS',
    );
  return removed;
}

/** The latest change time of `dir` and of its direct entries; undefined when it is not a directory (a link is never followed). */
async function lastChanged(dir: string): Promise<number | undefined> {
  const own = await fs.lstat(dir);
  if (!own.isDirectory()) return undefined;
  let latest = own.ctimeMs;
  // A guest may have taken its own directory's permissions away (chmod 000 .): that change, the
  // last it could make, is the directory's own change time.
  const entries = await fs.readdir(dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'EACCES' || error.code === 'EPERM') return [] as string[];
    throw error;
  });
  for (const entry of entries.slice(0, ENTRIES_LOOKED_AT)) {
    const stat = await fs.lstat(path.join(dir, entry)).catch(() => undefined);
    if (stat) latest = Math.max(latest, stat.ctimeMs);
  }
  return latest;
}

/**
 * Removes `dir` and all in it. A guest may have taken the permissions off its own directories
 * (the sandbox runs it as the executor's user): what refuses its removal is made the owner's to
 * change, then removed again.
 */
async function removeTree(dir: string): Promise<void> {
  try {
    await fs.rm(dir, { recursive: true, force: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EACCES' && code !== 'EPERM') throw error;
    await openUp(dir);
    await fs.rm(dir, { recursive: true, force: true });
  }
}

/** Gives the owner every permission on `dir` and each directory beneath it, never following a link. */
async function openUp(dir: string): Promise<void> {
  await fs.chmod(dir, 0o700);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) if (entry.isDirectory()) await openUp(path.join(dir, entry.name));
}
