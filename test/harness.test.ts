import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentProject, rpc, startAgent, textMessage, traceOf } from './support/agents.js';
import { claudeCodeBin } from './support/claude-code.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type ScriptedInference, type ScriptedReply, startScriptedInference } from './support/scripted-inference.js';

/**
 * `inference.transport: process`: the runtime drives the real Claude Code headless, inside the
 * capsule's sandbox, against a scripted Anthropic endpoint on loopback (the one fake: the model).
 * The capsule's tools reach it over the runtime's MCP server; its conversation is its own, and
 * the runtime keeps only the session id per context in `harness-session.json`.
 */

type Body = { messages?: Array<{ role: string; content: unknown }> };

/** Every text the model was sent, flattened: what a request shows of the conversation so far. */
function textsOf(body: Body): string {
  return JSON.stringify(body.messages ?? []);
}

describe('the harness transport (Claude Code)', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let model: ScriptedInference;
  /** What the scripted model answers next, by the request's last message. */
  let answer: (body: Body) => ScriptedReply = () => ({ text: 'ok' });

  beforeAll(async () => {
    scratch = await tempDir('murmur-harness-');
    const bin = await claudeCodeBin();
    model = await startScriptedInference({ stream: 'as-asked', script: (body) => answer(body as Body) });
    env = {
      MURMUR_HOME: path.join(scratch.dir, 'home'),
      PATH: `${bin}:${process.env.PATH ?? ''}`,
      ANTHROPIC_BASE_URL: model.endpoint,
      ANTHROPIC_API_KEY: 'test-key',
      // A refused request is final at once: Claude Code's own retries take minutes.
      CLAUDE_CODE_MAX_RETRIES: '0',
    };
  }, 600_000);

  afterAll(async () => {
    await model?.close();
    await scratch?.cleanup();
  });

  const manifest = (options: { name?: string; network?: string[]; command?: string; lifecycle?: string } = {}) =>
    [
      `name: ${options.name ?? 'harnessed'}`,
      'version: 0.1.0',
      'description: a capsule whose inference is Claude Code',
      'capabilities:',
      '  network:',
      `    allow: [${(options.network ?? [model.authority]).join(', ')}]`,
      '  env:',
      '    allow: [ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, CLAUDE_CODE_MAX_RETRIES]',
      '  shell:',
      '    allow: [echo]',
      ...(options.lifecycle ? ['lifecycle:', options.lifecycle] : []),
      'inference:',
      '  transport: process',
      `  command: ${options.command ?? 'claude'}`,
      '  model: test-model',
      '',
    ].join('\n');

  const entryOf = async (record: string, context: string) =>
    JSON.parse(await fs.readFile(path.join(env.MURMUR_HOME as string, 'conversations', record, context, 'harness-session.json'), 'utf8')) as Record<
      string,
      unknown
    >;

  const sessionHeader = (index: number) => model.requests()[index]?.headers['x-claude-code-session-id'];

  it('answers a task through Claude Code, which calls a capsule tool over MCP, and records the session it started', async () => {
    const project = await agentProject(path.join(scratch.dir, 'answer'), manifest());
    answer = (body) =>
      textsOf(body).includes('said: hello from the harness')
        ? { text: 'the echo tool said hello' }
        : { toolCalls: [{ name: 'mcp__murmur__echo', input: { command: 'said: hello from the harness' } }] };
    const before = model.requests().length;
    const result = await runMur(['run', '--json', '--context', 'ctx-answer', '--task', 'use the echo tool'], { cwd: project, env, timeoutMs: 120_000 });
    expect(result.code, result.stderr).toBe(0);
    const launch = JSON.parse(result.stdout.trim().split('\n')[0] as string) as { workdir: string };
    expect(await fs.readFile(path.join(launch.workdir, 'out', 'result.txt'), 'utf8')).toBe('the echo tool said hello');
    const sent = model.requests().slice(before);
    expect(sent).toHaveLength(2);
    expect(textsOf(sent[0]?.body as Body)).toContain('use the echo tool');
    // The model saw the capsule's tool, and nothing of the harness's own.
    const offered = ((sent[0]?.body as { tools?: Array<{ name: string }> }).tools ?? []).map((tool) => tool.name);
    expect(offered).toContain('mcp__murmur__echo');
    expect(offered.filter((name) => !name.startsWith('mcp__') && !/Deferred|ToolSearch/.test(name))).toEqual([]);
    const trace = await traceOf(launch.workdir);
    const call = trace.find((event) => event.event_type === 'tool_call');
    expect(call).toMatchObject({ tool_name: 'echo', status: 'ok' });
    expect(trace.filter((event) => event.event_type === 'inference')).toHaveLength(2);
    expect(trace.find((event) => event.event_type === 'session_end')).toMatchObject({ exit_status: 'ok' });
    const entry = await entryOf('harnessed', 'ctx-answer');
    expect(entry).toMatchObject({ type: 'murmur.harness-session', harness: 'claude-code', driver: 'claude' });
    expect(entry.session_id).toBe(sessionHeader(before));
    expect(entry.created_ms).toBe(entry.updated_ms);
  }, 180_000);
});
