import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, promises as fs, mkdirSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';
import { probeCgroups } from '@murmur/executor';
import { type TestContext, afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CgroupSupport } from '../services/executor/src/cgroup.js';
import { ABANDONED_AFTER_MS, sweepAbandonedGroups } from '../services/executor/src/cgroup-sweep.js';
import { probeProject } from './support/capsules.js';
import { removeCgroup } from './support/cgroups.js';
import { tempDir } from './support/fs.js';
import { startNatsServer } from './support/nats-server.js';
import { eventually, repositoryRoot, runMur, startService } from './support/processes.js';

/**
 * An executor that is killed leaves its sessions' cgroups behind: its sandboxes die with it, the
 * directories do not. These run against the real cgroup v1 tree, in a parent group of their own
 * (as a delegated subtree is given to an executor), so nothing outside it is touched.
 */
const ROOT = '/sys/fs/cgroup';
const CONTROLLERS = ['memory', 'pids', 'cpu'] as const;
const isRoot = process.getuid?.() === 0;
const v1 = CONTROLLERS.every((controller) => existsSync(path.join(ROOT, controller))) && !existsSync(path.join(ROOT, 'cgroup.controllers'));
const why = !isRoot ? 'making cgroups needs root here' : !v1 ? 'this host has no cgroup v1 memory, pids and cpu trees' : undefined;
const parent = `murmur-sweep-test-${process.pid}`;
const HOUR_AGO = new Date(Date.now() - 60 * 60 * 1000);

/** Skips a case, saying why, on a host where it cannot run. */
function cannotRunHere(context: TestContext): boolean {
  if (!why) return false;
  console.warn(`[cgroup sweep] ${why}`);
  context.skip(why);
  return true;
}

let counter = 0;
/** A name this runtime gives a session's group. */
function sessionName(): string {
  counter += 1;
  return `murmur-ses_${(Date.now().toString(16) + counter.toString(16)).padStart(32, '0')}`;
}

/** A group as an executor makes one: in every controller, with its `tools/`; made `made` ago. */
function makeGroup(name: string, made?: Date): void {
  for (const controller of CONTROLLERS) {
    const dir = path.join(ROOT, controller, parent, name);
    mkdirSync(path.join(dir, 'tools'), { recursive: true });
    if (made) utimesSync(dir, made, made);
  }
}

function exists(name: string, controller: (typeof CONTROLLERS)[number]): boolean {
  return existsSync(path.join(ROOT, controller, parent, name));
}

describe('session cgroups that an executor left behind', () => {
  let support: CgroupSupport;

  beforeAll(() => {
    if (why) return;
    for (const controller of CONTROLLERS) mkdirSync(path.join(ROOT, controller, parent), { recursive: true });
    const probed = probeCgroups(ROOT, parent);
    if (!probed.support) throw new Error(`the test's own parent group is unusable: ${probed.reason}`);
    support = probed.support;
  });

  afterAll(async () => {
    if (why) return;
    for (const controller of CONTROLLERS) await removeCgroup(path.join(ROOT, controller, parent));
  });

  it('are removed in every controller, a session’s and a pooled host’s, once they hold no process and are a minute old', (context) => {
    if (cannotRunHere(context)) return;
    const session = sessionName();
    const pooled = `murmur-pool-${'ab'.repeat(8)}`;
    makeGroup(session, HOUR_AGO);
    makeGroup(pooled, HOUR_AGO);
    expect(sweepAbandonedGroups(support).sort()).toEqual([pooled, session].sort());
    for (const controller of CONTROLLERS) {
      expect(exists(session, controller)).toBe(false);
      expect(exists(pooled, controller)).toBe(false);
    }
  });

  /**
   * An hour-old group `name` with a live process in its memory and pids groups, as
   * `SessionCgroup.joining` places a host (not its cpu one: that is its tools'), while `use` runs;
   * the process is killed and the group removed after.
   */
  async function withLiveHost(name: string, use: () => Promise<void> | void): Promise<void> {
    makeGroup(name, HOUR_AGO);
    const host: ChildProcess = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      for (const controller of ['memory', 'pids']) writeFileSync(path.join(ROOT, controller, parent, name, 'cgroup.procs'), String(host.pid));
      await use();
    } finally {
      host.kill('SIGKILL');
      await once(host, 'exit');
      for (const controller of CONTROLLERS) await removeCgroup(path.join(ROOT, controller, parent, name));
    }
  }

  it('keep a group whose host is in its memory and pids groups, its empty cpu group too', async (context) => {
    if (cannotRunHere(context)) return;
    const live = sessionName();
    await withLiveHost(live, () => {
      expect(sweepAbandonedGroups(support)).toEqual([]);
      for (const controller of CONTROLLERS) expect(exists(live, controller)).toBe(true);
    });
  });

  it('keep a live group when swept from another PID namespace, whose cgroup.procs lists none of its processes', async (context) => {
    if (cannotRunHere(context)) return;
    const live = sessionName();
    await withLiveHost(live, async () => {
      // The sweep run as an executor in a container sharing the parent group would run it.
      const sweeper = spawn(
        'unshare',
        [
          '--pid',
          '--fork',
          '--mount-proc',
          process.execPath,
          '--input-type=module',
          '-e',
          `import { probeCgroups } from ${JSON.stringify(path.join(repositoryRoot, 'services', 'executor', 'dist', 'service.js'))};
           import { sweepAbandonedGroups } from ${JSON.stringify(path.join(repositoryRoot, 'services', 'executor', 'dist', 'cgroup-sweep.js'))};
           const seen = (await import('node:fs')).readFileSync(${JSON.stringify(path.join(ROOT, 'pids', parent, live, 'cgroup.procs'))}, 'utf8');
           console.log(JSON.stringify({ seen, removed: sweepAbandonedGroups(probeCgroups(${JSON.stringify(ROOT)}, ${JSON.stringify(parent)}).support) }));`,
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let said = '';
      sweeper.stdout?.on('data', (chunk: Buffer) => (said += chunk.toString()));
      await once(sweeper, 'exit');
      // From in there, the group looks empty; it was kept whole all the same.
      expect(JSON.parse(said)).toEqual({ seen: '', removed: [] });
      for (const controller of CONTROLLERS) {
        expect(exists(live, controller)).toBe(true);
        expect(existsSync(path.join(ROOT, controller, parent, live, 'tools'))).toBe(true);
      }
    });
  });

  it('keep an empty group made less than a minute ago: a live executor moves its host in a moment after making it', (context) => {
    if (cannotRunHere(context)) return;
    const fresh = sessionName();
    makeGroup(fresh);
    expect(sweepAbandonedGroups(support)).toEqual([]);
    expect(exists(fresh, 'pids')).toBe(true);
    // The same group, judged a minute and a second later, is abandoned.
    expect(sweepAbandonedGroups(support, { now: Date.now() + ABANDONED_AFTER_MS + 1_000 })).toEqual([fresh]);
    expect(exists(fresh, 'pids')).toBe(false);
  });

  it('never touch a group whose name the runtime does not make, however old and empty', async (context) => {
    if (cannotRunHere(context)) return;
    const others = ['murmur-operator', 'murmur-ses_short', `murmur-${'0'.repeat(32)}`, 'murmur'];
    for (const name of others) makeGroup(name, HOUR_AGO);
    try {
      expect(sweepAbandonedGroups(support)).toEqual([]);
      for (const name of others) expect(exists(name, 'memory')).toBe(true);
    } finally {
      for (const name of others) for (const controller of CONTROLLERS) await removeCgroup(path.join(ROOT, controller, parent, name));
    }
  });

  it('are never left by a launch refused before its host runs: neither the session’s group nor a pooled host’s', async (context) => {
    if (cannotRunHere(context)) return;
    const scratch = await tempDir('murmur-refused-launch-');
    try {
      // A shell binary in a directory whose name the sandbox's spec refuses (it holds a line break):
      // the host for it is refused after its group was made, and the warm host started while the
      // capsule was staged is let go.
      const project = await probeProject(path.join(scratch.dir, 'refused'), 'capabilities:\n  shell:\n    allow: [late-tool]\n');
      const bin = path.join(scratch.dir, 'line\nbreak');
      await fs.mkdir(bin);
      await fs.copyFile('/bin/true', path.join(bin, 'late-tool'));
      await fs.chmod(path.join(bin, 'late-tool'), 0o755);
      const result = await runMur(['run'], {
        cwd: project,
        env: { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_CGROUP_PARENT: parent, PATH: `${bin}:${process.env.PATH ?? ''}` },
      });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("error[E-IO-003]: the sandbox's rules would name the path");
      expect(result.stderr).toContain('control character');
      const left = (): string[] =>
        CONTROLLERS.flatMap((controller) => readdirSync(path.join(ROOT, controller, parent)).filter((name) => name.startsWith('murmur-')));
      await eventually(() => (left().length === 0 ? true : undefined), 5_000, `no group left in ${parent}: ${left().join(', ')}`);
    } finally {
      await scratch.cleanup();
    }
  }, 60_000);

  it('are removed by the executor service when it starts', async (context) => {
    if (cannotRunHere(context)) return;
    const abandoned = sessionName();
    makeGroup(abandoned, HOUR_AGO);
    const nats = await startNatsServer();
    try {
      const executor = await startService('executor', { MURMUR_NATS_URL: nats.url, MURMUR_CGROUP_PARENT: parent, MURMUR_EXECUTOR_POOL: '0' });
      try {
        for (const controller of CONTROLLERS) expect(exists(abandoned, controller)).toBe(false);
        await eventually(() => executor.logs().includes('removed session cgroups') || undefined, 5_000, 'the sweep logged');
      } finally {
        await executor.stop();
      }
    } finally {
      await nats.stop();
    }
  }, 30_000);
});
