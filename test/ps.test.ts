import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processStartToken, runningDir, writeRunningRecord } from '@murmur/shared/node';
import { agentManifest, agentProject, rpc, startAgent, textMessage } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { eventually, runMur, spawnMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * The machine's map of running sessions as an operator meets it: the record a running agent
 * leaves under `MURMUR_HOME/running`, `mur ps` verifying each record, and `mur stop` ending a
 * session without ever signalling a process that merely inherited its pid.
 */
describe('mur ps and mur stop', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-ps-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_STOP_GRACE_MS: '3000' };
    inference = await startScriptedInference({ script: [{ text: 'ok' }] });
  });

  afterAll(async () => {
    await inference?.close();
    await scratch?.cleanup();
  });

  const ps = async () => {
    const result = await runMur(['ps', '--json'], { env });
    expect(result.code, result.stderr).toBe(0);
    return JSON.parse(result.stdout) as Array<Record<string, unknown> & { session_id: string; liveness: string; reason?: string }>;
  };

  it('records a running agent, lists it live, stops it, and forgets it', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    const agent = await startAgent(project, env);
    try {
      const file = path.join(env.MURMUR_HOME as string, 'running', `${agent.sessionId}.json`);
      const written = await eventually(async () => fs.readFile(file, 'utf8').catch(() => undefined), 10_000, 'the running record');
      const record = JSON.parse(written) as Record<string, unknown>;
      expect(Object.keys(record).sort()).toEqual([
        'capsule_name',
        'capsule_version',
        'outlives_launcher',
        'pid',
        'process_start',
        'session_id',
        'started_at',
        'url',
        'workdir',
      ]);
      expect(record).toMatchObject({ session_id: agent.sessionId, url: agent.url, pid: agent.pid, capsule_name: 'agent', outlives_launcher: true });
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(statSync(path.dirname(file)).mode & 0o777).toBe(0o700);

      const listed = await ps();
      expect(listed.find((session) => session.session_id === agent.sessionId)).toMatchObject({ liveness: 'live', pid: agent.pid });

      // A task answered first: what the session did must survive its stop in the trace.
      const sent = await rpc(agent.url, 'message/send', textMessage('one task before the stop'));
      const taskId = sent.body.result?.id;
      await eventually(
        async () =>
          ((await rpc(agent.url, 'tasks/get', { id: taskId })).body.result?.status as { state?: string } | undefined)?.state === 'completed' || undefined,
        30_000,
        'the task to complete',
      );

      const stopped = await runMur(['stop', agent.sessionId], { env });
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.stdout).toContain(`${agent.sessionId}: stopped`);
      const exited = await agent.exited;
      expect(exited.code).toBe(1);
      // A stop, said as one: not a host that ended without a result, pointing at a log it never wrote.
      // Its own code, not a trap's (E-RUN-001 is what the capsule's code did).
      expect(exited.stderr).toContain(
        'error[E-SES-005]: the session was stopped: its capsule host was sent SIGTERM from outside the executor (as mur stop does)',
      );
      expect(exited.stderr).toContain('hint: nothing in the capsule failed: it was stopped');
      expect(exited.stderr).not.toContain('host.log');
      expect(await fs.readFile(path.join(agent.workdir, 'logs', 'bootstrap.log'), 'utf8')).toContain(
        '[host] was stopped from outside (SIGTERM) without a result:',
      );
      // The end the executor wrote for the stopped host is the trace's last: it keeps the totals
      // of the one the host wrote after its task, where it used to say the session did nothing.
      const ends = (await fs.readFile(path.join(agent.workdir, 'trace.jsonl'), 'utf8'))
        .split('\n')
        .filter((line) => line.includes('"session_end"'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      const [byHost, byExecutor] = ends.slice(-2);
      expect(byHost?.total_turns).toBeGreaterThanOrEqual(1);
      expect(byExecutor).toMatchObject({
        exit_status: 'failed',
        total_turns: byHost?.total_turns,
        total_input_tokens: byHost?.total_input_tokens,
        total_output_tokens: byHost?.total_output_tokens,
      });
      await eventually(async () => ((await fs.stat(file).catch(() => undefined)) ? undefined : true), 10_000, 'the record to be removed');
      expect((await ps()).some((session) => session.session_id === agent.sessionId)).toBe(false);
    } finally {
      await agent.stop();
    }
  });

  it('stops its session and forgets it when it is sent SIGTERM, as an interrupt does', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'terminated'),
      agentManifest(inference, { name: 'terminated', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    const agent = await startAgent(project, env);
    try {
      const file = path.join(env.MURMUR_HOME as string, 'running', `${agent.sessionId}.json`);
      await eventually(async () => ((await fs.stat(file).catch(() => undefined)) ? true : undefined), 10_000, 'the running record');
      agent.process.kill('SIGTERM');
      // Through the interrupt's path (130), with the one listener the run keeps for the signal:
      // a listener swapped at launch once lost a signal sent after it, under load.
      expect((await agent.exited).code).toBe(130);
      expect(() => process.kill(agent.pid, 0), 'the session’s sandbox is gone').toThrow();
      expect(await fs.stat(file).catch(() => undefined), 'the record is removed').toBeUndefined();
    } finally {
      await agent.stop();
    }
  });

  it('launches nothing when it is told to stop while it is still starting, and closes what it started', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'early'),
      agentManifest(inference, { name: 'early', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    const { child, output } = spawnMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--json'], { env });
    const exited = once(child, 'close');
    try {
      // Once it has started something (its warm host, begun while the capsule is staged) and
      // before its launch line: what the signal's default left behind.
      const started = await eventually(
        async () => {
          const children = (await fs.readFile(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').catch(() => '')).trim();
          return children === '' || output.stdout !== '' ? undefined : children.split(' ').map(Number);
        },
        10_000,
        'mur run to start its warm host',
      );
      child.kill('SIGTERM');
      const [code, signal] = (await exited) as [number | null, string | null];
      expect({ code, signal }).toEqual({ code: 130, signal: null });
      expect(output.stderr).toContain('mur: SIGTERM: stopping once what is under way is done, launching nothing new (again to leave at once)');
      // Held before the launch: nothing launched. (Held while the launch was already asked for,
      // the session it made is stopped as an interrupted one is, and its directory says so.)
      if (output.stdout === '') expect(await fs.readdir(path.join(project, 'workdir')).catch(() => []), 'no session directory').toEqual([]);
      // Nothing it started outlives it (a sandbox dies with its parent; the run closed the rest).
      for (const pid of started) {
        await eventually(
          () => {
            try {
              process.kill(pid, 0);
              return undefined;
            } catch {
              return true;
            }
          },
          10_000,
          `what it started (${pid}) to be gone`,
        );
      }
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });

  it('prunes a record whose pid now belongs to another process, and never signals that process', async () => {
    const sessionId = 'ses_0199c4e2f1b7712a9d3e4f5061728394';
    const sleeper = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      // A record of this pid under a start time that is not the process's: a pid reused since.
      const reused = {
        session_id: sessionId,
        url: '127.0.0.1:1',
        pid: sleeper.pid as number,
        process_start: 'a-start-time-that-is-not-its',
        capsule_name: 'old',
        capsule_version: '0.1.0',
        workdir: '/nowhere',
        outlives_launcher: true,
        started_at: '2026-01-01T00:00:00Z',
      };
      writeRunningRecord(reused, env);

      const stopped = await runMur(['stop', sessionId], { env });
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.stdout).toContain('already gone');
      expect(sleeper.exitCode).toBeNull();
      expect(sleeper.signalCode).toBeNull();
      writeRunningRecord(reused, env);

      const listed = (await ps()).find((session) => session.session_id === sessionId);
      expect(listed).toMatchObject({ liveness: 'gone', reason: expect.stringContaining('another time') });
      expect((await ps()).some((session) => session.session_id === sessionId)).toBe(false);
    } finally {
      sleeper.kill('SIGKILL');
    }
  });

  it('keeps a record whose process is alive but whose door does not answer, as unreachable', async () => {
    const sessionId = 'ses_0299c4e2f1b7712a9d3e4f5061728394';
    writeRunningRecord(
      {
        session_id: sessionId,
        url: '127.0.0.1:9',
        pid: process.pid,
        process_start: processStartToken(process.pid) as string,
        capsule_name: 'silent',
        capsule_version: '0.1.0',
        workdir: '/nowhere',
        outlives_launcher: false,
        started_at: '2026-01-01T00:00:00Z',
      },
      env,
    );
    const listed = (await ps()).find((session) => session.session_id === sessionId);
    expect(listed).toMatchObject({ liveness: 'unreachable' });
    expect((await ps()).some((session) => session.session_id === sessionId)).toBe(true);
    await fs.rm(path.join(runningDir(env), `${sessionId}.json`));
  });

  it('lists a record holding a field this runtime does not know (a newer mur wrote it), rather than pruning it', async () => {
    const sessionId = 'ses_0699c4e2f1b7712a9d3e4f5061728394';
    const file = path.join(runningDir(env), `${sessionId}.json`);
    const newer = {
      session_id: sessionId,
      url: '127.0.0.1:9',
      pid: process.pid,
      process_start: processStartToken(process.pid) as string,
      capsule_name: 'from-a-newer-mur',
      capsule_version: '0.1.0',
      workdir: '/nowhere',
      outlives_launcher: false,
      started_at: '2026-01-01T00:00:00Z',
      a_field_of_a_later_version: { anything: true },
    };
    await fs.writeFile(file, JSON.stringify(newer), { mode: 0o600 });
    try {
      const listed = (await ps()).find((session) => session.session_id === sessionId);
      expect(listed).toMatchObject({ capsule_name: 'from-a-newer-mur', liveness: 'unreachable' });
      expect(listed).not.toHaveProperty('a_field_of_a_later_version');
      expect(JSON.parse(await fs.readFile(file, 'utf8'))).toEqual(newer);
      // A record missing one of the nine is still pruned: it names no process that could be checked.
      const { process_start: _, ...missing } = newer;
      await fs.writeFile(file, JSON.stringify(missing), { mode: 0o600 });
      expect((await ps()).some((session) => session.session_id === sessionId)).toBe(false);
      await expect(fs.stat(file)).rejects.toThrow();
    } finally {
      await fs.rm(file, { force: true });
    }
  });

  it('prunes a record that does not parse', async () => {
    const broken = path.join(runningDir(env), 'ses_0399c4e2f1b7712a9d3e4f5061728394.json');
    await fs.writeFile(broken, 'not json');
    await ps();
    await expect(fs.stat(broken)).rejects.toThrow();
  });

  it('passes by what is not a record file (a directory named like one), and lists the rest', async () => {
    const stray = path.join(runningDir(env), 'ses_0599c4e2f1b7712a9d3e4f5061728394.json');
    await fs.mkdir(stray);
    try {
      const result = await runMur(['ps', '--json'], { env });
      expect(result.code, result.stderr).toBe(0);
      expect(Array.isArray(JSON.parse(result.stdout))).toBe(true);
      expect((await fs.stat(stray)).isDirectory()).toBe(true);
    } finally {
      await fs.rm(stray, { recursive: true, force: true });
    }
  });

  it('refuses a malformed MURMUR_STOP_GRACE_MS before it signals anything', async () => {
    const sessionId = 'ses_0699c4e2f1b7712a9d3e4f5061728394';
    const sleeper = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      writeRunningRecord(
        {
          session_id: sessionId,
          url: '127.0.0.1:9',
          pid: sleeper.pid as number,
          process_start: processStartToken(sleeper.pid as number) as string,
          capsule_name: 'sleeper',
          capsule_version: '0.1.0',
          workdir: '/nowhere',
          outlives_launcher: false,
          started_at: '2026-01-01T00:00:00Z',
        },
        env,
      );
      const result = await runMur(['stop', sessionId], { env: { ...env, MURMUR_STOP_GRACE_MS: 'abc' } });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('error[E-CFG-003]: invalid MURMUR_STOP_GRACE_MS');
      // Time for a signal, had one been sent, to have been heard of here.
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(sleeper.exitCode).toBeNull();
      expect(sleeper.signalCode).toBeNull();
    } finally {
      sleeper.kill('SIGKILL');
      await fs.rm(path.join(runningDir(env), `${sessionId}.json`), { force: true });
    }
  });

  it('refuses to stop a session it has no record of, saying where to look', async () => {
    const result = await runMur(['stop', 'ses_0499c4e2f1b7712a9d3e4f5061728394'], { env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-IO-001]');
    expect(result.stderr).toContain('mur ps');
  });

  it('refuses to stop what is not a session id at once, in-process and against a stack alike', async () => {
    // Against a stack nothing is asked: a bus that does not answer must not be what says so.
    for (const extra of [{}, { MURMUR_NATS_URL: 'nats://127.0.0.1:9' }]) {
      const result = await runMur(['stop', 'ses_nonexistent'], { env: { ...env, ...extra } });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("error[E-SES-001]: 'ses_nonexistent' is not a session id (ses_ followed by 32 hex digits)");
      expect(result.stderr).toContain("hint: 'mur ps' lists the running sessions");
    }
  });
});
