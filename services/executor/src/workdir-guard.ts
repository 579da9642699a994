import { lstat, open, opendir, readFile, readlink, realpath, stat } from 'node:fs/promises';
import path from 'node:path';

/** What a session's workdir holds: the bytes of its entries that are not directories, and how many entries of any kind. */
export interface WorkdirUsage {
  bytes: number;
  entries: number;
  /** The first entry the walk could not read or measure, and why (its path relative to the workdir). */
  hidden?: { path: string; code: string };
  /** Of `bytes`, those under the session's delegated children's workdirs (`children/`), when the walk was told where they are. */
  delegatedBytes?: number;
  /**
   * Of `bytes`, those held by files in the workdir that the session's processes deleted while
   * holding them open (`unlinkedUsage`), when the guard was told which processes are the session's.
   */
  unlinkedBytes?: number;
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
 *
 * A walk goes by names, and a file a process deleted while holding it open has none, yet keeps
 * its disk until its last descriptor closes (`exec 3>/tmp/big; rm /tmp/big`, or WASI's open,
 * unlink and write): a capsule of a 1 MiB ceiling wrote 500 MiB so and ended `ok`. Told the
 * session's processes (`processes`), each check first counts what theirs of those files in the
 * workdir hold (`unlinkedUsage`), and the walk's bytes are added to it; without, it cannot see them.
 */
export class WorkdirGuard {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private walking = false;
  /** Where in the session's descriptors the next check's look for deleted files begins (`unlinkedUsage`'s `from`). */
  private descriptorsFrom = 0;

  constructor(
    private readonly workdir: string,
    private readonly ceilings: WorkdirCeilings,
    private readonly onBreach: (breach: WorkdirBreach, observed: WorkdirUsage) => void,
    intervalMs: number,
    /** Where the session's delegated children have their workdirs: counted too, and said apart. */
    private readonly delegations?: string,
    /**
     * The pids of the session's processes (its capsule host and every subprocess), as the
     * executor sees them (its own pid namespace), asked afresh at each check: the files they hold
     * open that were deleted from the workdir count against its ceiling (`unlinkedBytes`). One
     * that throws, or names a pid gone since, costs that check only those files, never the walk.
     */
    private readonly processes?: () => Iterable<number> | Promise<Iterable<number>>,
  ) {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  private async check(): Promise<void> {
    if (this.walking || this.stopped) return;
    this.walking = true;
    try {
      let unlinked: number | undefined;
      if (this.processes) {
        let pids: Iterable<number> = [];
        try {
          pids = await this.processes();
        } catch {
          // which processes are the session's is unknown this once: the walk still judges what has a name
        }
        const held = await unlinkedUsage(this.workdir, pids, () => this.stopped, this.descriptorsFrom);
        this.descriptorsFrom = held.next;
        unlinked = held.bytes;
      }
      if (this.stopped) return;
      // the walk stops once the names and the deleted files together are over the ceiling
      const names = unlinked === undefined ? this.ceilings : { ...this.ceilings, bytes: this.ceilings.bytes - unlinked };
      const observed = await workdirUsage(this.workdir, names, () => this.stopped, this.delegations);
      if (unlinked !== undefined) {
        observed.bytes += unlinked;
        observed.unlinkedBytes = unlinked;
      }
      const breach = breachOf(observed, this.ceilings);
      if (breach && !this.stopped) {
        this.stop();
        this.onBreach(breach, observed);
      }
    } finally {
      this.walking = false;
    }
  }

  /**
   * One last measure, once the session's processes are gone (so without the deleted files they
   * held), whether or not the guard is stopped: the breach it finds, if any. A session shorter
   * than one check (10 s) was never measured at all, and ended `ok` with its workdir 250 times its
   * ceiling, left on the executor's disk.
   */
  async lastLook(): Promise<{ breach: WorkdirBreach; observed: WorkdirUsage } | undefined> {
    const observed = await workdirUsage(this.workdir, this.ceilings, () => false, this.delegations);
    const breach = breachOf(observed, this.ceilings);
    return breach ? { breach, observed } : undefined;
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
      const unlinked = observed.unlinkedBytes ?? 0;
      const parts = [
        ...(delegated > 0 ? [`${delegated} of them in its delegated children's workdirs under children/`] : []),
        ...(unlinked > 0 ? [`${unlinked} of them in files deleted while still open`] : []),
      ];
      return {
        limit: 'workdir_max_bytes',
        message: `session workdir grew to ${observed.bytes} bytes${parts.length > 0 ? ` (${parts.join('; ')})` : ''}, past the ${ceilings.bytes} byte ceiling (capabilities.resources.workdir_max_bytes)`,
        hint:
          delegated > 0
            ? "a delegated child's workdir lies in its parent's, and what children write counts against the parent's ceiling, finished children's files included: raise capabilities.resources.workdir_max_bytes in the parent's murmur.yaml, or delegate work that writes less"
            : unlinked > 0
              ? 'a file deleted while a process holds it open keeps its disk until the last descriptor on it closes, and counts against the ceiling until then: close such files (or end the process holding them), or raise capabilities.resources.workdir_max_bytes in murmur.yaml if the capsule legitimately writes this much'
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

/** The most descriptors one check reads (its link, and for a deleted file its size and mount), across all the session's processes. */
const DESCRIPTORS_PER_CHECK = 4096;

/** How a descriptor's link reads once the file it holds has lost its name. */
const DELETED = ' (deleted)';

/**
 * The disk held by files in `root` that `pids` hold open after their names were deleted, each
 * file counted once however many descriptors hold it (by device and inode) and, as the walk
 * counts one with a name, as the larger of its size and its blocks on disk. Only a file with no
 * name left counts (no links): one still linked elsewhere in the workdir is the walk's to count.
 *
 * Whether such a file lies in `root` cannot go by its link's path alone: the kernel writes it as
 * the holding process sees it, and a sandboxed one sees the workdir's `tmp/` as `/tmp` (its mount
 * namespace), where the executor's `/tmp` is another directory. So a path is taken back to the
 * filesystem it is on, through the mount the descriptor was opened on (`fdinfo`'s `mnt_id`, in the
 * process's `mountinfo`: its device and the directory of that filesystem it shows), and compared
 * with the workdir's real path taken back the same way through the executor's own mounts.
 *
 * At most `DESCRIPTORS_PER_CHECK` descriptors are read, beginning at the `from`-th of the
 * session's (pids in order, each one's descriptors as `/proc` lists them); `next` is where the
 * next call begins, so a file behind thousands of other descriptors is found a few checks later,
 * not never. What cannot be read — a process that ended or a descriptor closed mid-scan, a `/proc`
 * entry the executor may not read — is skipped: the scan races the processes by nature, and its
 * figure is a lower bound. `abandoned()` ends it at its next read.
 */
export async function unlinkedUsage(
  root: string,
  pids: Iterable<number>,
  abandoned: () => boolean = () => false,
  from = 0,
): Promise<{ bytes: number; next: number }> {
  const workdir = await placeOfDirectory(root).catch(() => undefined);
  if (workdir === undefined) return { bytes: 0, next: 0 };
  const seen = new Set<string>();
  let bytes = 0;
  let position = 0;
  let read = 0;
  for (const pid of new Set(pids)) {
    if (!Number.isSafeInteger(pid) || pid <= 0) continue;
    let mounts: Promise<Map<string, Mount> | undefined> | undefined;
    let handle: Awaited<ReturnType<typeof opendir>>;
    try {
      handle = await opendir(`/proc/${pid}/fd`, { bufferSize: ENTRIES_PER_READ });
    } catch {
      continue;
    }
    try {
      for await (const entry of handle) {
        if (abandoned()) return { bytes, next: 0 };
        if (position++ < from) continue;
        if (read++ === DESCRIPTORS_PER_CHECK) return { bytes, next: position - 1 };
        const descriptor = `/proc/${pid}/fd/${entry.name}`;
        try {
          const link = await readlink(descriptor);
          if (!link.endsWith(DELETED)) continue;
          const file = await stat(descriptor, { bigint: true });
          const key = `${file.dev}:${file.ino}`;
          if (file.nlink !== 0n || !file.isFile() || seen.has(key)) continue;
          mounts ??= readFile(`/proc/${pid}/mountinfo`, 'utf8').then(parseMountinfo, () => undefined);
          const mount = (await mounts)?.get(await mountIdOf(`/proc/${pid}/fdinfo/${entry.name}`));
          const place = mount && placeIn(mount, link.slice(0, -DELETED.length));
          if (place === undefined || !within(place, workdir)) continue;
          seen.add(key);
          bytes += Number(file.size > file.blocks * 512n ? file.size : file.blocks * 512n);
        } catch {
          // closed, or its process ended, since it was listed
        }
      }
    } catch {
      // the process ended mid-listing (the loop closes the handle however it ends)
    }
  }
  return { bytes, next: 0 };
}

/** A mount as `mountinfo` shows it: the device it is of, the directory of that device's filesystem it shows, and where. */
interface Mount {
  device: string;
  root: string;
  point: string;
}

/** A path as its filesystem knows it, whichever mount namespace it was seen from: the device, and the path on it. */
interface Place {
  device: string;
  path: string;
}

/** `/proc/<pid>/mountinfo`'s mounts by id; its paths have their spaces, tabs, newlines and backslashes in octal. */
function parseMountinfo(text: string): Map<string, Mount> {
  const decoded = (field: string) => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
  const mounts = new Map<string, Mount>();
  for (const line of text.split('\n')) {
    const [id, , device, root, point] = line.split(' ');
    if (id && device && root && point) mounts.set(id, { device, root: decoded(root), point: decoded(point) });
  }
  return mounts;
}

/** The id of the mount a descriptor was opened on (Linux 3.15 on), from its `fdinfo`. */
async function mountIdOf(fdinfo: string): Promise<string> {
  const id = /^mnt_id:\s*(\d+)$/m.exec(await readFile(fdinfo, 'utf8'))?.[1];
  if (id === undefined) throw new Error(`${fdinfo} names no mount`);
  return id;
}

/** Where `at`, a path seen through `mount` from its namespace, lies on the mount's filesystem; undefined if not beneath it. */
function placeIn(mount: Mount, at: string): Place | undefined {
  if (mount.point !== '/' && at !== mount.point && !at.startsWith(`${mount.point}/`)) return undefined;
  const beneath = mount.point === '/' ? at : at.slice(mount.point.length);
  return { device: mount.device, path: path.posix.join(mount.root, beneath || '/') };
}

function within(place: Place, directory: Place): boolean {
  return place.device === directory.device && (directory.path === '/' || place.path === directory.path || place.path.startsWith(`${directory.path}/`));
}

/** Where the executor's `directory` lies on its filesystem: its real path, through the mount it is opened on. */
async function placeOfDirectory(directory: string): Promise<Place | undefined> {
  const real = await realpath(directory);
  const handle = await open(real, 'r');
  try {
    const [mounts, id] = await Promise.all([readFile('/proc/self/mountinfo', 'utf8').then(parseMountinfo), mountIdOf(`/proc/self/fdinfo/${handle.fd}`)]);
    const mount = mounts.get(id);
    return mount && placeIn(mount, real);
  } finally {
    await handle.close();
  }
}

function breachOf(usage: WorkdirUsage, ceilings: WorkdirCeilings): WorkdirBreach | undefined {
  if (usage.hidden) return 'hidden';
  if (usage.bytes > ceilings.bytes) return 'bytes';
  if (usage.entries > ceilings.entries) return 'entries';
  return undefined;
}
