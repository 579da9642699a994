import path from 'node:path';
import { doorPublicUrl } from '@murmur/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, openStream, readSse, rpc, startAgent, textMessage } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, runMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * Doors on the stack: a real nats-server, stager and executor processes, and two door processes
 * in front of one agent session. Either door serves the session, a task sent through one is
 * seen through the other with the same event ids, and the session outlives a door — because no
 * door holds any task state.
 */
describe('two doors in front of one session', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  const services: ServiceProcess[] = [];
  let doorA: ServiceProcess;
  let doorB: ServiceProcess;
  let agent: RunningAgent;
  /** The session's URL at each door. */
  let atA: string;
  let atB: string;

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-doors-');
    const env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    services.push(await startService('stager', env), await startService('executor', env), await startService('watcher', env));
    doorA = await startService('door', env);
    doorB = await startService('door', env);
    services.push(doorA, doorB);
    inference = await startScriptedInference({
      stream: true,
      script: (body) => ({ text: `echo: ${(body.messages as Array<{ content: Array<{ text?: string }> }>).at(-1)?.content[0]?.text ?? ''}` }),
    });
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4' }),
    );
    agent = await startAgent(project, env);
    const sessionPath = `/sessions/${agent.sessionId}/`;
    // Each door names itself localhost, as it is bound to loopback.
    atA = `${doorPublicUrl(doorA.url)}${sessionPath}`;
    atB = `${doorPublicUrl(doorB.url)}${sessionPath}`;
  });

  afterAll(async () => {
    await agent?.stop();
    for (const service of services.reverse()) await service.stop();
    await inference?.close();
    await nats?.stop();
    await scratch?.cleanup();
  });

  it('mur run prints the URL of a door on the bus', () => {
    expect([atA, atB]).toContain(agent.url);
  });

  it("keeps a session's card once its host wrote it, asks the host again when told no-cache, and forgets it when the session ends", async () => {
    /** The session calls door A has made over the bus, as its own metrics count them. */
    const hostCalls = async (): Promise<number> => {
      const text = await (await fetch(`${doorA.url}/metrics`)).text();
      const line = text.split('\n').find((entry) => entry.startsWith('murmur_bus_request_duration_seconds_count{topic="session.*.rpc",outcome="ok"}'));
      return line ? Number(line.split(' ').at(-1)) : 0;
    };
    const card = (url: string, headers: Record<string, string> = {}) => fetch(new URL('.well-known/agent-card.json', url), { headers });
    expect((await card(atA)).status).toBe(200);
    const before = await hostCalls();
    for (let index = 0; index < 5; index += 1) expect(((await (await card(atA)).json()) as { session_id: string }).session_id).toBe(agent.sessionId);
    expect(await hostCalls()).toBe(before);
    expect((await card(atA, { 'cache-control': 'no-cache' })).status).toBe(200);
    expect(await hostCalls()).toBe(before + 1);

    const project = await agentProject(
      path.join(scratch.dir, 'short-lived'),
      agentManifest(inference, { name: 'short-lived', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    const shortLived = await startAgent(project, { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') });
    const itsCard = `${doorA.url}/sessions/${shortLived.sessionId}/`;
    expect((await card(itsCard)).status).toBe(200);
    await shortLived.stop();
    await eventually(async () => ((await card(itsCard)).status === 404 ? true : undefined), 10_000, 'the ended session’s card to be gone');
  });

  it('says --bind changes nothing against a stack, whose doors listen where they were started, and the session is served there', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'bound'),
      agentManifest(inference, { name: 'bound', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    // A documentation address (TEST-NET-1): nothing could listen on it, whatever mur did with it.
    const bound = await startAgent(project, { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') }, ['--bind', '192.0.2.1']);
    try {
      // Said while staging, before the launch line; read once stderr has caught up with stdout.
      await eventually(() => (bound.stderr().includes('--bind changes nothing') ? true : undefined), 5_000, 'the --bind warning');
      expect(bound.stderr()).toContain(
        "warning: --bind changes nothing against a stack: the session is served by the stack's doors, which listen where they were started (MURMUR_DOOR_HOST)",
      );
      expect(bound.stderr()).not.toContain('beyond this machine');
      expect([doorA.url, doorB.url].some((door) => bound.url.startsWith(doorPublicUrl(door)))).toBe(true);
    } finally {
      await bound.stop();
    }
  });

  it('answers what it does not serve with 404 and E-DOOR-002 as JSON, as mur run’s door does, where it was a bare text 404', async () => {
    for (const [method, at] of [
      ['PUT', atA],
      ['DELETE', atA],
      ['POST', new URL('.well-known/agent-card.json', atA).href],
      ['GET', `${doorA.url}/`],
      ['OPTIONS', atA],
    ] as const) {
      const response = await fetch(at, { method });
      expect(response.status, `${method} ${at}`).toBe(404);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('E-DOOR-002');
      expect(body.error.message).toContain(`it has no ${method} ${new URL(at).pathname}`);
      expect(body.error.message).toContain('a door answers POST /sessions/<id> (JSON-RPC) and GET of its agent cards');
      if (method === 'OPTIONS') expect(body.error.message).toContain('it answers no CORS preflight');
    }
    // Its own /health stays its own.
    expect((await fetch(`${doorA.url}/health`)).status).toBe(200);
  });

  it('both doors serve the card, each with its own URL', async () => {
    for (const url of [atA, atB]) {
      const card = (await (await fetch(new URL('.well-known/agent-card.json', url))).json()) as { url: string; session_id: string };
      expect(card.session_id).toBe(agent.sessionId);
      expect(card.url).toBe(url);
    }
  });

  it('a task sent through one door is got, streamed and replayed through the other, with the same event ids', async () => {
    const frames = (await readSse(await openStream(atA, 'message/stream', textMessage('through A')))).filter((frame) => frame.id !== undefined);
    const taskId = (JSON.parse(frames[0]?.data as string) as { result: { taskId: string } }).result.taskId;
    const got = await rpc(atB, 'tasks/get', { id: taskId });
    expect(got.body.result?.status).toMatchObject({ state: 'completed', message: { parts: [{ text: 'echo: through A' }] } });
    const replayed = (
      await readSse(await openStream(atB, 'tasks/resubscribe', { id: taskId }, { headers: { 'last-event-id': String(Number(frames[0]?.id) - 1) } }))
    ).filter((frame) => frame.id !== undefined);
    // The same events, rendered the same; only the JSON-RPC id (the client's request) differs.
    const resultOf = (frame: { id?: string; event?: string; data: string }) => [frame.id, frame.event, (JSON.parse(frame.data) as { result: unknown }).result];
    expect(replayed.map(resultOf)).toEqual(frames.map(resultOf));
  });

  it('a listing begun at one door goes on at the other: the page token is the session’s, not a door’s', async () => {
    // A context of their own, and each send answered once its task is done: a task that changes
    // (the earlier cases', or one of these still working) moves to the front of a listing, newest first.
    const contextId = `listing-${Date.now()}`;
    for (const text of ['page one', 'page two']) {
      const sent = await rpc(atA, 'message/send', { ...textMessage(text, { contextId }), configuration: { blocking: true } });
      expect(sent.body.error).toBeUndefined();
      expect((sent.body.result as { status?: { state?: string } } | undefined)?.status?.state).toBe('completed');
    }
    const first = (await rpc(atA, 'tasks/list', { pageSize: 1, contextId })).body.result as unknown as { tasks: Array<{ id: string }>; nextPageToken: string };
    expect(first.nextPageToken, 'two tasks, one a page: a next page').not.toBe('');
    const second = await rpc(atB, 'tasks/list', { pageSize: 1, contextId, pageToken: first.nextPageToken });
    expect(second.body.error).toBeUndefined();
    const secondPage = second.body.result as unknown as { tasks: Array<{ id: string }> };
    expect(secondPage.tasks).toHaveLength(1);
    expect(secondPage.tasks[0]?.id).not.toBe(first.tasks[0]?.id);
    // The same token at the door that gave it names the same page.
    const again = (await rpc(atA, 'tasks/list', { pageSize: 1, contextId, pageToken: first.nextPageToken })).body.result as unknown as {
      tasks: Array<{ id: string }>;
    };
    expect(again.tasks.map((task) => task.id)).toEqual(secondPage.tasks.map((task) => task.id));
  });

  it("is on the watcher's map: mur ps over the bus lists it live, its pid verified by its executor", async () => {
    const env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    const result = await runMur(['ps', '--json'], { env });
    expect(result.code, result.stderr).toBe(0);
    const sessions = JSON.parse(result.stdout) as Array<{ session_id: string; liveness: string; pid: number }>;
    expect(sessions.find((session) => session.session_id === agent.sessionId)).toMatchObject({ liveness: 'live', pid: agent.pid });
  });

  it('is not called gone by a watcher restarted under it: unverified until an executor names it, then live, and never dropped', async () => {
    const env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    const index = services.findIndex((service) => service.name === 'watcher');
    await services[index]?.stop();
    const watcher = await startService('watcher', env);
    services[index] = watcher;
    const listed = async () => {
      const result = await runMur(['ps', '--json'], { env });
      expect(result.code, result.stderr).toBe(0);
      return (JSON.parse(result.stdout) as Array<{ session_id: string; liveness: string; executor_id?: string }>).find(
        (session) => session.session_id === agent.sessionId,
      );
    };
    const first = await listed();
    expect(first, 'still listed').toBeDefined();
    expect(first?.liveness).not.toBe('gone');
    const live = await eventually(async () => ((await listed())?.liveness === 'live' ? await listed() : undefined), 15_000, 'the session live again');
    expect(live?.executor_id).toMatch(/^executor-/);
  });

  it('keeps serving through the other door when one door stops', async () => {
    const sent = await rpc(atA, 'message/send', textMessage('before the door stops'));
    const taskId = sent.body.result?.id as string;
    await doorA.stop();
    const done = await eventually(
      async () => {
        const reply = await rpc(atB, 'tasks/get', { id: taskId });
        return (reply.body.result?.status as { state: string } | undefined)?.state === 'completed' ? reply : undefined;
      },
      20_000,
      'the task to complete',
    );
    expect(done.body.result?.id).toBe(taskId);
    const after = await rpc(atB, 'message/send', { ...textMessage('after'), configuration: { blocking: true } });
    expect(after.body.result?.status).toMatchObject({ state: 'completed' });
  });
});
