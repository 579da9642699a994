import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, openStream, readSse, rpc, startAgent, textMessage } from './support/agents.js';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, runMur, spawnMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * `mur run` as a client of a stack whose bus goes away: the session lives on its executor, so the
 * run says so and waits for the bus; and an interrupt it cannot deliver does not leave it hanging.
 * One stack for both cases (four services take a while to start): the first restarts its NATS
 * server, the second takes it away for good, so it comes last.
 */
describe('mur run against a stack whose NATS server goes away', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  const services: ServiceProcess[] = [];
  const agents: RunningAgent[] = [];
  let env: Record<string, string>;
  let project: string;

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-bus-loss-');
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    for (const name of ['stager', 'executor', 'watcher', 'door']) services.push(await startService(name, env));
    inference = await startScriptedInference({ script: () => ({ text: 'hello' }) });
    project = await agentProject(path.join(scratch.dir, 'agent'), agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep' }));
  });

  afterAll(async () => {
    for (const agent of agents.splice(0)) await agent.stop();
    // The services stop without their bus as well (services.test.ts).
    for (const service of services.splice(0).reverse()) await service.stop();
    await inference?.close();
    await nats?.stop();
    await scratch?.cleanup();
  });

  it('says the bus is lost and back, and waits for it', async () => {
    const agent = await startAgent(project, env);
    agents.push(agent);
    await nats.restart();
    const said = await eventually(() => (agent.stderr().includes("the stack's bus is back") ? agent.stderr() : undefined), 10_000, 'the bus back');
    expect(said).toContain(
      `mur: lost the stack's bus at ${nats.url}; session ${agent.sessionId} goes on on its executor, and mur waits for the bus to come back (Ctrl-C leaves)`,
    );
    // Still waiting on its session: nothing ended it.
    expect(agent.process.exitCode).toBeNull();
    // Stopped while the bus is here: the next case takes it away.
    agents.splice(agents.indexOf(agent), 1);
    await agent.stop();
  });

  it('ends no session when the NATS server hangs longer than an executor may be silent: the silence was the bus’s, not the executor’s', async () => {
    const agent = await startAgent(project, env);
    agents.push(agent);
    const executor = services[1] as ServiceProcess;
    // Past the watcher's 5 s and mur run's 8 s: a stopped server sends no connection change.
    await nats.pause();
    await new Promise((resolve) => setTimeout(resolve, 9_000));
    nats.resume();
    const sent = await eventually(
      async () => {
        const reply = await rpc(agent.url, 'message/send', { ...textMessage('still there?'), configuration: { blocking: true } });
        return reply.status === 200 ? reply : undefined;
      },
      20_000,
      'the session to answer after the stall',
    );
    expect((sent.body.result as { status?: { state?: string } } | undefined)?.status?.state).toBe('completed');
    expect(agent.process.exitCode).toBeNull();
    expect(agent.stderr()).not.toContain('E-EXE-001');
    expect(executor.logs()).not.toContain('its loss was announced');
    agents.splice(agents.indexOf(agent), 1);
    await agent.stop();
  }, 60_000);

  it('a door asked to watch a session while its bus was down watches it again once the bus is back', async () => {
    const agent = await startAgent(project, env);
    agents.push(agent);
    /** One `stream/watch` at the session's door URL: `stream` when it streams, else what it answered. */
    const watchOnce = async (): Promise<string> => {
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), 3_000);
      try {
        const response = await fetch(agent.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${agent.token}` },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'stream/watch', params: {} }),
          signal: controller.signal,
        });
        if ((response.headers.get('content-type') ?? '').includes('text/event-stream')) return 'stream';
        return await response.text();
      } catch (error) {
        return `failed: ${String(error)}`;
      } finally {
        clearTimeout(timer);
        controller.abort();
      }
    };
    expect(await watchOnce()).toBe('stream');
    await nats.down();
    try {
      // Asked while the door's bus is away: whatever this answers, it must not stick.
      expect(await watchOnce()).not.toBe('stream');
    } finally {
      await nats.up();
    }
    const after = await eventually(async () => ((await watchOnce()) === 'stream' ? 'stream' : undefined), 20_000, 'the door to watch the session again');
    expect(after).toBe('stream');
    agents.splice(agents.indexOf(agent), 1);
    await agent.stop();
  });

  it("a door's open stream whose task ended while the bus was away is caught up once it is back, to the task's end", async () => {
    // A model that answers after 3 s: the task ends while the bus is down.
    const slow = await startScriptedInference({ script: () => ({ text: 'answered while the bus was away', delayMs: 3_000 }) });
    const agent = await startAgent(
      await agentProject(path.join(scratch.dir, 'streamed-across'), agentManifest(slow, { lifecycle: '  task_acceptance: queue\n  after_task: sleep' })),
      env,
    );
    agents.push(agent);
    try {
      const response = await openStream(agent.url, 'message/stream', textMessage('answer slowly'), { headers: { authorization: `Bearer ${agent.token}` } });
      expect(response.status).toBe(200);
      const frames = readSse(response, (frame) => frame.data.includes('"final":true'));
      await eventually(() => (slow.requests().length > 0 ? true : undefined), 30_000, 'the task to ask its model');
      await nats.down();
      // Past the model's answer: the task completes while the door hears nothing.
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      await nats.up();
      const read = await Promise.race([frames, new Promise<'still open'>((resolve) => setTimeout(() => resolve('still open'), 30_000).unref())]);
      expect(read).not.toBe('still open');
      const last = JSON.parse((read as Array<{ data: string }>).at(-1)?.data ?? '{}') as { result?: { status?: { state?: string }; final?: boolean } };
      expect(last.result).toMatchObject({ status: { state: 'completed' }, final: true });
    } finally {
      agents.splice(agents.indexOf(agent), 1);
      await agent.stop();
      await slow.close();
    }
  });

  it('hears a session that ended while its bus was away: back, it asks the executor, and ends as the session did', async () => {
    const probe = await probeProject(path.join(scratch.dir, 'ends-while-away'), 'capabilities:\n  limits:\n    deadline_seconds: 600\n');
    const actions = [{ op: 'waitfor', path: 'go', seconds: 600 }];
    const { child, output } = spawnMur(['run', '--json', '--task', JSON.stringify(actions)], { cwd: probe, env });
    try {
      const launch = await eventually(
        () => (output.stdout.includes('\n') ? (JSON.parse(output.stdout.split('\n')[0] as string) as { session_id: string; workdir: string }) : undefined),
        90_000,
        'the launch line',
      );
      await nats.down();
      await eventually(() => output.stderr.includes('lost the stack') || undefined, 10_000, 'the loss said');
      // The session ends, and its end is announced, while nobody can hear it.
      await fs.writeFile(path.join(launch.workdir, 'go'), 'go');
      await eventually(
        async () => (await fs.readFile(path.join(launch.workdir, 'trace.jsonl'), 'utf8').catch(() => '')).includes('"session_end"') || undefined,
        20_000,
        'the session to end',
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
      await nats.up();
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(code, output.stderr).toBe(0);
      expect(output.stderr).toContain("mur: the stack's bus is back");
    } finally {
      child.kill('SIGKILL');
    }
  }, 180_000);

  it('an interrupt that cannot reach the executor ends the run, naming the session to stop later; a second leaves at once', async () => {
    const first = await startAgent(project, env);
    const second = await startAgent(project, env);
    agents.push(first, second);
    await nats.stop();
    await eventually(() => (first.stderr().includes('lost the stack') && second.stderr().includes('lost the stack')) || undefined, 10_000, 'the loss said');
    // A service without its bus tells a probe so (docker's health check), rather than `ok`.
    const door = services.find((service) => service.name === 'door') as ServiceProcess;
    const health = await eventually(
      async () => {
        const response = await fetch(`${door.url}/health`);
        return response.status === 503 ? ((await response.json()) as { status: string; reason: string }) : undefined;
      },
      10_000,
      'the door’s health to say its bus is lost',
    );
    expect(health).toMatchObject({ status: 'unavailable', reason: `its bus connection to ${nats.url} is lost` });

    second.process.kill('SIGINT');
    // Two signals sent together may arrive as one.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const twice = Date.now();
    second.process.kill('SIGINT');
    const secondEnd = await second.exited;
    expect(secondEnd.code).toBe(130);
    expect(Date.now() - twice).toBeLessThan(2_500);
    expect(secondEnd.stderr).toContain(`mur: interrupted again; leaving session ${second.sessionId} as it is (mur stop ${second.sessionId} stops it)`);

    first.process.kill('SIGINT');
    const firstEnd = await first.exited;
    expect(firstEnd.code).toBe(130);
    expect(firstEnd.stderr).toMatch(
      new RegExp(
        `mur: could not ask for session ${first.sessionId} to stop \\(.+\\); it may still run on its executor: mur stop ${first.sessionId} once the stack answers`,
      ),
    );
  });
});

/**
 * A stack whose NATS server comes back refusing the connections it had (the operator turned a
 * token on): nothing will reconnect, so nothing waits as if it would.
 */
describe('a stack whose NATS server comes back refusing its clients’ credentials', () => {
  it('ends mur run and mur events with the reason and the session to stop later, and stops the services, failed', async () => {
    const nats = await startNatsServer();
    const scratch = await tempDir('murmur-bus-refused-');
    const inference = await startScriptedInference({ script: () => ({ text: 'hello' }) });
    const services: ServiceProcess[] = [];
    const env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    let agent: RunningAgent | undefined;
    let events: ReturnType<typeof spawnMur> | undefined;
    try {
      for (const name of ['stager', 'executor', 'door']) services.push(await startService(name, env));
      const project = await agentProject(
        path.join(scratch.dir, 'agent'),
        agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
      );
      agent = await startAgent(project, env);
      events = spawnMur(['events', 'session.>'], { env });
      const watching = events;
      await eventually(() => watching.output.stderr.includes('listening on') || undefined, 10_000, 'mur events to listen');
      const eventsExited = once(watching.child, 'exit') as Promise<[number | null]>;
      // 'mur events' hears the sessions' events, never their requests: a stop of a session no one
      // runs still gets NATS' "no responders", and says so at once rather than after a timeout.
      const stopped = await runMur(['stop', `ses_${'0'.repeat(32)}`], { env });
      expect(stopped.code).toBe(1);
      expect(stopped.stderr).toContain(`error[E-SES-001]: no executor on ${nats.url} runs session 'ses_${'0'.repeat(32)}'`);

      await nats.restart({ token: 'a-token-none-of-them-has-0123456789' });

      const run = await agent.exited;
      expect(run.code).toBe(1);
      expect(run.stderr).toContain(`error[E-BUS-005]: the stack's bus at ${nats.url} closed mur's connection for good`);
      expect(run.stderr).toContain(`'mur stop ${agent.sessionId}' stops it`);
      const [eventsCode] = await eventsExited;
      expect(eventsCode).toBe(1);
      expect(watching.output.stderr).toContain(`error[E-BUS-005]: the bus at ${nats.url} closed mur's connection for good`);
      for (const service of services) {
        // It stops by itself (the executor ends its sessions first, within its stop deadline), failed.
        const code = await Promise.race([service.exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 20_000))]);
        expect(code, service.name).toBe(1);
        expect(service.logs(), service.name).toContain('lost its bus for good');
        // Stopped as it stops on a signal (done, or cut short at its deadline), not crashed on the way.
        expect(service.logs(), service.name).toMatch(new RegExp(`"msg":"${service.name} (stopped|did not stop within)`));
      }
    } finally {
      events?.child.kill('SIGKILL');
      await agent?.stop();
      for (const service of services.reverse()) await service.stop();
      await inference.close();
      await nats.stop();
      await scratch.cleanup();
    }
  });
});
