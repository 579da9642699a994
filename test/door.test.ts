import { promises as fs } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, openStream, readSse, rpc, startAgent, textMessage, traceOf } from './support/agents.js';
import { probeToolArtifact, publishInto } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { eventually } from './support/processes.js';
import { type ScriptedInference, type ScriptedReply, startScriptedInference } from './support/scripted-inference.js';
import { rawExchange } from './support/servers.js';
import { SETTLE_WITHIN_MAX_MS, loopbackHostGuard } from '@murmur/shared';

/**
 * The door in front of a running agent capsule (`mur run --json`, the embedded default): the
 * agent card, JSON-RPC in both A2A generations, SSE with numbered events, replay and heartbeats,
 * input-required, and every refusal a client can provoke.
 *
 * The scripted model echoes a message (`echo: <text>`); a message `ask <prompt>` makes it call
 * the probe tool, which asks the person for input, and then it answers with what the tool said.
 */

type Message = { role: string; content: Array<{ type: string; text?: string; content?: Array<{ text: string }> }> };

export function echoScript(body: Record<string, unknown>): ScriptedReply {
  const messages = body.messages as Message[];
  const last = messages.at(-1) as Message;
  const result = last.content.find((block) => block.type === 'tool_result');
  if (result) return { text: `tool said: ${result.content?.[0]?.text ?? ''}` };
  const text = last.content.find((block) => block.type === 'text')?.text ?? '';
  if (text.startsWith('ask ')) return { toolCalls: [{ name: 'probe-tool', input: { actions: [{ op: 'ask', prompt: text.slice(4) }] } }] };
  // A model that takes half a minute: only a canceled task's abandoned call lets the session go on sooner.
  if (text.startsWith('slow ')) return { text: `echo: ${text}`, delayMs: 30_000 };
  // `run <command>`: one shell call, its output the answer.
  if (text.startsWith('run ')) return { toolCalls: [{ name: 'sh', input: { command: text.slice(4) } }] };
  // `narrate <text>`: a tool turn that says something as it calls the tool.
  if (text.startsWith('narrate ')) return { toolCalls: [{ name: 'sh', input: { command: 'true' } }], text: 'first, a tool. ' };
  // `big <n>`: an answer of n characters.
  if (text.startsWith('big ')) return { text: 'y'.repeat(Number(text.slice(4))) };
  return { text: `echo: ${text}` };
}

describe('the door', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let agent: RunningAgent;
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-door-');
    env = {
      MURMUR_HOME: path.join(scratch.dir, 'home'),
      MURMUR_SSE_HEARTBEAT_MS: '150',
      MURMUR_DOOR_MAX_BODY_BYTES: '65536',
      // Each request of this suite is sent whole at once; a stream or a blocking send outlasts it.
      MURMUR_HTTP_READ_TIMEOUT_MS: '2000',
    };
    await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), await probeToolArtifact());
    inference = await startScriptedInference({ script: echoScript, stream: true });
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, {
        artifacts: '  - name: probe-tool\n    version: 1.0.0\n    runtime: tool',
        lifecycle: '  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 1\n  input_timeout_secs: 60',
      }),
    );
    agent = await startAgent(project, env);
  });

  afterAll(async () => {
    await agent?.stop();
    await inference?.close();
    await scratch?.cleanup();
  });

  /** Another agent of this suite's model, without tools, from its own project in `dir`; the caller stops it. */
  async function startPlainAgent(dir: string, name: string, lifecycle: string, args: string[] = []): Promise<RunningAgent> {
    return startAgent(await agentProject(path.join(scratch.dir, dir), agentManifest(inference, { name, lifecycle })), env, args);
  }

  async function completed(taskId: string, version?: string, at = agent.url): Promise<Record<string, unknown>> {
    return eventually(
      async () => {
        const reply = await rpc(at, version ? 'GetTask' : 'tasks/get', { id: taskId }, version ? { version } : {});
        const state = (reply.body.result?.status as { state?: string } | undefined)?.state;
        return state === 'completed' || state === 'TASK_STATE_COMPLETED' || state === 'failed' ? reply.body.result : undefined;
      },
      20_000,
      `task ${taskId} to end`,
    );
  }

  describe('agent card', () => {
    it('is a valid A2A card for both generations, naming the session and the capsule', async () => {
      const response = await fetch(new URL('.well-known/agent-card.json', agent.url));
      expect(response.status).toBe(200);
      const card = (await response.json()) as Record<string, unknown>;
      expect(card).toMatchObject({
        name: 'agent',
        description: 'an agent capsule under test',
        version: '0.1.0',
        url: agent.url,
        preferredTransport: 'JSONRPC',
        protocolVersion: '0.3.0',
        session_id: agent.sessionId,
        capsule_name: 'agent',
        capsule_version: '0.1.0',
        defaultInputModes: ['text/plain'],
        defaultOutputModes: ['text/plain'],
      });
      // The door listens on 127.0.0.1 (mur run's default --bind) and names itself as upstream does.
      expect(new URL(agent.url).hostname).toBe('localhost');
      expect(card.supportedInterfaces).toEqual([
        { url: agent.url, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
        { url: agent.url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
      ]);
      expect(card.capabilities).toMatchObject({ streaming: true, pushNotifications: false, tools: ['probe-tool'], shell: false, network: true });
      expect(card.skills).toEqual([{ id: 'probe-tool', name: 'probe-tool', description: 'the probe-tool tool', tags: ['tool'] }]);
    });

    it('is also served when the client joins the path with a slash of its own', async () => {
      const response = await fetch(`${agent.url}/.well-known/agent-card.json`);
      expect(response.status).toBe(200);
      expect(((await response.json()) as { session_id: string }).session_id).toBe(agent.sessionId);
    });

    it('answers a card it keeps with the same status, header lines and bytes as the answer the host gave, at both of its addresses', async () => {
      /** One GET over a fresh connection: the status, the header lines as sent (names' case and order kept, the date left out), the body. */
      const raw = (url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: string[]; body: string }> =>
        new Promise((resolve, reject) => {
          http
            .get(url, { headers, agent: false }, (response) => {
              const chunks: Buffer[] = [];
              response.on('data', (chunk: Buffer) => chunks.push(chunk));
              response.on('end', () => {
                const lines: string[] = [];
                for (let index = 0; index < response.rawHeaders.length; index += 2) {
                  const name = response.rawHeaders[index] as string;
                  lines.push(name.toLowerCase() === 'date' ? name : `${name}: ${response.rawHeaders[index + 1]}`);
                }
                resolve({ status: response.statusCode ?? 0, headers: lines, body: Buffer.concat(chunks).toString() });
              });
            })
            .on('error', reject);
        });
      for (const url of [new URL('.well-known/agent-card.json', agent.url).href, new URL('/.well-known/agent-card.json', agent.url).href]) {
        const fromHost = await raw(url, { 'cache-control': 'no-cache' });
        const kept = await raw(url);
        expect(fromHost.status).toBe(200);
        expect(kept).toEqual(fromHost);
        expect(JSON.parse(kept.body)).toMatchObject({ session_id: agent.sessionId });
        // A client that holds the card (A2A 1.0 §8.6) is told so, from the kept card and from the host alike.
        const etag = kept.headers.find((line) => line.toLowerCase().startsWith('etag: '))?.slice('etag: '.length) ?? '';
        expect(etag).toMatch(/^"[A-Za-z0-9_-]{27}"$/);
        expect(kept.headers).toContain('cache-control: max-age=300');
        const held = await raw(url, { 'if-none-match': etag });
        const heldFromHost = await raw(url, { 'if-none-match': `"other", ${etag}`, 'cache-control': 'no-cache' });
        expect(held).toEqual(heldFromHost);
        expect(held).toMatchObject({ status: 304, body: '' });
        expect((await raw(url, { 'if-none-match': '"another card"' })).status).toBe(200);
      }
    });

    it('answers 404 for a session id that is not one, without asking the bus', async () => {
      const base = agent.url.slice(0, agent.url.indexOf('/sessions/'));
      const response = await fetch(`${base}/sessions/ses_..%2F..%2Fetc/.well-known/agent-card.json`);
      expect(response.status).toBe(404);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe('E-DOOR-001');
    });

    it('answers a path it does not serve with 404 and E-DOOR-002, as JSON', async () => {
      const base = agent.url.slice(0, agent.url.indexOf('/sessions/'));
      const response = await fetch(`${base}/nowhere/at/all`);
      expect(response.status).toBe(404);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('E-DOOR-002');
      expect(body.error.message).toContain('GET /nowhere/at/all');
    });

    it('answers 404 with E-DOOR-001 for a well-formed session no one runs', async () => {
      const base = agent.url.slice(0, agent.url.indexOf('/sessions/'));
      const response = await fetch(`${base}/sessions/ses_${'0'.repeat(32)}/.well-known/agent-card.json`);
      expect(response.status).toBe(404);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('E-DOOR-001');
      expect(body.error.message).toContain(`ses_${'0'.repeat(32)}`);
    });
  });

  describe('message/send and tasks/get (0.3)', () => {
    it('accepts a task at once, and tasks/get shows it complete with the response', async () => {
      const sent = await rpc(agent.url, 'message/send', textMessage('hello there'));
      expect(sent.status).toBe(200);
      const task = sent.body.result as { kind: string; id: string; contextId: string; status: { state: string } };
      expect(task.kind).toBe('task');
      expect(task.id).toMatch(/^tsk_[0-9a-f]{32}$/);
      expect(task.contextId).toMatch(/^ctx_[0-9a-f]{32}$/);
      expect(task.status.state).toBe('submitted');
      const done = (await completed(task.id)) as {
        status: { state: string; message: { parts: Array<{ text: string }> } };
        artifacts: Array<{ name: string; parts: Array<{ text: string }> }>;
        history: Array<{ role: string }>;
      };
      expect(done.status.state).toBe('completed');
      expect(done.status.message.parts[0]?.text).toBe('echo: hello there');
      expect(done.artifacts.find((artifact) => artifact.name === 'response')?.parts[0]?.text).toBe('echo: hello there');
      expect(done.history.map((entry) => entry.role)).toEqual(['user', 'agent']);
      expect(await fs.readFile(path.join(agent.workdir, 'out', 'result.txt'), 'utf8')).toBe('echo: hello there');
    });

    it('waits for the task to settle when the client asks to block', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('block for me'), configuration: { blocking: true } });
      expect((sent.body.result!.status as { state: string }).state).toBe('completed');
    });

    it('keeps a client-chosen context id, and returns the last task when tasks/get names none', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('in my context', { contextId: 'my-context.1' }), configuration: { blocking: true } });
      expect(sent.body.result?.contextId).toBe('my-context.1');
      const last = await rpc(agent.url, 'tasks/get', {});
      expect(last.body.result?.id).toBe(sent.body.result?.id);
    });

    it('records the A2A task in the trace in upstream order', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('trace me'), configuration: { blocking: true } });
      const taskId = sent.body.result?.id as string;
      const trace = await traceOf(agent.workdir);
      const start = trace.findIndex((event) => event.event_type === 'a2a_task_received' && event.task_id === taskId);
      const end = trace.findIndex((event) => event.event_type === 'task_end' && event.task_id === taskId);
      expect(start).toBeGreaterThanOrEqual(0);
      expect(end).toBeGreaterThan(start);
      const order = trace
        .slice(start, end + 1)
        .map((event) => event.event_type)
        .filter((type) => type !== 'egress');
      expect(order).toEqual(['a2a_task_received', 'task_start', 'session_start', 'inference', 'session_end', 'task_end']);
      expect(trace.slice(start, end).find((event) => event.event_type === 'task_start')).toMatchObject({
        source: 'a2a',
        message_parts_bytes: Buffer.byteLength('trace me'),
      });
      expect(trace[end]).toMatchObject({ exit_status: 'ok', turns: 1, reopen_count: 0 });
    });
  });

  describe('SendMessage and GetTask (1.0)', () => {
    it('blocks by default and answers in 1.0 shapes', async () => {
      const sent = await rpc(
        agent.url,
        'SendMessage',
        { message: { messageId: 'm-1', role: 'ROLE_USER', parts: [{ text: 'one point oh' }] } },
        { version: '1.0' },
      );
      const task = sent.body.result?.task as {
        id: string;
        status: { state: string; message: { role: string; parts: Array<{ text: string }> } };
        kind?: string;
      };
      expect(task.kind).toBeUndefined();
      expect(task.status.state).toBe('TASK_STATE_COMPLETED');
      expect(task.status.message.role).toBe('ROLE_AGENT');
      expect(task.status.message.parts[0]?.text).toBe('echo: one point oh');
      const got = await rpc(agent.url, 'GetTask', { id: task.id }, { version: '1.0' });
      expect((got.body.result!.status as { state: string }).state).toBe('TASK_STATE_COMPLETED');
    });

    it('returns at once when asked to', async () => {
      const sent = await rpc(
        agent.url,
        'SendMessage',
        { message: { messageId: 'm-2', role: 'ROLE_USER', parts: [{ text: 'quick' }] }, configuration: { returnImmediately: true } },
        { version: '1.0' },
      );
      expect((sent.body.result!.task as { status: { state: string } }).status.state).toBe('TASK_STATE_SUBMITTED');
      await completed((sent.body.result!.task as { id: string }).id, '1.0');
    });
  });

  describe('streams', () => {
    it('streams a task with increasing event ids and closes after its final status', async () => {
      const response = await openStream(agent.url, 'message/stream', textMessage('stream this please'));
      expect(response.headers.get('content-type')).toContain('text/event-stream');
      const frames = (await readSse(response)).filter((frame) => frame.comment === undefined);
      const results = frames.map((frame) => (JSON.parse(frame.data) as { result: Record<string, unknown> }).result);
      expect(results[0]).toMatchObject({ kind: 'task', status: { state: 'submitted' } });
      const ids = frames.filter((frame) => frame.id !== undefined).map((frame) => Number(frame.id));
      expect(ids.length).toBeGreaterThan(3);
      expect(ids).toEqual([...ids].sort((left, right) => left - right));
      expect(new Set(ids).size).toBe(ids.length);
      const last = results.at(-1) as { kind: string; final: boolean; status: { state: string } };
      expect(last).toMatchObject({ kind: 'status-update', final: true, status: { state: 'completed' } });
      // The scripted model streams its reply in two deltas: two text chunks, then the closing one.
      const chunks = frames
        .filter((frame) => frame.event === 'text')
        .map((frame) => (JSON.parse(frame.data) as { result: { artifact: { parts: Array<{ text: string }> }; lastChunk: boolean } }).result);
      expect(chunks.map((chunk) => chunk.artifact.parts[0]?.text).join('')).toBe('echo: stream this please');
      expect(chunks.at(-1)?.lastChunk).toBe(true);
      expect(frames.filter((frame) => frame.event === 'status').length).toBeGreaterThanOrEqual(2);
    });

    it('streams to an HTTP/1.0 client, or one that asked to close, without chunks and closes once the task is final', async () => {
      const url = new URL(agent.url);
      for (const [version, connection] of [
        ['1.0', ''],
        ['1.1', 'Connection: close\r\n'],
      ] as const) {
        const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/stream', params: textMessage(`stream over ${version}`) });
        const head = `POST ${url.pathname} HTTP/${version}\r\nHost: ${url.host}\r\n${connection}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
        // Well short of the door's keep-alive timeout, which had held the socket open after the last event.
        const { received, closed } = await rawExchange(Number(url.port), `${head}${body}`, 3_000);
        const [responseHead = '', stream = ''] = received.split('\r\n\r\n', 2);
        expect(closed, version).toBe(true);
        expect(responseHead).toMatch(/^HTTP\/1\.1 200 /);
        expect(responseHead.toLowerCase()).toContain('connection: close');
        if (version === '1.0') {
          expect(responseHead.toLowerCase()).not.toContain('transfer-encoding');
          expect(stream.startsWith('event: ') || stream.startsWith('id: ') || stream.startsWith('data: ')).toBe(true);
        }
        expect(received).toContain('"final":true');
      }
    });

    it('streams in 1.0 shapes with A2A-Version: 1.0', async () => {
      const response = await openStream(
        agent.url,
        'SendStreamingMessage',
        { message: { messageId: 'm-s', role: 'ROLE_USER', parts: [{ text: 'stream one oh' }] } },
        { version: '1.0' },
      );
      const results = (await readSse(response))
        .filter((frame) => frame.comment === undefined)
        .map((frame) => (JSON.parse(frame.data) as { result: Record<string, unknown> }).result);
      expect(Object.keys(results[0] as object)).toEqual(['task']);
      expect(results.at(-1)).toMatchObject({ statusUpdate: { status: { state: 'TASK_STATE_COMPLETED' } } });
      expect(results.some((result) => 'artifactUpdate' in result)).toBe(true);
    });

    it('names a tool result in the stream as the finished task names it, so a client holding both holds it once', async () => {
      const frames = await readSse(
        await openStream(agent.url, 'SendStreamingMessage', {
          message: { messageId: `m-tool-${Date.now()}`, role: 'ROLE_USER', parts: [{ text: 'run echo named' }] },
        }),
      );
      type Artifact = { artifactId: string; name: string; parts: Array<{ text: string }> };
      const results = frames
        .filter((frame) => frame.comment === undefined)
        .map((frame) => (JSON.parse(frame.data) as { result: Record<string, unknown> }).result);
      const taskId = (results[0]?.task as { id: string } | undefined)?.id;
      const streamedTool = results
        .map((result) => (result.artifactUpdate as { artifact: Artifact } | undefined)?.artifact)
        .find((artifact) => artifact?.name === 'sh');
      // This agent grants no shell, so the result is the refusal: an artifact all the same.
      expect(streamedTool?.artifactId).toMatch(/-artifact-0$/);
      const task = (await rpc(agent.url, 'GetTask', { id: taskId })).body.result as { artifacts: Artifact[] };
      expect(task.artifacts.filter((artifact) => artifact.name === 'sh')).toEqual([streamedTool]);
    });

    it('replays a task after Last-Event-ID, the same events with the same ids', async () => {
      const first = (await readSse(await openStream(agent.url, 'message/stream', textMessage('replay me')))).filter((frame) => frame.id !== undefined);
      const taskId = (JSON.parse(first[0]?.data as string) as { result: { taskId: string } }).result.taskId;
      const after = Number(first[1]?.id);
      const replayed = (
        await readSse(await openStream(agent.url, 'tasks/resubscribe', { id: taskId }, { headers: { 'last-event-id': String(after) } }))
      ).filter((frame) => frame.comment === undefined);
      expect((JSON.parse(replayed[0]?.data as string) as { result: { kind: string; status: { state: string } } }).result).toMatchObject({
        kind: 'task',
        status: { state: 'completed' },
      });
      expect(replayed.slice(1).map((frame) => frame.id)).toEqual(first.slice(2).map((frame) => frame.id));
      expect(replayed.slice(1).map((frame) => frame.data)).not.toEqual([]);
    });

    it('ends a resubscription to a finished task after its snapshot when nothing is asked to be replayed', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('finished'), configuration: { blocking: true } });
      const frames = await readSse(await openStream(agent.url, 'tasks/resubscribe', { id: sent.body.result?.id }));
      expect(frames).toHaveLength(1);
      expect(frames[0]?.event).toBe('task');
    });

    it('observes the whole session with stream/watch, upstream shapes and all', async () => {
      const response = await openStream(agent.url, 'stream/watch', {}, { headers: { 'last-event-id': '0' } });
      const frames = await readSse(response, (_frame, seen) => seen.filter((frame) => frame.event === 'status').length >= 3);
      expect(frames[0]).toMatchObject({ event: 'connection-ack' });
      expect(JSON.parse(frames[0]?.data as string)).toEqual({ role: 'observer', conversation_mode: 'stateless' });
      const status = frames.find((frame) => frame.event === 'status');
      expect(JSON.parse(status?.data as string)).toMatchObject({ status: { state: expect.any(String) }, final: expect.any(Boolean) });
      expect(status?.id).toBe('1');
    });
  });

  describe('input-required', () => {
    it('pauses the task for input, shows the prompt, resumes it with the next message, and sends heartbeats while it waits', async () => {
      const stream = await openStream(agent.url, 'message/stream', textMessage('ask what colour?'));
      const framesWhileWaiting = readSse(
        stream,
        (_frame, seen) => seen.some((frame) => frame.comment === 'heartbeat') && seen.some((frame) => frame.data.includes('input-required')),
      );
      const waiting = await framesWhileWaiting;
      const taskId = (JSON.parse(waiting[0]?.data as string) as { result: { id: string } }).result.id;
      const asked = await rpc(agent.url, 'tasks/get', { id: taskId });
      expect(asked.body.result).toMatchObject({ status: { state: 'input-required', message: { parts: [{ text: 'what colour?' }] } } });
      expect(
        (asked.body.result!.artifacts as Array<{ name: string; parts: Array<{ text: string }> }>).find((artifact) => artifact.name === 'prompt')?.parts[0]
          ?.text,
      ).toBe('what colour?');
      // A message naming the task and another conversation is refused, and the task still waits.
      const crossed = await rpc(agent.url, 'message/send', textMessage('red', { taskId, contextId: 'some-other-conversation' }));
      expect(crossed.body.error?.code).toBe(-32602);
      expect(crossed.body.error?.message).toContain(`message.contextId 'some-other-conversation' is not the context of task '${taskId}'`);
      expect((await rpc(agent.url, 'tasks/get', { id: taskId })).body.result).toMatchObject({ status: { state: 'input-required' } });
      const answered = await rpc(agent.url, 'message/send', { ...textMessage('blue', { taskId }), configuration: { blocking: true } });
      expect(answered.body.result?.id).toBe(taskId);
      const done = answered.body.result as { status: { state: string; message: { parts: Array<{ text: string }> } } };
      expect(done.status.state).toBe('completed');
      expect(done.status.message.parts[0]?.text).toContain('"value":"blue"');
    });

    it('rejects a task when the queue is full, as a result and not an error, and cancels one still waiting', async () => {
      const held = await rpc(agent.url, 'message/send', textMessage('ask hold the slot'));
      const heldId = held.body.result?.id as string;
      await eventually(
        async () => ((await rpc(agent.url, 'tasks/get', { id: heldId })).body.result!.status as { state: string }).state === 'input-required' || undefined,
        20_000,
        'the held task to ask',
      );
      const queued = await rpc(agent.url, 'message/send', textMessage('queued', { contextId: 'another-conversation' }));
      expect((queued.body.result!.status as { state: string }).state).toBe('submitted');
      const refused = await rpc(agent.url, 'message/send', textMessage('one too many', { contextId: 'yet-another' }));
      expect(refused.body.error).toBeUndefined();
      expect(refused.body.result?.status).toMatchObject({ state: 'rejected', message: { parts: [{ text: 'task rejected: capsule is busy' }] } });
      const canceled = await rpc(agent.url, 'tasks/cancel', { id: queued.body.result?.id });
      expect((canceled.body.result!.status as { state: string }).state).toBe('canceled');
      const notCancelable = await rpc(agent.url, 'tasks/cancel', { id: refused.body.result?.id });
      expect(notCancelable.body.error?.code).toBe(-32002);
      const answered = await rpc(agent.url, 'message/send', { ...textMessage('done holding', { taskId: heldId }), configuration: { blocking: true } });
      expect((answered.body.result!.status as { state: string }).state).toBe('completed');
    });
  });

  describe('refusals', () => {
    async function post(
      body: string,
      headers: Record<string, string> = { 'content-type': 'application/json' },
    ): Promise<{ status: number; body: { id?: unknown; result?: Record<string, unknown>; error?: { code: number; message: string } } }> {
      const response = await fetch(agent.url, { method: 'POST', headers, body });
      return { status: response.status, body: (await response.json()) as { result?: Record<string, unknown>; error?: { code: number; message: string } } };
    }

    it('answers a client that stops sending its body 408 at the read timeout, and goes on serving', async () => {
      const url = new URL(agent.url);
      const head = `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`;
      const { received, closed } = await rawExchange(Number(url.port), `${head}{"jsonrpc": "2.0",`, 15_000);
      expect(closed).toBe(true);
      expect(received).toMatch(/^HTTP\/1\.1 408 /);
      expect((await post('{"jsonrpc": "2.0", "method": ')).body).toMatchObject({ error: { code: -32700 } });
    });

    it('answers garbage with -32700', async () => {
      const reply = await post('{"jsonrpc": "2.0", "method": ');
      expect(reply.body).toMatchObject({ id: null, error: { code: -32700 } });
    });

    it('answers a request that is not JSON-RPC, or a batch, with -32600', async () => {
      expect((await post('{"id": 7, "method": "tasks/get"}')).body).toMatchObject({ id: 7, error: { code: -32600 } });
      expect((await post('[{"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}]')).body.error?.code).toBe(-32600);
    });

    it('answers an id of the wrong type with -32600, params that are not an object with -32602, and two requests with the same id each', async () => {
      expect((await post('{"jsonrpc": "2.0", "id": true, "method": "tasks/get"}')).body).toMatchObject({ id: null, error: { code: -32600 } });
      expect((await post('{"jsonrpc": "2.0", "id": {"n": 1}, "method": "tasks/get"}')).body.error?.code).toBe(-32600);
      for (const params of ['[1, 2]', '"text"', 'null', '7']) {
        const reply = await post(`{"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": ${params}}`);
        expect(reply.body, params).toMatchObject({ id: 9, error: { code: -32602 } });
        expect(reply.body.error?.message, params).toMatch(/^Invalid params: params must be an object/);
      }
      const body = (text: string) =>
        JSON.stringify({ jsonrpc: '2.0', id: 'same', method: 'message/send', params: { ...textMessage(text), configuration: { blocking: true } } });
      const [one, two] = await Promise.all([post(body('twin one')), post(body('twin two'))]);
      for (const [reply, text] of [
        [one, 'twin one'],
        [two, 'twin two'],
      ] as const) {
        expect(reply?.body.id).toBe('same');
        expect((reply?.body.result?.status as { message?: { parts: Array<{ text: string }> } } | undefined)?.message?.parts[0]?.text).toBe(`echo: ${text}`);
      }
    });

    it('answers an unknown method with -32601, and says when it belongs to the generation the request did not ask for', async () => {
      expect((await rpc(agent.url, 'tasks/explode', {})).body.error?.code).toBe(-32601);
      const wrongGeneration = await rpc(agent.url, 'SendMessage', textMessage('x'), { version: '0.3' });
      expect(wrongGeneration.body.error?.code).toBe(-32601);
      expect(wrongGeneration.body.error?.message).toBe(
        "Method not found: 'SendMessage' ('SendMessage' is an A2A 1.0 method: send it with A2A-Version: 1.0, or with no version)",
      );
      const other = await rpc(agent.url, 'tasks/get', {}, { version: '1.0' });
      expect(other.body.error?.message).toContain("'tasks/get' is an A2A 0.3 method: send it with A2A-Version: 0.3, or with no version");
    });

    it('answers a method named like a property every object has (constructor, toString, __proto__) as the unknown method it is', async () => {
      for (const method of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) {
        for (const version of [undefined, '0.3', '1.0']) {
          const reply = await rpc(agent.url, method, {}, version ? { version } : {});
          expect(reply.status, `${method} ${version}`).toBe(200);
          expect(reply.body.error?.code, `${method} ${version}`).toBe(-32601);
        }
      }
    });

    it('answers a body that is not UTF-8 with -32700 rather than reading it as something three times its size', async () => {
      const bytes = Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"'), Buffer.alloc(1000, 0xff), Buffer.from('"}}')]);
      const response = await fetch(agent.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: bytes });
      expect(await response.json()).toMatchObject({ id: null, error: { code: -32700, message: 'Parse error: the body is not UTF-8 text' } });
    });

    it('reads 1.0 params nested far deeper than any field it reads without running out of stack', async () => {
      const deep = `${'['.repeat(30_000)}${']'.repeat(30_000)}`;
      const body = `{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":"tsk_none","z":${deep}}}`;
      const response = await fetch(agent.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect(((await response.json()) as { error: { code: number } }).error.code).toBe(-32001);
    });

    it('answers bad params with -32602, naming what was wrong', async () => {
      const reply = await rpc(agent.url, 'message/send', { message: { role: 'user', parts: [{ kind: 'text', text: 'no id' }] } });
      expect(reply.body.error?.code).toBe(-32602);
      expect(reply.body.error?.message).toMatch(/^Invalid params: .*messageId/);
    });

    it("refuses a client's message written as the agent's with -32602 naming message.role, in both generations", async () => {
      const legacy = await rpc(agent.url, 'message/send', textMessage('words put in its mouth', { role: 'agent' }));
      const modern = await rpc(
        agent.url,
        'SendMessage',
        { message: { messageId: 'm-as-agent', role: 'ROLE_AGENT', parts: [{ text: 'words put in its mouth' }] } },
        { version: '1.0' },
      );
      for (const reply of [legacy, modern]) {
        expect(reply.body.error?.code).toBe(-32602);
        expect(reply.body.error?.message).toMatch(/^Invalid params: message\.role: a client's message is the user's/);
      }
    });

    it('refuses a context id that is not a plain path segment with -32602, and starts no task', async () => {
      for (const contextId of ['../escape', 'a/b', '.', '..', 'x'.repeat(200)]) {
        const reply = await rpc(agent.url, 'message/send', textMessage('escape', { contextId }));
        expect(reply.body.error?.code, contextId).toBe(-32602);
      }
      await expect(fs.stat(path.join(agent.workdir, 'contexts'))).rejects.toThrow();
    });

    it('answers an unknown task with -32001 in both generations', async () => {
      expect((await rpc(agent.url, 'tasks/get', { id: 'tsk_nope' })).body.error).toMatchObject({ code: -32001 });
      // 1.0's error details: an ErrorInfo naming the A2A error type.
      expect((await rpc(agent.url, 'GetTask', { id: 'tsk_nope' }, { version: '1.0' })).body.error).toMatchObject({
        code: -32001,
        data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'TASK_NOT_FOUND', domain: 'a2a-protocol.org' }],
      });
      expect((await rpc(agent.url, 'tasks/cancel', { id: 'tsk_nope' })).body.error).toMatchObject({ code: -32001 });
      expect((await rpc(agent.url, 'tasks/resubscribe', { id: 'tsk_nope' })).body.error).toMatchObject({ code: -32001 });
    });

    it('answers a finished task cancel with -32002', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('finish first'), configuration: { blocking: true } });
      const reply = await rpc(agent.url, 'tasks/cancel', { id: sent.body.result?.id });
      expect(reply.body.error?.code).toBe(-32002);
      expect(reply.body.error?.message).toContain('completed');
    });

    it('refuses a message with a part that is not text with -32005, naming the part, and one with no parts with -32602', async () => {
      const refusals: Array<[string, Record<string, unknown>, string | undefined]> = [
        [
          'message/send',
          {
            message: {
              kind: 'message',
              messageId: 'm-file',
              role: 'user',
              parts: [
                { kind: 'text', text: 'see' },
                { kind: 'file', file: { uri: 'https://x/y.png' } },
              ],
            },
          },
          undefined,
        ],
        ['message/stream', { message: { kind: 'message', messageId: 'm-data', role: 'user', parts: [{ kind: 'data', data: { a: 1 } }] } }, undefined],
        ['SendMessage', { message: { messageId: 'm-url', role: 'ROLE_USER', parts: [{ url: 'https://x/y.png', mediaType: 'image/png' }] } }, '1.0'],
        ['SendStreamingMessage', { message: { messageId: 'm-raw', role: 'ROLE_USER', parts: [{ raw: 'AAEC' }] } }, '1.0'],
      ];
      for (const [method, params, version] of refusals) {
        const reply = await rpc(agent.url, method, params, version ? { version } : {});
        expect(reply.body.error?.code, method).toBe(-32005);
        expect(reply.body.error?.message, method).toMatch(
          /^Content type not supported: message\.parts\[\d\] is a (file|data|url|raw) part; this agent takes text parts only/,
        );
      }
      const empty = await rpc(agent.url, 'message/send', { message: { kind: 'message', messageId: 'm-empty', role: 'user', parts: [] } });
      expect(empty.body.error?.code).toBe(-32602);
      expect(empty.body.error?.message).toContain('message.parts');
    });

    it('refuses a message to a task that has ended with -32004 in both generations, and says how to start another', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('over and done'), configuration: { blocking: true } });
      const taskId = sent.body.result?.id as string;
      const legacy = await rpc(agent.url, 'message/send', textMessage('more', { taskId }));
      expect(legacy.body.error?.code).toBe(-32004);
      expect(legacy.body.error?.message).toContain(`task '${taskId}' is completed`);
      const modern = await rpc(agent.url, 'SendMessage', { message: { messageId: 'm-more', role: 'ROLE_USER', taskId, parts: [{ text: 'more' }] } });
      expect(modern.body.error?.code).toBe(-32004);
      expect(modern.body.error?.message).toContain('send without taskId to start a new one');
    });

    it('refuses SubscribeToTask to a task that has ended with -32004, and still replays it to a client resuming with Last-Event-ID', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('ended before subscribing'), configuration: { blocking: true } });
      const taskId = sent.body.result?.id as string;
      const refused = await rpc(agent.url, 'SubscribeToTask', { id: taskId });
      expect(refused.body.error?.code).toBe(-32004);
      expect(refused.body.error?.message).toContain('GetTask reads it');
      const resumed = (
        await readSse(await openStream(agent.url, 'SubscribeToTask', { id: taskId }, { version: '1.0', headers: { 'last-event-id': '0' } }))
      ).filter((frame) => frame.comment === undefined);
      expect(resumed[0]?.event).toBe('task');
      expect(resumed.some((frame) => frame.data.includes('TASK_STATE_COMPLETED'))).toBe(true);
    });

    it('answers for the extended card it does not have in each generation’s words: -32004 in 1.0, -32007 in 0.3', async () => {
      const modern = await rpc(agent.url, 'GetExtendedAgentCard', {});
      expect(modern.body.error?.code).toBe(-32004);
      const legacy = await rpc(agent.url, 'agent/getAuthenticatedExtendedCard', {});
      expect(legacy.body.error?.code).toBe(-32007);
      for (const reply of [modern, legacy]) expect(reply.body.error?.message).toContain('.well-known/agent-card.json is the whole card');
    });

    it('answers an unsupported A2A-Version with -32009', async () => {
      const reply = await rpc(agent.url, 'GetTask', { id: 'x' }, { version: '2.0' });
      expect(reply.body.error?.code).toBe(-32009);
      expect(reply.body.error?.message).toContain("'2.0'");
    });

    it('refuses a body over the size limit with 413 before reading it whole', async () => {
      const huge = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: textMessage('x'.repeat(70_000)) });
      const reply = await post(huge);
      expect(reply.status).toBe(413);
      expect(reply.body.error?.code).toBe(-32600);
      expect(reply.body.error?.message).toContain('65536');
      // A streamed body without a length is cut off at the limit too.
      const streamed = await fetch(agent.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: new ReadableStream({
          start(controller) {
            for (let index = 0; index < 40; index++) controller.enqueue(new TextEncoder().encode('x'.repeat(4096)));
            controller.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
      expect(streamed.status).toBe(413);
    });

    it('refuses a body declared too large before it is sent, when the client waits to be told to send it (Expect: 100-continue)', async () => {
      // Over the limit (65536) and well under what the door would read and drop (16×): the early refusal's own case.
      const head = await headAnswer(agent.url, { 'content-length': '100000', expect: '100-continue' });
      expect(head).toMatch(/^HTTP\/1\.1 413 /);
      expect(head).not.toContain('100 Continue');
      expect(head).toContain('larger than 65536 bytes (MURMUR_DOOR_MAX_BODY_BYTES)');
    });

    it('cuts off a client that goes on sending a body of no declared length past what the door reads and drops', async () => {
      const target = new URL(agent.url);
      const socket = net.connect(Number(target.port), target.hostname);
      await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
      socket.on('error', () => {});
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      let gone = false;
      void closed.then(() => (gone = true));
      socket.write(`POST ${target.pathname} HTTP/1.1\r\nhost: ${target.host}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`);
      // 16 × the 64 KiB limit is read and dropped; sent here are 8 MiB, in 64 KiB chunks.
      const chunk = `10000\r\n${'x'.repeat(0x10000)}\r\n`;
      let sent = 0;
      for (; sent < 8 * 1024 * 1024 && !gone; sent += 0x10000) {
        if (!socket.write(chunk)) await Promise.race([new Promise((resolve) => socket.once('drain', resolve)), closed]);
      }
      await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      socket.destroy();
      expect(gone, `the door read ${sent} bytes of a body it refuses, and kept the connection`).toBe(true);
      // Cut off for what it sent, not let run until its time to send a request was up.
      expect(received).not.toMatch(/^HTTP\/1\.1 408 /);
    });

    it('answers a body declared past what the door would read at all with 413 at once, before any of it is sent', async () => {
      const head = await headAnswer(agent.url, { 'content-length': String(2 ** 31) });
      expect(head).toMatch(/^HTTP\/1\.1 413 /);
      expect(head).toContain('larger than 65536 bytes (MURMUR_DOOR_MAX_BODY_BYTES)');
      // With the door's own code for what it refused, as its other refusals carry one.
      expect(head).toContain('"E-DOOR-002"');
    });

    it('refuses a body that is not JSON by content-type with 415, comparing the media type rather than searching it', async () => {
      // The second is what a web page may send to any origin without a CORS preflight.
      for (const contentType of ['text/plain', 'text/plain;charset=application/json', 'text/html; x=application/json']) {
        const reply = await post('{}', { 'content-type': contentType });
        expect(reply.status, contentType).toBe(415);
        expect(reply.body.error).toMatchObject({ code: -32600, data: [{ metadata: { murmur_code: 'E-DOOR-002' } }] });
      }
      const suffixed = await post(JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tasks/get', params: { id: 'tsk_none' } }), {
        'content-type': 'Application/JSON; charset=utf-8',
      });
      expect(suffixed.body.error?.code).toBe(-32001);
    });

    it('refuses a body with a content-encoding by its coding with 415, and a transfer coding other than chunked with 501, where gzip was read as text that is not UTF-8 and a mislabelled body as plain', async () => {
      const call = JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'tasks/get', params: { id: 'tsk_none' } });
      for (const [coding, body] of [
        ['gzip', gzipSync(call)],
        ['br', Buffer.from(call)],
      ] as const) {
        const response = await fetch(agent.url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': coding }, body });
        expect(response.status, coding).toBe(415);
        expect(response.headers.get('accept-encoding')).toBe('identity');
        const reply = (await response.json()) as { error: { code: number; message: string } };
        expect(reply.error).toMatchObject({ code: -32600, data: [{ metadata: { murmur_code: 'E-DOOR-002' } }] });
        expect(reply.error.message).toContain(`content-encoding '${coding}' is not read here`);
      }
      // Identity is no coding at all.
      expect((await post(call, { 'content-type': 'application/json', 'content-encoding': 'identity' })).body.error?.code).toBe(-32001);
      // A transfer coding other than chunked is one the door does not implement (RFC 9112: 501).
      const target = new URL(agent.url);
      // The body is the plain call, labelled as what it is not: it would be read as the call.
      const { received } = await rawExchange(
        Number(target.port),
        `POST ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n${call.length.toString(16)}\r\n${call}\r\n0\r\n\r\n`,
        3_000,
      );
      expect(received).toMatch(/^HTTP\/1\.1 501 /);
      expect(received).toContain("transfer-encoding 'gzip' is not read here");
      expect(received).toContain('"murmur_code":"E-DOOR-002"');
    });

    it('answers only for localhost while it listens on loopback: a request naming another host (DNS rebinding) is 421 before anything is read', async () => {
      const target = new URL(agent.url);
      const ask = (method: 'GET' | 'POST', requestPath: string, host: string) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const request = http.request(
            { host: '127.0.0.1', port: target.port, method, path: requestPath, headers: { host, 'content-type': 'application/json' } },
            (response) => {
              let body = '';
              response.setEncoding('utf8').on('data', (chunk: string) => {
                body += chunk;
              });
              response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
            },
          );
          request.on('error', reject);
          request.end(method === 'POST' ? JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: {} }) : undefined);
        });
      const cardPath = `${target.pathname}.well-known/agent-card.json`;
      for (const [method, requestPath] of [
        ['GET', '/.well-known/agent-card.json'],
        ['GET', cardPath],
        ['POST', target.pathname],
      ] as const) {
        const refused = await ask(method, requestPath, `attacker.example:${target.port}`);
        expect(refused.status, `${method} ${requestPath}`).toBe(421);
        expect(refused.body).toContain('E-DOOR-002');
        expect(refused.body).toContain("'attacker.example:");
        expect(refused.body).not.toContain(agent.sessionId);
      }
      for (const host of [`localhost:${target.port}`, `127.0.0.1:${target.port}`, 'LOCALHOST', `agent.localhost:${target.port}`]) {
        expect((await ask('GET', cardPath, host)).status, host).toBe(200);
      }
      // A target in absolute form names the authority the request is for, whatever Host says (RFC 9112).
      const absolute = async (authority: string, host: string): Promise<string> =>
        (await rawExchange(Number(target.port), `GET http://${authority}${cardPath} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, 2_000)).received;
      expect(await absolute('attacker.example', `localhost:${target.port}`)).toMatch(/^HTTP\/1\.1 421 /);
      expect(await absolute(`localhost:${target.port}`, 'attacker.example')).toMatch(/^HTTP\/1\.1 200 /);
    });

    it('keeps serving after all of that', async () => {
      const sent = await rpc(agent.url, 'message/send', { ...textMessage('still here'), configuration: { blocking: true } });
      expect((sent.body.result!.status as { state: string }).state).toBe('completed');
    });
  });

  describe('canceling a working task', () => {
    it('stops the agent loop at once, abandoning the model call in flight, ends the task canceled, and the session goes on with its next task', async () => {
      const sent = await rpc(agent.url, 'SendMessage', {
        message: { messageId: `m-slow-${Date.now()}`, role: 'ROLE_USER', parts: [{ text: 'slow one' }] },
        configuration: { returnImmediately: true },
      });
      const taskId = (sent.body.result?.task as { id: string } | undefined)?.id as string;
      expect(taskId).toBeDefined();
      await eventually(
        async () => {
          const reply = await rpc(agent.url, 'GetTask', { id: taskId });
          const status = reply.body.result?.status as { state: string; message?: { parts: Array<{ text: string }> } } | undefined;
          // Working, and its first turn begun: the driver's call to the slow model is in flight.
          return status?.state === 'TASK_STATE_WORKING' && status.message?.parts[0]?.text === 'inference turn 1' ? true : undefined;
        },
        10_000,
        'the slow task to be in its first turn',
      );
      const canceled = await rpc(agent.url, 'CancelTask', { id: taskId });
      expect((canceled.body.result?.status as { state: string } | undefined)?.state, JSON.stringify(canceled.body)).toBe('TASK_STATE_CANCELED');
      const again = await rpc(agent.url, 'CancelTask', { id: taskId });
      expect(again.body.error?.code).toBe(-32002);
      // The model has not answered the canceled call (it waits 30 s): this answer comes only because that call was abandoned.
      const next = await rpc(agent.url, 'message/send', textMessage('after the cancel'));
      const answered = await completed(next.body.result?.id as string);
      expect(answered.status).toMatchObject({ state: 'completed', message: { parts: [{ text: 'echo: after the cancel' }] } });
      expect((await rpc(agent.url, 'GetTask', { id: taskId })).body.result?.status).toMatchObject({ state: 'TASK_STATE_CANCELED' });
    });
    it('says a session that ends with its one task, canceled by a client, was canceled, not that its loop failed', async () => {
      const single = await startPlainAgent('single-canceled', 'single', '  task_acceptance: single\n  after_task: exit');
      try {
        const sent = await rpc(single.url, 'SendMessage', {
          message: { messageId: `m-slow-${Date.now()}`, role: 'ROLE_USER', parts: [{ text: 'slow single' }] },
          configuration: { returnImmediately: true },
        });
        const taskId = (sent.body.result?.task as { id: string } | undefined)?.id as string;
        await eventually(
          async () =>
            ((await rpc(single.url, 'GetTask', { id: taskId })).body.result?.status as { state: string } | undefined)?.state === 'TASK_STATE_WORKING' ||
            undefined,
          10_000,
          'the slow task to be working',
        );
        expect(((await rpc(single.url, 'CancelTask', { id: taskId })).body.result?.status as { state: string } | undefined)?.state).toBe('TASK_STATE_CANCELED');
        const canceledAt = Date.now();
        const exited = await single.exited;
        // The model answers the canceled call only after 30 s: a session that waited for it did not
        // abandon it (the cancel came while the driver was still being readied for its first call).
        expect(Date.now() - canceledAt, 'the session waited for the model’s reply to the canceled call').toBeLessThan(20_000);
        expect(exited.code).toBe(1);
        expect(exited.stderr).toContain(`error[E-RUN-007]: its task ${taskId} was canceled by a client (tasks/cancel) before it was done`);
        expect(exited.stderr).toContain('hint: nothing in the capsule failed');
        expect(exited.stderr).not.toContain('agent loop failed');
      } finally {
        await single.stop();
      }
    });

    it('kills the shell command the canceled task was running, with what it forked', async () => {
      const shelled = await startAgent(
        await agentProject(
          path.join(scratch.dir, 'shelled'),
          agentManifest(inference, {
            name: 'shelled',
            capabilities: '  shell:\n    allow: [sh, sleep]',
            lifecycle: '  task_acceptance: queue\n  after_task: sleep',
          }),
        ),
        env,
      );
      // A duration no other process on the machine has, so the host's process table tells whether it still runs.
      const marker = `${40 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 1e6)}`;
      const sleeping = async (): Promise<boolean> => {
        for (const entry of await fs.readdir('/proc')) {
          if (!/^\d+$/.test(entry)) continue;
          const command = await fs.readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
          if (command.split('\0').join(' ').trim() === `sleep ${marker}`) return true;
        }
        return false;
      };
      try {
        const sent = await rpc(shelled.url, 'SendMessage', {
          // `sh -c` forks for a list: the sleep is the shell's child, not the shell itself.
          message: { messageId: `m-shell-${Date.now()}`, role: 'ROLE_USER', parts: [{ text: `run sleep ${marker}; echo woke` }] },
          configuration: { returnImmediately: true },
        });
        const taskId = (sent.body.result?.task as { id: string } | undefined)?.id as string;
        await eventually(async () => ((await sleeping()) ? true : undefined), 15_000, 'the shell command to be running');
        const canceled = await rpc(shelled.url, 'CancelTask', { id: taskId });
        expect((canceled.body.result?.status as { state: string } | undefined)?.state, JSON.stringify(canceled.body)).toBe('TASK_STATE_CANCELED');
        await eventually(async () => ((await sleeping()) ? undefined : true), 5_000, 'the canceled task’s command to be gone');
        const next = await rpc(shelled.url, 'message/send', textMessage('after the shell cancel'));
        expect((await completed(next.body.result?.id as string, undefined, shelled.url)).status).toMatchObject({
          state: 'completed',
          message: { parts: [{ text: 'echo: after the shell cancel' }] },
        });
      } finally {
        await shelled.stop();
      }
    });
  });

  describe('the card where clients look for it', () => {
    it("serves the session's card at the origin root of mur run's own door too (RFC 8615), naming the session's own URL", async () => {
      const atRoot = await fetch(new URL('/.well-known/agent-card.json', agent.url));
      expect(atRoot.status).toBe(200);
      const card = (await atRoot.json()) as { session_id: string; url: string };
      expect(card.session_id).toBe(agent.sessionId);
      expect(card.url).toBe(agent.url);
    });

    it('describes a capsule without tools as one skill of its own, since a card must have at least one', async () => {
      const plain = await startPlainAgent('toolless', 'toolless', '  task_acceptance: queue\n  after_task: sleep');
      try {
        const card = (await (await fetch(new URL('.well-known/agent-card.json', plain.url))).json()) as { skills: unknown[] };
        expect(card.skills).toEqual([{ id: 'toolless', name: 'toolless', description: 'an agent capsule under test', tags: ['capsule'] }]);
      } finally {
        await plain.stop();
      }
    });

    it('names a door bound to another loopback address by that address, since localhost does not reach it', async () => {
      const elsewhere = await startPlainAgent('elsewhere', 'elsewhere', '  task_acceptance: queue\n  after_task: sleep', ['--bind', '127.0.0.2']);
      try {
        expect(new URL(elsewhere.url).hostname).toBe('127.0.0.2');
        const response = await fetch(new URL('.well-known/agent-card.json', elsewhere.url));
        expect(response.status).toBe(200);
        const card = (await response.json()) as { url: string; session_id: string };
        expect(card).toMatchObject({ url: elsewhere.url, session_id: elsewhere.sessionId });
      } finally {
        await elsewhere.stop();
      }
    });
  });

  describe('ListTasks, version negotiation and push notifications', () => {
    let contextId: string;
    const sentIds: string[] = [];
    const v10Message = (text: string) => ({ message: { messageId: `m-${text}-${Date.now()}`, role: 'ROLE_USER', parts: [{ text }], contextId } });
    type Listed = { tasks: Array<Record<string, unknown>>; nextPageToken: string; pageSize: number; totalSize: number };

    beforeAll(async () => {
      contextId = `ctx-list-${Date.now()}`;
      // Sent bare (no A2A-Version): a 1.0 method name is served in 1.0.
      for (const text of ['first', 'second', 'third']) {
        const sent = await rpc(agent.url, 'SendMessage', v10Message(text));
        const task = sent.body.result?.task as { id: string; status: { state: string } } | undefined;
        expect(task?.status.state, JSON.stringify(sent.body)).toBe('TASK_STATE_COMPLETED');
        sentIds.push(task?.id as string);
      }
    });

    it('lists a context’s tasks newest first, a page at a time behind a cursor, artifacts only when asked and history as long as asked', async () => {
      const first = (await rpc(agent.url, 'ListTasks', { contextId, pageSize: 2 })).body.result as unknown as Listed;
      expect(first.tasks.map((task) => task.id)).toEqual([sentIds[2], sentIds[1]]);
      expect(first).toMatchObject({ pageSize: 2, totalSize: 3 });
      expect(first.nextPageToken).not.toBe('');
      expect(first.tasks.every((task) => !('artifacts' in task))).toBe(true);
      const second = (await rpc(agent.url, 'ListTasks', { contextId, pageSize: 2, pageToken: first.nextPageToken })).body.result as unknown as Listed;
      expect(second.tasks.map((task) => task.id)).toEqual([sentIds[0]]);
      expect(second.nextPageToken).toBe('');
      const full = (await rpc(agent.url, 'ListTasks', { contextId, includeArtifacts: true, historyLength: 1 })).body.result as unknown as Listed;
      expect(full.tasks).toHaveLength(3);
      expect(((full.tasks[0]?.artifacts ?? []) as Array<{ name: string }>).map((artifact) => artifact.name)).toContain('response');
      expect(full.tasks[0]?.history).toHaveLength(1);
      // 0.3's tasks/list, filtered by its own state names and by time.
      const since = new Date(Date.now() + 60_000).toISOString();
      const none = (await rpc(agent.url, 'tasks/list', { contextId, lastUpdatedAfter: since })).body.result as unknown as Listed;
      expect(none).toMatchObject({ tasks: [], totalSize: 0, nextPageToken: '' });
      const done = (await rpc(agent.url, 'tasks/list', { contextId, status: 'completed' })).body.result as unknown as Listed;
      expect(done.tasks.map((task) => task.kind)).toEqual(['task', 'task', 'task']);
      const working = (await rpc(agent.url, 'ListTasks', { contextId, status: 'TASK_STATE_WORKING' })).body.result as unknown as Listed;
      expect(working.totalSize).toBe(0);
    });

    it('cuts a page short where its tasks would outgrow one message on the bus, and goes on from there', async () => {
      const bigContext = `ctx-big-${Date.now()}`;
      const big = new Set<string>();
      for (let index = 0; index < 5; index += 1) {
        const text = `${index}`.padEnd(60_000, 'x');
        const sent = await rpc(agent.url, 'SendMessage', {
          message: { messageId: `m-big-${index}-${Date.now()}`, role: 'ROLE_USER', parts: [{ text }], contextId: bigContext },
        });
        expect((sent.body.result?.task as { status: { state: string } } | undefined)?.status.state, JSON.stringify(sent.body).slice(0, 300)).toBe(
          'TASK_STATE_COMPLETED',
        );
        big.add((sent.body.result as { task: { id: string } }).task.id);
      }
      const seen: string[] = [];
      let pageToken = '';
      let pages = 0;
      do {
        const reply = await rpc(agent.url, 'ListTasks', { contextId: bigContext, pageSize: 100, ...(pageToken ? { pageToken } : {}) });
        expect(reply.body.error, JSON.stringify(reply.body.error)).toBeUndefined();
        const page = reply.body.result as unknown as Listed;
        expect(page.totalSize).toBe(5);
        seen.push(...page.tasks.map((task) => task.id as string));
        pageToken = page.nextPageToken;
        pages += 1;
      } while (pageToken !== '' && pages < 10);
      expect(pages).toBeGreaterThan(1);
      expect(new Set(seen)).toEqual(big);
      expect(seen).toHaveLength(5);
    });

    it('reads a 1.0 field given as null, or a plain string given empty, as not given, as ProtoJSON writers that emit defaults send them', async () => {
      const listed = await rpc(agent.url, 'ListTasks', {
        tenant: '',
        contextId: '',
        status: 'TASK_STATE_UNSPECIFIED',
        pageToken: '',
        pageSize: null,
        historyLength: null,
      });
      expect(listed.body.error).toBeUndefined();
      expect((listed.body.result as unknown as Listed).totalSize).toBeGreaterThanOrEqual(3);
      const got = await rpc(agent.url, 'GetTask', { id: sentIds[0], historyLength: null, tenant: '' });
      expect(got.body.result).toMatchObject({ id: sentIds[0] });
      const sent = await rpc(agent.url, 'SendMessage', {
        message: { messageId: 'm-defaults', contextId: '', taskId: '', role: 'ROLE_USER', parts: [{ text: 'defaults' }], metadata: null },
        configuration: null,
      });
      expect(sent.body.result?.task).toMatchObject({ status: { state: 'TASK_STATE_COMPLETED' } });
      // A required string stays required: empty, it is refused, naming it.
      const unnamed = await rpc(agent.url, 'GetTask', { id: '' });
      expect(unnamed.body.error).toMatchObject({ code: -32602, message: expect.stringContaining('id') });
    });

    it('reads 1.0 params by their proto names too, and an int32 given as a string, as ProtoJSON allows', async () => {
      const listed = (await rpc(agent.url, 'ListTasks', { context_id: contextId, page_size: '1' })).body.result as unknown as Listed;
      expect(listed.tasks.map((task) => task.id)).toEqual([sentIds[2]]);
      expect(listed).toMatchObject({ pageSize: 1, totalSize: 3 });
      const withArtifacts = (await rpc(agent.url, 'ListTasks', { context_id: contextId, include_artifacts: true })).body.result as unknown as Listed;
      expect(withArtifacts.tasks.every((task) => 'artifacts' in task)).toBe(true);
      const got = await rpc(agent.url, 'GetTask', { id: sentIds[0], history_length: 0 });
      expect(got.body.result).not.toHaveProperty('history');
    });

    it('refuses ListTasks values that are not valid with -32602 naming the field, and a page token of another session', async () => {
      const foreign = Buffer.from(JSON.stringify({ s: 'ses_00000000000000000000000000000000', u: 1, i: 'tsk_x' })).toString('base64url');
      const given = ((await rpc(agent.url, 'ListTasks', { contextId, pageSize: 1 })).body.result as unknown as Listed).nextPageToken;
      const [, signature] = given.split('.');
      expect(signature, 'a first page of three gives a token').toBeTruthy();
      const retargeted = `${Buffer.from(JSON.stringify({ s: agent.sessionId, u: Number.MAX_SAFE_INTEGER, i: '' })).toString('base64url')}.${signature}`;
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ pageSize: 0 }, 'pageSize'],
        [{ pageSize: -1 }, 'pageSize'],
        [{ pageSize: 101 }, 'pageSize'],
        [{ pageToken: 'not-a-token' }, 'pageToken'],
        [{ pageToken: foreign }, 'pageToken'],
        [{ status: 'TASK_STATE_EXPLODED' }, 'status'],
        [{ status: 'completed' }, 'status'],
        [{ statusTimestampAfter: 'yesterday' }, 'statusTimestampAfter'],
        [{ historyLength: -1 }, 'historyLength'],
        [{ historyLength: 2 ** 31 }, 'historyLength'],
        [{ status: 9 }, 'status'],
        // A token written by hand whose position no number holds.
        [{ pageToken: Buffer.from(`{"s":"${agent.sessionId}","u":1e400,"i":"x"}`).toString('base64url') }, 'pageToken'],
        // One written by hand for this session, with a cursor of its own choosing: not one the door signed.
        [{ pageToken: Buffer.from(JSON.stringify({ s: agent.sessionId, u: Number.MAX_SAFE_INTEGER, i: '' })).toString('base64url') }, 'pageToken'],
        // A real token of this session, its cursor rewritten and its signature kept.
        [{ pageToken: retargeted }, 'pageToken'],
      ];
      for (const [params, field] of cases) {
        const reply = await rpc(agent.url, 'ListTasks', params);
        expect(reply.body.error?.code, JSON.stringify(params)).toBe(-32602);
        expect(reply.body.error?.message, JSON.stringify(params)).toContain(`Invalid params: ${field}`);
      }
      expect((await rpc(agent.url, 'GetTask', { id: sentIds[0], historyLength: 2 ** 40 })).body.error?.code).toBe(-32602);
      // Past what JavaScript holds as an integer, the bound said is the field's own.
      expect((await rpc(agent.url, 'ListTasks', { historyLength: 1e300 })).body.error?.message).toContain('<=2147483647');
      expect((await rpc(agent.url, 'ListTasks', { pageSize: 1e300 })).body.error?.message).toContain('<=100');
      // A 0.3 filter is a state's name, never a number.
      expect((await rpc(agent.url, 'tasks/list', { status: 3 })).body.error?.code).toBe(-32602);
      // A time before 1970 is a time: everything since.
      const since1969 = await rpc(agent.url, 'ListTasks', { statusTimestampAfter: '1969-12-31T23:59:59Z' });
      expect(since1969.body.error).toBeUndefined();
      expect((since1969.body.result as { tasks: unknown[] }).tasks.length).toBeGreaterThan(0);
      // A filter no task can match still asks for the session, as every listing does.
      const nowhere = agent.url.replace(agent.sessionId, `ses_${'0'.repeat(32)}`);
      expect((await rpc(nowhere, 'ListTasks', { status: 'TASK_STATE_AUTH_REQUIRED' })).status).toBe(404);
    });

    it('answers a historyLength beyond what it keeps with what it keeps (a lower limit, as the spec allows), and none as no history field', async () => {
      for (const historyLength of [101, 5000, 2 ** 31 - 1]) {
        const reply = await rpc(agent.url, 'GetTask', { id: sentIds[0], historyLength });
        expect(reply.body.error, String(historyLength)).toBeUndefined();
        expect((reply.body.result?.history as unknown[] | undefined)?.length).toBeGreaterThanOrEqual(1);
      }
      const none = await rpc(agent.url, 'GetTask', { id: sentIds[0], historyLength: 0 });
      expect(none.body.result?.id).toBe(sentIds[0]);
      expect(none.body.result).not.toHaveProperty('history');
      // A send's configuration is honoured on the answer too, blocking or not.
      // In a context of their own: the listing tests count this describe's context.
      for (const configuration of [{ historyLength: 0 }, { historyLength: 0, returnImmediately: true }]) {
        const message = { ...v10Message('no history').message, contextId: `ctx-history-${Date.now()}` };
        const sent = await rpc(agent.url, 'SendMessage', { message, configuration });
        expect(sent.body.result?.task, JSON.stringify(configuration)).not.toHaveProperty('history');
      }
      // And on the task a stream opens with.
      const message = { ...v10Message('streamed, no history').message, contextId: `ctx-history-${Date.now()}` };
      const frames = await readSse(await openStream(agent.url, 'SendStreamingMessage', { message, configuration: { historyLength: 0 } }));
      const opening = JSON.parse(frames[0]?.data ?? '{}') as { result?: { task?: Record<string, unknown> } };
      expect(opening.result?.task?.id).toBeDefined();
      expect(opening.result?.task).not.toHaveProperty('history');
    });

    it('filters by a state given as the proto enum number, and by auth-required, a state its tasks never enter, to an empty page', async () => {
      const byName = (await rpc(agent.url, 'ListTasks', { contextId, status: 'TASK_STATE_COMPLETED' })).body.result as unknown as Listed;
      const byNumber = (await rpc(agent.url, 'ListTasks', { contextId, status: 3 })).body.result as unknown as Listed;
      expect(byNumber.tasks.map((task) => task.id)).toEqual(byName.tasks.map((task) => task.id));
      expect(byNumber.tasks.map((task) => task.id)).toEqual(expect.arrayContaining(sentIds));
      const all = (await rpc(agent.url, 'ListTasks', { contextId })).body.result as unknown as Listed;
      const unspecified = (await rpc(agent.url, 'ListTasks', { contextId, status: 0 })).body.result as unknown as Listed;
      expect(unspecified.totalSize).toBe(all.totalSize);
      for (const [method, status] of [
        ['ListTasks', 'TASK_STATE_AUTH_REQUIRED'],
        ['ListTasks', 8],
        ['tasks/list', 'auth-required'],
        // 0.3's `unknown` is a state of its enum too, and no task of this runtime is ever in it.
        ['tasks/list', 'unknown'],
      ] as const) {
        const listed = await rpc(agent.url, method, { contextId, status });
        expect(listed.body.result, `${method} ${status}`).toEqual({ tasks: [], nextPageToken: '', pageSize: 50, totalSize: 0 });
      }
    });

    it('takes A2A-Version as a header or a query parameter, serves a bare method in its own generation, and refuses a version it does not speak with -32009', async () => {
      const bare = await rpc(agent.url, 'GetTask', { id: sentIds[0] });
      expect((bare.body.result?.status as { state: string } | undefined)?.state).toBe('TASK_STATE_COMPLETED');
      const queried = await rpc(`${agent.url}?A2A-Version=1.0`, 'GetTask', { id: sentIds[0] });
      expect((queried.body.result?.status as { state: string } | undefined)?.state).toBe('TASK_STATE_COMPLETED');
      const legacy = await rpc(`${agent.url}?A2A-Version=0.3`, 'tasks/get', { id: sentIds[0] });
      expect((legacy.body.result?.status as { state: string } | undefined)?.state).toBe('completed');
      // Major.Minor is what is negotiated: a patch number is not.
      for (const [version, method, state] of [
        ['1.0.1', 'GetTask', 'TASK_STATE_COMPLETED'],
        ['0.3.5', 'tasks/get', 'completed'],
      ] as const) {
        const patched = await rpc(agent.url, method, { id: sentIds[0] }, { version });
        expect((patched.body.result?.status as { state: string } | undefined)?.state, version).toBe(state);
      }
      // The parameter's name is case-insensitive (a 0.3 method asked for in 1.0 is not one of its
      // methods), and a header sent empty does not hide it.
      const mixed = await rpc(`${agent.url}?A2a-Version=1.0`, 'tasks/get', { id: sentIds[0] });
      expect(mixed.body.error?.code).toBe(-32601);
      for (const reply of [
        await rpc(`${agent.url}?A2A-Version=2.0`, 'GetTask', { id: sentIds[0] }),
        await rpc(`${agent.url}?a2a-VERSION=2.0`, 'GetTask', { id: sentIds[0] }),
        await rpc(`${agent.url}?A2A-Version=2.0`, 'GetTask', { id: sentIds[0] }, { headers: { 'a2a-version': '' } }),
        await rpc(agent.url, 'GetTask', { id: sentIds[0] }, { version: '0.5' }),
        await rpc(agent.url, 'GetTask', { id: sentIds[0] }, { version: '1.x' }),
      ]) {
        expect(reply.body.error?.code).toBe(-32009);
        expect(reply.body.error?.message).toMatch(/^Unsupported A2A version '(2\.0|0\.5|1\.x)'/);
      }
    });

    it('answers every push-notification configuration method with -32003, as its card says it offers none', async () => {
      const card = (await (await fetch(new URL('.well-known/agent-card.json', agent.url))).json()) as { capabilities: { pushNotifications: boolean } };
      expect(card.capabilities.pushNotifications).toBe(false);
      const methods: Array<[string, string | undefined]> = [
        ['CreateTaskPushNotificationConfig', '1.0'],
        ['GetTaskPushNotificationConfig', '1.0'],
        ['ListTaskPushNotificationConfigs', '1.0'],
        ['DeleteTaskPushNotificationConfig', '1.0'],
        ['tasks/pushNotificationConfig/set', undefined],
        ['tasks/pushNotificationConfig/get', undefined],
        ['tasks/pushNotificationConfig/list', undefined],
        ['tasks/pushNotificationConfig/delete', undefined],
      ];
      for (const [method, version] of methods) {
        const reply = await rpc(agent.url, method, { id: sentIds[0] }, version ? { version } : {});
        expect(reply.body.error?.code, method).toBe(-32003);
        expect(reply.body.error?.message, method).toContain('Push Notification is not supported');
      }
    });

    it('refuses a message that asks to be told of its end by a push with -32003, and starts no task for it', async () => {
      const tasksKept = async (): Promise<number> => ((await rpc(agent.url, 'tasks/list', { pageSize: 1 })).body.result as { totalSize: number }).totalSize;
      const before = await tasksKept();
      const push = { url: 'http://127.0.0.1:9/hook', token: 't' };
      const sends: Array<[string, Record<string, unknown>, string | undefined]> = [
        ['message/send', { ...textMessage('push me'), configuration: { pushNotificationConfig: push } }, undefined],
        ['message/stream', { ...textMessage('push me'), configuration: { pushNotificationConfig: push } }, undefined],
        [
          'SendMessage',
          { message: { messageId: 'm-push', role: 'ROLE_USER', parts: [{ text: 'push me' }] }, configuration: { taskPushNotificationConfig: push } },
          '1.0',
        ],
        [
          'SendStreamingMessage',
          { message: { messageId: 'm-push-s', role: 'ROLE_USER', parts: [{ text: 'push me' }] }, configuration: { task_push_notification_config: push } },
          '1.0',
        ],
      ];
      for (const [method, params, version] of sends) {
        const reply = await rpc(agent.url, method, params, version ? { version } : {});
        expect(reply.body.error?.code, method).toBe(-32003);
        expect(reply.body.error?.message, method).toContain('Push Notification is not supported');
      }
      expect(await tasksKept()).toBe(before);
    });
  });

  // Last: it fills the session's feed past its window, which the tests before it do not expect.
  describe('a streamed answer after a tool turn', () => {
    it('says its last chunk is the last once, at the turn that answers, not at the tool turn before it', async () => {
      const frames = await readSse(await openStream(agent.url, 'message/stream', textMessage('narrate streamed')), (frame) =>
        frame.data.includes('"final":true'),
      );
      type Update = { result: { kind?: string; lastChunk?: boolean; artifact?: { artifactId: string; parts: Array<{ text?: string }> } } };
      const chunks = frames
        .filter((frame) => frame.event === 'text')
        .map((frame) => (JSON.parse(frame.data) as Update).result)
        .filter((update) => update.artifact?.artifactId.endsWith('response-stream'));
      // The tool turn's words, then the answer's (the tool's result is the probe's refusal of sh, which is not declared here).
      expect(chunks.map((chunk) => chunk.artifact?.parts[0]?.text ?? '').join('')).toMatch(/^first, a tool\. tool said: /);
      expect(chunks.filter((chunk) => chunk.lastChunk === true)).toHaveLength(1);
      expect(chunks.at(-1)?.lastChunk).toBe(true);
    });
  });

  describe('a door that holds as many streams as it takes', () => {
    /** A sleeping agent whose door holds at most `maxStreams` streams. */
    async function boundedAgent(name: string, maxStreams: number): Promise<RunningAgent> {
      const manifest = agentManifest(inference, { name, lifecycle: '  task_acceptance: queue\n  after_task: sleep' });
      return startAgent(await agentProject(path.join(scratch.dir, name), manifest), { ...env, MURMUR_DOOR_MAX_STREAMS: String(maxStreams) });
    }

    /** How many times the model has been asked to answer `slow one`, by any agent of this suite. */
    function slowAsks(): number {
      return inference.requests().filter((request) => JSON.stringify(request.body).includes('slow one')).length;
    }

    /** Waits until the door takes a stream again, which is kept in `opened`. */
    async function streamTakenAgain(url: string, opened: Response[], timeoutMs: number, what: string): Promise<void> {
      await eventually(
        async () => {
          const again = await openStream(url, 'stream/watch', {});
          if (again.status !== 200) {
            await again.body?.cancel();
            return undefined;
          }
          opened.push(again);
          return true;
        },
        timeoutMs,
        what,
      );
    }

    it('refuses one more with 503 and E-DOOR-004, still answers a blocking send, and takes a stream again once one closes', async () => {
      const bounded = await boundedAgent('bounded', 2);
      const opened: Response[] = [];
      try {
        for (let n = 0; n < 2; n += 1) {
          const response = await openStream(bounded.url, 'stream/watch', {});
          expect(response.headers.get('content-type')).toContain('text/event-stream');
          opened.push(response);
        }
        const refused = await openStream(bounded.url, 'stream/watch', {});
        expect(refused.status).toBe(503);
        expect(await refused.json()).toMatchObject({ error: { code: -32603, data: [{ metadata: { murmur_code: 'E-DOOR-004' } }] } });
        // A blocking send is answered all the same, with the task as it stands when no stream is left to follow it.
        const sent = await rpc(bounded.url, 'message/send', { ...textMessage('hello'), configuration: { blocking: true } });
        expect(sent.status).toBe(200);
        expect(['working', 'submitted', 'completed']).toContain((sent.body.result?.status as { state?: string } | undefined)?.state);
        await opened.shift()?.body?.cancel();
        await streamTakenAgain(bounded.url, opened, 10_000, 'a stream to be taken once one closed');
      } finally {
        for (const response of opened) await response.body?.cancel().catch(() => {});
        await bounded.stop();
      }
    });

    it('lets go of the stream a blocking send follows its task with as soon as that client goes away', async () => {
      const bounded = await boundedAgent('bounded-one', 1);
      const opened: Response[] = [];
      const client = new AbortController();
      try {
        // A task that works for half a minute: the host answers the send after its own wait
        // (SETTLE_WITHIN_MAX_MS), still working, and the door then follows it with its one stream.
        const askedBefore = slowAsks();
        const sending = fetch(bounded.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { ...textMessage('slow one'), configuration: { blocking: true } } }),
          signal: client.signal,
        }).catch((error: unknown) => error);
        // The host's wait began when it took the send, before its guest asked the model: counted
        // from the ask, not from the request, a loaded machine's slow start cannot cut it short.
        await eventually(async () => (slowAsks() > askedBefore ? true : undefined), 30_000, 'the slow task to ask its model');
        await new Promise((resolve) => setTimeout(resolve, SETTLE_WITHIN_MAX_MS + 1_000));
        const held = await openStream(bounded.url, 'stream/watch', {});
        expect(held.status).toBe(503);
        await held.body?.cancel();
        client.abort();
        expect(await sending).toBeInstanceOf(Error);
        // Free again well before the task settles (the model answers 30 s after it was asked, ~10 s
        // ago): room for a loaded machine, and still ~10 s short of the settling that would free it too.
        await streamTakenAgain(bounded.url, opened, 10_000, 'the stream the blocking send held to be let go');
      } finally {
        client.abort();
        for (const response of opened) await response.body?.cancel().catch(() => {});
        await bounded.stop();
      }
    });
  });

  describe('a stream whose client stopped reading', () => {
    it('is cut once a write has waited four heartbeats, and the door holds nothing more for it', async () => {
      // A raw connection that asks to watch the session and then reads nothing.
      const url = new URL(agent.url);
      const socket = net.connect(Number(url.port), url.hostname);
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.pause();
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'stream/watch', params: {} });
      socket.write(
        `POST ${url.pathname} HTTP/1.1\r\nhost: ${url.host}\r\ncontent-type: application/json\r\naccept: text/event-stream\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      try {
        // About twice what the connection's buffers hold (~4 MB here): the door's writes to it begin to wait.
        for (let sent = 0; sent < 7; sent += 1) {
          const reply = await rpc(agent.url, 'message/send', { ...textMessage('big 700000'), configuration: { blocking: true } });
          expect(reply.body.result?.status).toMatchObject({ state: 'completed' });
        }
        // Cut by now (heartbeats of 150 ms): what was sent before the cut is read, then the end.
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        socket.resume();
        socket.on('data', () => {});
        await Promise.race([ended, new Promise((_, reject) => setTimeout(() => reject(new Error('the stalled stream was never cut')), 10_000))]);
      } finally {
        socket.destroy();
      }
    });
  });

  describe('the feed’s window', () => {
    it('says in a comment that events were lost to the feed’s window, so every data frame of the stream stays a JSON-RPC response', async () => {
      // The host keeps its last 512 events; each of these tasks makes one or more (most are
      // rejected at once, the queue being full, which is quickest), sent twenty at a time.
      let taskId = '';
      for (let batch = 0; batch < 40; batch += 1) {
        const sent = await Promise.all(Array.from({ length: 20 }, (_, index) => rpc(agent.url, 'message/send', textMessage(`filler ${batch}-${index}`))));
        taskId = sent.at(-1)?.body.result?.id as string;
      }
      const frames = await readSse(await openStream(agent.url, 'tasks/resubscribe', { id: taskId }, { headers: { 'last-event-id': '1' } }));
      expect(frames[0]?.comment).toMatch(/^ gap: the earliest event still kept is \d+$/);
      const data = frames.filter((frame) => frame.comment === undefined);
      expect(data.length).toBeGreaterThan(1);
      for (const frame of data) expect(JSON.parse(frame.data), frame.data).toMatchObject({ jsonrpc: '2.0', result: expect.any(Object) });
    });

    it('replays a task whose events are larger than one bus message, the latest that fit, saying where they begin', async () => {
      // Sent again while the queue (one deep) is still full of the fillers above.
      const sent = await eventually(
        async () => {
          const reply = await rpc(agent.url, 'message/send', { ...textMessage('big 700000'), configuration: { blocking: true } });
          return (reply.body.result?.status as { state?: string } | undefined)?.state === 'completed' ? reply : undefined;
        },
        30_000,
        'the big answer to be completed',
      );
      const frames = await readSse(await openStream(agent.url, 'tasks/resubscribe', { id: sent.body.result?.id }, { headers: { 'last-event-id': '0' } }));
      const data = frames.filter((frame) => frame.comment === undefined);
      for (const frame of data) expect(JSON.parse(frame.data), frame.data.slice(0, 300)).toMatchObject({ jsonrpc: '2.0', result: expect.any(Object) });
      // Its last event, the final status, among them.
      expect(data.at(-1)?.event).toBe('status');
      expect(frames[0]?.comment).toMatch(/^ gap: the earliest event still kept is \d+$/);
    });
  });
});

/**
 * Writes a POST's head to `url` over a bare socket, no body, and returns what the door answers
 * before the body would be sent (what it wrote within a second).
 */
async function headAnswer(url: string, headers: Record<string, string>): Promise<string> {
  const target = new URL(url);
  const lines = [
    `POST ${target.pathname} HTTP/1.1`,
    `host: ${target.host}`,
    'content-type: application/json',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  return (await rawExchange(Number(target.port), `${lines.join('\r\n')}\r\n\r\n`, 1_000)).received;
}

describe('the Host a door answers for', () => {
  it('is guarded when the door listens on loopback, or listens elsewhere but is published as loopback (the stack), and not when it is neither', () => {
    const stack = loopbackHostGuard('http://0.0.0.0:8080', 'http://localhost:8080', 'door, agents.internal.');
    expect(stack).toBeDefined();
    for (const host of ['localhost:8080', '127.0.0.1:8080', '[::1]:8080', 'door:8080', 'Agents.Internal', undefined])
      expect(stack?.(host), String(host)).toBe(true);
    for (const host of ['attacker.example:8080', 'door.attacker.example', '10.0.0.5:8080']) expect(stack?.(host), host).toBe(false);
    const loopback = loopbackHostGuard('http://127.0.0.1:8080', undefined);
    expect(loopback?.('localhost:8080')).toBe(true);
    expect(loopback?.('door:8080')).toBe(false);
    expect(loopbackHostGuard('http://0.0.0.0:8080', 'https://agents.example.com')).toBeUndefined();
    expect(loopbackHostGuard('http://0.0.0.0:8080', undefined)).toBeUndefined();
  });
});
