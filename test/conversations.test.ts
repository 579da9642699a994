import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * A threaded capsule's conversation outlives the capsule (upstream 0.6.0): each answered task is
 * recorded under `$MURMUR_HOME/conversations/<record>/<context-id>/`, so a later `mur run` in the
 * same context continues it.
 */

type Message = { role: string; content: Array<{ type: string; text?: string }> };

describe('conversations', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let inference: ScriptedInference;

  beforeAll(async () => {
    scratch = await tempDir('murmur-conversations-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    let answer = 0;
    inference = await startScriptedInference({ script: () => ({ text: `answer ${++answer}` }) });
  });

  afterAll(async () => {
    await inference.close();
    await scratch.cleanup();
  });

  const threaded = (record?: string) =>
    agentManifest(inference, { name: 'chatty', lifecycle: '  conversation: threaded', ...(record ? { extra: `context:\n  record: ${record}` } : {}) });

  const texts = (messages: Message[]) => messages.map((message) => `${message.role}: ${message.content.map((block) => block.text ?? '').join('')}`);

  it('continues a context across two mur runs: the second launch sees the first one’s history', async () => {
    const project = await agentProject(path.join(scratch.dir, 'resume'), threaded());
    const first = await runMur(['run', '--json', '--context', 'ctx-resume', '--task', 'my name is Ada'], { cwd: project, env });
    expect(first.code, first.stderr).toBe(0);
    const file = path.join(env.MURMUR_HOME as string, 'conversations', 'chatty', 'ctx-resume', 'conversation.jsonl');
    expect(((await fs.stat(file)).mode & 0o777).toString(8)).toBe('600');
    expect(((await fs.stat(path.dirname(file))).mode & 0o777).toString(8)).toBe('700');
    const before = inference.requests().length;
    const second = await runMur(['run', '--json', '--resume', 'ctx-resume', '--task', 'what is my name?'], { cwd: project, env });
    expect(second.code, second.stderr).toBe(0);
    const sent = inference.requests()[before]?.body.messages as Message[];
    expect(texts(sent)).toEqual(['user: my name is Ada', 'assistant: answer 1', 'user: what is my name?']);
    expect((await fs.readFile(file, 'utf8')).trim().split('\n')).toHaveLength(4);
  });

  it('refuses --resume of a context that has no recorded conversation, naming it, before the capsule runs', async () => {
    const project = await agentProject(path.join(scratch.dir, 'unknown'), threaded());
    const before = inference.requests().length;
    const result = await runMur(['run', '--resume', 'ctx-never-seen', '--task', 'hello'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("error[E-CTX-001]: no conversation is recorded for context 'ctx-never-seen' of chatty");
    expect(inference.requests().length).toBe(before);
  });

  it('keeps no file for a context id that is not a path segment, says so, and the run goes on', async () => {
    const project = await agentProject(path.join(scratch.dir, 'odd-id'), threaded());
    const result = await runMur(['run', '--json', '--context', '../../escape', '--task', 'hello'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("warning: --context '../../escape' is not a plain name");
    expect(result.stderr).toContain('so no conversation is kept for it');
    await expect(fs.stat(path.join(env.MURMUR_HOME as string, 'escape'))).rejects.toThrow();
    await expect(fs.stat(path.join(env.MURMUR_HOME as string, 'conversations', 'escape'))).rejects.toThrow();
  });

  it("keeps nothing with context.record: off, and names another record's directory with context.record", async () => {
    const off = await agentProject(path.join(scratch.dir, 'off'), threaded('off'));
    expect((await runMur(['run', '--context', 'ctx-off', '--task', 'hello'], { cwd: off, env })).code).toBe(0);
    await expect(fs.stat(path.join(env.MURMUR_HOME as string, 'conversations', 'chatty', 'ctx-off'))).rejects.toThrow();
    const named = await agentProject(path.join(scratch.dir, 'named'), threaded('shared-notes'));
    expect((await runMur(['run', '--context', 'ctx-named', '--task', 'hello'], { cwd: named, env })).code).toBe(0);
    await fs.stat(path.join(env.MURMUR_HOME as string, 'conversations', 'shared-notes', 'ctx-named', 'conversation.jsonl'));
  });

  it('reports an unwritable home once and survives it', async () => {
    const home = path.join(scratch.dir, 'readonly-home');
    await fs.mkdir(home, { recursive: true });
    // A file where the conversations directory would go: nothing under it can be created.
    await fs.writeFile(path.join(home, 'conversations'), 'not a directory');
    const project = await agentProject(path.join(scratch.dir, 'unwritable'), threaded());
    const result = await runMur(['run', '--context', 'ctx-lost', '--task', 'hello'], { cwd: project, env: { ...env, MURMUR_HOME: home } });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr.match(/\[conversation\] the conversation for context 'ctx-lost' could not be written/g)).toHaveLength(1);
  });
});
