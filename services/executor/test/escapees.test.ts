import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repositoryRoot } from '../../../test/support/processes.js';

/**
 * The sweep of processes that outlived their subprocess, run where it is meant to run: in a pid
 * namespace of its own (unshare's, with its own /proc), as pid 1 there, like a host unshare
 * started. Never outside one: there it would kill the machine's processes.
 */
const sweepModule = pathToFileURL(path.join(repositoryRoot, 'services', 'executor', 'dist', 'host', 'escapees.js')).href;

/** Runs `script` (an ES module with the sweep imported as `EscapeeSweep`) as the init of a new pid namespace; its last stdout line, parsed. */
function inOwnPidNamespace(script: string): Record<string, unknown> {
  const run = spawnSync(
    'unshare',
    [
      '--user',
      '--map-root-user',
      '--pid',
      '--fork',
      '--mount-proc',
      '--kill-child',
      process.execPath,
      '--input-type=module',
      '-e',
      `import { EscapeeSweep } from '${sweepModule}';\n${script}`,
    ],
    { encoding: 'utf8', timeout: 30_000 },
  );
  expect(run.status, `${run.stderr}${run.error?.message ?? ''}`).toBe(0);
  return JSON.parse(run.stdout.trim().split('\n').at(-1) as string) as Record<string, unknown>;
}

const ALIVE = `const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
const settle = () => new Promise((resolve) => setTimeout(resolve, 200));`;

describe('the sweep of processes that outlived their subprocess', () => {
  it('kills what is left only once the last running subprocess has ended, and nothing but it, and tells which', () => {
    const seen = inOwnPidNamespace(`${ALIVE}
import { spawn } from 'node:child_process';
const told = [];
const sweep = new EscapeeSweep((pids) => told.push(pids));
sweep.began();
sweep.began();
const left = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
sweep.ended();
const whileOneRuns = told.slice();
const aliveWhileOneRuns = alive(left.pid);
sweep.ended();
const once = told.slice();
sweep.ended();
await settle();
console.log(JSON.stringify({ pid: left.pid, whileOneRuns, aliveWhileOneRuns, once, told, aliveAfter: alive(left.pid), self: process.pid }));`);
    expect(seen.self).toBe(1);
    expect(seen.whileOneRuns).toEqual([]);
    expect(seen.aliveWhileOneRuns).toBe(true);
    expect(seen.once).toEqual([[seen.pid]]);
    expect(seen.aliveAfter).toBe(false);
    // Told once, of what it killed: a sweep right after may still find it dying, and kills it
    // again without telling of it twice.
    expect(seen.told).toEqual([[seen.pid]]);
  });

  it('kills a whole tree, whatever left its session, and what it started as it went', () => {
    const seen = inOwnPidNamespace(`${ALIVE}
import { spawn } from 'node:child_process';
const told = [];
const sweep = new EscapeeSweep((pids) => told.push(...pids));
sweep.began();
// A shell with two jobs, one of which leaves its session; the shell goes on forking while it lives.
const tree = spawn('sh', ['-c', 'setsid sleep 600 & sleep 600 & while :; do sleep 600 & done'], { detached: true, stdio: 'ignore' });
await settle();
sweep.ended();
await settle();
const { readdirSync, readFileSync } = await import('node:fs');
const listed = readdirSync('/proc').filter((entry) => /^[0-9]+$/.test(entry));
// A zombie is ended: as pid 1, node reaps only the children it started itself.
const live = listed.filter((pid) => !readFileSync('/proc/' + pid + '/stat', 'latin1').includes(') Z'));
console.log(JSON.stringify({ killed: told.length, live: live.map(Number), shell: tree.pid }));`);
    expect(seen.killed).toBeGreaterThanOrEqual(3);
    expect(seen.live).toEqual([1]);
  });
});
