import { once } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject } from './support/agents.js';
import { capsuleProject } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { capsuleWat, helloCapsuleJs } from './support/guests.js';
import { eventually, runMur, spawnMur } from './support/processes.js';

/** `mur stage` as a user runs it: with the same environment as `mur run`, and interrupted. */
describe('mur stage', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };

  beforeAll(async () => {
    scratch = await tempDir('murmur-stage-command-');
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  /** An agent whose key is `${STAGE_TEST_KEY}`, which only its project's `.env` sets. */
  async function projectWithDotenv(name: string): Promise<string> {
    const manifest = agentManifest({ endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' }, { name, inference: '  api_key: ${STAGE_TEST_KEY}' });
    return agentProject(path.join(scratch.dir, name), manifest, { '.env': 'STAGE_TEST_KEY=from-the-dotenv\n' });
  }

  it("takes a ${VAR} from the project's .env, as mur run does, unless --no-env-file", async () => {
    const project = await projectWithDotenv('dotenv-staged');
    const env = { MURMUR_HOME: path.join(scratch.dir, 'home-dotenv') };
    const staged = await runMur(['stage', project, '--json'], { env });
    expect(staged.code, staged.stderr).toBe(0);
    expect(JSON.parse(staged.stdout)).toMatchObject({ capsule: { name: 'dotenv-staged' } });
    const without = await runMur(['stage', project, '--no-env-file'], { env });
    expect(without.code).toBe(1);
    expect(without.stderr).toContain('error[E-MAN-003]');
    expect(without.stderr).toContain('STAGE_TEST_KEY');
    // The value is the capsule's secret: staged or refused, it is never shown.
    expect(staged.stdout + staged.stderr + without.stderr).not.toContain('from-the-dotenv');
  });

  it("prints a capsule's grants one line each, in its plan and in --explain-scope, whatever line breaks they hold", async () => {
    const grants = 'capabilities:\n  shell:\n    allow: ["sh\\nstatus:  ok"]\n  env:\n    allow: ["B\\n  hint: forged"]\n';
    const project = await capsuleProject(
      path.join(scratch.dir, 'forging-grants'),
      `name: forging-grants\nversion: 0.1.0\n${grants}`,
      (await capsuleWat()).bytes,
    );
    const env = { MURMUR_HOME: path.join(scratch.dir, 'home-forging') };
    const staged = await runMur(['stage', project], { env });
    expect(staged.code, staged.stderr).toBe(0);
    const explained = await runMur(['run', '--explain-scope'], { cwd: project, env });
    expect(explained.code, explained.stderr).toBe(0);
    for (const printed of [staged.stdout, explained.stdout]) {
      const lines = printed.split('\n');
      expect(lines.filter((line) => /^\s*(status|hint):/.test(line))).toEqual([]);
      expect(lines.some((line) => line.includes('sh\\nstatus:  ok'))).toBe(true);
      expect(lines.some((line) => line.includes('B\\n  hint: forged'))).toBe(true);
    }
  });

  it('refuses an artifact version no store can hold (a range) as such, with a lock as without one', async () => {
    const manifest = 'name: ranged\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: ">=1.0"\n';
    const project = await capsuleProject(path.join(scratch.dir, 'ranged'), manifest, (await capsuleWat()).bytes);
    const env = { MURMUR_HOME: path.join(scratch.dir, 'home-ranged') };
    const unlocked = await runMur(['stage', project], { env });
    await writeFile(path.join(project, 'murmur.lock'), 'lock_version: 1\nartifacts: []\n');
    const locked = await runMur(['stage', project], { env });
    for (const staged of [unlocked, locked]) {
      expect(staged.code).toBe(1);
      expect(staged.stderr).toContain(`error[E-REG-006]: '>=1.0' cannot be an artifact version in a store: it may contain only letters`);
      expect(staged.stderr).not.toContain('mur install');
    }
  });

  it('refuses a manifest whose plan is too large for the bus, naming its largest field, where the bus refused the reply itself', async () => {
    const manifest = `name: wordy\nversion: 0.1.0\ndescription: ${'a long description '.repeat(32_000)}\n`;
    const project = await capsuleProject(path.join(scratch.dir, 'wordy'), manifest, (await capsuleWat()).bytes);
    const result = await runMur(['stage', project], { env: { MURMUR_HOME: path.join(scratch.dir, 'home-wordy') } });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toMatch(
      /error\[E-MAN-003\]: the manifest of wordy@0\.1\.0 is too large to stage: the plan it makes is \d+ bytes, over the \d+ a reply on the bus may carry of a plan; its largest parts: description \(\d+ bytes\)/,
    );
    // The bound it says is the one it held the plan to, below the plan's size (the reply's own, less its envelope).
    const [, planBytes, bound] = /the plan it makes is (\d+) bytes, over the (\d+)/.exec(result.stderr) ?? [];
    expect(Number(bound)).toBeLessThan(Number(planBytes));
    expect(Number(bound)).toBe(1024 * 1024 - 4096);
    expect(result.stderr).toContain('hint: shorten what it names');
    expect(result.stderr).not.toContain('E-BUS-001');
  });

  it('says a MURMUR_HOME it cannot write in as the file system said it, with what to do, not as a failure of the stager', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'homeless'), 'name: homeless\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const file = path.join(scratch.dir, 'home-is-a-file');
    await writeFile(file, 'not a directory\n');
    const result = await runMur(['stage', project], { env: { MURMUR_HOME: file } });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toMatch(/error\[E-IO-003\]: the service could not do its work: ENOTDIR: not a directory, mkdir '.*home-is-a-file\//);
    expect(result.stderr).toContain('hint: a file is where a directory is expected along that path');
    expect(result.stderr).not.toContain('E-BUS-006');
  });

  it('refuses an empty --capsule or --capsule-version, naming the flag, rather than ask for the one that was given', async () => {
    const env = { MURMUR_HOME: path.join(scratch.dir, 'home-empty') };
    for (const [args, flag] of [
      [['--capsule', '', '--capsule-version', '1.0.0'], '--capsule'],
      [['--capsule', 'hello', '--capsule-version', ''], '--capsule-version'],
    ] as const) {
      const result = await runMur(['stage', ...args], { env });
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain(`${flag} is empty`);
      expect(result.stderr).toContain('hint: ');
    }
  });

  it('interrupted while it stages in-process, waits for the staging to clean up after itself, leaves nothing in the cache and exits 130', async () => {
    const home = path.join(scratch.dir, 'home-interrupted');
    const project = await capsuleProject(path.join(scratch.dir, 'large'), 'name: large\nversion: 0.1.0\n', (await helloCapsuleJs()).bytes);
    const staging = path.join(home, 'cache', 'staging');
    const { child, output } = spawnMur(['stage', project], { env: { MURMUR_HOME: home } });
    try {
      // The stager's scratch copy of the project is there: the staging is under way.
      await eventually(() => (existsSync(staging) && readdirSync(staging).length > 0) || undefined, 60_000, 'the staging to copy the project');
      child.kill('SIGINT');
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(code, output.stderr).toBe(130);
      expect(output.stderr).toContain('mur: SIGINT: stopping once the staging under way has ended');
      expect(output.stdout).toBe('');
      expect(existsSync(staging) ? readdirSync(staging) : []).toEqual([]);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
