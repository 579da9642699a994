import { createHash, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurZip, writeMurZip } from '@murmur/shared/artifacts';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { inferSkillName, skillArguments } from '../cli/src/commands/build-skill.js';
import { agentManifest, agentProject } from './support/agents.js';
import { listTree, tempDir, writeFiles } from './support/fs.js';
import { type MurResult, runMur } from './support/processes.js';
import { rawZip } from './support/raw-zip.js';

/**
 * `mur build --skill`: a folder or `.zip` holding a SKILL.md packaged as a skill artifact without
 * a hand-written murmur.yaml, as upstream documents it (name inference, SKILL.md in any case, the
 * archive in the current directory, version 0.1.0 unless told), and usable as any skill is:
 * published, listed, installed and staged.
 */
describe('mur build --skill', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  /** The current directory of every `mur` a test runs: where the archive goes unless -o says otherwise. */
  let work: string;
  let env: Record<string, string>;

  beforeEach(async () => {
    scratch = await tempDir('murmur-build-skill-');
    work = path.join(scratch.dir, 'work');
    await fs.mkdir(work);
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
  });
  afterEach(async () => {
    await scratch.cleanup();
  });

  const SKILL_TEXT = '# Code review conventions\n\nGroup findings by severity: blocking, non-blocking, nit.\n';

  function build(args: string[], extraEnv: Record<string, string> = {}): Promise<MurResult> {
    return runMur(['build', ...args], { cwd: work, env: { ...env, ...extraEnv } });
  }

  /** A built archive read as every reader reads it: its entries, its manifest (text and parsed), its skill. */
  async function readArchive(file: string): Promise<{ entries: string[]; manifestText: string; manifest: Record<string, unknown>; skill: string }> {
    const zip = await MurZip.open(await fs.readFile(file), { label: file });
    try {
      const manifestText = await zip.manifestText();
      return { entries: zip.names, manifestText, manifest: parse(manifestText) as Record<string, unknown>, skill: await zip.readText('skill.md') };
    } finally {
      zip.close();
    }
  }

  function built(result: MurResult, file: string): void {
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(`Built artifact: ${path.join(work, file)}\n`);
  }

  /** A refusal as the README promises it: the code and the words, a hint, exit 1 (2 for a usage error), no stack. */
  function refused(result: MurResult, code: string, words: string, hint: string, exitCode = 1): void {
    expect(result.code, result.stderr).toBe(exitCode);
    expect(result.stderr).toContain(`error[${code}]: ${words}`);
    expect(result.stderr).toContain(hint);
    expect(result.stderr).toMatch(/\n {2}hint: /);
    expect(result.stderr).not.toMatch(/\n\s+at |this is a bug in mur/);
    expect(result.stdout).toBe('');
  }

  it('packages a folder holding SKILL.md as <name>-0.1.0.mur.zip in the current directory, with a generated name, version and runtime: skill', async () => {
    await writeFiles(work, { 'my-coding-skill/SKILL.md': SKILL_TEXT });
    const result = await build(['--skill', 'my-coding-skill/']);
    built(result, 'my-coding-skill-0.1.0.mur.zip');
    const archive = await readArchive(path.join(work, 'my-coding-skill-0.1.0.mur.zip'));
    expect(archive.entries).toEqual(['murmur.yaml', 'skill.md']);
    expect(archive.manifest).toEqual({ name: 'my-coding-skill', version: '0.1.0', runtime: 'skill' });
    expect(archive.manifestText).toContain("version: '0.1.0'");
    expect(archive.skill).toBe(SKILL_TEXT);
    // The source folder is only read: the archive goes to the current directory, not beside SKILL.md.
    expect(await listTree(work)).toEqual(['my-coding-skill-0.1.0.mur.zip', 'my-coding-skill/', 'my-coding-skill/SKILL.md']);
  });

  it('finds the skill file whatever its case (SKILL.md, skill.md, Skill.MD) and always packs it as skill.md', async () => {
    for (const [folder, file] of [
      ['upper', 'SKILL.md'],
      ['lower', 'skill.md'],
      ['mixed', 'Skill.MD'],
    ] as const) {
      await writeFiles(work, { [`${folder}/${file}`]: `${SKILL_TEXT}${folder}\n` });
      built(await build(['--skill', `./${folder}`]), `${folder}-0.1.0.mur.zip`);
      const archive = await readArchive(path.join(work, `${folder}-0.1.0.mur.zip`));
      expect(archive.entries).toEqual(['murmur.yaml', 'skill.md']);
      expect(archive.skill).toBe(`${SKILL_TEXT}${folder}\n`);
    }
  });

  it('refuses a folder holding two skill files that differ only in case, naming both, rather than pick one', async () => {
    await writeFiles(work, { 'twice/SKILL.md': 'one\n', 'twice/skill.md': 'two\n' });
    const result = await build(['--skill', './twice']);
    refused(result, 'E-BLD-002', `${path.join(work, 'twice')} holds`, 'keep one of them');
    expect(result.stderr).toContain("'SKILL.md'");
    expect(result.stderr).toContain("'skill.md'");
    expect(await listTree(work)).toEqual(['twice/', 'twice/SKILL.md', 'twice/skill.md']);
  });

  it('packages a .zip holding SKILL.md at its root, naming the artifact after the zip, even written without ./ as upstream shows it', async () => {
    await fs.writeFile(
      path.join(work, 'external-skill.zip'),
      await writeMurZip([
        { name: 'SKILL.md', data: Buffer.from(SKILL_TEXT) },
        { name: 'notes/readme.txt', data: Buffer.from('not the skill\n') },
      ]),
    );
    built(await build(['--skill', 'external-skill.zip']), 'external-skill-0.1.0.mur.zip');
    const archive = await readArchive(path.join(work, 'external-skill-0.1.0.mur.zip'));
    expect(archive.entries).toEqual(['murmur.yaml', 'skill.md']);
    expect(archive.manifest).toEqual({ name: 'external-skill', version: '0.1.0', runtime: 'skill' });
    expect(archive.skill).toBe(SKILL_TEXT);
  });

  it('refuses a .zip whose SKILL.md sits in a top folder, as upstream reads only the root, naming where it is and writing nothing', async () => {
    await fs.writeFile(path.join(work, 'wrapped.zip'), await writeMurZip([{ name: 'my-skill/SKILL.md', data: Buffer.from(SKILL_TEXT) }]));
    const result = await build(['--skill', './wrapped.zip']);
    refused(result, 'E-IO-001', `SKILL.md not found in ${path.join(work, 'wrapped.zip')}`, 'it holds my-skill/SKILL.md below its root');
    expect(await listTree(work)).toEqual(['wrapped.zip']);
  });

  it("infers names by upstream's rules, with a hyphen where upstream writes '_', so that every name inferred is one a manifest accepts", () => {
    const cases: Array<[string, string]> = [
      ['my-coding-skill/', 'my-coding-skill'],
      ['My Skill.zip', 'my-skill'],
      ['/somewhere/Release.ZIP', 'release'],
      ['skills/PDF Tools (v2)', 'pdf-tools-v2'],
      ['a__b  c', 'a-b-c'],
      ['-_Fancy--Name!_', 'fancy--name'],
      ['x/café-notes', 'caf-notes'],
      ['---', 'skill'],
      ['日本語', 'skill'],
    ];
    expect(cases.map(([input]) => [input, inferSkillName(input)])).toEqual(cases);
    expect(inferSkillName('.')).toBe(inferSkillName(process.cwd()));
  });

  it('names the artifact after the folder it was run in when given no path, and after a folder whose name has spaces and capitals', async () => {
    const folder = path.join(work, 'Cwd Skill');
    await writeFiles(folder, { 'SKILL.md': SKILL_TEXT });
    const bare = await runMur(['build', '--skill'], { cwd: folder, env });
    expect(bare.code, bare.stderr).toBe(0);
    expect(bare.stdout).toBe(`Built artifact: ${path.join(folder, 'cwd-skill-0.1.0.mur.zip')}\n`);
    built(await build(['--skill', './Cwd Skill']), 'cwd-skill-0.1.0.mur.zip');
    expect((await readArchive(path.join(work, 'cwd-skill-0.1.0.mur.zip'))).manifest.name).toBe('cwd-skill');
  });

  it('takes a value after --skill as the artifact name, and the positional source as the folder', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    built(await build(['--skill', 'wrapped-skill', '--version', '1.2.0', 'my-skill/']), 'wrapped-skill-1.2.0.mur.zip');
    const archive = await readArchive(path.join(work, 'wrapped-skill-1.2.0.mur.zip'));
    expect(archive.manifest).toEqual({ name: 'wrapped-skill', version: '1.2.0', runtime: 'skill' });
  });

  it("takes a value after --skill holding '/', '\\', a leading '.' or a .zip ending as the path, and refuses a second path beside it", async () => {
    expect(skillArguments('./my-skill', undefined)).toEqual({ explicitName: undefined, input: './my-skill' });
    expect(skillArguments('skills/my-skill', undefined)).toEqual({ explicitName: undefined, input: 'skills/my-skill' });
    expect(skillArguments('skills\\my-skill', undefined)).toEqual({ explicitName: undefined, input: 'skills\\my-skill' });
    expect(skillArguments('.hidden', undefined)).toEqual({ explicitName: undefined, input: '.hidden' });
    expect(skillArguments('Bundle.ZIP', undefined)).toEqual({ explicitName: undefined, input: 'Bundle.ZIP' });
    expect(skillArguments('my-skill', undefined)).toEqual({ explicitName: 'my-skill', input: '.' });
    expect(skillArguments('my-skill', 'elsewhere')).toEqual({ explicitName: 'my-skill', input: 'elsewhere' });
    expect(skillArguments(true, undefined)).toEqual({ explicitName: undefined, input: '.' });

    await writeFiles(work, { 'skills/nested-skill/SKILL.md': SKILL_TEXT });
    built(await build(['--skill', './skills/nested-skill']), 'nested-skill-0.1.0.mur.zip');
    built(await build(['--skill', 'skills/nested-skill', '--version', '0.2.0']), 'nested-skill-0.2.0.mur.zip');
    const two = await build(['--skill', './skills/nested-skill', 'skills']);
    refused(two, 'E-IO-003', '--skill ./skills/nested-skill is a path', 'package one of them', 2);
  });

  it('writes --version and --description into the generated manifest, quoted so that YAML reads them back as the same text', async () => {
    await writeFiles(work, { 'review/SKILL.md': SKILL_TEXT });
    const description = 'Project\'s PR: "conventions" # not a comment';
    built(await build(['--skill', 'code-review', '--version', '1.0', '--description', description, './review']), 'code-review-1.0.mur.zip');
    const archive = await readArchive(path.join(work, 'code-review-1.0.mur.zip'));
    // `version: 1.0` unquoted would be the number 1 to a YAML reader that does not know the key.
    expect(archive.manifest).toEqual({ name: 'code-review', version: '1.0', runtime: 'skill', description });
  });

  it('refuses a folder without SKILL.md with E-IO-001 and writes nothing', async () => {
    await writeFiles(work, { 'empty-skill/README.md': 'no skill here\n' });
    const result = await build(['--skill', './empty-skill']);
    refused(result, 'E-IO-001', `SKILL.md not found in ${path.join(work, 'empty-skill')}`, 'put the skill in a file named SKILL.md');
    expect(await listTree(work)).toEqual(['empty-skill/', 'empty-skill/README.md']);
  });

  it('says how to name a folder as a path when a name given to --skill is also a folder here and the current directory holds no skill', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    const result = await build(['--skill', 'my-skill']);
    refused(result, 'E-IO-001', `SKILL.md not found in ${work}`, 'write its path: mur build --skill ./my-skill');
    expect(await listTree(work)).toEqual(['my-skill/', 'my-skill/SKILL.md']);
  });

  it('refuses an invalid name given to --skill with E-BLD-001, naming it, and writes nothing', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    for (const name of ['My_Skill', 'ends-with-', 'x'.repeat(101)]) {
      const result = await build(['--skill', name, './my-skill']);
      refused(result, 'E-BLD-001', `invalid artifact name '${name}' (the name given to --skill)`, 'lowercase letters, digits and inner hyphens');
    }
    expect(await listTree(work)).toEqual(['my-skill/', 'my-skill/SKILL.md']);
  });

  it('refuses an invalid --version with E-BLD-001 and a reserved one with E-REG-004, naming it, and writes nothing', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    for (const version of ['../1', '1 0', '-1']) {
      refused(await build(['--skill', './my-skill', '--version', version]), 'E-BLD-001', `invalid artifact version '${version}' (--version)`, 'e.g. 0.1.0');
    }
    refused(
      await build(['--skill', './my-skill', '--version', 'latest']),
      'E-REG-004',
      "the version 'latest' (--version) is reserved",
      'give a concrete version',
    );
    expect(await listTree(work)).toEqual(['my-skill/', 'my-skill/SKILL.md']);
  });

  it('replaces an archive already at the output path whole, as upstream does, leaving no temporary file beside it', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT, 'my-skill-0.1.0.mur.zip': 'an older, broken archive' });
    built(await build(['--skill', './my-skill']), 'my-skill-0.1.0.mur.zip');
    expect((await readArchive(path.join(work, 'my-skill-0.1.0.mur.zip'))).skill).toBe(SKILL_TEXT);
    expect(await listTree(work)).toEqual(['my-skill-0.1.0.mur.zip', 'my-skill/', 'my-skill/SKILL.md']);
  });

  it('leaves an archive already at the output path as it was when the build is refused, with no temporary file beside it', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    built(await build(['--skill', './my-skill']), 'my-skill-0.1.0.mur.zip');
    const before = await fs.readFile(path.join(work, 'my-skill-0.1.0.mur.zip'));
    // Incompressible, and past the ceiling this build is held to: refused after the folder is read.
    await fs.writeFile(path.join(work, 'my-skill', 'SKILL.md'), randomBytes(4096).toString('base64'));
    const result = await build(['--skill', './my-skill'], { MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: '2048' });
    refused(result, 'E-ART-002', 'SKILL.md is 5464 bytes, over the 2048-byte ceiling', 'MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES');
    expect(await fs.readFile(path.join(work, 'my-skill-0.1.0.mur.zip'))).toEqual(before);
    expect(await listTree(work)).toEqual(['my-skill-0.1.0.mur.zip', 'my-skill/', 'my-skill/SKILL.md']);
  });

  it("reads a .zip with the archive reader's guards: an entry past MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES (E-ART-002) or an unsafe one (E-ART-001) refuses it", async () => {
    await fs.writeFile(path.join(work, 'large.zip'), await writeMurZip([{ name: 'SKILL.md', data: Buffer.from(randomBytes(4096).toString('base64')) }]));
    const large = await build(['--skill', './large.zip'], { MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: '2048' });
    expect(large.code, large.stderr).toBe(1);
    expect(large.stderr).toContain(`error[E-ART-002]: ${path.join(work, 'large.zip')}: zip entry 'SKILL.md' exceeds the 2048-byte decompression ceiling`);

    await fs.writeFile(
      path.join(work, 'climbing.zip'),
      rawZip([
        { name: 'SKILL.md', data: Buffer.from(SKILL_TEXT) },
        { name: '../outside.md', data: Buffer.from('escape\n') },
      ]),
    );
    const climbing = await build(['--skill', './climbing.zip']);
    expect(climbing.code, climbing.stderr).toBe(1);
    expect(climbing.stderr).toContain(`error[E-ART-001]: ${path.join(work, 'climbing.zip')}: zip entry '../outside.md' has an unsafe path`);
    expect(await listTree(work)).toEqual(['climbing.zip', 'large.zip']);
  });

  it('refuses a SKILL.md that is a symlink with E-BLD-002, never packing what it points to', async () => {
    await writeFiles(scratch.dir, { 'secret.md': 'not for the archive\n' });
    await fs.mkdir(path.join(work, 'linked'));
    await fs.symlink(path.join(scratch.dir, 'secret.md'), path.join(work, 'linked', 'SKILL.md'));
    const result = await build(['--skill', './linked']);
    refused(result, 'E-BLD-002', `SKILL.md is a symlink (${path.join(work, 'linked', 'SKILL.md')})`, 'copy the file it points to');
    expect(await listTree(work)).toEqual(['linked/', 'linked/SKILL.md']);
  });

  it('uses a murmur.yaml the folder brings as it is written, with its name and version, and --description set in it', async () => {
    const manifest = '# kept as written\nname: guide\nversion: "2.0.0"\nruntime: skill\nrequires_files: [SKILL.md, refs/style.md]\n';
    await writeFiles(work, {
      'guide-src/SKILL.md': SKILL_TEXT,
      'guide-src/murmur.yaml': manifest,
      'guide-src/refs/style.md': 'style\n',
      'guide-src/unused.md': 'left out\n',
    });
    built(await build(['--skill', './guide-src']), 'guide-2.0.0.mur.zip');
    const plain = await readArchive(path.join(work, 'guide-2.0.0.mur.zip'));
    expect(plain.manifestText).toBe(manifest);
    expect(plain.entries).toEqual(['murmur.yaml', 'skill.md', 'refs/style.md']);

    built(await build(['--skill', './guide-src', '--description', 'House style', '-o', 'described.mur.zip']), 'described.mur.zip');
    const described = await readArchive(path.join(work, 'described.mur.zip'));
    expect(described.manifestText).toContain('# kept as written');
    expect(described.manifest).toMatchObject({ name: 'guide', version: '2.0.0', runtime: 'skill', description: 'House style' });
  });

  it('refuses a murmur.yaml the folder brings whose runtime is not skill (E-MAN-003), that is not YAML (E-MAN-002), or that a flag contradicts (usage error)', async () => {
    await writeFiles(work, {
      'tool/SKILL.md': SKILL_TEXT,
      'tool/murmur.yaml': 'name: tool\nversion: 0.1.0\nruntime: tool\n',
      'broken/SKILL.md': SKILL_TEXT,
      'broken/murmur.yaml': 'name: [unclosed\n',
      'pinned/SKILL.md': SKILL_TEXT,
      'pinned/murmur.yaml': 'name: pinned\nversion: 1.0.0\nruntime: skill\n',
    });
    const before = await listTree(work);
    refused(await build(['--skill', './tool']), 'E-MAN-003', `${path.join(work, 'tool', 'murmur.yaml')} declares runtime: "tool"`, 'set runtime: skill');
    refused(await build(['--skill', './broken']), 'E-MAN-002', `${path.join(work, 'broken', 'murmur.yaml')}: YAML syntax error`, 'fix the YAML syntax');
    refused(
      await build(['--skill', './pinned', '--version', '2.0.0']),
      'E-IO-003',
      `--version says '2.0.0', but ${path.join(work, 'pinned', 'murmur.yaml')} says '1.0.0'`,
      'leave --version out',
      2,
    );
    refused(await build(['--skill', 'other-name', 'pinned']), 'E-IO-003', "the name given to --skill says 'other-name'", 'leave the name out', 2);
    expect(await listTree(work)).toEqual(before);
  });

  it('writes where -o says: into a directory, or to a file ending in .mur.zip, and refuses any other file name', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    const intoDirectory = await build(['--skill', './my-skill', '-o', 'dist/']);
    expect(intoDirectory.code, intoDirectory.stderr).toBe(0);
    expect(intoDirectory.stdout).toBe(`Built artifact: ${path.join(work, 'dist', 'my-skill-0.1.0.mur.zip')}\n`);
    built(await build(['--skill', './my-skill', '-o', 'custom.mur.zip']), 'custom.mur.zip');
    refused(
      await build(['--skill', './my-skill', '-o', 'custom.zip']),
      'E-IO-003',
      'output path must end with .mur.zip',
      'give -o a file name ending in .mur.zip',
    );
    expect(await listTree(work)).toEqual(['custom.mur.zip', 'dist/', 'dist/my-skill-0.1.0.mur.zip', 'my-skill/', 'my-skill/SKILL.md']);
  });

  it('prints one JSON line with --json: path, name, version, kind, runtime, sha256 and entries', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    const result = await build(['--skill', './my-skill', '--json']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.endsWith('\n')).toBe(true);
    expect(result.stdout.trimEnd().split('\n')).toHaveLength(1);
    const file = path.join(work, 'my-skill-0.1.0.mur.zip');
    const sha256 = createHash('sha256')
      .update(await fs.readFile(file))
      .digest('hex');
    expect(JSON.parse(result.stdout)).toEqual({
      path: file,
      name: 'my-skill',
      version: '0.1.0',
      kind: 'artifact',
      runtime: 'static',
      sha256,
      entries: ['murmur.yaml', 'skill.md'],
    });
  });

  it('builds an artifact that mur publish takes, and that mur list -g then shows as a skill with its description', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    built(await build(['--skill', 'house-style', '--description', 'House review style', './my-skill']), 'house-style-0.1.0.mur.zip');
    const published = await runMur(['publish', 'house-style-0.1.0.mur.zip'], { cwd: work, env });
    expect(published.code, published.stderr).toBe(0);
    expect(published.stdout).toBe('Published house-style@0.1.0\n');

    const listed = await runMur(['list', '-g'], { cwd: work, env });
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout.split('\n')[1]?.split(/\s+/)).toEqual(['house-style', '0.1.0', 'skill', 'static']);
    const asJson = await runMur(['list', '-g', '--json'], { cwd: work, env });
    expect(JSON.parse(asJson.stdout)).toEqual([
      expect.objectContaining({ name: 'house-style', artifact_runtime: 'skill', runtime: 'static', description: 'House review style' }),
    ]);
  });

  it('builds an artifact that mur install takes into a project, which a capsule declaring it stages as a skill holding its skill.md', async () => {
    await writeFiles(work, { 'my-skill/SKILL.md': SKILL_TEXT });
    built(await build(['--skill', 'house-style', '--version', '1.0.0', './my-skill']), 'house-style-1.0.0.mur.zip');
    const project = await agentProject(
      path.join(scratch.dir, 'capsule'),
      agentManifest(
        { endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' },
        { artifacts: '  - name: house-style\n    version: 1.0.0\n    runtime: skill' },
      ),
    );
    const installed = await runMur(['install', path.join(work, 'house-style-1.0.0.mur.zip')], { cwd: project, env });
    expect(installed.code, installed.stderr).toBe(0);

    const staged = await runMur(['stage', project, '--json'], { env });
    expect(staged.code, staged.stderr).toBe(0);
    const plan = JSON.parse(staged.stdout) as { artifacts: Array<{ name: string; role: string; packaging: string; origin: string; files: unknown[] }> };
    const sha256 = createHash('sha256').update(SKILL_TEXT).digest('hex');
    expect(plan.artifacts.find((artifact) => artifact.name === 'house-style')).toMatchObject({
      role: 'skill',
      packaging: 'static',
      origin: 'project',
      files: [{ path: 'skill.md', sha256, size: Buffer.byteLength(SKILL_TEXT) }],
    });
  });
});
