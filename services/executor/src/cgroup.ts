import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * A session's control groups: two, one inside the other.
 *
 * - The **session** group holds everything the session runs, the capsule host included, so a
 *   session can be killed as a whole and a runaway host is stopped by the kernel too. Its ceiling
 *   is derived (the tools' memory, the guests' `limits.memory_bytes` and a budget for the host
 *   itself), because the manifest's `capabilities.resources` describe the subprocess tree.
 * - The **tools** group, inside it, holds every subprocess a shell or native tool starts (the
 *   helper joins it before it execs the tool) and carries exactly the manifest's ceilings:
 *   `cgroup_memory_bytes`, `cgroup_pids_max` and `cgroup_cpu_percent` — as upstream, where the
 *   scope bounds the subprocesses and not the runtime. A fork bomb counts only its own tasks, and
 *   a memory hog is the one the kernel kills.
 *
 * cgroup v2 is used where this process's own cgroup can delegate the memory, pids and cpu
 * controllers; v1 otherwise (as on these machines, whose v2 hierarchy carries no controllers).
 * Groups nest under this process's own groups, never at a root we were not given.
 */

export type CgroupVersion = 'v1' | 'v2';

export interface CgroupSupport {
  version: CgroupVersion;
  /** v1: each controller's directory for this process; v2: its one directory, three times. */
  memoryParent: string;
  pidsParent: string;
  cpuParent: string;
  /**
   * Where the tools' I/O is throttled (v1: this process's `blkio` directory; v2: the same one
   * directory, when it delegates `io`); undefined when it cannot be, `ioUnavailable` saying why.
   * Best-effort, as upstream's `io.max`: of the four ceilings it is the one whose absence makes a
   * capsule slow rather than dangerous, so it never refuses a launch.
   */
  ioParent: string | undefined;
  ioUnavailable: string | undefined;
}

export interface CgroupProbe {
  support: CgroupSupport | undefined;
  /** Why there is none, for the refusal (`E-RUN-012`). */
  reason: string | undefined;
}

function ownCgroups(): Map<string, string> {
  const groups = new Map<string, string>();
  try {
    for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
      const [, controllers, groupPath] = line.split(':');
      if (controllers === undefined || groupPath === undefined) continue;
      for (const controller of controllers === '' ? ['unified'] : controllers.split(',')) groups.set(controller, groupPath);
    }
  } catch {
    // not Linux, or /proc unavailable: no cgroups
  }
  return groups;
}

/** Tries to make a child group and write one limit in it; undefined when that works, else why not. */
function childProblem(parent: string, limitFile: string | undefined, value = ''): string | undefined {
  const probe = path.join(parent, `murmur-probe-${process.pid}-${Date.now()}`);
  try {
    mkdirSync(probe);
    if (limitFile !== undefined) writeFileSync(path.join(probe, limitFile), value);
    return undefined;
  } catch (error) {
    return `${path.join(parent, '…', limitFile ?? '')}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`;
  } finally {
    try {
      rmdirSync(probe);
    } catch {
      // never created
    }
  }
}

/** The directory of `controller` for this process on v1, which may be mounted jointly (`cpu,cpuacct`). */
function v1Directory(root: string, own: Map<string, string>, controller: string): string | undefined {
  const groupPath = own.get(controller);
  if (groupPath === undefined) return undefined;
  for (const mount of [controller, `${controller},cpuacct`, `cpuacct,${controller}`]) {
    const dir = path.join(root, mount);
    if (existsSync(dir)) return path.join(dir, groupPath);
  }
  return undefined;
}

/**
 * Finds where this process may create session groups with memory, pids and cpu limits: under its
 * own groups, or under `parent` (`MURMUR_CGROUP_PARENT`: a path below each controller's mount
 * point) when it was given a delegated subtree — as in a container, whose mount shows only its
 * own group and whose entrypoint made a writable `murmur/` in it.
 */
export function probeCgroups(root = '/sys/fs/cgroup', parent?: string): CgroupProbe {
  const own = parent === undefined ? ownCgroups() : new Map(['unified', 'memory', 'pids', 'cpu', 'blkio'].map((controller) => [controller, parent]));
  const v2Path = own.get('unified');
  const pureV2 = existsSync(path.join(root, 'cgroup.controllers'));
  if (pureV2 && v2Path !== undefined) {
    const dir = path.join(root, v2Path);
    let controllers = '';
    try {
      controllers = readFileSync(path.join(dir, 'cgroup.subtree_control'), 'utf8');
    } catch {
      // unreadable: not delegated
    }
    const missing = ['memory', 'pids', 'cpu'].filter((controller) => !controllers.split(/\s+/).includes(controller));
    if (missing.length > 0)
      return {
        support: undefined,
        reason: `the cgroup v2 group ${dir} does not delegate the ${missing.join(', ')} controller${missing.length > 1 ? 's' : ''} to this process`,
      };
    const problem = childProblem(dir, 'memory.max', 'max');
    if (problem) return { support: undefined, reason: `cannot create child groups under ${dir} (${problem})` };
    const io = controllers.split(/\s+/).includes('io');
    return {
      support: {
        version: 'v2',
        memoryParent: dir,
        pidsParent: dir,
        cpuParent: dir,
        ioParent: io ? dir : undefined,
        ioUnavailable: io ? undefined : `the cgroup v2 group ${dir} does not delegate the io controller to this process`,
      },
      reason: undefined,
    };
  }
  const memoryParent = v1Directory(root, own, 'memory');
  const pidsParent = v1Directory(root, own, 'pids');
  const cpuParent = v1Directory(root, own, 'cpu');
  const absent = [memoryParent ? undefined : 'memory', pidsParent ? undefined : 'pids', cpuParent ? undefined : 'cpu'].filter((name) => name !== undefined);
  if (memoryParent === undefined || pidsParent === undefined || cpuParent === undefined) {
    return { support: undefined, reason: `no ${absent.join(', ')} cgroup controller${absent.length > 1 ? 's are' : ' is'} mounted for this process` };
  }
  const problem =
    childProblem(memoryParent, 'memory.limit_in_bytes', String(1 << 30)) ??
    childProblem(pidsParent, 'pids.max', '64') ??
    childProblem(cpuParent, 'cpu.cfs_quota_us', '100000');
  if (problem) return { support: undefined, reason: `cannot create child groups with limits (${problem}): no permission, or no delegation` };
  const blkio = v1Directory(root, own, 'blkio');
  const ioProblem = blkio === undefined ? 'no blkio cgroup controller is mounted for this process' : childProblem(blkio, undefined);
  return {
    support: {
      version: 'v1',
      memoryParent,
      pidsParent,
      cpuParent,
      ioParent: ioProblem === undefined ? blkio : undefined,
      ioUnavailable: ioProblem === undefined ? undefined : blkio === undefined ? ioProblem : `cannot create child groups under ${blkio} (${ioProblem})`,
    },
    reason: undefined,
  };
}

export interface ToolCeilings {
  memoryBytes: number;
  pidsMax: number;
  /** Percent of one CPU: 50 is half a core, 200 two cores. */
  cpuPercent: number;
}

export interface SessionCeilings {
  memoryBytes: number;
  pidsMax: number;
}

/** What the kernel counted in the tools' group: how often it killed for memory, and refused a fork. */
export interface ToolCounters {
  oom_kills: number;
  pids_refusals: number;
}

const CPU_PERIOD_US = 100_000;

/** The waits between attempts to remove a busy group: soon at first, then every 50 ms, ~2 s in all. */
const REMOVE_RETRY_MS: readonly number[] = [1, 2, 4, 8, 16, 32, ...Array.from({ length: 38 }, () => 50)];

/** One session's groups. */
export class SessionCgroup {
  /** The group's name (`murmur-<session>`, or a pooled host's until a session takes it). */
  private name = '';
  /** Every directory this session made, parents before children. */
  private dirs: string[] = [];
  /** The host joins these (v1: one per controller; v2: `host/`, since a v2 group with children holds no process). */
  hostProcsFiles: string[] = [];
  /** Every subprocess joins these, through the descriptors the helper is given. */
  toolsProcsFiles: string[] = [];
  private memoryDir = '';
  private toolsMemoryDir = '';
  private toolsPidsDir = '';
  /** The tools' group that carries their I/O throttle; undefined where there is none. */
  private toolsIoDir: string | undefined;

  private constructor(
    private readonly support: CgroupSupport,
    name: string,
  ) {
    this.place(name);
  }

  /** The group's paths under `name`: v2 one tree with `host/` and `tools/`, v1 one per controller. */
  private place(name: string): void {
    this.name = name;
    const support = this.support;
    if (support.version === 'v2') {
      const session = path.join(support.memoryParent, name);
      this.dirs = [session, path.join(session, 'host'), path.join(session, 'tools')];
      this.memoryDir = session;
      this.toolsMemoryDir = this.toolsPidsDir = path.join(session, 'tools');
      this.hostProcsFiles = [path.join(session, 'host', 'cgroup.procs')];
      this.toolsProcsFiles = [path.join(session, 'tools', 'cgroup.procs')];
      this.toolsIoDir = support.ioParent === undefined ? undefined : path.join(session, 'tools');
    } else {
      const memory = path.join(support.memoryParent, name);
      const pids = path.join(support.pidsParent, name);
      const cpu = path.join(support.cpuParent, name);
      this.dirs = [memory, path.join(memory, 'tools'), pids, path.join(pids, 'tools'), cpu, path.join(cpu, 'tools')];
      this.memoryDir = memory;
      this.toolsMemoryDir = path.join(memory, 'tools');
      this.toolsPidsDir = path.join(pids, 'tools');
      this.hostProcsFiles = [path.join(memory, 'cgroup.procs'), path.join(pids, 'cgroup.procs')];
      this.toolsProcsFiles = [path.join(memory, 'tools', 'cgroup.procs'), path.join(pids, 'tools', 'cgroup.procs'), path.join(cpu, 'tools', 'cgroup.procs')];
      this.toolsIoDir = undefined;
      if (support.ioParent !== undefined) {
        // Only the tools join it: the host's own reads (its code, the capsule's components) are
        // the runtime's, which a capsule's setting must not slow.
        const blkio = path.join(support.ioParent, name);
        this.dirs.push(blkio, path.join(blkio, 'tools'));
        this.toolsIoDir = path.join(blkio, 'tools');
        this.toolsProcsFiles.push(path.join(blkio, 'tools', 'cgroup.procs'));
      }
    }
  }

  static create(support: CgroupSupport, name: string, session: SessionCeilings, tools: ToolCeilings): SessionCgroup {
    const group = new SessionCgroup(support, name);
    try {
      for (const dir of group.dirs) mkdirSync(dir, { recursive: true });
      if (support.version === 'v2')
        writeFileSync(path.join(group.memoryDir, 'cgroup.subtree_control'), support.ioParent === undefined ? '+memory +pids +cpu' : '+memory +pids +cpu +io');
      group.limit(session, tools);
    } catch (error) {
      group.removeNow();
      throw error;
    }
    return group;
  }

  /** Sets the ceilings; a pooled host's group gets its session's when the session takes it. */
  limit(session: SessionCeilings, tools: ToolCeilings): void {
    const write = (dir: string, file: string, value: string): void => writeFileSync(path.join(dir, file), value);
    const quota = String(Math.max(1_000, tools.cpuPercent * 1_000));
    if (this.support.version === 'v2') {
      const [sessionDir, , toolsDir] = this.dirs as [string, string, string];
      write(sessionDir, 'memory.max', String(session.memoryBytes));
      write(sessionDir, 'pids.max', String(session.pidsMax));
      write(toolsDir, 'memory.max', String(tools.memoryBytes));
      write(toolsDir, 'pids.max', String(tools.pidsMax));
      write(toolsDir, 'cpu.max', `${quota} ${CPU_PERIOD_US}`);
      for (const dir of [sessionDir, toolsDir]) {
        try {
          write(dir, 'memory.swap.max', '0');
        } catch {
          // no swap accounting: memory.max alone bounds it
        }
      }
    } else {
      const [memory, toolsMemory, pids, toolsPids, , toolsCpu] = this.dirs as [string, string, string, string, string, string];
      write(memory, 'memory.limit_in_bytes', String(session.memoryBytes));
      write(toolsMemory, 'memory.limit_in_bytes', String(tools.memoryBytes));
      write(pids, 'pids.max', String(session.pidsMax));
      write(toolsPids, 'pids.max', String(tools.pidsMax));
      write(toolsCpu, 'cpu.cfs_period_us', String(CPU_PERIOD_US));
      write(toolsCpu, 'cpu.cfs_quota_us', quota);
    }
  }

  /**
   * `cgroup_io_bytes_per_sec`: the tools' reads and writes on `device` (a whole disk's `MAJ:MIN`,
   * `throttleDevice`) held to `bytesPerSec` each. Best-effort, as upstream's `io.max`: undefined
   * when it holds, else why not, for the session's log; a launch goes on either way.
   *
   * On cgroup v1 the kernel throttles what the tools read from the disk and write to it directly
   * (`O_DIRECT`, and what a sync forces out of them); their buffered writes reach the disk through
   * the kernel's writeback, which v1 charges to no group. v2 charges writeback to its group too.
   */
  throttleToolsIo(device: string, bytesPerSec: number): string | undefined {
    if (this.toolsIoDir === undefined) return this.support.ioUnavailable ?? 'no io controller';
    const rate = String(Math.floor(bytesPerSec));
    try {
      if (this.support.version === 'v2') writeFileSync(path.join(this.toolsIoDir, 'io.max'), `${device} rbps=${rate} wbps=${rate}`);
      else
        for (const file of ['blkio.throttle.read_bps_device', 'blkio.throttle.write_bps_device'])
          writeFileSync(path.join(this.toolsIoDir, file), `${device} ${rate}`);
      return undefined;
    } catch (error) {
      return `the kernel refused a throttle on device ${device} (${(error as NodeJS.ErrnoException).code ?? String(error)})`;
    }
  }

  /**
   * `argv` run from a shell that first joins the session's groups, so every process the session
   * ever starts is inside them: nothing is forked before the limits apply.
   */
  joining(argv: string[]): string[] {
    const join = this.hostProcsFiles.map((file) => `echo $$ > '${file}'`).join(' && ');
    return ['/bin/sh', '-c', `${join} && exec "$@"`, 'murmur-session', ...argv];
  }

  /**
   * Gives the group its session's name (the kernel renames a group in place, processes and open
   * descriptors with it), so a pooled host's group reads like any session's: `murmur-<session>`.
   */
  rename(name: string): void {
    // The group's own directories (one per v1 controller), not the `host/` and `tools/` inside them.
    for (const top of this.dirs.filter((dir) => path.basename(dir) === this.name)) renameSync(top, path.join(path.dirname(top), name));
    this.place(name);
  }

  pids(): number[] {
    const pids = new Set<number>();
    for (const dir of this.dirs) {
      try {
        for (const line of readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n')) if (line.trim()) pids.add(Number(line));
      } catch {
        // gone already
      }
    }
    return [...pids];
  }

  /** SIGKILLs every process in the session, repeatedly, until none is left (the pids limit bounds forking). */
  killAll(): void {
    for (let round = 0; round < 20; round += 1) {
      const pids = this.pids();
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  }

  /** Whether the kernel's OOM killer acted at the session's own ceiling (not a tool's). */
  oomKilled(): boolean {
    return counter(path.join(this.memoryDir, this.support.version === 'v2' ? 'memory.events' : 'memory.oom_control'), 'oom_kill') > 0;
  }

  /** The tools' group's counters, read before and after each subprocess to say which ceiling ended it. */
  toolCounters(): ToolCounters {
    return {
      oom_kills: counter(path.join(this.toolsMemoryDir, this.support.version === 'v2' ? 'memory.events' : 'memory.oom_control'), 'oom_kill'),
      pids_refusals: counter(path.join(this.toolsPidsDir, 'pids.events'), 'max'),
    };
  }

  private removeNow(): void {
    for (const dir of [...this.dirs].reverse()) {
      try {
        rmdirSync(dir);
      } catch {
        // not made, or not empty
      }
    }
  }

  /** Kills every process in the groups and removes them: what is left of a session or a pooled host that is over. */
  async discard(): Promise<void> {
    this.killAll();
    await this.remove();
  }

  /**
   * Removes the groups once their last process has gone. A group is busy for a moment after its
   * processes are killed or have exited (the kernel tears them down asynchronously), so removal is
   * retried for ~2 s rather than attempted once and left behind. The first retries come soon
   * (`REMOVE_RETRY_MS`): a session's end is announced once its groups are gone, and a third of
   * them were busy at the first attempt, each then waiting out a whole 50 ms where the group was
   * empty within ~4–12 ms (a warm executor's script sessions).
   */
  async remove(): Promise<void> {
    for (const dir of [...this.dirs].reverse()) {
      for (let attempt = 0; ; attempt += 1) {
        try {
          for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) rmdirSync(path.join(dir, entry.name));
          rmdirSync(dir);
          break;
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code;
          if (code === 'ENOENT' || attempt >= REMOVE_RETRY_MS.length) break;
          await new Promise((resolve) => setTimeout(resolve, REMOVE_RETRY_MS[attempt]));
        }
      }
    }
  }
}

/** `name N` out of a flat-keyed cgroup file; 0 when it cannot be read. */
function counter(file: string, name: string): number {
  try {
    const match = new RegExp(`^${name} (\\d+)$`, 'm').exec(readFileSync(file, 'utf8'));
    return match ? Number(match[1]) : 0;
  } catch {
    return 0;
  }
}
