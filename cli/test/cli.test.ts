import { spawnSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readLockfile, sha256Hex } from '@murmur/shared/artifacts';
import { agentManifest, agentProject } from '../../test/support/agents.js';
import { capsuleProject, componentArtifact } from '../../test/support/artifacts.js';
import { listTree, tempDir, writeFiles } from '../../test/support/fs.js';
import { capsuleWat, toolWat } from '../../test/support/guests.js';
import { murBin, runMur } from '../../test/support/processes.js';

let scratch: { dir: string; cleanup: () => Promise<void> };
let env: Record<string, string>;

beforeEach(async () => {
  scratch = await tempDir('murmur-cli-');
  env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
});

afterEach(async () => {
  await scratch.cleanup();
});

async function toolSource(name = 'echo-tool', version = '0.1.0'): Promise<string> {
  const dir = path.join(scratch.dir, `${name}-src`);
  await writeFiles(dir, {
    'murmur.yaml': `name: ${name}\nversion: ${version}\nruntime: tool\ndescription: echoes\nrequires_files: [tool.wasm]\n`,
    'tool.wasm': (await toolWat()).bytes,
  });
  return dir;
}

describe('mur build', () => {
  it('packs a script capsule project into <name>-<version>.mur.zip and says where', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['build', project], { env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(`Built artifact: ${path.join(project, 'hello-0.1.0.mur.zip')}\n`);
  });

  it('refuses an unsafe requires_files entry with E-BLD-002 and writes no archive', async () => {
    const dir = path.join(scratch.dir, 'bad-tool');
    await writeFiles(dir, { 'murmur.yaml': 'name: bad-tool\nversion: 0.1.0\nruntime: tool\nrequires_files: [../secret.wasm]\n' });
    const result = await runMur(['build', dir], { env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("error[E-BLD-002]: requires_files entry '../secret.wasm' has an unsafe path: contains a '..' component");
    expect(result.stderr).toContain('  hint: declare files by a relative path inside the source directory');
    expect(await listTree(dir)).toEqual(['murmur.yaml']);
  });

  it('says what to do when the file system refuses a path it was given, rather than calling it a bug', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello-out'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const out = path.join(scratch.dir, 'out');
    // A directory where the archive's file goes.
    await fs.mkdir(path.join(out, 'hello-0.1.0.mur.zip'), { recursive: true });
    const result = await runMur(['build', project, '-o', `${out}/`], { env });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `error[E-IO-003]: ${out}/hello-0.1.0.mur.zip is a directory; the archive cannot be written in its place\n  hint: move that directory out of the way, or write the archive elsewhere with -o\n`,
    );
    expect(result.stderr).not.toContain('this is a bug');
    expect((await listTree(out)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  });

  it('refuses an -o that names nothing, or a file as a directory, saying which, and prints the path it wrote on one line', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello-o'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const empty = await runMur(['build', project, '-o', ''], { env });
    expect(empty.code).toBe(1);
    expect(empty.stderr).toContain('error[E-IO-003]: -o names nothing');
    const file = path.join(project, 'murmur.yaml');
    const fileAsDirectory = await runMur(['build', project, '-o', `${file}/`], { env });
    expect(fileAsDirectory.code).toBe(1);
    expect(fileAsDirectory.stderr).toContain(`error[E-IO-003]: -o ${file}/ names a directory, and ${file} is a file`);
    expect(fileAsDirectory.stderr).not.toContain('EEXIST');
    const broken = path.join(scratch.dir, 'broken\nline.mur.zip');
    const written = await runMur(['build', project, '-o', broken], { env });
    expect(written.code, written.stderr).toBe(0);
    expect(written.stdout).toBe(`Built artifact: ${path.join(scratch.dir, 'broken\\nline.mur.zip')}\n`);
    expect(await listTree(project)).toEqual(['capsule.wasm', 'murmur.yaml']);
  });

  it('prints W-SEC-019 on stderr for an unknown key and still builds', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'typo'), 'name: typo\nversion: 0.1.0\ncapabilites: {}\n', (await capsuleWat()).bytes);
    const result = await runMur(['build', project], { env });
    expect(result.code).toBe(0);
    expect(result.stderr).toContain("warning[W-SEC-019]: murmur.yaml: unrecognized key 'capabilites'");
    expect(result.stdout).toContain('Built artifact:');
  });
});

describe('mur publish, install and list', () => {
  it('publishes into the global store and refuses to publish the same version twice', async () => {
    const dir = await toolSource();
    expect((await runMur(['build', dir], { env })).code).toBe(0);
    const zip = path.join(dir, 'echo-tool-0.1.0.mur.zip');
    const first = await runMur(['publish', zip], { env });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toBe('Published echo-tool@0.1.0\n');
    const store = path.join(env.MURMUR_HOME as string, 'artifacts');
    const before = await listTree(store);
    const second = await runMur(['publish', zip], { env });
    expect(second.code).toBe(1);
    expect(second.stderr).toContain('error[E-REG-003]: artifact echo-tool@0.1.0 already exists');
    expect(await listTree(store)).toEqual(before);
  });

  it('publishes the artifact of the current directory when no path is given', async () => {
    const dir = await toolSource();
    await runMur(['build'], { cwd: dir, env });
    const result = await runMur(['publish'], { cwd: dir, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe('Published echo-tool@0.1.0\n');
  });

  it('installs name@version from the global store into the project store and pins it', async () => {
    const dir = await toolSource();
    await runMur(['build', dir], { env });
    const zip = path.join(dir, 'echo-tool-0.1.0.mur.zip');
    await runMur(['publish', zip], { env });
    const project = await capsuleProject(
      path.join(scratch.dir, 'app'),
      'name: app\nversion: 1.0.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n',
      (await capsuleWat()).bytes,
    );

    const result = await runMur(['install', 'echo-tool@0.1.0'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('Installed echo-tool@0.1.0 →');
    const lock = await readLockfile(path.join(project, 'murmur.lock'));
    expect(lock).toEqual({
      lock_version: 1,
      artifacts: [{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: sha256Hex(await fs.readFile(zip)) } }],
    });

    const list = await runMur(['list'], { cwd: project, env });
    expect(list.stdout).toBe('NAME       VERSION  RUNTIME  PLATFORM\necho-tool  0.1.0    tool     wasm\n');
    const all = await runMur(['list', '--all'], { cwd: project, env });
    expect(
      all.stdout
        .split('\n')
        .slice(0, 3)
        .map((line) => line.trimEnd()),
    ).toEqual([
      'NAME       VERSION  RUNTIME  PLATFORM  SCOPE',
      'echo-tool  0.1.0    tool     wasm      project',
      'echo-tool  0.1.0    tool     wasm      global',
    ]);
  });

  it('installs a .mur.zip by path into the project store without pinning it (SPEC 2.4: a local file is not pinned)', async () => {
    const dir = await toolSource();
    await runMur(['build', dir], { env });
    const project = await capsuleProject(path.join(scratch.dir, 'app'), 'name: app\nversion: 1.0.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['install', path.join(dir, 'echo-tool-0.1.0.mur.zip')], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(await listTree(path.join(project, '.murmur', 'artifacts'))).toContain('echo-tool/0.1.0/echo-tool-0.1.0.mur.zip');
    expect(await readLockfile(path.join(project, 'murmur.lock'))).toBeUndefined();
  });

  it('refuses an install that contradicts the lock with E-REG-005 and changes nothing', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'app'), 'name: app\nversion: 1.0.0\n', (await capsuleWat()).bytes);
    await fs.writeFile(
      path.join(project, 'murmur.lock'),
      `lock_version: 1\nartifacts:\n  - name: echo-tool\n    resolved_version: 0.0.9\n    sha256:\n      wasm: ${'b'.repeat(64)}\n`,
    );
    const zip = path.join(scratch.dir, 'echo-tool-0.1.0.mur.zip');
    await fs.writeFile(zip, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    const lockBefore = await fs.readFile(path.join(project, 'murmur.lock'), 'utf8');
    const result = await runMur(['install', zip], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("error[E-REG-005]: murmur.lock conflict for 'echo-tool'");
    expect(await fs.readFile(path.join(project, 'murmur.lock'), 'utf8')).toBe(lockBefore);
    expect(await listTree(path.join(project, '.murmur'))).toEqual([]);
  });

  it('names an artifact no registry has with E-REG-001', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'app'), 'name: app\nversion: 1.0.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['install', 'ghost@1.0.0'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-REG-001]: artifact ghost@1.0.0 not found');
  });

  it('installs every artifact the manifest declares, and reports those that failed', async () => {
    const dir = await toolSource();
    await runMur(['build', dir], { env });
    await runMur(['publish', path.join(dir, 'echo-tool-0.1.0.mur.zip')], { env });
    const project = await capsuleProject(
      path.join(scratch.dir, 'app'),
      'name: app\nversion: 1.0.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n  - name: missing-tool\n    version: 2.0.0\n',
      (await capsuleWat()).bytes,
    );
    const result = await runMur(['install'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('1 of 2 artifacts failed to install:');
    expect(result.stderr).toContain('missing-tool@2.0.0');
    expect(result.stderr).toContain('error[E-REG-001]');
    expect(result.stdout).not.toContain('error[');
    expect((await readLockfile(path.join(project, 'murmur.lock')))?.artifacts.map((entry) => entry.name)).toEqual(['echo-tool']);
  });

  it('says so when no artifacts are installed', async () => {
    const result = await runMur(['list', '-g'], { env });
    expect(result.stdout).toBe('No artifacts found.\n');
  });
});

describe('mur stage', () => {
  it('prints what it staged, and the plan as JSON with --json', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const human = await runMur(['stage', project], { env });
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toMatch(/^staged hello@0\.1\.0 \(script capsule\) in \d+ ms/);
    const json = await runMur(['stage', project, '--json'], { env });
    expect(JSON.parse(json.stdout)).toMatchObject({ plan_version: 1, capsule: { name: 'hello', kind: 'script', component: { cache_hit: true } } });
  });

  it('shows transpile progress on a terminal, and nothing when stderr is not one', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const piped = await runMur(['stage', project], { env });
    expect(piped.stderr).toBe('');
    // A real pseudo-terminal, from util-linux's script(1), with a cache that has not seen this component.
    const command = `${JSON.stringify(murBin)} stage ${JSON.stringify(project)}`;
    const terminal = spawnSync('script', ['-qec', command, '/dev/null'], {
      env: { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'fresh-home'), TERM: 'dumb' },
      encoding: 'utf8',
    });
    expect(terminal.status).toBe(0);
    expect(terminal.stdout).toContain('transpiling hello@0.1.0 (182 B)');
    expect(terminal.stdout).toMatch(/✓ transpiled hello@0\.1\.0 \(182 B\) in \d+\.\ds/);
    expect(terminal.stdout).toContain('staged hello@0.1.0 (script capsule)');
  });

  it('refuses a manifest whose name holds control characters, shown as escapes on a terminal and to a pipe, never acted on', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'escapes'), 'name: "x\\e]0;PWNED\\a"\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const onTerminal = (args: string) =>
      spawnSync('script', ['-qec', `${JSON.stringify(murBin)} ${args}`, '/dev/null'], {
        env: { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'escapes-home'), TERM: 'dumb' },
        encoding: 'utf8',
      }).stdout;
    const staged = onTerminal(`stage ${JSON.stringify(project)}`);
    expect(staged).toContain('error[E-MAN-003]');
    expect(staged).toContain(`'name' must not hold a control character`);
    const built = onTerminal(`build ${JSON.stringify(project)}`);
    expect(built).toMatch(/error\[E-(MAN-003|BLD-001)\]/);
    for (const output of [staged, built]) expect(output).not.toContain('\u001b]0;PWNED');
    // To a pipe as well: the refusal quotes the name as JSON writes it, escapes and all.
    const piped = await runMur(['stage', project], { env });
    expect(piped.code).toBe(1);
    expect(piped.stderr).toContain('as "x\\u001b]0;PWNED\\u0007" does');
    expect(piped.stdout).toBe('');
  });

  it('takes a first-party driver already transpiled from what the runtime ships, in a home that never transpiled it', async () => {
    // Staged only: the endpoint is never asked.
    const project = await agentProject(path.join(scratch.dir, 'agent'), agentManifest({ endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' }));
    const result = await runMur(['stage', project, '--json'], { env });
    expect(result.code, result.stderr).toBe(0);
    const plan = JSON.parse(result.stdout) as {
      artifacts: Array<{ name: string; origin: string; component?: { cache_hit: boolean; bundle: { key: string } } }>;
    };
    const driver = plan.artifacts.find((artifact) => artifact.name === 'murmur-driver-anthropic');
    expect(driver).toMatchObject({ origin: 'default', component: { cache_hit: true } });
    // Copied into this home's cache, where an executor finds what a plan names.
    expect(await fs.readdir(path.join(env.MURMUR_HOME as string, 'cache', 'transpiled', ...(driver?.component?.bundle.key ?? '').split('/')))).toContain(
      'component.js',
    );
  });

  it('stages a published capsule by --capsule and --capsule-version', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    await runMur(['build', project], { env });
    await runMur(['publish', path.join(project, 'hello-0.1.0.mur.zip')], { env });
    const result = await runMur(['stage', '--capsule', 'hello', '--capsule-version', '0.1.0', '--json'], { cwd: scratch.dir, env });
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ capsule: { origin: { kind: 'registry', name: 'hello', version: '0.1.0', origin: 'global' } } });
  });

  it('refuses a bad manifest with its code, path and line, on stderr only', async () => {
    const project = await capsuleProject(
      path.join(scratch.dir, 'bad'),
      'name: bad\nversion: 0.1.0\ncapabilities:\n  network:\n    allow: ["https://x.example.com/some/path"]\n',
      (await capsuleWat()).bytes,
    );
    const result = await runMur(['stage', project, '--json'], { env });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(
      "error[E-CAP-001]: murmur.yaml: invalid network allow entry 'https://x.example.com/some/path': URL allow entries must not include path, query, or fragment (line 5)",
    );
  });
});

describe('usage', () => {
  it('exits 2 for an unknown command or flag, and 0 for --help', async () => {
    expect((await runMur(['frobnicate'], { env })).code).toBe(2);
    expect((await runMur(['build', '--nope'], { env })).code).toBe(2);
    const help = await runMur(['--help'], { env });
    expect(help.code).toBe(0);
    for (const command of ['build', 'publish', 'install', 'list', 'stage', 'roost']) expect(help.stdout).toContain(command);
  });

  it('gives a usage error a code and points it at the help of the command it was made in', async () => {
    const unknownFlag = await runMur(['build', '--nope'], { env });
    expect(unknownFlag.stderr).toBe("error[E-IO-003]: unknown option '--nope'\n  hint: run mur build --help for usage\n");
    const missing = await runMur(['config', 'set'], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe("error[E-IO-003]: missing required argument 'key'\n  hint: run mur config set --help for usage\n");
    const unknownCommand = await runMur(['frobnicate'], { env });
    expect(unknownCommand.stderr).toBe("error[E-IO-003]: unknown command 'frobnicate'\n  hint: run mur --help for usage\n");
    // Asked for its help, an unknown command is named as well, not answered with the whole help.
    const unknownHelp = await runMur(['help', 'frobnicate'], { env });
    expect(unknownHelp.code).toBe(2);
    expect(unknownHelp.stderr).toBe("error[E-IO-003]: unknown command 'frobnicate'\n  hint: run mur --help for usage\n");
    expect((await runMur(['help', 'build'], { env })).stdout).toContain('Usage: mur build');
    expect((await runMur(['list', '--all', '-g'], { env })).stderr).toMatch(/^error\[E-IO-003\]: .*\n {2}hint: run mur list --help for usage\n$/);
  });

  it('refuses --all together with -g', async () => {
    expect((await runMur(['list', '--all', '-g'], { env })).code).toBe(2);
  });
});
