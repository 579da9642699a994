import { readFileSync, readdirSync } from 'node:fs';

/**
 * Processes that left the subprocess they came from, ended once no subprocess is running.
 *
 * A subprocess leads a process group, and its call ends by killing that group. A process that
 * leaves the group (`setsid`, a daemon's double fork) is out of reach of that kill, and one whose
 * parent exits is re-parented to its pid namespace's init: it would go on, unseen, working in the
 * workdir and holding its share of the session's ceilings, for as long as the session lives.
 *
 * When the host has a pid namespace of its own (bubblewrap or unshare started it; the executor
 * says so in `start`), every process in that namespace is the session's: its init, the host, and
 * what the running subprocesses started. So once none is running, any other process is one that
 * outlived its call, and is killed. While one runs, nothing is killed: a process that left its
 * group cannot be told from one the running call still works with, and the sweep waits for the
 * last call to end. Zombies are already dead and are left to whoever reaps them.
 *
 * Never used without a pid namespace of the host's own: there, "every other process" would be
 * the machine's.
 */
export class EscapeeSweep {
  private running = 0;

  /**
   * `killed` is told the pids of each sweep that killed any, so the capsule's author learns why a
   * job it left running is gone. `procRoot` and `hostPid` are the namespace's `/proc` and this
   * host's pid in it.
   */
  constructor(
    private readonly killed: (pids: number[]) => void = () => {},
    private readonly procRoot = '/proc',
    private readonly hostPid = process.pid,
  ) {}

  /** A subprocess starts. */
  began(): void {
    this.running += 1;
  }

  /** A subprocess ended (with its group): with none left running, whatever remains goes. Returns the pids killed. */
  ended(): number[] {
    this.running = Math.max(0, this.running - 1);
    if (this.running > 0) return [];
    const killed = this.sweep();
    if (killed.length > 0) this.killed(killed);
    return killed;
  }

  /**
   * Kills every live process but the namespace's init and the host, round after round until a
   * round finds none it has not signalled: one may fork between the listing and its kill, and
   * its child shows up in the next round. Bounded, since a ceiling bounds the processes a session
   * may have (`cgroup_pids_max`, `max_processes`) and each round kills every one it sees.
   */
  sweep(): number[] {
    const killed = new Set<number>();
    for (let round = 0; round < MAX_ROUNDS; round += 1) {
      const found = this.liveOthers().filter((pid) => !killed.has(pid));
      if (found.length === 0) break;
      for (const pid of found) {
        killed.add(pid);
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Gone already.
        }
      }
    }
    return [...killed];
  }

  private liveOthers(): number[] {
    const pids: number[] = [];
    let entries: string[];
    try {
      entries = readdirSync(this.procRoot);
    } catch {
      return pids;
    }
    for (const entry of entries) {
      if (!/^[0-9]+$/.test(entry)) continue;
      const pid = Number(entry);
      if (pid === 1 || pid === this.hostPid) continue;
      const state = processState(this.procRoot, entry);
      if (state !== undefined && state !== 'Z' && state !== 'X') pids.push(pid);
    }
    return pids;
  }
}

/** Enough for a process tree that forks while it is being killed; each round kills all it sees. */
const MAX_ROUNDS = 64;

/** The state letter of `/proc/<pid>/stat` (after the command name, which may hold anything, parentheses too), or undefined when it is gone. */
function processState(procRoot: string, pid: string): string | undefined {
  try {
    const stat = readFileSync(`${procRoot}/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return undefined;
  }
}
