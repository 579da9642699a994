import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentProject, rpc, startAgent, textMessage, traceOf } from './support/agents.js';
import { componentArtifact, publishInto } from './support/artifacts.js';
import { continuationDriver } from './support/driver-guests.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';

/**
 * A stateful driver's continuation (upstream's `continuation.rs`): a driver that answers a turn
 * with the metadata `continuation_id` is sent, next turn, only the messages added since, with that
 * id; one that never does is sent the whole history every turn. The continuation driver reports
 * what it was sent in its final text, so `out/result.txt` shows it. The manifest's endpoint is a
 * dummy: the driver calls no model.
 */

function manifest(config: string | undefined, extra: string[] = []): string {
  return [
    'name: agent-capsule',
    'version: 0.1.0',
    'artifacts:',
    '  - name: continuation-driver',
    '    version: 0.1.0',
    '    runtime: driver',
    'capabilities:',
    '  network:',
    '    allow: [127.0.0.1:9]',
    '  shell:',
    '    allow: [bash]',
    ...extra,
    'inference:',
    '  endpoint: http://127.0.0.1:9',
    '  model: test-model',
    '  driver:',
    '    artifact: continuation-driver',
    ...(config ? ['    config:', `      mode: ${config}`] : []),
    '',
  ].join('\n');
}

describe('a driver continuation', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-continuation-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    const driver = await componentArtifact('continuation-driver', '0.1.0', (await continuationDriver()).bytes, 'driver');
    await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), driver);
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  /** The same task in both modes: only the driver's config differs, which never reaches the request. */
  async function runSession(name: string, config: string | undefined) {
    const project = await agentProject(path.join(scratch.dir, name), manifest(config));
    const result = await runMur(['run', '--json', '--task', 'Please echo hello.'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const workdir = (JSON.parse(result.stdout.trim().split('\n')[0] as string) as { workdir: string }).workdir;
    const text = await fs.readFile(path.join(workdir, 'out', 'result.txt'), 'utf8');
    const inputTokens = (await traceOf(workdir)).filter((event) => event.event_type === 'inference').map((event) => event.input_tokens as number);
    return { text: text.trim(), inputTokens };
  }

  it('sends the second turn only the messages added since the first, with the continuation id the driver gave', async () => {
    const run = await runSession('active', undefined);
    // The assistant's tool call and its result: not the task's message again.
    expect(run.text).toBe('wire_n=2 cont=cont-echo-1');
  });

  it('resends the whole history, with no continuation id, to a driver that never gives one', async () => {
    const run = await runSession('inactive', 'NOCONT');
    expect(run.text).toBe('wire_n=3 cont=none');
  });

  it('never carries a continuation into a task that starts from other messages: the next task of the context is sent whole', async () => {
    // One turn a task: the first task's tool call leaves a continuation held, and the task ends out
    // of turns, its history not kept. The next task in the same context starts from its own message.
    const project = await agentProject(
      path.join(scratch.dir, 'next-task'),
      manifest(undefined, ['lifecycle:', '  task_acceptance: queue', '  after_task: sleep']).replace(
        '  model: test-model',
        '  model: test-model\n  max_turns: 1',
      ),
    );
    const agent = await startAgent(project, env);
    try {
      const states: string[] = [];
      for (const text of ['the first task', 'the second task']) {
        const sent = await rpc(agent.url, 'message/send', { ...textMessage(text, { contextId: 'ctx-shared' }), configuration: { blocking: true } });
        states.push((sent.body.result as { status: { state: string } }).status.state);
      }
      // Sent whole, with no id, the second task's first turn is the driver's first turn again (a
      // tool call, then out of turns); given the first task's continuation and none of its own
      // messages, it answered at once with `wire_n=0 cont=cont-echo-1`.
      expect(await fs.readFile(path.join(agent.workdir, 'out', 'result.txt'), 'utf8')).toBe('error: inference loop exceeded 1 turns');
      expect(states).toEqual(['failed', 'failed']);
      const calls = (await traceOf(agent.workdir)).filter((event) => event.event_type === 'tool_call').map((event) => event.tool_name);
      expect(calls).toEqual(['bash', 'bash']);
    } finally {
      await agent.stop();
    }
  });

  it('counts the same input tokens each turn with and without a continuation', async () => {
    const active = await runSession('active-tokens', undefined);
    const inactive = await runSession('inactive-tokens', 'NOCONT');
    expect(active.text).toBe('wire_n=2 cont=cont-echo-1');
    expect(inactive.text).toBe('wire_n=3 cont=none');
    expect(active.inputTokens).toHaveLength(2);
    // The system prompt names each run's own workdir: the growth from turn 0 is what must agree.
    const growth = (tokens: number[]) => tokens.map((count) => count - (tokens[0] as number));
    expect(growth(active.inputTokens)).toEqual(growth(inactive.inputTokens));
    // Counted from the full history: the smaller wire would have made the second turn cheaper than the first.
    expect(growth(active.inputTokens)[1]).toBeGreaterThan(0);
  }, 60_000);
});
