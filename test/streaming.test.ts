import { promises as fs } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, openStream, readSse, rpc, startAgent, textMessage } from './support/agents.js';
import { probeProject, probeResults } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type HeldStreamReply, type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * Streaming is live: a model's streamed reply crosses the executor's egress relay, the capsule
 * host and the driver guest as it is written, and each piece reaches an A2A streaming client as a
 * `text` (or `thinking`) event while the model is still writing the rest.
 *
 * The scripted model writes its reply in pieces and writes piece `i` only after the client has
 * seen piece `i - 1` (or after a long wait, which the test then reports as a failure): if any
 * part of the path held the reply until its end, the client would see nothing before the wait ran
 * out. Each write is cut inside the next piece's first multi-byte character, so the pieces have to
 * be put back together across writes on the way.
 */

/** How long the model waits for the client to see a piece before it writes the next one anyway. */
const PATIENCE_MS = 15_000;

const PIECES: HeldStreamReply['pieces'] = [{ thinking: 'je réfléchis…' }, { text: 'première partie, ' }, { text: 'deuxième 😀 partie, ' }, { text: 'fin ✓' }];
const WHOLE_TEXT = PIECES.map((piece) => piece.text ?? '').join('');

/** A promise and its resolver. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

describe.each(['anthropic', 'openai'] as const)('a streamed %s reply', (dialect) => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let agent: RunningAgent;
  /** Resolved when the client has seen piece `i` (all of its text or thinking). */
  const seen = PIECES.map(() => deferred());
  const seenAt: number[] = [];
  /** Pieces the model wrote because the client had not seen the one before in time. */
  const writtenUnseen: number[] = [];
  /** The task the first test streamed, which the second resumes. */
  let streamedTask: string | undefined;

  beforeAll(async () => {
    scratch = await tempDir(`murmur-streaming-${dialect}-`);
    inference = await startScriptedInference({
      dialect,
      script: [
        {
          pieces: PIECES,
          async release(index) {
            const patience = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), PATIENCE_MS).unref());
            if ((await Promise.race([seen[index - 1]?.promise, patience])) === 'late') writtenUnseen.push(index);
          },
        },
      ],
    });
    // The session outlives its task, so the finished task can be read back.
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { driver: dialect, lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    agent = await startAgent(project, { MURMUR_HOME: path.join(scratch.dir, 'home') });
  });

  afterAll(async () => {
    await agent?.stop();
    await inference?.close();
    await scratch?.cleanup();
  });

  it('reaches a streaming client piece by piece while the model is still writing, and the task ends with the whole text', async () => {
    let text = '';
    let thinking = '';
    let taskId: string | undefined;
    /** Each streamed chunk's artifact and whether it said to append, in order. */
    const chunks: Array<[string, boolean]> = [];
    const frames = await readSse(await openStream(agent.url, 'message/stream', textMessage('raconte')), (frame) => {
      if (frame.data === '') return false;
      const result = (
        JSON.parse(frame.data) as {
          result: { id?: string; taskId?: string; append?: boolean; artifact?: { artifactId: string; parts: Array<{ text: string }> } };
        }
      ).result;
      taskId ??= result.taskId ?? result.id;
      if ((frame.event === 'text' || frame.event === 'thinking') && result.artifact) chunks.push([result.artifact.artifactId, result.append === true]);
      if (frame.event === 'text') text += result.artifact?.parts[0]?.text ?? '';
      if (frame.event === 'thinking') thinking += result.artifact?.parts[0]?.text ?? '';
      let streamed = '';
      PIECES.forEach((piece, index) => {
        streamed += piece.text ?? '';
        const arrived = piece.thinking !== undefined ? thinking.includes(piece.thinking) : text.startsWith(streamed);
        if (arrived && seenAt[index] === undefined) {
          seenAt[index] = Date.now();
          seen[index]?.resolve();
        }
      });
      return false;
    });
    expect(writtenUnseen, 'pieces the model had to write before the client saw the one before').toEqual([]);
    const written = inference.piecesWritten().map((write) => write.at);
    expect(written).toHaveLength(PIECES.length);
    for (let index = 0; index + 1 < PIECES.length; index += 1) {
      expect(seenAt[index], `piece ${index} seen before piece ${index + 1} was written`).toBeLessThanOrEqual(written[index + 1] as number);
    }
    expect(text).toBe(WHOLE_TEXT);
    expect(thinking).toBe('je réfléchis…');
    // The first chunk of each streamed artifact opens it; only the ones after it append.
    for (const artifactId of ['response-stream', 'thinking-stream']) {
      const appends = chunks.filter(([id]) => id === artifactId).map(([, append]) => append);
      expect(appends.length, artifactId).toBeGreaterThan(0);
      expect(appends, artifactId).toEqual(appends.map((_, index) => index > 0));
    }
    const last = JSON.parse(frames.filter((frame) => frame.data !== '').at(-1)?.data ?? '{}') as { result: { final?: boolean; status?: { state: string } } };
    expect(last.result).toMatchObject({ final: true, status: { state: 'completed' } });
    const task = await rpc(agent.url, 'tasks/get', { id: taskId });
    const artifacts = (task.body.result?.artifacts ?? []) as Array<{ name: string; parts: Array<{ text: string }> }>;
    expect(artifacts.find((artifact) => artifact.name === 'response')?.parts[0]?.text).toBe(WHOLE_TEXT);
    streamedTask = taskId;
  });

  it('goes on appending to the streams a client resuming after an event (Last-Event-ID) had seen begin, and begins those it had not', async () => {
    expect(streamedTask, 'the task streamed above').toBeDefined();
    /** The streamed chunks of a resumption after `after`: event, id, artifact and whether it appends. */
    const resumed = async (after: number) =>
      (await readSse(await openStream(agent.url, 'tasks/resubscribe', { id: streamedTask }, { headers: { 'last-event-id': String(after) } })))
        .filter((frame) => frame.event === 'text' || frame.event === 'thinking')
        .map((frame) => {
          const result = (JSON.parse(frame.data) as { result: { append?: boolean; artifact: { artifactId: string } } }).result;
          return { event: frame.event, id: Number(frame.id), artifactId: result.artifact.artifactId, append: result.append === true };
        });
    const all = await resumed(0);
    const thinking = all.filter((chunk) => chunk.event === 'thinking');
    const texts = all.filter((chunk) => chunk.event === 'text');
    expect(thinking).toHaveLength(1);
    expect(texts.length).toBeGreaterThan(1);
    expect(thinking[0]?.id).toBeLessThan(texts[0]?.id as number);
    // Resumed after the first piece of the reply: every chunk it is sent appends to it.
    const afterFirstText = await resumed(texts[0]?.id as number);
    expect(afterFirstText.map(({ artifactId, append }) => [artifactId, append])).toEqual(texts.slice(1).map(() => ['response-stream', true]));
    // Resumed after the thinking alone: the reply's stream is begun by its first chunk.
    const afterThinking = await resumed(thinking[0]?.id as number);
    expect(afterThinking.map(({ append }) => append)).toEqual(texts.map((_, index) => index > 0));
  });
});

describe('a relayed response body', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let server: http.Server;
  let origin: string;
  /** 3 MiB, well past the host's window: written in 64 KiB pieces, it is read through the window's refills. */
  const LARGE_BYTES = 3 * 1024 * 1024;

  beforeAll(async () => {
    scratch = await tempDir('murmur-relayed-body-');
    server = http.createServer((request, response) => {
      if (request.url === '/large') {
        response.writeHead(200, { 'content-type': 'text/plain' });
        const piece = Buffer.alloc(64 * 1024, 'x');
        let sent = 0;
        const more = (): void => {
          while (sent < LARGE_BYTES) {
            sent += piece.length;
            if (!response.write(piece)) return void response.once('drain', more);
          }
          response.end();
        };
        more();
      } else if (request.url === '/cut') {
        // Half a body, then the connection is gone.
        response.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' });
        response.write('the first half');
        setTimeout(() => response.destroy(), 100);
      } else {
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end('whole');
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    await scratch?.cleanup();
  });

  it('larger than the host holds at once reaches the guest whole, and one cut off midway fails the guest’s read without stopping its run', async () => {
    const project = await probeProject(path.join(scratch.dir, 'probe'), `capabilities:\n  network:\n    allow: [${origin}]\n`);
    const actions = [
      { op: 'fetch', url: `http://${origin}/large` },
      { op: 'fetch', url: `http://${origin}/cut` },
      { op: 'fetch', url: `http://${origin}/after` },
    ];
    const result = await runMur(['run', '--json', '--task', JSON.stringify(actions)], { cwd: project, env: { MURMUR_HOME: path.join(scratch.dir, 'home') } });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const log = await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8');
    const [large, cut, after] = probeResults(log.replaceAll('[stdout] ', ''));
    expect(large).toMatchObject({ ok: true, value: { status: 200, body: 'x'.repeat(2000) } });
    expect(cut).toMatchObject({ ok: false, error: expect.stringContaining('reading from incoming response body') });
    expect(after).toMatchObject({ ok: true, value: { status: 200, body: 'whole' } });
  });
});
