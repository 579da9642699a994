import { lstat, opendir } from 'node:fs/promises';
import path from 'node:path';

/** What a session's workdir holds: the bytes of its entries that are not directories, and how many entries of any kind. */
export interface WorkdirUsage {
  bytes: number;
  entries: number;
  /** The first entry the walk could not read or measure, and why (its path relative to the workdir). */
  hidden?: { path: string; code: string };
  /** Of `bytes`, those under the session's delegated children's workdirs (`children/`), when the walk was told where they are. */
  delegatedBytes?: number;
}

/**
 * The most a session's workdir may hold: `bytes` is the manifest's
 * `capabilities.resources.workdir_max_bytes`; `entries` the executor's `MURMUR_WORKDIR_MAX_ENTRIES`.
 * Bytes alone do not bound a disk: empty files weigh nothing and each still takes an inode, and
 * a guest creates ~14 000 a second through WASI, enough to leave the executor's filesystem
 * without inodes for every other session within an agent's lifetime.
 */
export interface WorkdirCeilings {
  bytes: number;
  entries: number;
}

/**
 * Why a walk ends the session: a ceiling passed, or an entry it could not measure. A subprocess
 * can make a directory its owner cannot read (`chmod 000`; the executor of a stack is that owner,
 * without root's override) or nest one past the kernel's 4 096-byte path (`cd` as it goes), and
 * whatever it writes beneath would weigh nothing: in doubt, the walk counts such a workdir as over.
 */
export type WorkdirBreach = keyof WorkdirCeilings | 'hidden';

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
    private readonly onBreach: (breach: WorkdirBreach, observed: WorkdirUsage) => void,
    intervalMs: number,
    /** Where the session's delegated children have their workdirs: counted too, and said apart. */
    private readonly delegations?: string,
  ) {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  private async check(): Promise<void> {
    if (this.walking || this.stopped) return;
    this.walking = true;
    try {
      const observed = await workdirUsage(this.workdir, this.ceilings, () => this.stopped, this.delegations);
      const breach = breachOf(observed, this.ceilings);
      if (breach && !this.stopped) {
        this.stop();
        this.onBreach(breach, observed);
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
 * A breach as the session's end says it: which limit, what was seen, and what to do — the
 * manifest's ceiling a capsule's author may raise; the executor's is its operator's.
 */
export function workdirBreach(breach: WorkdirBreach, observed: WorkdirUsage, ceilings: WorkdirCeilings): { limit: string; message: string; hint: string } {
  switch (breach) {
    case 'bytes': {
      const delegated = observed.delegatedBytes ?? 0;
      return {
        limit: 'workdir_max_bytes',
        message: `session workdir grew to ${observed.bytes} bytes${delegated > 0 ? ` (${delegated} of them in its delegated children's workdirs under children/)` : ''}, past the ${ceilings.bytes} byte ceiling (capabilities.resources.workdir_max_bytes)`,
        hint:
          delegated > 0
            ? "a delegated child's workdir lies in its parent's, and what children write counts against the parent's ceiling, finished children's files included: raise capabilities.resources.workdir_max_bytes in the parent's murmur.yaml, or delegate work that writes less"
            : 'raise capabilities.resources.workdir_max_bytes in murmur.yaml if the capsule legitimately writes this much, or find what is filling the workdir',
      };
    }
    case 'entries':
      return {
        limit: 'workdir_max_entries',
        message: `session workdir grew to ${observed.entries} files, directories and links, past the executor's ceiling of ${ceilings.entries} (MURMUR_WORKDIR_MAX_ENTRIES)`,
        hint: "find what is creating so many files (a capsule cannot raise this ceiling: it guards the inodes of the disk every session's workdir shares), or ask the executor's operator to raise MURMUR_WORKDIR_MAX_ENTRIES",
      };
    case 'hidden': {
      const hidden = observed.hidden ?? { path: '?', code: '?' };
      return {
        limit: 'workdir_max_bytes',
        message: `session workdir holds '${hidden.path.length > 200 ? `${hidden.path.slice(0, 200)}…` : hidden.path}', which the executor cannot measure against capabilities.resources.workdir_max_bytes (${hidden.code})`,
        hint: 'a capsule must leave its workdir readable to its owner (no directory without read and search permission) and every path in it shorter than 4 096 bytes, or the executor counts it as past its ceiling',
      };
    }
  }
}

const UNBOUNDED: WorkdirCeilings = { bytes: Number.POSITIVE_INFINITY, entries: Number.POSITIVE_INFINITY };

/** How many entries one read of a directory takes, and so how many of their sizes are asked for at once. */
const ENTRIES_PER_READ = 128;

/**
 * What `root` holds. The walk ends early once past either of `stopAbove`'s ceilings (the answer
 * is then "over", its figures a lower bound), at the first entry it cannot read or measure
 * (`hidden`; one that went away mid-walk is only skipped), or when `abandoned()` says so (its
 * figures are then meaningless).
 */
export async function workdirUsage(
  root: string,
  stopAbove: WorkdirCeilings = UNBOUNDED,
  abandoned: () => boolean = () => false,
  /** Where delegated children's workdirs are: their bytes are also counted apart (`delegatedBytes`). */
  delegations?: string,
): Promise<WorkdirUsage> {
  const usage: WorkdirUsage = { bytes: 0, entries: 0, ...(delegations === undefined ? {} : { delegatedBytes: 0 }) };
  const delegated = (dir: string): boolean => delegations !== undefined && (dir === delegations || dir.startsWith(`${delegations}/`));
  const pending = [root];
  const hide = (entry: string, error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    if (!GONE.has(code)) usage.hidden ??= { path: path.relative(root, entry) || '.', code };
  };
  const within = () => !abandoned() && breachOf(usage, stopAbove) === undefined;
  while (pending.length > 0 && within()) {
    const dir = pending.pop() as string;
    let handle: Awaited<ReturnType<typeof opendir>>;
    try {
      handle = await opendir(dir, { bufferSize: ENTRIES_PER_READ });
    } catch (error) {
      hide(dir, error);
      continue;
    }
    const count = (bytes: number): void => {
      usage.bytes += bytes;
      if (usage.delegatedBytes !== undefined && delegated(dir)) usage.delegatedBytes += bytes;
    };
    try {
      let files: string[] = [];
      for await (const entry of handle) {
        usage.entries++;
        const full = path.join(dir, entry.name);
        if (entry.isDirectory()) pending.push(full);
        else files.push(full);
        if (files.length === ENTRIES_PER_READ) {
          count(await bytesOf(files, hide));
          files = [];
          if (!within()) break;
        }
      }
      count(await bytesOf(files, hide));
    } catch (error) {
      // the directory went away mid-walk (the loop closes the handle however it ends), or cannot be read on
      hide(dir, error);
    }
  }
  return usage;
}

/** What an entry that went away mid-walk fails with: skipped, as a walk that came a moment later would. */
const GONE = new Set(['ENOENT', 'ENOTDIR']);

/**
 * The sizes of `files` together, each as itself (never followed) and the larger of what it says
 * it holds and what it takes on disk: a sparse file counts all it could be read as, and disk a
 * tool reserved past a file's end (`fallocate`'s keep-size, which the sealed filter refuses and a
 * scoped or advisory sandbox does not) counts though the file says it is empty. One gone counts
 * nothing, one that cannot be measured is hidden.
 */
async function bytesOf(files: string[], hide: (entry: string, error: unknown) => void): Promise<number> {
  const sizes = await Promise.all(
    files.map((file) =>
      lstat(file).then(
        (stat) => Math.max(stat.size, stat.blocks * 512),
        (error: unknown) => {
          hide(file, error);
          return 0;
        },
      ),
    ),
  );
  return sizes.reduce((sum, size) => sum + size, 0);
}

function breachOf(usage: WorkdirUsage, ceilings: WorkdirCeilings): WorkdirBreach | undefined {
  if (usage.hidden) return 'hidden';
  if (usage.bytes > ceilings.bytes) return 'bytes';
  if (usage.entries > ceilings.entries) return 'entries';
  return undefined;
}
