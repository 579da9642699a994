import { readFileSync, readdirSync, rmdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type { CgroupSupport } from './cgroup.js';

/**
 * Session groups that no executor will remove: those of an executor that ended without ending its
 * sessions (killed, out of memory, its machine's power). Its sandboxes die with it (bubblewrap is
 * told to die with its parent), but a cgroup is a directory the kernel keeps until someone removes
 * it, so each crash would leave its sessions' and its warm hosts' groups in the controllers'
 * trees for good. An executor removes them when it starts.
 *
 * Only what is certainly abandoned goes, because executors share their parent groups (several on
 * one machine, or one restarted beside its successor):
 * - only names this runtime makes: `murmur-<session id>` (a session, or a pooled host it took),
 *   `murmur-pool-<16 hex>` (a pooled host), `murmur-probe-<pid>-<ms>` (a probe cut short), never
 *   another name, nor an operator's parent that happens to start with `murmur`;
 * - only a name whose every group, in every controller, holds no process: a live session's host
 *   is in its memory and pids groups while its cpu group (for its tools) is often empty;
 * - only groups made more than `olderThanMs` ago, since a live executor makes a group empty and
 *   moves the host's shell into it a moment later.
 * And the kernel refuses to remove a group that holds a process, so a process that joins after
 * the check keeps its group.
 */
const ABANDONABLE = /^murmur-(?:ses_[0-9a-f]{32}|pool-[0-9a-f]{16}|probe-\d+-\d+)$/;

/** How long a group must have existed before an empty one counts as abandoned. */
export const ABANDONED_AFTER_MS = 60_000;

/** Removes the abandoned session groups under this executor's parents; returns the names removed. */
export function sweepAbandonedGroups(support: CgroupSupport, options: { olderThanMs?: number; now?: number } = {}): string[] {
  const cutoff = (options.now ?? Date.now()) - (options.olderThanMs ?? ABANDONED_AFTER_MS);
  const parents = [...new Set([support.memoryParent, support.pidsParent, support.cpuParent, ...(support.ioParent === undefined ? [] : [support.ioParent])])];
  const candidates = new Map<string, string[]>();
  for (const parent of parents) {
    for (const name of childGroups(parent)) {
      if (!ABANDONABLE.test(name)) continue;
      candidates.set(name, [...(candidates.get(name) ?? []), path.join(parent, name)]);
    }
  }
  const removed: string[] = [];
  for (const [name, tops] of candidates) {
    const groups = tops.flatMap((top) => [top, ...childGroups(top).map((child) => path.join(top, child))]);
    if (!tops.every((top) => madeBefore(top, cutoff)) || !groups.every(holdsNoProcess)) continue;
    // Children first: a group with a child cannot be removed.
    let whole = true;
    for (const group of groups.reverse()) {
      try {
        rmdirSync(group);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') whole = false;
      }
    }
    if (whole) removed.push(name);
  }
  return removed;
}

function childGroups(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name);
  } catch {
    return [];
  }
}

function madeBefore(group: string, cutoff: number): boolean {
  try {
    return statSync(group).mtimeMs < cutoff;
  } catch {
    return false;
  }
}

/**
 * Whether a group holds no process; one that cannot be read is treated as holding one. Its
 * `cgroup.procs` lists only the processes of the reader's PID namespace, so an executor in
 * another one (a container sharing the parent group) would read a live group as empty: where the
 * kernel counts every task (`pids.current`, v2's `cgroup.events`), that count must say none too.
 */
function holdsNoProcess(group: string): boolean {
  try {
    if (readFileSync(path.join(group, 'cgroup.procs'), 'utf8').trim() !== '') return false;
    const tasks = readIfThere(path.join(group, 'pids.current'));
    if (tasks !== undefined && tasks.trim() !== '0') return false;
    const events = readIfThere(path.join(group, 'cgroup.events'));
    return events === undefined || /^populated 0$/m.test(events);
  } catch {
    return false;
  }
}

function readIfThere(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}
