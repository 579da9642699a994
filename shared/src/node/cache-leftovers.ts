import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Log } from '../log.js';
import { writeFileAtomic } from './atomic.js';

/**
 * What a process that died mid-write leaves in a cache: a temporary sibling (`temporarySibling`:
 * `.<name>.<pid>.<12 hex>.tmp`, a transpile or a fetched bundle not yet renamed into place, a blob
 * being written, a backup) or a staging's scratch copy of a project (`staging/<id>`). Each is
 * removed on every path but a crash, so none of them is ever read; a cache that is never swept
 * keeps them for good.
 *
 * Judged by age, not by the pid in the name: a cache may be shared by processes in other PID
 * namespaces (containers on one volume), where a pid says nothing. A directory's time changes only
 * when its own entries do, so a staging's scratch copy or a prepared transpile waiting for its
 * commit looks as old as the staging: a day without a write is past any staging (a stager works
 * one transpile at a time, two minutes each at most), where an hour is not past a long queue.
 */

const TEMPORARY = /^\..+\.\d+\.[0-9a-f]{12}\.tmp(\.bak)?$/;
const STAGING_DIR = 'staging';
/** How deep below the cache a temporary can lie (`transpiled/<id>/<key>/<file>`). */
const DEPTH = 4;
const MARKER = '.leftovers-swept';
export const LEFTOVER_AGE_MS = 24 * 60 * 60 * 1000;
/** How often the services sweep. */
export const LEFTOVER_SWEEP_EVERY_MS = 60 * 60 * 1000;

/** Removes every leftover in `cacheDir` not written to for `olderThanMs`; returns their paths. */
export function sweepCacheLeftovers(cacheDir: string, olderThanMs = LEFTOVER_AGE_MS, now = Date.now()): Promise<string[]> {
  return sweepLeftovers(cacheDir, olderThanMs, now, true);
}

/**
 * The same for an artifact store (`ArtifactStore`: a registry, a project's or the global one),
 * whose publishes and installs write through temporary siblings too, and which a `kill -9` or a
 * crashed roost leaves them in. A store has no scratch copies: a directory named `staging` in it
 * is an artifact's.
 */
export function sweepStoreLeftovers(storeRoot: string, olderThanMs = LEFTOVER_AGE_MS, now = Date.now()): Promise<string[]> {
  return sweepLeftovers(storeRoot, olderThanMs, now, false);
}

async function sweepLeftovers(root: string, olderThanMs: number, now: number, scratchCopies: boolean): Promise<string[]> {
  const removed: string[] = [];
  const stale = async (entry: string): Promise<boolean> => {
    const stat = await fs.lstat(entry).catch(() => undefined);
    return stat !== undefined && now - stat.mtimeMs >= olderThanMs;
  };
  const remove = async (entry: string): Promise<void> => {
    // A link is removed as a link: `rm` never follows it to what it names.
    await fs.rm(entry, { recursive: true, force: true });
    removed.push(entry);
  };
  const walk = async (dir: string, depth: number): Promise<void> => {
    const entries = await fs.readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const full = path.join(dir, entry.name);
      const scratch = scratchCopies && depth === 1 && path.basename(dir) === STAGING_DIR;
      if (scratch || TEMPORARY.test(entry.name)) {
        if (await stale(full)) await remove(full);
      } else if (entry.isDirectory() && depth < DEPTH) {
        await walk(full, depth + 1);
      }
    }
  };
  await walk(root, 0);
  return removed;
}

/**
 * A long-running service's sweeps of its cache: now, and every `LEFTOVER_SWEEP_EVERY_MS` (each
 * skipped when another process sharing the cache swept it meanwhile). Returns how to stop them.
 */
export function keepCacheSwept(cacheDir: string, log: Log): () => void {
  return nowAndHourly(() => sweepCacheLeftoversIfDue(cacheDir, LEFTOVER_SWEEP_EVERY_MS, log));
}

/** Runs `sweep` now and every `LEFTOVER_SWEEP_EVERY_MS`, never holding the process open; returns how to stop it. */
function nowAndHourly(sweep: () => Promise<void>): () => void {
  const run = (): void => void sweep();
  run();
  const timer = setInterval(run, LEFTOVER_SWEEP_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Sweeps `cacheDir` unless it was swept within `everyMs` (a marker file says when: the processes
 * sharing a cache take turns), in the background of whoever calls it; what it removed is logged.
 */
export async function sweepCacheLeftoversIfDue(cacheDir: string, everyMs: number, log: Log): Promise<void> {
  const marker = path.join(cacheDir, MARKER);
  try {
    const last = await fs.stat(marker).then(
      (stat) => stat.mtimeMs,
      () => 0,
    );
    // A minute's slack: a timer set to `everyMs` fires a moment before the marker it wrote is that old.
    if (Date.now() - last < everyMs - 60_000) return;
    await fs.mkdir(cacheDir, { recursive: true });
    await writeFileAtomic(marker, `${new Date().toISOString()}\n`);
    const removed = await sweepCacheLeftovers(cacheDir);
    if (removed.length > 0) log.info({ dir: cacheDir, removed }, 'removed what interrupted writes left behind');
  } catch (error) {
    log.warn({ dir: cacheDir, err: error }, 'could not sweep for what interrupted writes left behind');
  }
}

/**
 * A registry's sweeps of its store (roost's): now, and every `LEFTOVER_SWEEP_EVERY_MS`. No marker
 * is kept, as a cache's is: a store's files are its artifacts, and a second roost on the same
 * volume sweeping as well removes nothing twice. Returns how to stop them.
 */
export function keepStoreSwept(storeRoot: string, log: Log): () => void {
  return nowAndHourly(() =>
    sweepStoreLeftovers(storeRoot).then(
      (removed) => {
        if (removed.length > 0) log.info({ dir: storeRoot, removed }, 'removed what interrupted writes left behind');
      },
      (error: unknown) => log.warn({ dir: storeRoot, err: error }, 'could not sweep for what interrupted writes left behind'),
    ),
  );
}

const sweptThisProcess = new Set<string>();
/** A command's store (`mur publish`, `mur install`), swept once in the process that writes to it. */
export async function sweepStoreOnce(storeRoot: string): Promise<void> {
  if (sweptThisProcess.has(storeRoot)) return;
  sweptThisProcess.add(storeRoot);
  await sweepStoreLeftovers(storeRoot).catch(() => []);
}
