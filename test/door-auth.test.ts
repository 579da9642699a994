import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { Role, TaskState } from '@a2a-js/sdk';
import { Client, ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { LegacyJsonRpcTransport } from '@a2a-js/sdk/compat/v0_3/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, rpc, startAgent, textMessage } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type ScriptedInference, type ScriptedReply, startScriptedInference } from './support/scripted-inference.js';

/** The scripted model of both suites: it answers a message with `echo: <its text>`. */
function echo(body: Record<string, unknown>): ScriptedReply {
  const last = (body.messages as Array<{ content: Array<{ type: string; text?: string }> }>).at(-1);
  return { text: `echo: ${last?.content.find((block) => block.type === 'text')?.text ?? ''}` };
}

/**
 * A door that requires credentials (`MURMUR_DOOR_AUTH`): the card readable by anyone and saying
 * so, every other request without one of the door's bearer tokens refused with 401 before it
 * names anything, and real clients — raw HTTP from the spec's examples, and @a2a-js/sdk in both
 * generations — working with a token.
 */
describe('a door with authentication', () => {
  const tokenA = 'door-token-a-0123456789abcdef';
  const tokenB = 'door-token-b-fedcba9876543210';
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let agent: RunningAgent;
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-door-auth-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_DOOR_AUTH: `${tokenA}, ${tokenB}` };
    inference = await startScriptedInference({ script: echo });
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { name: 'guarded', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    agent = await startAgent(project, env);
  });

  afterAll(async () => {
    await agent?.stop();
    await inference?.close();
    await scratch?.cleanup();
  });

  const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

  it('serves its agent card without credentials, declaring the bearer scheme in both generations’ shapes', async () => {
    const response = await fetch(new URL('.well-known/agent-card.json', agent.url));
    expect(response.status).toBe(200);
    const card = (await response.json()) as Record<string, unknown>;
    expect(card.securitySchemes).toEqual({
      murmur_bearer: {
        type: 'http',
        scheme: 'bearer',
        description: expect.any(String),
        httpAuthSecurityScheme: { scheme: 'Bearer', description: expect.any(String) },
      },
    });
    expect(card.security).toEqual([{ murmur_bearer: [] }]);
    expect(card.securityRequirements).toEqual([{ schemes: { murmur_bearer: { list: [] } } }]);
  });

  it('refuses a request without a token, with an almost right one, or for a session that is not one, alike: 401, WWW-Authenticate, nothing about the session', async () => {
    const almost = `${tokenA.slice(0, -1)}${tokenA.endsWith('f') ? 'e' : 'f'}`;
    const elsewhere = agent.url.replace(agent.sessionId, `ses_${'0'.repeat(32)}`);
    const refusals = [
      await rpc(agent.url, 'message/send', textMessage('no token')),
      await rpc(agent.url, 'message/send', textMessage('almost'), bearer(almost)),
      await rpc(agent.url, 'message/send', textMessage('wrong scheme'), { headers: { authorization: `Basic ${tokenA}` } }),
      await rpc(elsewhere, 'message/send', textMessage('no such session')),
    ];
    for (const refusal of refusals) {
      expect(refusal.status).toBe(401);
      expect(refusal.body.error).toMatchObject({ code: -32600, data: [{ reason: 'E_DOOR_003', metadata: { murmur_code: 'E-DOOR-003' } }] });
      expect(JSON.stringify(refusal.body)).not.toContain('ses_');
    }
    const raw = await fetch(agent.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(raw.headers.get('www-authenticate')).toBe('Bearer realm="murmur door"');
    // Credentials of another scheme are not a bearer token that was not good: only the scheme is said.
    const basic = await fetch(agent.url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Basic ${tokenA}` }, body: '{}' });
    expect(basic.headers.get('www-authenticate')).toBe('Bearer realm="murmur door"');
    // A token that was sent and is not good is told so (RFC 6750), here and for a session that is not one alike.
    for (const url of [agent.url, elsewhere]) {
      const wrong = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${almost}` }, body: '{}' });
      expect(wrong.status).toBe(401);
      expect(wrong.headers.get('www-authenticate')).toBe('Bearer realm="murmur door", error="invalid_token"');
      expect(((await wrong.json()) as { error: { message: string } }).error.message).toContain('the credentials sent are not good at this door');
    }
  });

  it('refuses a request without a token before it reads its body: 401 at once, not 413, nor a wait for a megabyte that never comes', async () => {
    // Over the limit: owed 401, not 413.
    const big = await fetch(agent.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: 'x'.repeat(2 * 1024 * 1024) });
    expect(big.status).toBe(401);
    // A body declared and never sent: answered from the headers alone.
    const { port, hostname, pathname } = new URL(agent.url);
    const socket = connect(Number(port), hostname === 'localhost' ? '127.0.0.1' : hostname);
    try {
      socket.write(`POST ${pathname} HTTP/1.1\r\nHost: localhost:${port}\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n{`);
      const head = await new Promise<string>((resolve, reject) => {
        socket.once('data', (chunk) => resolve(chunk.toString('latin1')));
        socket.once('error', reject);
        setTimeout(() => reject(new Error('no answer within 5s: the door waited for the body')), 5_000).unref();
      });
      expect(head).toMatch(/^HTTP\/1\.1 401 /);
    } finally {
      socket.destroy();
    }
    // A client that asks before it sends (Expect: 100-continue) is refused then, never told to go on
    // and send a body it is refused for; one with its token is told to go on.
    for (const [authorization, first] of [
      ['', /^HTTP\/1\.1 401 [\s\S]*www-authenticate: Bearer realm="murmur door"\r\n/i],
      ['Authorization: Bearer not-the-token\r\n', /^HTTP\/1\.1 401 [\s\S]*error="invalid_token"/i],
      [`Authorization: Bearer ${tokenB}\r\n`, /^HTTP\/1\.1 100 Continue/],
    ] as const) {
      const asking = connect(Number(port), hostname === 'localhost' ? '127.0.0.1' : hostname);
      try {
        asking.write(
          `POST ${pathname} HTTP/1.1\r\nHost: localhost:${port}\r\n${authorization}Content-Type: application/json\r\nContent-Length: 4000\r\nExpect: 100-continue\r\n\r\n`,
        );
        const head = await new Promise<string>((resolve, reject) => {
          asking.once('data', (chunk) => resolve(chunk.toString('latin1')));
          asking.once('error', reject);
          setTimeout(() => reject(new Error('no answer within 5s')), 5_000).unref();
        });
        expect(head).toMatch(first);
      } finally {
        asking.destroy();
      }
    }
  });

  it('answers a completion’s headers with a session id that is not one as it answers no token: 401, nothing about sessions', async () => {
    const headers = { 'x-murmur-delegation-id': `dlg_${randomUUID().replaceAll('-', '')}`, 'x-murmur-completion-session': 'whatever' };
    const reply = await rpc(agent.url.replace(agent.sessionId, 'ses_not-a-session'), 'message/send', textMessage('done'), { headers });
    expect(reply.status).toBe(401);
    expect(JSON.stringify(reply.body)).not.toContain('ses_');
  });

  it('answers any of its tokens, over raw HTTP as the spec writes requests', async () => {
    for (const token of [tokenA, tokenB]) {
      const reply = await rpc(
        agent.url,
        'SendMessage',
        { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: `with ${token.slice(11, 12)}` }] } },
        bearer(token),
      );
      expect(reply.status).toBe(200);
      const status = (reply.body.result?.task as { status: { state: string; message?: { parts: Array<{ text: string }> } } } | undefined)?.status;
      expect(status?.state).toBe('TASK_STATE_COMPLETED');
      expect(status?.message?.parts[0]?.text).toBe(`echo: with ${token.slice(11, 12)}`);
    }
  });

  it('works end to end with @a2a-js/sdk, 1.x and its 0.3 compat transport, given a fetch that sends the token', async () => {
    const authed: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', `Bearer ${tokenB}`);
      return fetch(input, { ...init, headers });
    };
    const message = (text: string) =>
      ({ message: { messageId: randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: text } }] } }) as unknown as Parameters<
        Client['sendMessage']
      >[0];
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({ fetchImpl: authed })] }),
    );
    const modern = await factory.createFromUrl(agent.url);
    const sent = (await modern.sendMessage(message('sdk with auth'))) as { status?: { state: number } };
    expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);

    const legacyCard = await (
      await new ClientFactory(
        ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
          cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true } }),
          transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true }, fetchImpl: authed })],
        }),
      ).createFromUrl(agent.url)
    ).getAgentCard();
    const legacy = new Client(new LegacyJsonRpcTransport({ endpoint: agent.url, fetchImpl: authed } as never) as never, legacyCard);
    const old = (await legacy.sendMessage(message('legacy with auth'))) as { status?: { state: number } };
    expect(old.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);

    const unauthenticated = await new ClientFactory().createFromUrl(agent.url);
    await expect(unauthenticated.sendMessage(message('no token'))).rejects.toThrow();
  });

  it("lets a delegated child's completion through without a token, to be judged by the host, which admits it only into a task awaiting that delegation", async () => {
    const completion = (headers: Record<string, string>) => rpc(agent.url, 'message/send', textMessage('Delegated capsule finished.'), { headers });
    const delegationId = `dlg_${randomUUID().replaceAll('-', '')}`;
    const passed = await completion({ 'x-murmur-delegation-id': delegationId, 'x-murmur-completion-session': agent.sessionId });
    expect(passed.status).toBe(200);
    expect(passed.body.error?.message).toContain(delegationId);
    expect(passed.body.error?.message).toContain('no task');
    // Not a delegation id, or no session named: an ordinary request, and refused as one.
    const ordinary: Array<Record<string, string>> = [
      { 'x-murmur-delegation-id': 'dlg_guess', 'x-murmur-completion-session': agent.sessionId },
      { 'x-murmur-delegation-id': delegationId },
    ];
    for (const headers of ordinary) {
      expect((await completion(headers)).status, JSON.stringify(headers)).toBe(401);
    }
  });

  it("admits a completion's headers for a plain send only: reading, listing, canceling or streaming with them is refused as without a token", async () => {
    // A task the forger would like to read or cancel, made with a real token.
    const made = await rpc(agent.url, 'message/send', textMessage('private'), bearer(tokenA));
    const taskId = (made.body.result as { id: string }).id;
    const forged = { headers: { 'x-murmur-delegation-id': `dlg_${randomUUID().replaceAll('-', '')}`, 'x-murmur-completion-session': agent.sessionId } };
    const attempts = [
      await rpc(agent.url, 'tasks/get', { id: taskId }, forged),
      await rpc(agent.url, 'tasks/list', {}, forged),
      await rpc(agent.url, 'tasks/cancel', { id: taskId }, forged),
      await rpc(agent.url, 'message/stream', textMessage('streamed'), forged),
      await rpc(agent.url, 'tasks/resubscribe', { id: taskId }, forged),
      await rpc(agent.url, 'GetTask', { id: taskId }, forged),
      await rpc(agent.url, 'ListTasks', {}, forged),
      await rpc(agent.url, 'CancelTask', { id: taskId }, forged),
    ];
    for (const attempt of attempts) {
      expect(attempt.status).toBe(401);
      expect(attempt.body.error).toMatchObject({ code: -32600, data: [{ reason: 'E_DOOR_003', metadata: { murmur_code: 'E-DOOR-003' } }] });
      expect(JSON.stringify(attempt.body)).not.toContain('private');
    }
    // The refused cancel did nothing: the task is the token holder's, in whatever state its turn has reached.
    const still = await rpc(agent.url, 'tasks/get', { id: taskId }, bearer(tokenA));
    expect(['working', 'completed']).toContain((still.body.result as { status: { state: string } }).status.state);
  });

  it('hands out no session token when it takes only its own tokens: the launch line has none, since this door would refuse it', async () => {
    expect(agent.token as string | undefined).toBeUndefined();
  });

  it('refuses to start a door whose token is too short to be safe, naming MURMUR_DOOR_AUTH', async () => {
    const project = await agentProject(path.join(scratch.dir, 'short-token'), agentManifest(inference, { name: 'short' }));
    const result = await runMur(['run', '--json', '--task', 'hello'], { cwd: project, env: { ...env, MURMUR_DOOR_AUTH: 'xq9zv' } });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain("error[E-CFG-003]: MURMUR_DOOR_AUTH's token 1 is 5 characters long; a door token needs at least 16");
    // A token is never written anywhere, not even one refused.
    expect(result.stderr).not.toContain('xq9zv');
  });

  it('refuses to start a door whose MURMUR_DOOR_AUTH is set but names no token, rather than serve without credentials', async () => {
    // `MURMUR_DOOR_AUTH="$TOKEN"` with TOKEN unset, or a stray comma: whoever set it meant auth on.
    const project = await agentProject(path.join(scratch.dir, 'no-token'), agentManifest(inference, { name: 'no-token' }));
    for (const value of ['', ' ', ', ,']) {
      const result = await runMur(['run', '--json', '--task', 'hello'], { cwd: project, env: { ...env, MURMUR_DOOR_AUTH: value } });
      expect(result.code, value).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(`error[E-CFG-003]: MURMUR_DOOR_AUTH is set (to ${JSON.stringify(value)}) but names no token`);
      expect(result.stderr).toContain('unset it to serve without credentials');
    }
  });
});

/**
 * A door that takes each session's own token (`MURMUR_DOOR_AUTH=session`): `mur run --json`
 * prints it, the door asks the session's executor whether a bearer is it, and nothing of the
 * session answers anyone else.
 */
describe("a door that takes each session's own token", () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let agent: RunningAgent;

  beforeAll(async () => {
    scratch = await tempDir('murmur-session-token-');
    inference = await startScriptedInference({ script: echo });
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { name: 'own-token', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    agent = await startAgent(project, { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_DOOR_AUTH: 'session' });
  });

  afterAll(async () => {
    await agent?.stop();
    await inference?.close();
    await scratch?.cleanup();
  });

  const send = (text: string, token?: string) =>
    rpc(
      agent.url,
      'SendMessage',
      { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] } },
      token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } },
    );

  it('prints the session token in the launch line, and the card says where to get one', async () => {
    expect(agent.token).toMatch(/^mst_[A-Za-z0-9_-]{43}$/);
    const card = (await (await fetch(new URL('.well-known/agent-card.json', agent.url))).json()) as {
      securitySchemes: { murmur_bearer: { description: string } };
    };
    expect(card.securitySchemes.murmur_bearer.description).toBe("the session's own token, which its launch returned (mur run prints it as its token)");
  });

  it('prints the session token on a line of its own when run without --json, where it was printed nowhere and no client could reach the session', async () => {
    const project = await agentProject(path.join(scratch.dir, 'plain'), agentManifest(inference, { name: 'plain-run' }));
    const result = await runMur(['run', '--task', 'hello'], {
      cwd: project,
      env: { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_DOOR_AUTH: 'session' },
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^murmur: token mst_[A-Za-z0-9_-]{43}$/m);
  });

  it('answers a request that carries the session token, raw and through @a2a-js/sdk', async () => {
    const reply = await send('with its own token', agent.token);
    expect(reply.status).toBe(200);
    expect((reply.body.result?.task as { status?: { state: string } } | undefined)?.status?.state).toBe('TASK_STATE_COMPLETED');
    const authed: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', `Bearer ${agent.token}`);
      return fetch(input, { ...init, headers });
    };
    const client = await new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({ fetchImpl: authed })] }),
    ).createFromUrl(agent.url);
    // The SDK's typed request, as its own fromJSON fills one in: proto3 defaults, state unspecified.
    const listed = await client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '' } as unknown as Parameters<
      Client['listTasks']
    >[0]);
    expect(listed.tasks.length).toBeGreaterThan(0);
  });

  it('refuses no token, an almost right one, and another well-formed one alike, before reading the request', async () => {
    const last = agent.token.at(-1) === 'A' ? 'B' : 'A';
    const refusals = [
      await send('no token'),
      await send('almost', `${agent.token.slice(0, -1)}${last}`),
      await send('another', `mst_${'A'.repeat(43)}`),
      // Not even a JSON-RPC body: the token is judged first.
      { status: (await fetch(agent.url, { method: 'POST', headers: { authorization: `Bearer mst_${'B'.repeat(43)}` }, body: 'not json' })).status, body: {} },
    ];
    for (const refusal of refusals) expect(refusal.status).toBe(401);
    expect(refusals[1]?.body.error).toMatchObject({ code: -32600, data: [{ reason: 'E_DOOR_003', metadata: { murmur_code: 'E-DOOR-003' } }] });
    // The session's token opens no other session, even a well-formed one the door does not know.
    const elsewhere = agent.url.replace(agent.sessionId, `ses_${'0'.repeat(32)}`);
    expect((await rpc(elsewhere, 'GetTask', { id: 'tsk_x' }, { headers: { authorization: `Bearer ${agent.token}` } })).status).toBe(401);
  });

  it("writes the token nowhere in the session's records or the home", async () => {
    const written: string[] = [];
    const walk = async (dir: string): Promise<void> => {
      for (const entry of await fs.readdir(dir, { withFileTypes: true }).catch(() => [])) {
        const at = path.join(dir, entry.name);
        if (entry.isDirectory()) await walk(at);
        else if (entry.isFile() && (await fs.readFile(at, 'utf8')).includes(agent.token)) written.push(at);
      }
    };
    await walk(agent.workdir);
    await walk(path.join(scratch.dir, 'home'));
    expect(written).toEqual([]);
    expect(agent.stderr()).not.toContain(agent.token);
  });
});

/**
 * A threaded capsule keeps its conversations beyond a session, and any session of the capsule may
 * continue one by naming its context. A session's own token is good for that session alone, and
 * so is what was said under it: another session's holder who names the same context starts afresh.
 */
describe("the conversations of contexts named under a session's own token", () => {
  const operatorToken = 'door-operator-token-0123456789';
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let first: RunningAgent;
  let second: RunningAgent;
  let home: string;

  beforeAll(async () => {
    scratch = await tempDir('murmur-session-contexts-');
    home = path.join(scratch.dir, 'home');
    inference = await startScriptedInference({ script: echo });
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { name: 'keeper', lifecycle: '  conversation: threaded\n  task_acceptance: queue\n  after_task: sleep' }),
    );
    const env = { MURMUR_HOME: home, MURMUR_DOOR_AUTH: `session, ${operatorToken}` };
    first = await startAgent(project, env);
    second = await startAgent(project, env);
  });

  afterAll(async () => {
    await first?.stop();
    await second?.stop();
    await inference?.close();
    await scratch?.cleanup();
  });

  type Message = { role: string; content: Array<{ type: string; text?: string }> };
  /** What the model was sent for the task `text` began, one line per message. */
  const seenBy = async (agent: RunningAgent, token: string, contextId: string, text: string): Promise<string[]> => {
    const before = inference.requests().length;
    const reply = await rpc(
      agent.url,
      'SendMessage',
      { message: { messageId: randomUUID(), contextId, role: 'ROLE_USER', parts: [{ text }] } },
      { headers: { authorization: `Bearer ${token}` } },
    );
    expect((reply.body.result?.task as { status?: { state: string } } | undefined)?.status?.state).toBe('TASK_STATE_COMPLETED');
    const messages = inference.requests()[before]?.body.messages as Message[];
    return messages.map((message) => `${message.role}: ${message.content.map((block) => block.text ?? '').join('')}`);
  };

  it('keeps such a context for its session alone: another session naming it starts afresh, and the shared record holds nothing of it', async () => {
    expect(await seenBy(first, first.token, 'main', 'the secret is 42')).toEqual(['user: the secret is 42']);
    expect(await seenBy(second, second.token, 'main', 'what is the secret?')).toEqual(['user: what is the secret?']);
    // The session that said it still continues it.
    expect(await seenBy(first, first.token, 'main', 'say it again')).toEqual([
      'user: the secret is 42',
      'assistant: echo: the secret is 42',
      'user: say it again',
    ]);
    const record = path.join(home, 'conversations', 'keeper');
    expect((await fs.readdir(record)).sort()).toEqual([`main@${first.sessionId}`, `main@${second.sessionId}`].sort());
  });

  it("keeps what the operator said in a session apart from what the session's own token says there, under the same context id", async () => {
    expect(await seenBy(first, operatorToken, 'mixed', 'my pin is 9876')).toEqual(['user: my pin is 9876']);
    // The session's own token, in the session the operator spoke in, with the operator's context id.
    expect(await seenBy(first, first.token, 'mixed', 'what is my pin?')).toEqual(['user: what is my pin?']);
    // And the operator's context holds nothing the token said.
    expect(await seenBy(second, operatorToken, 'mixed', 'anything else?')).toEqual([
      'user: my pin is 9876',
      'assistant: echo: my pin is 9876',
      'user: anything else?',
    ]);
  });

  it("shares a context named under the operator's token across the capsule's sessions, as a context always was", async () => {
    expect(await seenBy(first, operatorToken, 'shared', 'my name is Ada')).toEqual(['user: my name is Ada']);
    expect(await seenBy(second, operatorToken, 'shared', 'what is my name?')).toEqual([
      'user: my name is Ada',
      'assistant: echo: my name is Ada',
      'user: what is my name?',
    ]);
  });
});
