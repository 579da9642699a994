import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * A session's control group: a memory ceiling and a pids ceiling on the whole process tree of
 * its capsule host, so a session that forks or balloons past its resources is stopped by the
 * kernel, and a session past its hard limit can be killed as a whole.
 *
 * cgroup v2 is used where this process's own cgroup can delegate the memory and pids controllers;
 * v1 otherwise (as on these machines, whose v2 hierarchy carries no controllers). Session groups
 * nest under this process's own groups, never at a root we were not given.
 */

export type CgroupVersion = 'v1' | 'v2';

export interface CgroupSupport {
  version: CgroupVersion;
  /** v1: the memory and pids hierarchies' directories for this process; v2: its one directory. */
  memoryParent: string;
  pidsParent: string;
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

function canCreateChild(parent: string, limitFile: string, value: string): boolean {
  const probe = path.join(parent, `murmur-probe-${process.pid}-${Date.now()}`);
  try {
    mkdirSync(probe);
    writeFileSync(path.join(probe, limitFile), value);
    return true;
  } catch {
    return false;
  } finally {
    try {
      rmdirSync(probe);
    } catch {
      // never created
    }
  }
}

/**
 * Finds where this process may create session groups with memory and pids limits: under its own
 * groups, or under `parent` (`MURMUR_CGROUP_PARENT`: a path below each controller's mount point)
 * when it was given a delegated subtree — as in a container, whose mount shows only its own group
 * and whose entrypoint made a writable `murmur/` in it.
 */
export function probeCgroups(root = '/sys/fs/cgroup', parent?: string): CgroupProbe {
  const own = parent === undefined ? ownCgroups() : new Map([['unified', parent], ['memory', parent], ['pids', parent]]);
  const v2Path = own.get('unified');
  const pureV2 = existsSync(path.join(root, 'cgroup.controllers'));
  if (pureV2 && v2Path !== undefined) {
    const parent = path.join(root, v2Path);
    try {
      const controllers = readFileSync(path.join(parent, 'cgroup.subtree_control'), 'utf8');
      if (controllers.includes('memory') && controllers.includes('pids') && canCreateChild(parent, 'memory.max', 'max')) {
        return { support: { version: 'v2', memoryParent: parent, pidsParent: parent }, reason: undefined };
      }
    } catch {
      // fall through to v1
    }
  }
  const memoryPath = own.get('memory');
  const pidsPath = own.get('pids');
  if (memoryPath !== undefined && pidsPath !== undefined) {
    const memoryParent = path.join(root, 'memory', memoryPath);
    const pidsParent = path.join(root, 'pids', pidsPath);
    if (canCreateChild(memoryParent, 'memory.limit_in_bytes', String(1 << 30)) && canCreateChild(pidsParent, 'pids.max', '64')) {
      return { support: { version: 'v1', memoryParent, pidsParent }, reason: undefined };
    }
    return { support: undefined, reason: `cannot create child groups under ${memoryParent} and ${pidsParent} (no permission, or no delegation)` };
  }
  return { support: undefined, reason: pureV2 ? 'the cgroup v2 hierarchy does not delegate the memory and pids controllers to this process' : 'no memory and pids cgroup controllers are mounted' };
}

export interface SessionLimits {
  memoryBytes: number;
  pidsMax: number;
}

/** One session's group(s). */
export class SessionCgroup {
  private readonly dirs: string[];

  private constructor(
    private readonly support: CgroupSupport,
    readonly name: string,
  ) {
    this.dirs = support.version === 'v2' ? [path.join(support.memoryParent, name)] : [path.join(support.memoryParent, name), path.join(support.pidsParent, name)];
  }

  static create(support: CgroupSupport, name: string, limits: SessionLimits): SessionCgroup {
    const group = new SessionCgroup(support, name);
    for (const dir of group.dirs) mkdirSync(dir, { recursive: true });
    if (support.version === 'v2') {
      const dir = group.dirs[0] as string;
      writeFileSync(path.join(dir, 'memory.max'), String(limits.memoryBytes));
      try {
        writeFileSync(path.join(dir, 'memory.swap.max'), '0');
      } catch {
        // no swap accounting: memory.max alone bounds it
      }
      writeFileSync(path.join(dir, 'pids.max'), String(limits.pidsMax));
    } else {
      writeFileSync(path.join(group.dirs[0] as string, 'memory.limit_in_bytes'), String(limits.memoryBytes));
      writeFileSync(path.join(group.dirs[1] as string, 'pids.max'), String(limits.pidsMax));
    }
    return group;
  }

  /** The files a process writes its pid into to join every group of this session. */
  get procsFiles(): string[] {
    return this.dirs.map((dir) => path.join(dir, 'cgroup.procs'));
  }

  pids(): number[] {
    const pids = new Set<number>();
    for (const file of this.procsFiles) {
      try {
        for (const line of readFileSync(file, 'utf8').split('\n')) if (line.trim()) pids.add(Number(line));
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

  /** Whether the kernel's OOM killer acted in this group. */
  oomKilled(): boolean {
    const dir = this.dirs[0] as string;
    try {
      const file = this.support.version === 'v2' ? 'memory.events' : 'memory.oom_control';
      const match = /oom_kill (\d+)/.exec(readFileSync(path.join(dir, file), 'utf8'));
      return match !== null && Number(match[1]) > 0;
    } catch {
      return false;
    }
  }

  /** Removes the groups once they are empty. Best effort: a group that still has a process stays. */
  /**
   * Removes the group(s) once their last process has gone. A group is busy for a moment after its
   * processes are killed (the kernel tears them down asynchronously), so removal is retried for a
   * while rather than attempted once and left behind.
   */
  async remove(): Promise<void> {
    for (const dir of [...this.dirs].reverse()) {
      for (let attempt = 0; ; attempt += 1) {
        try {
          rmdirSync(dir);
          break;
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code;
          if (code === 'ENOENT' || attempt >= 40) break;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
    }
  }
}
