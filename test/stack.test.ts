import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SessionEnded, type SessionStarted, commands, silentLog, topics } from '@murmur/shared';
import { type Bus, createBus } from '@murmur/shared/bus';
import { NatsTransport } from '@murmur/shared/bus/nats';
import { startTokenFromStat } from '@murmur/shared/node';
import { capsuleProject, nativeTool, publishInto } from './support/artifacts.js';
import { printingCapsuleWat } from './support/guests.js';
import { probeProject, probeResults } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, runMur, spawnMur, startService } from './support/processes.js';

/**
 * `mur run` against the stack: a real nats-server, stager and executor processes. The same
 * capsule must give the same result as on the embedded default, and an executor must outlive the
 * capsules it stops.
 */
describe('mur run on the stack', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  const services: ServiceProcess[] = [];
  let executor: ServiceProcess;
  let bus: Bus;
  let env: Record<string, string>;
  const started: SessionStarted[] = [];
  const ended: SessionEnded[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-stack-');
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    services.push(await startService('stager', env));
    executor = await startService('executor', { ...env, MURMUR_HARD_LIMIT_GRACE_MS: '1500' });
    services.push(executor);
    bus = createBus(await NatsTransport.connect(nats.url, { log: silentLog }), silentLog);
    bus.subscribe(topics.sessionStarted, (event) => void started.push(event));
    bus.subscribe(topics.sessionEnded, (event) => void ended.push(event));
    await bus.flush();
  });

  afterAll(async () => {
    await bus?.close();
    for (const service of services) await service.stop();
    await nats?.stop();
    await scratch?.cleanup();
  });

  const probeManifest = 'capabilities:\n  env:\n    allow: [GREETING]\n  limits:\n    deadline_seconds: 2\n    memory_bytes: 33554432\n';

  async function runProbe(name: string, actions: unknown[], extraEnv: Record<string, string> = {}, manifest = probeManifest) {
    const project = await probeProject(path.join(scratch.dir, name), manifest);
    return runMur(['run', '--task', JSON.stringify(actions)], {
      cwd: project,
      env: {
        ...extraEnv,
        MURMUR_HOME: env.MURMUR_HOME as string,
        ...('MURMUR_NATS_URL' in extraEnv ? {} : { MURMUR_NATS_URL: env.MURMUR_NATS_URL as string }),
      },
    });
  }

  it('gives the same result over NATS as in-process', async () => {
    const actions = [{ op: 'env' }, { op: 'write', path: 'out/x.txt', text: 'same' }, { op: 'read', path: 'out/x.txt' }, { op: 'read', path: '/etc/passwd' }];
    const overNats = await runProbe('same-nats', actions, { GREETING: 'hi' });
    const inProcess = await runMur(['run', '--task', JSON.stringify(actions)], {
      cwd: await probeProject(path.join(scratch.dir, 'same-local'), probeManifest),
      env: { MURMUR_HOME: env.MURMUR_HOME as string, GREETING: 'hi' },
    });
    expect(overNats.code, overNats.stderr).toBe(0);
    expect(inProcess.code, inProcess.stderr).toBe(0);
    const normalise = (stdout: string) =>
      probeResults(stdout).map((result) => (result.op === 'env' ? { ...result, value: { ...(result.value as object), MURMUR_SESSION_ID: 'ses' } } : result));
    expect(normalise(overNats.stdout)).toEqual(normalise(inProcess.stdout));
    expect(overNats.stdout.trim().split('\n').at(-1)).toBe('status:  ok');
    const sessionId = /^session: (\S+)$/m.exec(overNats.stdout)?.[1];
    await eventually(() => (ended.some((event) => event.session_id === sessionId) ? true : undefined), 5_000, 'session.ended');
    expect(ended.find((event) => event.session_id === sessionId)?.executor_id).toBe(executor.ready.instance_id);
  });

  it("starts a capsule's tools from the executor's own PATH and LANG, never the launcher's, which describe another machine", async () => {
    const reporter = '#!/bin/sh\nprintf \'{"status":"passed","data":"PATH=%s LANG=%s"}\' "$PATH" "$LANG"\n';
    await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), await nativeTool('path-tool', '1.0.0', reporter));
    const manifest = `${probeManifest}artifacts:\n  - name: path-tool\n    version: 1.0.0\n`;
    const result = await runProbe(
      'launcher-path',
      [{ op: 'invoke', name: 'path-tool' }],
      {
        PATH: `${process.env.PATH ?? ''}:/launcher-only/bin`,
        LANG: 'launcher-only-lang',
      },
      manifest,
    );
    expect(result.code, result.stderr).toBe(0);
    const data = (probeResults(result.stdout)[0]?.value as { data?: string } | undefined)?.data ?? '';
    expect(data).toMatch(/^PATH=\S+ LANG=/);
    expect(data).not.toContain('/launcher-only/bin');
    expect(data).not.toContain('launcher-only-lang');
  });

  it('stops a spinning guest at its deadline with E-RUN-001, and the executor keeps serving', async () => {
    const spin = await runProbe('spin', [{ op: 'spin' }]);
    expect(spin.code).toBe(1);
    expect(spin.stderr).toContain('error[E-RUN-001]: capsule execution exceeded its 2s deadline and was interrupted');
    expect(spin.stderr).toContain('capabilities.limits.deadline_seconds');
    expect(spin.stdout.trim().split('\n').at(-1)).toBe('status:  trapped');
    const after = await runProbe('after-spin', [{ op: 'print', text: 'still serving' }]);
    expect(after.code, after.stderr).toBe(0);
    expect(after.stdout).toContain('still serving');
  });

  it('stops a ballooning guest at its memory limit with E-RUN-001, and the executor keeps serving', async () => {
    // A deadline far past what filling 32 MiB takes: on a loaded machine the 2 s one came first.
    const balloon = await runProbe(
      'balloon',
      [{ op: 'balloon', chunkBytes: 1048576, trap: true }],
      {},
      probeManifest.replace('deadline_seconds: 2', 'deadline_seconds: 30'),
    );
    expect(balloon.code).toBe(1);
    expect(balloon.stderr).toContain('error[E-RUN-001]: capsule execution exceeded its configured resource limits');
    expect(balloon.stderr).toContain('capabilities.limits.memory_bytes');
    const after = await runProbe('after-balloon', [{ op: 'print', text: 'still serving' }]);
    expect(after.code, after.stderr).toBe(0);
  });

  it('kills a session past its hard limit as a whole, and reports it', async () => {
    const project = await probeProject(path.join(scratch.dir, 'frozen'), 'capabilities:\n  limits:\n    deadline_seconds: 1\n');
    const { child, output } = spawnMur(['run', '--json', '--task', JSON.stringify([{ op: 'spin' }])], { cwd: project, env });
    const launch = await eventually(
      () => (output.stdout.includes('\n') ? (JSON.parse(output.stdout.split('\n')[0] as string) as { session_id: string; pid: number }) : undefined),
      20_000,
      'the launch line',
    );
    // Freeze every process of the session: the host can no longer stop its guest at the deadline,
    // so only the executor's hard limit (deadline + grace) ends it.
    const cgroups = readFileSync('/proc/self/cgroup', 'utf8');
    const memoryPath = /:memory:(.*)/.exec(cgroups)?.[1] ?? '';
    const procs = path.join('/sys/fs/cgroup/memory', memoryPath, `murmur-${launch.session_id}`, 'cgroup.procs');
    const pids = readFileSync(procs, 'utf8').trim().split('\n').map(Number);
    expect(pids.length).toBeGreaterThan(1);
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    expect(output.stderr).toContain('exceeded its hard limit');
    expect(output.stderr).toContain('killed as a whole');
    // Killed, and gone once reaped.
    for (const pid of pids) {
      await eventually(
        () => {
          try {
            const state = readFileSync(`/proc/${pid}/stat`, 'utf8');
            return startTokenFromStat(state) === undefined || / Z /.test(state) ? true : undefined;
          } catch {
            return true;
          }
        },
        5_000,
        `pid ${pid} to be gone`,
      );
    }
  });

  it('asks an executor about the scope only for a run that declares a floor above advisory, the one thing it could refuse', async () => {
    const listener = await NatsTransport.connect(nats.url, { log: silentLog });
    let asked = 0;
    listener.subscribe(commands.explainScope.subject, () => {
      asked += 1;
    });
    try {
      await listener.flush();
      const plain = await runProbe('no-floor', [{ op: 'print', text: 'plain' }]);
      expect(plain.code, plain.stderr).toBe(0);
      const floored = await runProbe('scoped-floor', [{ op: 'print', text: 'floored' }], {}, 'capabilities:\n  containment: scoped\n');
      expect(floored.code, floored.stderr).toBe(0);
      await listener.flush();
      expect(asked).toBe(1);
    } finally {
      await listener.close();
    }
  });

  it('says the session before any of its output, however close the two come off the bus', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'printing'), 'name: printing\nversion: 0.1.0\n', (await printingCapsuleWat()).bytes);
    // At once, as a loaded machine reads them: the launch's answer and the first output then often
    // came in one read, and the output was written first.
    const runs = await Promise.all(Array.from({ length: 12 }, () => runMur(['run'], { cwd: project, env })));
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout.split('\n')[0], run.stdout).toMatch(/^session: ses_[0-9a-f]{32}$/);
    }
  });

  it('announces session.started and session.ended with the executor, pid, start token, status and duration', async () => {
    const result = await runProbe('announced', [{ op: 'print', text: 'hello' }], {}, 'capabilities:\n  limits:\n    deadline_seconds: 5\n');
    expect(result.code, result.stderr).toBe(0);
    const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1] as string;
    const start = await eventually(() => started.find((event) => event.session_id === sessionId), 5_000, 'session.started');
    const end = await eventually(() => ended.find((event) => event.session_id === sessionId), 5_000, 'session.ended');
    expect(start).toMatchObject({ capsule_name: 'probe', capsule_version: '0.1.0', executor_id: executor.ready.instance_id });
    expect(start.pid).toBeGreaterThan(1);
    expect(start.process_start).toMatch(/^\d+$/);
    expect(end).toMatchObject({ exit_status: 'ok', pid: start.pid, process_start: start.process_start, executor_id: start.executor_id, exit_code: 0 });
    expect(end.duration_ms).toBeGreaterThan(0);
  });

  it('records the start token of the very process that runs the session', async () => {
    const project = await probeProject(path.join(scratch.dir, 'token'), 'capabilities:\n  limits:\n    deadline_seconds: 2\n');
    const { child, output } = spawnMur(['run', '--json', '--task', JSON.stringify([{ op: 'spin' }])], { cwd: project, env });
    const launch = await eventually(
      () => (output.stdout.includes('\n') ? (JSON.parse(output.stdout.split('\n')[0] as string) as { session_id: string; pid: number }) : undefined),
      20_000,
      'the launch line',
    );
    const liveToken = startTokenFromStat(readFileSync(`/proc/${launch.pid}/stat`, 'utf8'));
    const start = await eventually(() => started.find((event) => event.session_id === launch.session_id), 5_000, 'session.started');
    expect(start.process_start).toBe(liveToken);
    await new Promise((resolve) => child.once('exit', resolve));
  });

  it('tails the bus with mur events', async () => {
    const { child: events, output } = spawnMur(['events', 'session.>', '--json'], { env: { MURMUR_NATS_URL: nats.url } });
    try {
      await eventually(() => (output.stderr.includes('listening') ? true : undefined), 10_000, 'mur events to listen');
      const result = await runProbe('watched', [{ op: 'print', text: 'watched' }]);
      const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1] as string;
      const seen = await eventually(
        () => {
          const subjects = output.stdout
            .trim()
            .split('\n')
            .filter((line) => line.includes(sessionId))
            .map((line) => (JSON.parse(line) as { subject: string }).subject);
          return subjects.includes('session.ended') ? subjects : undefined;
        },
        10_000,
        'session events in mur events',
      );
      expect(seen).toEqual(expect.arrayContaining(['session.started', 'session.ended', `session.${sessionId}.output`]));
      // A tail of every session's events answers for none of their requests: NATS still says
      // nobody runs a session that is not there, rather than leave the asker to its timeout.
      const stop = await runMur(['stop', 'ses_00000000000000000000000000000000'], { env: { MURMUR_NATS_URL: nats.url } });
      expect(stop.code).toBe(1);
      expect(stop.stderr).toContain('error[E-SES-001]: no executor on nats://127.0.0.1:');
      expect(stop.stderr).toContain("runs session 'ses_00000000000000000000000000000000'");
    } finally {
      events.kill('SIGINT');
      await new Promise((resolve) => events.once('exit', resolve));
    }
  });

  it('refuses mur events without a bus to tail', async () => {
    const result = await runMur(['events'], { env: {} });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-BUS-005]');
  });
});
