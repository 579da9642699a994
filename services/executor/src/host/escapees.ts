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
  /** The processes the last sweep signalled, by identity: one still dying is killed again, not told of again. */
  private signalled = new Set<string>();

  /** `killed` is told the pids each sweep ended (never an empty list), so the capsule's author learns why a job it left running is gone. */
  constructor(private readonly killed: (pids: number[]) => void) {}

  /** A subprocess starts. */
  began(): void {
    this.running += 1;
  }

  /** A subprocess ended (with its group): with none left running, whatever remains goes, and `killed` is told. */
  ended(): void {
    this.running = Math.max(0, this.running - 1);
    if (this.running > 0) return;
    const ended = this.sweep();
    if (ended.length > 0) this.killed(ended);
  }

  /**
   * Kills every live process but the namespace's init and the host, round after round until a
   * round finds none it has not signalled: one may fork between the listing and its kill, and
   * its child shows up in the next round. Bounded, since a ceiling bounds the processes a session
   * may have (`cgroup_pids_max`, `max_processes`) and each round kills every one it sees.
   *
   * A process is known by its pid and its start time, since a pid is reused: SIGKILL takes a
   * moment to end one, so the next call's sweep may still list a process this one signalled, and
   * kills it again without telling of it twice. Returns the pids of the processes it ended first.
   */
  private sweep(): number[] {
    const signalled = new Set<string>();
    const ended: number[] = [];
    for (let round = 0; round < MAX_ROUNDS; round += 1) {
      const found = liveProcesses().filter((entry) => !signalled.has(entry.identity));
      if (found.length === 0) break;
      for (const { pid, identity } of found) {
        signalled.add(identity);
        if (!this.signalled.has(identity)) ended.push(pid);
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Gone already.
        }
      }
    }
    this.signalled = signalled;
    return ended;
  }
}

/** Enough for a process tree that forks while it is being killed; each round kills all it sees. */
const MAX_ROUNDS = 64;

/** Every live process of the namespace but its init and this host, each with its identity (pid and start time). */
function liveProcesses(): Array<{ pid: number; identity: string }> {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const found: Array<{ pid: number; identity: string }> = [];
  for (const entry of entries) {
    if (!/^[0-9]+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === 1 || pid === process.pid) continue;
    const stat = statOf(entry);
    if (stat && stat.state !== 'Z' && stat.state !== 'X') found.push({ pid, identity: `${pid}:${stat.startTime}` });
  }
  return found;
}

/**
 * A process's state letter and start time (fields 3 and 22 of `/proc/<pid>/stat`, read after the
 * command name, which may hold anything, parentheses too), or undefined when it is gone.
 */
function statOf(pid: string): { state: string; startTime: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0] ?? '', startTime: fields[19] ?? '' };
  } catch {
    return undefined;
  }
}
