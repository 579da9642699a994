import { promises as fs } from 'node:fs';
import path from 'node:path';
import { writeMurZip } from '@murmur/shared/artifacts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject, traceOf } from './support/agents.js';
import { publishInto } from './support/artifacts.js';
import { listTree, tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * `mur run --system-prompt` as upstream's `system_prompt.rs` has it: the operator's prompt is
 * attributed to the command line even when it is empty, recorded verbatim only where the manifest
 * lets the trace hold capsule content, refused for a capsule that has no prompt, and releasing a
 * skill bound as the prompt back into the tools the model may call.
 */

const SKILL = 'house-style';

describe('mur run --system-prompt', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  const servers: ScriptedInference[] = [];

  beforeAll(async () => {
    scratch = await tempDir('murmur-system-prompt-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    const skill = await writeMurZip([
      { name: 'murmur.yaml', data: Buffer.from(`name: ${SKILL}\nversion: "1.0.0"\nruntime: skill\nprompt_payload: true\ndescription: the house style\n`) },
      { name: 'skill.md', data: Buffer.from('Always answer in haiku.\n') },
    ]);
    await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), skill);
  });

  afterAll(async () => {
    for (const server of servers) await server.close();
    await scratch.cleanup();
  });

  async function runAgent(name: string, options: { inference?: string; extra?: string; artifacts?: string }, args: string[]) {
    const model = await startScriptedInference({ script: [{ text: 'hello' }] });
    servers.push(model);
    const project = await agentProject(path.join(scratch.dir, name), agentManifest(model, options));
    const result = await runMur(['run', '--json', '--task', 'Say hello.', ...args], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const workdir = (JSON.parse(result.stdout.trim().split('\n')[0] as string) as { workdir: string }).workdir;
    const start = (await traceOf(workdir)).find((event) => event.event_type === 'session_start') as Record<string, unknown>;
    const [request] = model.requests();
    const body = request?.body as { system?: string; tools?: Array<{ name: string }> };
    return {
      start,
      system: String(body.system ?? ''),
      toolNames: (body.tools ?? []).map((tool) => tool.name),
      murmurMd: await fs.readFile(path.join(workdir, 'MURMUR.md'), 'utf8'),
    };
  }

  it("attributes an empty --system-prompt to the command line: it clears the manifest's prompt, with no hash", async () => {
    const run = await runAgent('empty', { inference: '  system_prompt: "Manifest prompt"' }, ['--system-prompt', '']);
    expect(run.system.startsWith('[Capsule]\nName:')).toBe(true);
    expect(run.system).not.toContain('Manifest prompt');
    expect(run.start.system_prompt_source).toBe('cli');
    expect(run.start.system_prompt_sha256).toBeNull();
  });

  it('records the prompt verbatim in session_start only when the trace may include tool output', async () => {
    const withheld = await runAgent('withheld', { inference: '  system_prompt: "Manifest prompt"' }, ['--system-prompt', 'CLI prompt']);
    expect(withheld.start).not.toHaveProperty('system_prompt');
    const included = await runAgent('included', { inference: '  system_prompt: "Manifest prompt"', extra: 'trace:\n  include_tool_output: true' }, [
      '--system-prompt',
      'CLI prompt',
    ]);
    expect(included.start.system_prompt).toBe('CLI prompt');
    expect(included.start.system_prompt_source).toBe('cli');
  });

  it('replaces a system_prompt_file that does not exist without reading it', async () => {
    const run = await runAgent('missing-file', { inference: '  system_prompt_file: missing-conventions.md' }, ['--system-prompt', 'CLI prompt']);
    expect(run.system).toContain('CLI prompt');
    expect(run.start.system_prompt_source).toBe('cli');
  });

  it('refuses --system-prompt for a capsule without inference: with E-IO-003, before anything is staged', async () => {
    const project = path.join(scratch.dir, 'script');
    await fs.mkdir(project, { recursive: true });
    await fs.writeFile(path.join(project, 'murmur.yaml'), 'name: script-capsule\nversion: 0.1.0\n');
    const result = await runMur(['run', '--system-prompt', 'CLI prompt'], { cwd: project, env });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('E-IO-003');
    expect(result.stderr).toContain('--system-prompt');
    expect(result.stderr).toContain('inference:');
    // Not even the missing capsule.wasm was looked at, and nothing was written.
    expect(result.stderr).not.toContain('capsule.wasm');
    expect(await listTree(project)).toEqual(['murmur.yaml']);
  });

  it('puts a system_prompt_artifact that --system-prompt replaced back among the callable skills', async () => {
    const options = { artifacts: `  - name: ${SKILL}\n    version: 1.0.0\n    runtime: skill`, inference: `  system_prompt_artifact: ${SKILL}` };
    const bound = await runAgent('bound', options, []);
    expect(bound.system).toContain('Always answer in haiku.');
    expect(bound.toolNames).not.toContain(SKILL);
    expect(bound.murmurMd).toContain(`- **${SKILL}** — the house style *(bound as system prompt — already in context, not separately callable)*`);

    const released = await runAgent('released', options, ['--system-prompt', 'CLI prompt']);
    expect(released.system).toContain('CLI prompt');
    expect(released.system).not.toContain('Always answer in haiku.');
    expect(released.toolNames).toContain(SKILL);
    expect(released.murmurMd).not.toContain('bound as system prompt');
    expect(released.murmurMd).toContain(`- **${SKILL}** — the house style *(call by name to load guidance)*`);
    expect(released.start.system_prompt_source).toBe('cli');
  });

  it('refuses a call to the system_prompt_artifact while it is bound as the prompt: hidden from the model and not callable either', async () => {
    const model = await startScriptedInference({ script: [{ toolCalls: [{ name: SKILL, input: {} }] }, { text: 'done' }] });
    servers.push(model);
    const options = { artifacts: `  - name: ${SKILL}\n    version: 1.0.0\n    runtime: skill`, inference: `  system_prompt_artifact: ${SKILL}` };
    const project = await agentProject(path.join(scratch.dir, 'bound-called'), agentManifest(model, options));
    const result = await runMur(['run', '--json', '--task', 'Say hello.'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const second = model.requests()[1]?.body as { messages?: unknown[] } | undefined;
    const answered = JSON.stringify(second?.messages?.at(-1) ?? null);
    expect(answered).toContain(`tool '${SKILL}' is not declared in manifest allowlist`);
    expect(answered).not.toContain('Always answer in haiku.');
  });
});
