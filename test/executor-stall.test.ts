import { existsSync, promises as fs, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTokenFromStat } from '@murmur/shared/node';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, spawnMur, startService } from './support/processes.js';

/**
 * NATS, a stager and an executor (and, when `withWatcher`, a watcher judging executors lost after
 * 1.5 s), started before a describe's tests and stopped after them; the executor is let go on
 * before it is stopped, whatever a test left it.
 */
function stackToStall(prefix: string, withWatcher: boolean): { env: Record<string, string>; scratch: string; executor: ServiceProcess } {
  const stack = { env: {} as Record<string, string>, scratch: '', executor: undefined as unknown as ServiceProcess };
  let nats: NatsServer | undefined;
  let scratch: { dir: string; cleanup: () => Promise<void> } | undefined;
  const services: ServiceProcess[] = [];
  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir(prefix);
    stack.scratch = scratch.dir;
    stack.env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    services.push(await startService('stager', stack.env));
    stack.executor = await startService('executor', stack.env);
    services.push(stack.executor);
    if (withWatcher) services.push(await startService('watcher', { ...stack.env, MURMUR_EXECUTOR_LOST_MS: '1500' }));
  });
  afterAll(async () => {
    stack.executor?.kill('SIGCONT');
    for (const service of services) await service.stop();
    await nats?.stop();
    await scratch?.cleanup();
  });
  return stack;
}

/** The launch line a `mur run --json` prints, once it has. A fresh stack transpiles the probe first. */
function launchLine(output: { stdout: string; stderr: string }): Promise<{ session_id: string; pid: number }> {
  return eventually(
    () => (output.stdout.includes('\n') ? (JSON.parse(output.stdout.split('\n')[0] as string) as { session_id: string; pid: number }) : undefined),
    90_000,
    'the launch line',
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}\n${output.stderr}`);
  });
}

/**
 * An executor that stops answering for longer than a watcher waits is declared lost, and its
 * sessions are announced ended (E-EXE-001): their launchers leave and are told to launch again.
 * When it answers again, those sessions must not go on running unseen.
 */
describe('an executor back from a stall', () => {
  const stack = stackToStall('murmur-executor-stall-', true);

  const alive = (pid: number): boolean => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return startTokenFromStat(stat) !== undefined && !/ Z /.test(stat);
    } catch {
      return false;
    }
  };

  it('ends the sessions the stack announced ended with it, rather than leave them running where nobody waits', async () => {
    const project = await probeProject(path.join(stack.scratch, 'waiting'), 'capabilities:\n  limits:\n    deadline_seconds: 600\n');
    const workdir = path.join(stack.scratch, 'waiting-workdir');
    await fs.mkdir(workdir);
    const actions = [
      { op: 'waitfor', path: 'go', seconds: 600 },
      { op: 'write', path: 'after-the-stall', text: 'ran on' },
    ];
    const { child, output } = spawnMur(['run', '--json', '--workdir', workdir, '--task', JSON.stringify(actions)], { cwd: project, env: stack.env });
    try {
      const launch = await launchLine(output);
      expect(alive(launch.pid)).toBe(true);
      // Stalled well past the watcher's 1.5 s: it declares the executor lost and the session ended.
      stack.executor.kill('SIGSTOP');
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
      expect(code, output.stderr).toBe(1);
      expect(output.stderr).toContain('error[E-EXE-001]');
      stack.executor.kill('SIGCONT');
      // Back, the executor ends the session the stack gave up on: its work is not done twice.
      await eventually(() => (alive(launch.pid) ? undefined : true), 15_000, `the session's host (pid ${launch.pid}) to be ended`);
      await fs.writeFile(path.join(workdir, 'go'), 'go');
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(existsSync(path.join(workdir, 'after-the-stall'))).toBe(false);
      expect(stack.executor.logs()).toContain('ending a session the stack announced ended with this executor');
    } finally {
      stack.executor.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }, 180_000);
});

/**
 * The same stall with no watcher on the bus: nobody else judges the executor, so the session's own
 * `mur run` does, by the executor's heartbeats, and announces the end as a watcher would.
 */
describe('an executor that falls silent while no watcher runs', () => {
  const stack = stackToStall('murmur-executor-silent-', false);

  it('is judged by the run that waits on it: the run ends with E-EXE-001, and the executor, back, ends the session', async () => {
    const project = await probeProject(path.join(stack.scratch, 'waiting'), 'capabilities:\n  limits:\n    deadline_seconds: 600\n');
    const actions = [{ op: 'waitfor', path: 'go', seconds: 600 }];
    const { child, output } = spawnMur(['run', '--json', '--task', JSON.stringify(actions)], {
      cwd: project,
      env: { ...stack.env, MURMUR_EXECUTOR_LOST_MS: '1500' },
    });
    try {
      const launch = await launchLine(output);
      stack.executor.kill('SIGSTOP');
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
      expect(code, output.stderr).toBe(1);
      expect(output.stderr).toContain('stopped answering; no watcher said so');
      expect(output.stderr).toContain('error[E-EXE-001]');
      stack.executor.kill('SIGCONT');
      // The run took the session's lost record as a watcher does: back, the executor ends the session.
      await eventually(
        () => (stack.executor.logs().includes('ending a session the stack announced ended with this executor') ? true : undefined),
        15_000,
        'the executor to end it',
      );
      expect(launch.session_id).toMatch(/^ses_/);
    } finally {
      stack.executor.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }, 180_000);
});
