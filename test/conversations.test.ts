import { spawnSync } from 'node:child_process';
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
    inference = await startScriptedInference({
      // An answer past what a save may carry (8 MiB of JSON) when asked for one.
      script: (body) => (JSON.stringify(body.messages).includes('LONG ANSWER') ? { text: 'y'.repeat(9 * 1024 * 1024) } : { text: `answer ${++answer}` }),
    });
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

  describe('a record that is not one to read', () => {
    const recordOf = (context: string) => path.join(env.MURMUR_HOME as string, 'conversations', 'chatty', context, 'conversation.jsonl');
    const outside = () => path.join(scratch.dir, 'outside.jsonl');

    /** Each context's record, made into what it names. */
    async function plant(context: string, what: 'fifo' | 'file-link' | 'damaged' | 'oversized' | 'directory-link'): Promise<void> {
      const file = recordOf(context);
      if (what === 'directory-link') {
        const target = path.join(scratch.dir, `target-of-${context}`);
        await fs.mkdir(target, { recursive: true, mode: 0o755 });
        await fs.mkdir(path.dirname(path.dirname(file)), { recursive: true });
        await fs.symlink(target, path.dirname(file));
        return;
      }
      await fs.mkdir(path.dirname(file), { recursive: true });
      if (what === 'fifo') spawnSync('mkfifo', [file]);
      if (what === 'file-link') {
        await fs.writeFile(outside(), `${JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'SECRET-FROM-OUTSIDE' }] })}\n`);
        await fs.symlink(outside(), file);
      }
      if (what === 'damaged') await fs.writeFile(file, `${JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'kept' }] })}\n{"role": "assis`);
      // Loaded, it could never be saved again (a save carries at most 8 MiB): every later turn was forgotten.
      if (what === 'oversized')
        await fs.writeFile(file, `${JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'x'.repeat(9 * 1024 * 1024) }] })}\n`);
    }

    it('refuses --resume of one, saying why, before the capsule runs: a FIFO (whose read waited for ever), a link, a damaged or an oversized record', async () => {
      const project = await agentProject(path.join(scratch.dir, 'unreadable-resume'), threaded());
      for (const [context, what, why] of [
        ['ctx-fifo', 'fifo', 'it is a FIFO'],
        ['ctx-file-link', 'file-link', 'it is a symbolic link, which is not followed'],
        ['ctx-damaged', 'damaged', 'line 2 is not JSON (the record is damaged)'],
        ['ctx-oversized', 'oversized', 'more than the 8388608 such a record may hold'],
      ] as const) {
        await plant(context, what);
        const before = inference.requests().length;
        const result = await runMur(['run', '--resume', context, '--task', 'hello'], { cwd: project, env, timeoutMs: 60_000 });
        expect(result.code, `${what}: ${result.stderr}`).toBe(1);
        expect(result.stderr).toContain(`error[E-CTX-001]: the conversation recorded for context '${context}' of chatty cannot be resumed: `);
        expect(result.stderr, what).toContain(why);
        expect(result.stderr).toContain(`hint: move ${recordOf(context)} aside to start the context afresh`);
        expect(inference.requests().length).toBe(before);
      }
    });

    it('starts a task afresh in a context whose record cannot be read, says so, and leaves the record as it is', async () => {
      const project = await agentProject(path.join(scratch.dir, 'unreadable-context'), threaded());
      await plant('ctx-kept-link', 'file-link');
      const before = inference.requests().length;
      const result = await runMur(['run', '--context', 'ctx-kept-link', '--task', 'hello'], { cwd: project, env });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toContain("[conversation] the record of context 'ctx-kept-link'");
      expect(result.stderr).toContain('this task starts afresh, and the record is left as it is');
      // Nothing of the file the link points to reached the model, and the link is still the link.
      expect(JSON.stringify(inference.requests()[before]?.body)).not.toContain('SECRET-FROM-OUTSIDE');
      expect((await fs.lstat(recordOf('ctx-kept-link'))).isSymbolicLink()).toBe(true);
    });

    it('writes no record through a link in place of a context directory, and leaves what it points to as it was', async () => {
      const project = await agentProject(path.join(scratch.dir, 'linked-dir'), threaded());
      await plant('ctx-linked', 'directory-link');
      const result = await runMur(['run', '--context', 'ctx-linked', '--task', 'hello'], { cwd: project, env });
      expect(result.code, result.stderr).toBe(0);
      const target = path.join(scratch.dir, 'target-of-ctx-linked');
      expect(await fs.readdir(target)).toEqual([]);
      expect(((await fs.stat(target)).mode & 0o777).toString(8)).toBe('755');
      expect(result.stderr).toContain("[conversation] the record of context 'ctx-linked'");
    });
  });

  it('tells the launcher when a conversation has grown past what a record may hold, where only a log said it was no longer recorded', async () => {
    const project = await agentProject(path.join(scratch.dir, 'grown'), threaded());
    const result = await runMur(['run', '--context', 'ctx-grown', '--task', 'LONG ANSWER please'], { cwd: project, env, timeoutMs: 120_000 });
    expect(result.code, result.stderr.slice(0, 2_000)).toBe(0);
    expect(result.stderr).toMatch(/\[conversation\] context ctx-grown was not recorded beyond this session: .*more than the 8388608/);
  });

  it('says what a flag does not do for this capsule: --forget-session where no harness holds the conversation, --context where none is kept', async () => {
    const project = await agentProject(path.join(scratch.dir, 'flags'), threaded());
    const forget = await runMur(['run', '--context', 'ctx-flags', '--forget-session', '--task', 'hello'], { cwd: project, env });
    expect(forget.code, forget.stderr).toBe(0);
    expect(forget.stderr).toContain(
      "warning: --forget-session forgets a harness's session (inference.transport: process); chatty calls its model itself, and its conversation of context 'ctx-flags' is kept",
    );
    const stateless = await agentProject(path.join(scratch.dir, 'stateless'), agentManifest(inference, { name: 'forgetful' }));
    const result = await runMur(['run', '--context', 'ctx-stateless', '--task', 'hello'], { cwd: stateless, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain(
      "warning: context 'ctx-stateless' names a conversation, and forgetful keeps none (lifecycle.conversation is not threaded): each task starts afresh",
    );
  });

  it('hints at a plain name when --resume names a context that is not one, for which nothing is ever recorded', async () => {
    const project = await agentProject(path.join(scratch.dir, 'odd-resume'), threaded());
    const result = await runMur(['run', '--resume', '../x', '--task', 'hello'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      "hint: '../x' is not a plain name (letters, digits, '.', '_', '-'; at most 128), so nothing is ever recorded for it: name the context with one",
    );
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
