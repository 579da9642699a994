import { lstat, opendir } from 'node:fs/promises';
import path from 'node:path';

/** What a session's workdir holds: the bytes of its entries that are not directories, and how many entries of any kind. */
export interface WorkdirUsage {
  bytes: number;
  entries: number;
}

/**
 * The most a session's workdir may hold: `bytes` is the manifest's
 * `capabilities.resources.workdir_max_bytes`; `entries` the executor's `MURMUR_WORKDIR_MAX_ENTRIES`.
 * Bytes alone do not bound a disk: empty files weigh nothing and each still takes an inode, and
 * a guest creates ~14 000 a second through WASI, enough to leave the executor's filesystem
 * without inodes for every other session within an agent's lifetime.
 */
export type WorkdirCeilings = WorkdirUsage;

/** Which ceiling a walk found passed. */
export type WorkdirCeiling = keyof WorkdirCeilings;

/**
 * The workdir against its ceilings, walked every `intervalMs` (10 s; the executor's
 * `MURMUR_WORKDIR_CHECK_MS`, for tests): the sizes of every entry that is not a directory,
 * symlinks counted as themselves and never followed, unreadable entries skipped, and every entry
 * counted once. The first walk over a ceiling reports it once and stops watching — the session
 * is ending.
 *
 * The walk is asynchronous and yields between reads, so a workdir of many files slows only the
 * guard, never the executor's other sessions; and a stopped guard abandons the walk in flight at
 * its next read, so a session's end (and an in-process `mur run`'s exit) never waits seconds for
 * a walk of a guest's hundreds of thousands of files.
 */
export class WorkdirGuard {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private walking = false;

  constructor(
    private readonly workdir: string,
    private readonly ceilings: WorkdirCeilings,
    private readonly onBreach: (ceiling: WorkdirCeiling, observed: WorkdirUsage) => void,
    intervalMs: number,
  ) {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  private async check(): Promise<void> {
    if (this.walking || this.stopped) return;
    this.walking = true;
    try {
      const observed = await workdirUsage(this.workdir, this.ceilings, () => this.stopped);
      const passed = passedCeiling(observed, this.ceilings);
      if (passed && !this.stopped) {
        this.stop();
        this.onBreach(passed, observed);
      }
    } finally {
      this.walking = false;
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * A ceiling passed, as the session's end says it: which limit, what was seen, and what to do —
 * the manifest's ceiling a capsule's author may raise; the executor's is its operator's.
 */
export function workdirBreach(passed: WorkdirCeiling, observed: WorkdirUsage, ceilings: WorkdirCeilings): { limit: string; message: string; hint: string } {
  if (passed === 'bytes') {
    return {
      limit: 'workdir_max_bytes',
      message: `session workdir grew to ${observed.bytes} bytes, past the ${ceilings.bytes} byte ceiling (capabilities.resources.workdir_max_bytes)`,
      hint: 'raise capabilities.resources.workdir_max_bytes in murmur.yaml if the capsule legitimately writes this much, or find what is filling the workdir',
    };
  }
  return {
    limit: 'workdir_max_entries',
    message: `session workdir grew to ${observed.entries} files, directories and links, past the executor's ceiling of ${ceilings.entries} (MURMUR_WORKDIR_MAX_ENTRIES)`,
    hint: "find what is creating so many files (a capsule cannot raise this ceiling: it guards the inodes of the disk every session's workdir shares), or ask the executor's operator to raise MURMUR_WORKDIR_MAX_ENTRIES",
  };
}

const UNBOUNDED: WorkdirCeilings = { bytes: Number.POSITIVE_INFINITY, entries: Number.POSITIVE_INFINITY };

/** How many entries one read of a directory takes, and so how many of their sizes are asked for at once. */
const ENTRIES_PER_READ = 128;

/**
 * What `root` holds. The walk ends early once past either of `stopAbove`'s ceilings (the answer
 * is then "over", its figures a lower bound), or when `abandoned()` says so (its figures are then
 * meaningless).
 */
export async function workdirUsage(root: string, stopAbove: WorkdirCeilings = UNBOUNDED, abandoned: () => boolean = () => false): Promise<WorkdirUsage> {
  const usage: WorkdirUsage = { bytes: 0, entries: 0 };
  const pending = [root];
  const within = () => !abandoned() && passedCeiling(usage, stopAbove) === undefined;
  while (pending.length > 0 && within()) {
    const dir = pending.pop() as string;
    let handle: Awaited<ReturnType<typeof opendir>>;
    try {
      handle = await opendir(dir, { bufferSize: ENTRIES_PER_READ });
    } catch {
      continue;
    }
    try {
      let files: string[] = [];
      for await (const entry of handle) {
        usage.entries++;
        const full = path.join(dir, entry.name);
        if (entry.isDirectory()) pending.push(full);
        else files.push(full);
        if (files.length === ENTRIES_PER_READ) {
          usage.bytes += await bytesOf(files);
          files = [];
          if (!within()) break;
        }
      }
      usage.bytes += await bytesOf(files);
    } catch {
      // the directory went away mid-walk (the loop closes the handle however it ends)
    }
  }
  return usage;
}

/** The sizes of `files` together, each as itself (never followed); one gone or unreadable counts nothing. */
async function bytesOf(files: string[]): Promise<number> {
  const sizes = await Promise.all(
    files.map((file) =>
      lstat(file).then(
        (stat) => stat.size,
        () => 0,
      ),
    ),
  );
  return sizes.reduce((sum, size) => sum + size, 0);
}

function passedCeiling(usage: WorkdirUsage, ceilings: WorkdirCeilings): WorkdirCeiling | undefined {
  if (usage.bytes > ceilings.bytes) return 'bytes';
  if (usage.entries > ceilings.entries) return 'entries';
  return undefined;
}
