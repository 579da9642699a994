import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ProbeResult, probeProject, probeRun } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type CountingServer, startCountingServer } from './support/servers.js';

/**
 * Everything that leaves a sandbox leaves through the executor, which judges it against
 * `network.allow` first. A denied request must not merely fail in the guest: the server it was
 * aimed at must never see a connection.
 */
describe('egress through the executor', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let allowed: CountingServer;
  let denied: CountingServer;
  let peer: CountingServer;

  beforeAll(async () => {
    scratch = await tempDir('murmur-egress-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    allowed = await startCountingServer((request, body) => ({ body: `allowed ${request.method} ${request.url} ${body}`, headers: { 'x-reply': 'yes' } }));
    denied = await startCountingServer();
    peer = await startCountingServer((_request, body) => {
      const rpc = JSON.parse(body) as { id: string; params: { message: { contextId?: string } } };
      const task = { id: 'tsk_peer', contextId: rpc.params.message.contextId ?? 'ctx_peer', status: { state: 'submitted' } };
      return { body: JSON.stringify({ jsonrpc: '2.0', id: rpc.id, result: task }), headers: { 'content-type': 'application/json' } };
    });
  });

  afterAll(async () => {
    for (const server of [allowed, denied, peer]) await server.close();
    await scratch.cleanup();
  });

  async function run(name: string, manifest: string, actions: unknown[]): Promise<{ results: ProbeResult[]; trace: Array<Record<string, unknown>> }> {
    const project = await probeProject(path.join(scratch.dir, name), manifest);
    const result = await runMur(['run', '--json', '--task', JSON.stringify(actions)], { cwd: project, env });
    // A session that failed says where its host's log is: what the host said is the best clue to why.
    const hostLog = /see (\S+host\.log)/.exec(result.stderr)?.[1];
    let said = '';
    for (const file of hostLog ? [hostLog, path.join(path.dirname(hostLog), 'bootstrap.log')] : [])
      said += `\n${path.basename(file)}:\n${await fs.readFile(file, 'utf8').catch(() => '(could not be read)')}`;
    expect(result.code, `${result.stderr}${said}`).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    return probeRun(workdir);
  }

  it('makes an allowed request for the guest and hands back the response', async () => {
    const before = allowed.connections();
    const { results, trace } = await run('allowed', `capabilities:\n  network:\n    allow: [127.0.0.1:${allowed.port}]\n`, [
      { op: 'fetch', url: `${allowed.url}/path?q=1`, method: 'POST', body: 'payload' },
    ]);
    expect(results[0]).toMatchObject({ ok: true, value: { status: 200, body: 'allowed POST /path?q=1 payload' } });
    expect(allowed.connections()).toBe(before + 1);
    expect(trace.find((event) => event.event_type === 'egress')).toMatchObject({
      kind: 'http',
      grant: 'capsule',
      target: `http://127.0.0.1:${allowed.port}`,
      decision: 'allowed',
      status: 200,
      // The rule that admitted it, as its span and the bus say it.
      rule: `127.0.0.1:${allowed.port}`,
    });
  });

  it('sends a body larger than one message whole, and refuses one past 64 MiB before it connects', async () => {
    // The server answers with the length and digest of what it received, never the body itself.
    const digests = await startCountingServer((_request, body) => ({
      body: `${Buffer.byteLength(body)} ${createHash('sha256').update(body).digest('hex')}`,
    }));
    try {
      const piece = '0123456789abcdef';
      const large = 200_000; // 3.2 MB: several of the host's 1 MiB upload pieces
      const oversized = (64 * 1024 * 1024) / piece.length + 1;
      const { results, trace } = await run('large-bodies', `capabilities:\n  network:\n    allow: [127.0.0.1:${digests.port}]\n`, [
        { op: 'fetch', url: `${digests.url}/large`, method: 'POST', body: piece, repeat: large },
        { op: 'fetch', url: `${digests.url}/oversized`, method: 'POST', body: piece, repeat: oversized },
      ]);
      const expected = piece.repeat(large);
      expect(results[0]).toMatchObject({ ok: true, value: { status: 200, body: `${expected.length} ${createHash('sha256').update(expected).digest('hex')}` } });
      expect(results[1]).toMatchObject({ ok: false });
      expect(digests.bodies()).toHaveLength(1);
      const decisions = trace.filter((event) => event.event_type === 'egress');
      expect(decisions[1]).toMatchObject({
        decision: 'denied',
        code: 'HTTP-request-body-size',
        reason: `the request body is ${oversized * piece.length} bytes, more than the 67108864 a request may carry`,
      });
    } finally {
      await digests.close();
    }
  });

  it('lets a session hold at most 64 response bodies open, refusing the next request before it connects', async () => {
    // A server that sends a head and the start of a body, then holds the connection.
    const sockets = new Set<Socket>();
    let requests = 0;
    const hoarded = http.createServer((_request, response) => {
      requests += 1;
      response.writeHead(200, { 'content-type': 'text/plain' });
      response.write('the start of a body that never ends');
    });
    hoarded.on('connection', (socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => hoarded.listen(0, '127.0.0.1', resolve));
    const port = (hoarded.address() as AddressInfo).port;
    try {
      const actions = Array.from({ length: 66 }, (_, index) => ({ op: 'fetch', url: `http://127.0.0.1:${port}/${index}`, unread: true }));
      const { results, trace } = await run('hoarding', `capabilities:\n  network:\n    allow: [127.0.0.1:${port}]\n`, actions);
      expect(results.slice(0, 64).every((result) => result.ok)).toBe(true);
      expect(results.slice(64).map((result) => result.ok)).toEqual([false, false]);
      expect(requests).toBe(64);
      const refusals = trace.filter((event) => event.event_type === 'egress' && event.decision === 'denied');
      expect(refusals).toHaveLength(2);
      expect(refusals[0]).toMatchObject({ code: 'internal-error', reason: 'this session already has 64 responses open or awaited: read or drop one first' });
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => hoarded.close(resolve));
    }
  });

  it('refuses a request network.allow does not cover, and never contacts its server', async () => {
    const { results, trace } = await run('denied', `capabilities:\n  network:\n    allow: [127.0.0.1:${allowed.port}]\n`, [
      { op: 'fetch', url: `${denied.url}/secret` },
      { op: 'fetch', url: `http://localhost:${allowed.port}/other-host-name` },
    ]);
    expect(results.map((result) => result.ok)).toEqual([false, false]);
    expect(denied.connections()).toBe(0);
    const refusals = trace.filter((event) => event.event_type === 'egress');
    expect(refusals).toEqual([
      expect.objectContaining({ decision: 'denied', code: 'HTTP-request-denied', target: `http://127.0.0.1:${denied.port}` }),
      expect.objectContaining({ decision: 'denied', code: 'HTTP-request-denied', target: `http://localhost:${allowed.port}` }),
    ]);
  });

  it('allows nothing when network.allow is empty', async () => {
    const before = allowed.connections();
    const { results, trace } = await run('nothing-allowed', '', [{ op: 'fetch', url: `${allowed.url}/` }]);
    expect(results[0]).toMatchObject({ ok: false });
    expect(allowed.connections()).toBe(before);
    expect(trace.find((event) => event.event_type === 'egress')).toMatchObject({ kind: 'http', decision: 'denied', code: 'HTTP-request-denied', at: 'handle' });
  });

  it('refuses from outgoing-handler.handle itself, so a guest that only calls handle learns it was denied', async () => {
    const before = allowed.connections();
    const { results, trace } = await run('handle-only', `capabilities:\n  network:\n    allow: [127.0.0.1:${allowed.port}]\n`, [
      { op: 'handle', url: `${denied.url}/never` },
      { op: 'handle', url: `${allowed.url}/allowed` },
    ]);
    expect(results[0]).toEqual({ op: 'handle', ok: false, error: 'Error: handle refused: HTTP-request-denied' });
    // An allowed request is accepted by handle; nothing is sent until the guest waits on it.
    expect(results[1]).toEqual({ op: 'handle', ok: true, value: 'handled' });
    expect(denied.connections()).toBe(0);
    expect(allowed.connections()).toBe(before);
    expect(trace.filter((event) => event.event_type === 'egress')).toEqual([
      expect.objectContaining({ decision: 'denied', code: 'HTTP-request-denied', target: `http://127.0.0.1:${denied.port}`, at: 'handle' }),
    ]);
  });

  it('judges murmur:message/send the same way: a denied peer gets no connection', async () => {
    const { results, trace } = await run('send-denied', '', [{ op: 'send', peer: `127.0.0.1:${peer.port}`, text: 'hello peer' }]);
    expect(results[0]).toEqual({ op: 'send', ok: false, error: `network policy: '127.0.0.1:${peer.port}' not in capabilities.network.allow` });
    expect(peer.connections()).toBe(0);
    expect(trace.find((event) => event.event_type === 'egress')).toMatchObject({ kind: 'a2a', decision: 'denied' });
  });

  it('refuses a message too large for the capsule host to hand the executor, as the guest’s error, and never contacts the peer', async () => {
    const before = peer.connections();
    // A character JSON writes as six (`\u0001`): a message of 9 MiB of JSON from 1.5 MiB of text,
    // which the guest's JavaScript engine builds and hands over in a fraction of the time.
    const repeat = 1.5 * 1024 * 1024;
    const { results } = await run('send-too-large', `capabilities:\n  network:\n    allow: [127.0.0.1:${peer.port}]\n`, [
      { op: 'send', peer: `127.0.0.1:${peer.port}`, text: '\u0001', repeat },
      { op: 'send', peer: `127.0.0.1:${peer.port}`, text: 'still here' },
    ]);
    expect(results[0]).toEqual({
      op: 'send',
      ok: false,
      error: expect.stringMatching(/^the 'send' request is \d+ characters of JSON, more than the 8388608 a capsule host may send the executor at once$/),
    });
    // The session, its host and its executor go on: the next message is sent.
    expect(results[1]).toMatchObject({ op: 'send', ok: true });
    expect(peer.connections()).toBe(before + 1);
  });

  it('traces an allowed request that could not connect as failed, never as denied, and says what a peer that is no A2A agent answered', async () => {
    const closed = await startCountingServer();
    const closedPort = closed.port;
    await closed.close();
    const redirecting = await startCountingServer(() => ({ status: 302, body: '', headers: { location: 'http://127.0.0.1:1/elsewhere' } }));
    try {
      const { results, trace } = await run(
        'failed-not-denied',
        `capabilities:\n  network:\n    allow: [127.0.0.1:${closedPort}, 127.0.0.1:${redirecting.port}, 127.0.0.1:${allowed.port}]\n`,
        [
          { op: 'fetch', url: `http://127.0.0.1:${closedPort}/` },
          { op: 'send', peer: `127.0.0.1:${redirecting.port}`, text: 'hello' },
          { op: 'send', peer: `127.0.0.1:${allowed.port}`, text: 'hello' },
        ],
      );
      expect(results[0]).toMatchObject({ ok: false });
      expect(trace.find((event) => event.event_type === 'egress' && event.kind === 'http')).toMatchObject({
        target: `http://127.0.0.1:${closedPort}`,
        decision: 'failed',
        code: 'connection-refused',
      });
      expect(results[1]).toEqual({
        op: 'send',
        ok: false,
        error: `the peer at '127.0.0.1:${redirecting.port}' answered HTTP 302 to http://127.0.0.1:1/elsewhere, a redirect, which is not followed: send to the URL it names, if the capsule's rules allow it`,
      });
      expect(results[2]).toEqual({
        op: 'send',
        ok: false,
        error: `the peer at '127.0.0.1:${allowed.port}' answered HTTP 200 with a body that is not JSON: is it an A2A agent's URL?`,
      });
      expect(trace.filter((event) => event.event_type === 'egress' && event.kind === 'a2a').map((event) => event.decision)).toEqual(['failed', 'failed']);
    } finally {
      await redirecting.close();
    }
  });

  it('names, when a script capsule fails, its last request that got no answer and the rule it lacked', async () => {
    const project = await probeProject(path.join(scratch.dir, 'failed-after-denial'), `capabilities:\n  network:\n    allow: [127.0.0.1:${allowed.port}]\n`);
    const result = await runMur(
      [
        'run',
        '--task',
        JSON.stringify([
          { op: 'fetch', url: `${denied.url}/secret?token=x` },
          { op: 'exit', code: 1 },
        ]),
      ],
      { cwd: project, env },
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-RUN-001]: capsule exited with code 1');
    // Without the query, which may carry a credential.
    expect(result.stderr).toContain(
      `hint: its last request, to http://127.0.0.1:${denied.port}/secret, got no answer: network policy: '127.0.0.1:${denied.port}' not in capabilities.network.allow (HTTP-request-denied); if the capsule needs that host, add it to capabilities.network.allow`,
    );
  });

  it('sends an allowed A2A message and records it as a2a_send', async () => {
    const { results, trace } = await run('send-allowed', `capabilities:\n  network:\n    allow: [127.0.0.1:${peer.port}]\n`, [
      { op: 'send', peer: `127.0.0.1:${peer.port}`, text: 'hello peer', contextId: 'ctx_thread', messageId: 'msg_one' },
    ]);
    expect(results[0]).toMatchObject({ ok: true, value: { taskId: 'tsk_peer', contextId: 'ctx_thread', state: 'submitted' } });
    const received = JSON.parse(peer.bodies().at(-1) as string) as { method: string; params: { message: { parts: Array<{ text: string }> } } };
    expect(received.method).toBe('message/send');
    expect(received.params.message.parts[0]?.text).toBe('hello peer');
    expect(trace.find((event) => event.event_type === 'a2a_send')).toMatchObject({
      peer_url: `127.0.0.1:${peer.port}`,
      message_id: 'msg_one',
      task_id: 'tsk_peer',
      context_id: 'ctx_thread',
    });
  });
});
