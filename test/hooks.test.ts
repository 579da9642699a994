import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject, openStream, readSse, rpc, startAgent, textMessage, traceOf } from './support/agents.js';
import { componentArtifact, publishInto } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { ONE_SHELL_CALL_SESSION } from './support/hook-events.js';
import { halfHookWat } from './support/guests.js';
import { recordingHook } from './support/probe-guests.js';
import { eventually, runMur } from './support/processes.js';
import { startOtlpReceiver } from './support/otlp-receiver.js';
import { type ScriptedInference, type ScriptedInferenceOptions, startScriptedInference } from './support/scripted-inference.js';

/**
 * Hooks, compaction and task reopening, end to end: real `mur run`s of agent capsules whose hooks
 * are the recording hook (our own JavaScript, built with componentize-js) against a scripted
 * model. Each hook sees only its own directory (`hooks/<name>` under the workdir), where it
 * records every call it gets and reads what to answer.
 */

interface Recorded {
  fn: string;
  event: Record<string, unknown>;
  env?: Record<string, string>;
}

/** The hooks the suite publishes: one component, several contracts (a hook's own manifest says its binding, mode and policy). */
const HOOKS: Record<string, string> = {
  recorder: '',
  'async-recorder': 'execution_mode: async\n',
  stager: 'binding: on-stage\ncommit_policy: write-manifests\n',
  compactor: 'binding: on-compaction\ncommit_policy: replace-context\n',
  reviewer: 'binding: on-task-end\ncommit_policy: reopen-task\n',
  annotator: 'binding: on-inference\n',
};

/** The capsule's entry for a hook; `extra` adds keys the capsule decides for it (`on_overflow`). */
function hookEntry(name: string, extra: string[] = []): string {
  return [
    `  - name: ${name}`,
    '    version: 1.0.0',
    '    runtime: hook',
    ...extra,
    '    capabilities:',
    '      filesystem:',
    `        scope: hooks/${name}`,
  ].join('\n');
}

describe('hooks', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  const servers: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    scratch = await tempDir('murmur-hooks-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home'), HOOK_TEST_SECRET: 'never-for-hooks' };
    const wasm = (await recordingHook()).bytes;
    for (const [name, contract] of Object.entries(HOOKS)) {
      await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), await componentArtifact(name, '1.0.0', wasm, 'hook', contract));
    }
    await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), await componentArtifact('half-hook', '1.0.0', (await halfHookWat()).bytes, 'hook'));
  }, 300_000);

  afterAll(async () => {
    for (const server of servers) await server.close();
    await scratch.cleanup();
  });

  async function model(script: ScriptedInferenceOptions['script']): Promise<ScriptedInference> {
    const server = await startScriptedInference({ script });
    servers.push(server);
    return server;
  }

  /** A project with the named hooks, each with its script, run once with `--workdir`. */
  async function runWithHooks(
    name: string,
    options: {
      inference: ScriptedInference;
      hooks: Record<string, unknown>;
      manifest?: Parameters<typeof agentManifest>[1];
      task?: string;
      /** Keys the capsule's entry for a hook adds, by hook. */
      entries?: Record<string, string[]>;
    },
  ) {
    const project = path.join(scratch.dir, name);
    const workdir = path.join(project, 'work');
    await fs.mkdir(workdir, { recursive: true });
    for (const [hook, script] of Object.entries(options.hooks)) {
      await fs.mkdir(path.join(workdir, 'hooks', hook), { recursive: true });
      await fs.writeFile(path.join(workdir, 'hooks', hook, 'script.json'), JSON.stringify(script));
    }
    const manifest = agentManifest(options.inference, {
      ...options.manifest,
      artifacts: [...Object.keys(options.hooks).map((hook) => hookEntry(hook, options.entries?.[hook])), options.manifest?.artifacts ?? ''].join('\n'),
    });
    await agentProject(project, manifest);
    const result = await runMur(['run', '--json', '--workdir', workdir, '--task', options.task ?? 'do the thing'], { cwd: project, env });
    const launch = result.stdout.trim() ? (JSON.parse(result.stdout.trim().split('\n')[0] as string) as { workdir: string; session_id: string }) : undefined;
    // With --workdir the launch line names the accessible workdir; the session's records are under .murmur/<session>.
    const sessionDir = path.join(workdir, '.murmur', launch?.session_id ?? 'no-session');
    return {
      result,
      workdir,
      sessionDir,
      trace: () => traceOf(sessionDir),
      recorded: async (hook: string): Promise<Recorded[]> =>
        (await fs.readFile(path.join(workdir, 'hooks', hook, 'events.jsonl'), 'utf8').catch(() => ''))
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => JSON.parse(line) as Recorded),
      hookLog: (hook: string) => fs.readFile(path.join(sessionDir, 'logs', `hook-${hook}.log`), 'utf8').catch(() => ''),
      read: (file: string) => fs.readFile(path.join(sessionDir, file), 'utf8'),
    };
  }

  const shellThenDone = (): ScriptedInferenceOptions['script'] => [
    { toolCalls: [{ name: 'bash', input: { command: 'echo hi' }, id: 'call-1' }] },
    { text: 'all done' },
  ];
  const withShell = { capabilities: '  shell:\n    allow: [bash]' };

  it("tells an unbound hook every session event but on-stage, in upstream's order, with upstream's payloads and no host environment", async () => {
    const inference = await model(shellThenDone());
    const run = await runWithHooks('every-event', { inference, hooks: { recorder: {} }, manifest: withShell });
    expect(run.result.code, run.result.stderr).toBe(0);
    const events = await run.recorded('recorder');
    expect(events.map((event) => event.fn)).toEqual([...ONE_SHELL_CALL_SESSION]);
    const byFn = (fn: string, index = 0) => events.filter((event) => event.fn === fn)[index] as Recorded;
    expect(byFn('on-session-start').event).toMatchObject({
      capsuleName: 'agent',
      capsuleVersion: '0.1.0',
      model: 'test-model',
      capabilities: ['network', 'shell'],
    });
    expect(String(byFn('on-session-start').event.sessionId)).toMatch(/^ses_[0-9a-f]{32}$/);
    expect(byFn('on-session-start').env).toEqual({});
    expect(byFn('on-task-start').event).toMatchObject({ source: 'task_md', inputBytes: Buffer.byteLength('do the thing') });
    const inferenceEvent = byFn('on-inference').event;
    expect(inferenceEvent).toMatchObject({ turn: 0, decision: 'tool_call', toolName: 'bash', inputTokens: 11, outputTokens: 7 });
    expect(JSON.parse(String(inferenceEvent.prompt))).toEqual([{ content: [{ text: 'do the thing', type: 'text' }], role: 'user' }]);
    expect((JSON.parse(String(inferenceEvent.tools)) as Array<{ name: string }>).map((tool) => tool.name)).toEqual(['bash']);
    expect(byFn('on-inference', 1).event).toMatchObject({ turn: 1, decision: 'end_turn' });
    expect(byFn('on-tool-call').event).toMatchObject({ turn: 0, toolName: 'bash', status: 'ok', inputBytes: Buffer.byteLength('{"command":"echo hi"}') });
    expect(byFn('on-shell').event).toMatchObject({ turn: 0, command: 'echo hi', exitCode: 0, stdout: 'hi\n', stderr: '', stdoutBytes: 3 });
    expect(String(byFn('on-shell').event.binary)).toMatch(/\/bash$/);
    expect(byFn('on-task-end').event).toMatchObject({ exitStatus: 'ok' });
    expect(byFn('on-session-end').event).toMatchObject({ totalTurns: 2, totalToolCalls: 1, totalShellCalls: 1, exitStatus: 'ok' });
    // Nothing failed, so nothing is traced for the hooks.
    expect((await run.trace()).filter((event) => event.event_type === 'hook_dispatch_error')).toEqual([]);
  });

  it('runs an async hook on its own ordered queue and drains it before the session ends', async () => {
    const inference = await model(shellThenDone());
    const run = await runWithHooks('async', { inference, hooks: { 'async-recorder': {} }, manifest: withShell });
    expect(run.result.code, run.result.stderr).toBe(0);
    expect((await run.recorded('async-recorder')).map((event) => event.fn)).toEqual([...ONE_SHELL_CALL_SESSION]);
  });

  it('drops what a full async queue cannot take, and abandons what the 15 s drain cannot finish, tracing both', async () => {
    // One turn asks for 1100 calls of a tool that does not exist (each a fast error result), while
    // the async hook spins in its first call, so nothing leaves its queue.
    const calls = Array.from({ length: 1100 }, (_, index) => ({ name: 'no-such-tool', input: {}, id: `call-${index}` }));
    const inference = await model([{ toolCalls: calls }, { text: 'done' }]);
    const run = await runWithHooks('overflow', {
      inference,
      hooks: { 'async-recorder': { 'on-session-start': [{ spin: true }] } },
      manifest: { capabilities: '  limits:\n    deadline_seconds: 40' },
    });
    expect(run.result.code, run.result.stderr).toBe(0);
    const faults = (await run.trace()).filter((event) => event.event_type === 'hook_dispatch_error');
    // After on-session-start: on-task-start, two on-inference, 1100 on-tool-call, on-task-end, on-session-end.
    const dropped = 1105 - 1024;
    expect(faults.filter((fault) => fault.arm === 'queue-overflow')).toHaveLength(dropped);
    expect(faults.filter((fault) => fault.arm !== 'queue-overflow').map(({ hook_name, event, arm }) => ({ hook_name, event, arm }))).toEqual([
      { hook_name: 'async-recorder', event: 'drain', arm: 'timeout' },
    ]);
    const log = await run.hookLog('async-recorder');
    expect(log).toContain(`discarded ${dropped} lifecycle event(s): its queue (1024 deep) was full`);
    expect(log).toContain('within the 15000ms session-end drain budget; the remaining calls were abandoned');
  }, 120_000);

  it('makes the runtime wait for room in a full async queue with on_overflow: block, so every event arrives, in order', async () => {
    // The same 1100 failing tool calls, while the hook computes for 3 s in its first call: the
    // queue fills, and each further event waits for room instead of being dropped.
    const calls = Array.from({ length: 1100 }, (_, index) => ({ name: 'no-such-tool', input: {}, id: `call-${index}` }));
    const inference = await model([{ toolCalls: calls }, { text: 'done' }]);
    const run = await runWithHooks('overflow-block', {
      inference,
      hooks: { 'async-recorder': { 'on-session-start': [{ busy_ms: 3000 }] } },
      entries: { 'async-recorder': ['    on_overflow: block'] },
      manifest: { capabilities: '  limits:\n    deadline_seconds: 40' },
    });
    expect(run.result.code, run.result.stderr).toBe(0);
    expect((await run.trace()).filter((event) => event.event_type === 'hook_dispatch_error')).toEqual([]);
    const fns = (await run.recorded('async-recorder')).map((event) => event.fn);
    expect(fns).toHaveLength(1106);
    expect(fns.slice(0, 3)).toEqual(['on-session-start', 'on-task-start', 'on-inference']);
    expect(fns.filter((fn) => fn === 'on-tool-call')).toHaveLength(1100);
    expect(fns.slice(-3)).toEqual(['on-inference', 'on-task-end', 'on-session-end']);
  }, 120_000);

  it("applies an on-stage hook's write-manifests before the session starts: the model sees the shell tool as the hook described it", async () => {
    const inference = await model([{ text: 'ok' }]);
    const manifest = 'name: bash\nversion: 0.0.0\nruntime: tool\nimplementation: native\ndescription: Runs bash, described by the stager hook.\n';
    const run = await runWithHooks('on-stage', {
      inference,
      hooks: { stager: { 'on-stage': [{ return: 'write-manifests', val: [{ binaryName: 'bash', content: manifest }] }] } },
      manifest: withShell,
    });
    expect(run.result.code, run.result.stderr).toBe(0);
    expect(await run.read('tools/bash/murmur.yaml')).toBe(manifest);
    const tools = inference.requests()[0]?.body.tools as Array<{ name: string; description: string }>;
    expect(tools.find((tool) => tool.name === 'bash')?.description).toBe('Runs bash, described by the stager hook.');
    expect((await run.recorded('stager')).map((event) => event.fn)).toEqual(['on-stage']);
    expect((await run.recorded('stager'))[0]?.event).toEqual({ shellAllow: ['bash'] });
  });

  it('refuses the session with E-HOOK-002 when an on-stage hook fails, before any inference', async () => {
    const inference = await model([{ text: 'never asked' }]);
    const run = await runWithHooks('on-stage-fails', { inference, hooks: { stager: { 'on-stage': [{ err: 'the stager refuses' }] } }, manifest: withShell });
    expect(run.result.code).toBe(1);
    expect(run.result.stderr).toContain('error[E-HOOK-002]');
    expect(run.result.stderr).toContain('on-stage hook failed: stager: the stager refuses');
    expect(inference.requests()).toEqual([]);
  });

  it('refuses a hook that lacks a required export with E-HOOK-001 naming the function, before any inference', async () => {
    const inference = await model([{ text: 'never asked' }]);
    const project = await agentProject(
      path.join(scratch.dir, 'half-hook'),
      agentManifest(inference, { artifacts: '  - name: half-hook\n    version: 1.0.0\n    runtime: hook' }),
    );
    const result = await runMur(['run', '--task', 'hello'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-HOOK-001]: hook half-hook@1.0.0 missing function murmur:hook/lifecycle@0.5.0#on-inference');
    expect(inference.requests()).toEqual([]);
  });

  it('refuses a write-manifests that names a binary outside shell.allow, writing nothing', async () => {
    const inference = await model([{ text: 'never asked' }]);
    const run = await runWithHooks('on-stage-escape', {
      inference,
      hooks: {
        stager: { 'on-stage': [{ return: 'write-manifests', val: [{ binaryName: '../../escaped', content: 'name: x\nversion: 0.0.0\nruntime: tool\n' }] }] },
      },
      manifest: withShell,
    });
    expect(run.result.code).toBe(1);
    expect(run.result.stderr).toContain("'../../escaped' is not a binary in capabilities.shell.allow");
    // Where `tools/../../escaped/murmur.yaml` would have landed: beside the session's directory.
    await expect(fs.stat(path.join(run.sessionDir, '..', 'escaped'))).rejects.toThrow();
    expect(inference.requests()).toEqual([]);
  });

  it('traces a hook that fails, overruns its deadline or returns an arm its event does not honour, before session_end, and the session goes on', async () => {
    const inference = await model(shellThenDone());
    const run = await runWithHooks('faults', {
      inference,
      hooks: {
        recorder: {
          'on-session-start': [{ err: 'boom at start' }],
          'on-inference': [{ return: 'reopen-task', val: 'not here' }, { return: 'none' }],
          'on-tool-call': [{ spin: true }],
        },
      },
      manifest: { ...withShell, capabilities: '  shell:\n    allow: [bash]\n  limits:\n    deadline_seconds: 4' },
    });
    expect(run.result.code, run.result.stderr).toBe(0);
    const trace = await run.trace();
    const faults = trace.filter((event) => event.event_type === 'hook_dispatch_error').map(({ hook_name, event, arm }) => ({ hook_name, event, arm }));
    expect(faults, JSON.stringify(faults)).toEqual([
      { hook_name: 'recorder', event: 'on-session-start', arm: 'error' },
      { hook_name: 'recorder', event: 'on-inference', arm: 'reopen-task' },
      { hook_name: 'recorder', event: 'on-tool-call', arm: 'timeout' },
      // The overrun ended the instance; the fresh one that took the next event starts its script over.
      { hook_name: 'recorder', event: 'on-inference', arm: 'reopen-task' },
    ]);
    const types = trace.map((event) => event.event_type);
    expect(types.lastIndexOf('hook_dispatch_error')).toBeLessThan(types.indexOf('session_end'));
    const log = await run.hookLog('recorder');
    expect(log).toContain('boom at start');
    expect(log).toContain("returned unsupported hook-output arm 'reopen-task' from 'on-inference'");
    expect(log).toContain("hook 'recorder' on-tool-call exceeded its 4s execution deadline");
    expect((await run.recorded('recorder')).map((event) => event.fn)).toContain('on-session-end');
  }, 120_000);

  it('runs none of the tools of a task canceled while a blocking hook ran, and the task stays canceled', async () => {
    const inference = await model([{ toolCalls: [{ name: 'bash', input: { command: 'touch tool-ran' }, id: 'call-1' }] }, { text: 'all done' }]);
    const project = path.join(scratch.dir, 'canceled-in-hook');
    const workdir = path.join(project, 'work');
    await fs.mkdir(path.join(workdir, 'hooks', 'annotator'), { recursive: true });
    // The turn's on-inference hook spins for a while: the task is canceled meanwhile.
    await fs.writeFile(path.join(workdir, 'hooks', 'annotator', 'script.json'), JSON.stringify({ 'on-inference': [{ busy_ms: 1_500 }] }));
    const manifest = agentManifest(inference, { ...withShell, lifecycle: '  task_acceptance: queue\n  after_task: sleep', artifacts: hookEntry('annotator') });
    await agentProject(project, manifest);
    const agent = await startAgent(project, env, ['--workdir', workdir]);
    try {
      const sent = await rpc(agent.url, 'message/send', textMessage('touch it'));
      const taskId = (sent.body.result as { id: string }).id;
      await eventually(
        async () =>
          (await fs.readFile(path.join(workdir, 'hooks', 'annotator', 'events.jsonl'), 'utf8').catch(() => '')).includes('on-inference') ? true : undefined,
        20_000,
        'the on-inference hook to be running',
      );
      expect((await rpc(agent.url, 'tasks/cancel', { id: taskId })).body.result).toMatchObject({ status: { state: 'canceled' } });
      // The next task is answered only once the canceled one's attempt is over, the hook's spin with it.
      const next = await rpc(agent.url, 'message/send', { ...textMessage('and now?'), configuration: { blocking: true } });
      expect((next.body.result as { status: { state: string } }).status.state).toBe('completed');
      expect(existsSync(path.join(workdir, 'tool-ran'))).toBe(false);
      // Not even asked for: no call is dispatched, none refused.
      const sessionDir = path.join(workdir, '.murmur', agent.sessionId);
      expect((await traceOf(sessionDir)).filter((event) => event.event_type === 'tool_call')).toEqual([]);
      expect((await rpc(agent.url, 'tasks/get', { id: taskId })).body.result).toMatchObject({ status: { state: 'canceled' } });
    } finally {
      await agent.stop();
    }
  });

  it('never sends back a task its client canceled, whatever its on-task-end hook asks', async () => {
    // The first task's model is slow: the client cancels it meanwhile. The reviewer asks to reopen
    // every task it is told of; a canceled one is over all the same.
    const inference = await model((_body, index) => (index === 0 ? { text: 'too late', delayMs: 2_000 } : { text: 'answered' }));
    const project = path.join(scratch.dir, 'canceled-reopen');
    const workdir = path.join(project, 'work');
    await fs.mkdir(path.join(workdir, 'hooks', 'reviewer'), { recursive: true });
    await fs.writeFile(
      path.join(workdir, 'hooks', 'reviewer', 'script.json'),
      JSON.stringify({ 'on-task-end': [{ return: 'reopen-task', val: 'again' }, { return: 'none' }] }),
    );
    const manifest = agentManifest(inference, {
      lifecycle: '  task_acceptance: queue\n  after_task: sleep',
      artifacts: hookEntry('reviewer'),
    });
    await agentProject(project, manifest);
    const agent = await startAgent(project, env, ['--workdir', workdir]);
    try {
      const sent = await rpc(agent.url, 'message/send', textMessage('be slow'));
      const taskId = (sent.body.result as { id: string }).id;
      await eventually(() => (inference.requests().length > 0 ? true : undefined), 20_000, 'the slow inference to be asked');
      expect((await rpc(agent.url, 'tasks/cancel', { id: taskId })).body.result).toMatchObject({ status: { state: 'canceled' } });
      // The next task runs once the canceled one's attempt is over, its on-task-end with it.
      const next = await rpc(agent.url, 'message/send', { ...textMessage('and now?'), configuration: { blocking: true } });
      expect(next.body.result).toMatchObject({ status: { state: 'completed' } });
      const trace = await traceOf(path.join(workdir, '.murmur', agent.sessionId));
      // The hook was asked, and asked to reopen: the canceled task was not sent back for it.
      expect(
        (await fs.readFile(path.join(workdir, 'hooks', 'reviewer', 'events.jsonl'), 'utf8')).split('\n').filter((line) => line.includes('on-task-end')).length,
      ).toBeGreaterThanOrEqual(1);
      expect(trace.filter((event) => event.event_type === 'task_reopened' && event.task_id === taskId)).toEqual([]);
      // One inference for the canceled task, one for the next: none for a reopened attempt.
      expect(inference.requests()).toHaveLength(2);
      expect((await rpc(agent.url, 'tasks/get', { id: taskId })).body.result).toMatchObject({ status: { state: 'canceled' } });
    } finally {
      await agent.stop();
    }
  });

  it("streams a task's text to that task while an async hook's completion is under way", async () => {
    // The hook, told of the first task's inference, makes its slow completion while the second
    // task runs; the second task's answer is streamed meanwhile.
    const inference = await startScriptedInference({
      stream: 'as-asked',
      script: (body) => {
        const request = JSON.stringify(body);
        if (body.system === 'be brief') return { text: 'hook answer', delayMs: 2_500 };
        return request.includes('task two') ? { text: 'the answer to task two', delayMs: 1_000 } : { text: 'the answer to task one' };
      },
    });
    servers.push(inference);
    const project = path.join(scratch.dir, 'async-completion');
    const workdir = path.join(project, 'work');
    await fs.mkdir(path.join(workdir, 'hooks', 'async-recorder'), { recursive: true });
    await fs.writeFile(
      path.join(workdir, 'hooks', 'async-recorder', 'script.json'),
      JSON.stringify({ 'on-inference': [{ infer: { messages: [{ role: 'user', content: 'annotate' }], systemPrompt: 'be brief' } }, { return: 'none' }] }),
    );
    const manifest = agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep', artifacts: hookEntry('async-recorder') });
    await agentProject(project, manifest);
    const agent = await startAgent(project, env, ['--workdir', workdir]);
    try {
      /** A task sent over message/stream: the pieces of text its stream carried, up to its final status. */
      const streamed = async (text: string): Promise<string[]> => {
        const frames = await readSse(
          await openStream(agent.url, 'message/stream', textMessage(text)),
          (frame) => frame.event === 'status' && frame.data.includes('"final":true'),
        );
        return frames
          .filter((frame) => frame.event === 'text')
          .map((frame) => (JSON.parse(frame.data) as { result: { artifact?: { parts: Array<{ text?: string }> } } }).result.artifact?.parts[0]?.text ?? '')
          .filter((piece) => piece !== '');
      };
      expect((await streamed('task one')).join('')).toBe('the answer to task one');
      // Piece by piece as the model wrote them (the script sends two): chunks that went elsewhere
      // would leave the task only its whole text, sent at the end of its turn.
      const pieces = await streamed('task two');
      expect(pieces.join('')).toBe('the answer to task two');
      expect(pieces.length, JSON.stringify(pieces)).toBeGreaterThan(1);
    } finally {
      await agent.stop();
    }
  });

  it('hands on-shell the whole command, however long: only the OTel attribute is cut', async () => {
    const command = `echo ${'x'.repeat(300)}`;
    const inference = await model([{ toolCalls: [{ name: 'bash', input: { command }, id: 'call-1' }] }, { text: 'all done' }]);
    const run = await runWithHooks('long-command', { inference, hooks: { recorder: {} }, manifest: withShell });
    expect(run.result.code, run.result.stderr).toBe(0);
    const shell = (await run.recorded('recorder')).find((event) => event.fn === 'on-shell');
    expect(shell?.event.command).toBe(command);
  });

  it("gives a hook one completion through the session's driver, traced with its origin, and its artifact reaches A2A clients", async () => {
    const inference = await model((body) => ((body.system as string | undefined) === 'be brief' ? { text: 'hook answer' } : { text: 'the capsule answer' }));
    const project = path.join(scratch.dir, 'a2a-artifact');
    const workdir = path.join(project, 'work');
    await fs.mkdir(path.join(workdir, 'hooks', 'annotator'), { recursive: true });
    await fs.writeFile(
      path.join(workdir, 'hooks', 'annotator', 'script.json'),
      JSON.stringify({ 'on-inference': [{ infer: { messages: [{ role: 'user', content: 'annotate' }], systemPrompt: 'be brief' } }] }),
    );
    await agentProject(project, agentManifest(inference, { artifacts: hookEntry('annotator') }));
    const agent = await startAgent(project, env, ['--workdir', workdir]);
    try {
      const response = await openStream(agent.url, 'message/stream', textMessage('hello'));
      const frames = await readSse(response, (frame) => frame.event === 'status' && (frame.data as { final?: boolean }).final === true);
      type ArtifactUpdate = { result: { kind: string; artifact: { name: string; parts: Array<{ text: string }> } } };
      const updates = frames
        .filter((frame) => frame.event === 'artifact')
        .map((frame) => JSON.parse(String(frame.data)) as ArtifactUpdate)
        .filter((update) => update.result.artifact.name === 'annotator');
      expect(updates, JSON.stringify(frames)).toHaveLength(1);
      expect(JSON.parse(updates[0]?.result.artifact.parts[0]?.text ?? '')).toMatchObject({ text: 'hook answer', model: 'test-model' });
      await agent.exited;
      const trace = await traceOf(path.join(workdir, '.murmur', agent.sessionId));
      expect(trace.filter((event) => event.event_type === 'inference' && event.origin === 'hook:annotator')).toMatchObject([
        // Counted as an agent turn's: the provider's reported usage, where it was estimated from the request.
        { turn: 0, decision: 'end_turn', tool_name: null, model: 'test-model', input_tokens: 11, output_tokens: 7 },
      ]);
    } finally {
      await agent.stop();
    }
  });

  describe('compaction', () => {
    const compacting = (threshold = 0.5) => ({
      ...withShell,
      extra: 'context:\n  max_tokens: 20',
      inference: `  compaction:\n    threshold: ${threshold}\n    dump_summaries: true\n    system_prompt: Summarise tightly.`,
    });

    it("replaces the history with the on-compaction hook's, uses no turn, and records tokens before and after, in the trace and as a capsule.compaction span", async () => {
      const inference = await model(shellThenDone());
      const collector = await startOtlpReceiver();
      servers.push(collector);
      const plain = compacting();
      const run = await runWithHooks('compaction', {
        inference,
        hooks: { compactor: { 'on-compaction': [{ return: 'replace-context', summary: 'SUMMARY OF EARLIER WORK' }] } },
        manifest: { ...plain, network: [collector.authority], extra: `${plain.extra}\nobservability:\n  otel_endpoint: ${collector.endpoint}` },
      });
      expect(run.result.code, run.result.stderr).toBe(0);
      const second = inference.requests()[1]?.body.messages as Array<{ role: string; content: Array<{ type: string; text?: string }> }>;
      expect(second[0]).toMatchObject({ role: 'user', content: [{ type: 'text', text: 'SUMMARY OF EARLIER WORK' }] });
      expect(second.map((message) => message.role)).toEqual(['user', 'assistant', 'user']);
      const trace = await run.trace();
      const compactions = trace.filter((event) => event.event_type === 'compaction');
      expect(compactions[0]).toMatchObject({ turn: 0, tokens_before: 18 });
      expect(Number(compactions[0]?.tokens_after)).toBeGreaterThan(0);
      expect(trace.filter((event) => event.event_type === 'inference')).toHaveLength(2);
      const told = (await run.recorded('compactor'))[0]?.event as Record<string, unknown>;
      expect(told).toMatchObject({ sessionTokens: 18, threshold: 0.9, systemPrompt: 'Summarise tightly.' });
      expect(JSON.parse((await run.read('out/compaction-summaries.jsonl')).split('\n')[0] as string)).toMatchObject({
        summary: 'SUMMARY OF EARLIER WORK',
        tokens_before: 18,
        turn: 0,
      });
      expect(await fs.readFile(path.join(run.sessionDir, 'logs', 'bootstrap.log'), 'utf8')).toContain('[compaction] hook compaction at turn 0');
      const spans = collector.spans();
      const span = spans.find((candidate) => candidate.name === 'capsule.compaction');
      expect(span?.attributes).toEqual({ tokens_before: 18, tokens_after: compactions[0]?.tokens_after });
      expect(span?.parentSpanId).toBe(spans.find((candidate) => candidate.name === 'capsule.session')?.spanId);
    });

    it('without an on-compaction hook, goes on uncompacted and says so in bootstrap.log', async () => {
      const inference = await model(shellThenDone());
      const run = await runWithHooks('no-compactor', { inference, hooks: {}, manifest: compacting() });
      expect(run.result.code, run.result.stderr).toBe(0);
      expect(await fs.readFile(path.join(run.sessionDir, 'logs', 'bootstrap.log'), 'utf8')).toContain(
        '[compaction] threshold reached but no hook returned replace-context; continuing without compaction',
      );
      expect((await run.trace()).filter((event) => event.event_type === 'compaction')).toEqual([]);
    });

    it('fails the session when the compaction hook fails', async () => {
      const inference = await model(shellThenDone());
      const run = await runWithHooks('compactor-fails', { inference, hooks: { compactor: { 'on-compaction': [{ err: 'boom' }] } }, manifest: compacting() });
      expect(run.result.code).toBe(1);
      expect(await run.read('out/result.txt')).toBe('error: compaction hook failed: compactor: boom');
      expect(run.result.stderr).toContain('error[E-RUN-007]');
    });

    // The first compaction (history: the task alone) keeps it; the second, with a tool call and its result, breaks it.
    it.each([
      ['drops a tool result', 'drop-tools', "returned a history this runtime cannot use: tool call 'call-1' has no tool result"],
      ['alters a tool result', 'tamper-tools', 'is a tool result that is not one the hook was given unmodified'],
    ])('fails the session, naming why, when the replacement %s', async (_what, keep, reason) => {
      const inference = await model(shellThenDone());
      const run = await runWithHooks(`compactor-${keep}`, {
        inference,
        hooks: { compactor: { 'on-compaction': [{ return: 'none' }, { return: 'replace-context', keep }] } },
        manifest: compacting(),
      });
      expect(run.result.code).toBe(1);
      expect(await run.read('out/result.txt')).toContain(reason);
    });

    it('does not compact at all without context.max_tokens, whatever the threshold', async () => {
      const inference = await model(shellThenDone());
      const { extra: _budget, ...unbudgeted } = compacting(0.01);
      const run = await runWithHooks('no-budget', {
        inference,
        hooks: { compactor: { 'on-compaction': [{ return: 'replace-context', summary: 'NEVER' }] } },
        manifest: unbudgeted,
      });
      expect(run.result.code, run.result.stderr).toBe(0);
      expect((await run.recorded('compactor')).filter((event) => event.fn === 'on-compaction')).toEqual([]);
      expect((await run.trace()).filter((event) => event.event_type === 'compaction')).toEqual([]);
    });
  });

  describe('task reopening', () => {
    it("reruns the task with the on-task-end hook's reason added to task.md, on the same turn budget", async () => {
      const inference = await model([{ text: 'first try' }, { text: 'second try' }]);
      const run = await runWithHooks('reopen', {
        inference,
        hooks: { reviewer: { 'on-task-end': [{ return: 'reopen-task', val: 'Add more detail.' }, { return: 'none' }] } },
      });
      expect(run.result.code, run.result.stderr).toBe(0);
      expect(await run.read('out/result.txt')).toBe('second try');
      const second = inference.requests()[1]?.body.messages as Array<{ content: Array<{ text?: string }> }>;
      const text = second[0]?.content[0]?.text ?? '';
      expect(text).toContain('do the thing\n\n---\n\n# Reopen feedback');
      expect(text).toContain('## Reopen 1 — from hook `reviewer`\n\nAdd more detail.');
      const trace = await run.trace();
      expect(trace.find((event) => event.event_type === 'task_reopened')).toMatchObject({
        hook_name: 'reviewer',
        reason: 'Add more detail.',
        reopen_number: 1,
      });
      expect(trace.find((event) => event.event_type === 'task_end')).toMatchObject({ exit_status: 'ok', reopen_count: 1, turns: 2 });
      expect(trace.filter((event) => event.event_type === 'session_start')).toHaveLength(2);
    });

    it('ends the task as reopen_budget_exhausted when the hook still asks after max_task_reopens', async () => {
      const inference = await model([{ text: 'never good enough' }]);
      const run = await runWithHooks('reopen-exhausted', { inference, hooks: { reviewer: { 'on-task-end': [{ return: 'reopen-task', val: 'again' }] } } });
      expect(run.result.code).toBe(1);
      const trace = await run.trace();
      expect(trace.filter((event) => event.event_type === 'task_reopened')).toHaveLength(1);
      expect(trace.find((event) => event.event_type === 'task_end')).toMatchObject({ exit_status: 'reopen_budget_exhausted', reopen_count: 1 });
      expect(run.result.stderr).toContain(
        "task reopen budget exhausted after 1 reopen(s): hook 'reviewer' still requested another reopen, and inference.max_task_reopens allows 1",
      );
      expect(run.result.stderr).toContain('or raise inference.max_task_reopens in murmur.yaml');
    });

    it('names the turns as the budget spent when they run out before the reopens do', async () => {
      const inference = await model([{ text: 'never good enough' }]);
      const run = await runWithHooks('reopen-turns', {
        inference,
        hooks: { reviewer: { 'on-task-end': [{ return: 'reopen-task', val: 'again' }] } },
        manifest: { inference: '  max_turns: 3\n  max_task_reopens: 1000' },
      });
      expect(run.result.code).toBe(1);
      expect(run.result.stderr).toContain("hook 'reviewer' still requested another reopen, and the task's 3 turns (inference.max_turns) are used up");
      expect(run.result.stderr).toContain('or raise inference.max_turns in murmur.yaml');
    });

    it('never reopens when max_task_reopens is 0', async () => {
      const inference = await model([{ text: 'only once' }]);
      const run = await runWithHooks('reopen-off', {
        inference,
        hooks: { reviewer: { 'on-task-end': [{ return: 'reopen-task', val: 'again' }] } },
        manifest: { inference: '  max_task_reopens: 0' },
      });
      expect(run.result.code).toBe(1);
      const trace = await run.trace();
      expect(trace.filter((event) => event.event_type === 'task_reopened')).toEqual([]);
      expect(trace.find((event) => event.event_type === 'task_end')).toMatchObject({ exit_status: 'reopen_budget_exhausted', reopen_count: 0 });
    });
  });
});
