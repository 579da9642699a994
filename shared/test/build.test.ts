import { spawnSync } from 'node:child_process';
import { promises as fs, existsSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { MurmurError } from '@murmur/shared';
import { MurZip, buildArtifact, sha256Hex } from '@murmur/shared/artifacts';
import { listTree, tempDir, writeFiles } from '../../test/support/fs.js';
import { capsuleWat, toolWat } from '../../test/support/guests.js';
import { rejectionOf as rejection } from '../../test/support/refusals.js';

const CORE_MODULE = Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);

/** Every `.mur.zip` and every temporary file under `root`. */
async function outputs(root: string): Promise<string[]> {
  return (await listTree(root)).filter((entry) => entry.endsWith('.mur.zip') || entry.endsWith('.tmp') || path.basename(entry).startsWith('.'));
}

async function entriesOf(file: string): Promise<Array<{ name: string; bytes: Buffer }>> {
  const zip = await MurZip.open(await fs.readFile(file), { label: file });
  try {
    const found: Array<{ name: string; bytes: Buffer }> = [];
    for (const name of zip.names) found.push({ name, bytes: await zip.read(name) });
    return found;
  } finally {
    zip.close();
  }
}

let dir: string;
let src: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('murmur-build-'));
  src = path.join(dir, 'src');
  await fs.mkdir(src);
});

afterEach(async () => {
  await cleanup();
});

const SCRIPT_CAPSULE = 'name: hello\nversion: 0.1.0\ndescription: says hello\n';

const AGENT_CAPSULE = `name: research-agent
version: 0.3.0
artifacts:
  - name: anthropic-driver
    version: 1.0.0
    runtime: driver
inference:
  model: claude-sonnet
  endpoint: https://api.example.com
  api_key: \${ANTHROPIC_API_KEY}
  driver:
    artifact: anthropic-driver
`;

function toolManifest(requiresFiles: string[], name = 'echo-tool'): string {
  return `name: ${name}\nversion: 0.1.0\nruntime: tool\ndescription: echoes\ntags: [demo]\nrequires_files:\n${requiresFiles.map((file) => `  - ${JSON.stringify(file)}`).join('\n')}\n`;
}

describe('buildArtifact: capsules', () => {
  it('packs a script capsule as exactly murmur.yaml then capsule.wasm', async () => {
    const capsule = await capsuleWat();
    await writeFiles(src, { 'murmur.yaml': SCRIPT_CAPSULE, 'capsule.wasm': capsule.bytes, 'notes.txt': 'not declared, not packed' });
    const result = await buildArtifact(src);
    expect(result.kind).toBe('capsule');
    expect(result.packaging).toBe('wasm');
    expect(result.entries).toEqual(['murmur.yaml', 'capsule.wasm']);
    expect(result.outputPath).toBe(path.join(src, 'hello-0.1.0.mur.zip'));
    expect(result.meta).toEqual({
      name: 'hello',
      version: '0.1.0',
      runtime: 'wasm',
      artifact_runtime: 'capsule',
      platforms: [],
      description: 'says hello',
      tags: [],
    });
    const packed = await entriesOf(result.outputPath);
    expect(packed.map((entry) => entry.name)).toEqual(['murmur.yaml', 'capsule.wasm']);
    expect(packed[0]?.bytes.toString('utf8')).toBe(SCRIPT_CAPSULE);
    expect(Buffer.compare(packed[1]?.bytes ?? Buffer.alloc(0), capsule.bytes)).toBe(0);
    expect(result.sha256).toBe(sha256Hex(await fs.readFile(result.outputPath)));
    expect(result.warnings).toEqual([]);
  });

  it('packs an agent capsule without any wasm', async () => {
    await writeFiles(src, { 'murmur.yaml': AGENT_CAPSULE });
    const result = await buildArtifact(src);
    expect(result.kind).toBe('capsule');
    expect(result.packaging).toBe('static');
    expect(result.entries).toEqual(['murmur.yaml']);
    expect(result.meta.artifact_runtime).toBe('capsule');
    expect((await entriesOf(result.outputPath)).map((entry) => entry.name)).toEqual(['murmur.yaml']);
  });

  it("packs an agent capsule's system_prompt_file beside its manifest", async () => {
    const manifest = AGENT_CAPSULE.replace('  driver:\n', '  system_prompt_file: prompts/system.md\n  driver:\n');
    await writeFiles(src, { 'murmur.yaml': manifest, 'prompts/system.md': 'You are careful.' });
    const result = await buildArtifact(src);
    expect(result.entries).toEqual(['murmur.yaml', 'prompts/system.md']);
  });

  it('refuses a capsule with neither a capsule.wasm nor an inference block, writing nothing', async () => {
    await writeFiles(src, { 'murmur.yaml': SCRIPT_CAPSULE });
    const error = await rejection(buildArtifact(src));
    expect(error.code).toBe('E-BLD-003');
    expect(error.message).toContain('neither');
    expect(await outputs(dir)).toEqual([]);
  });

  it('refuses a capsule.wasm that is a core module, not a component, writing nothing', async () => {
    await writeFiles(src, { 'murmur.yaml': SCRIPT_CAPSULE, 'capsule.wasm': CORE_MODULE });
    const error = await rejection(buildArtifact(src));
    expect(error.code).toBe('E-BLD-003');
    expect(error.message).toContain('capsule.wasm is not a WebAssembly component');
    expect(await outputs(dir)).toEqual([]);
  });
});

describe('buildArtifact: artifacts', () => {
  it('packs a tool as murmur.yaml then its requires_files in declared order', async () => {
    const tool = await toolWat();
    await writeFiles(src, {
      'murmur.yaml': toolManifest(['tool.wasm', 'docs/README.md', 'assets/a.json']),
      'tool.wasm': tool.bytes,
      'docs/README.md': '# echo',
      'assets/a.json': '{}',
    });
    const result = await buildArtifact(src);
    expect(result.kind).toBe('artifact');
    expect(result.packaging).toBe('wasm');
    expect(result.entries).toEqual(['murmur.yaml', 'tool.wasm', 'docs/README.md', 'assets/a.json']);
    expect(result.outputPath).toBe(path.join(src, 'echo-tool-0.1.0.mur.zip'));
    expect(result.meta).toEqual({
      name: 'echo-tool',
      version: '0.1.0',
      runtime: 'wasm',
      artifact_runtime: 'tool',
      platforms: [],
      description: 'echoes',
      tags: ['demo'],
    });
    const packed = await entriesOf(result.outputPath);
    expect(packed.map((entry) => entry.name)).toEqual(['murmur.yaml', 'tool.wasm', 'docs/README.md', 'assets/a.json']);
    expect(Buffer.compare(packed[1]?.bytes ?? Buffer.alloc(0), tool.bytes)).toBe(0);
  });

  it('packs a requires_files entry written with a backslash from the file its archive name names', async () => {
    const tool = await toolWat();
    // A file literally named with a backslash beside the one the entry means: the archive's is read.
    await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm', 'sub\\A.txt']), 'tool.wasm': tool.bytes, 'sub/A.txt': 'meant', 'sub\\A.txt': 'other' });
    const result = await buildArtifact(src);
    const packed = await entriesOf(result.outputPath);
    expect(packed.map((entry) => entry.name)).toEqual(['murmur.yaml', 'tool.wasm', 'sub/A.txt']);
    expect(packed[2]?.bytes.toString()).toBe('meant');
  });

  it('writes to a given .mur.zip path or into a given directory', async () => {
    const tool = await toolWat();
    await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm']), 'tool.wasm': tool.bytes });
    const file = path.join(dir, 'out', 'custom.mur.zip');
    expect((await buildArtifact(src, { output: file })).outputPath).toBe(file);
    const into = path.join(dir, 'dist');
    await fs.mkdir(into);
    expect((await buildArtifact(src, { output: into })).outputPath).toBe(path.join(into, 'echo-tool-0.1.0.mur.zip'));
    // A directory that does not exist yet, named as one by its trailing '/'.
    const fresh = path.join(dir, 'fresh', 'dist');
    expect((await buildArtifact(src, { output: `${fresh}/` })).outputPath).toBe(path.join(fresh, 'echo-tool-0.1.0.mur.zip'));
    expect((await fs.stat(path.join(fresh, 'echo-tool-0.1.0.mur.zip'))).isFile()).toBe(true);
    expect(await listTree(src)).toEqual(['murmur.yaml', 'tool.wasm']);
  });

  describe('refuses, writing no archive,', () => {
    async function refuse(files: Record<string, string | Uint8Array>, options: { output?: string } = {}): Promise<MurmurError> {
      await writeFiles(src, files);
      const error = await rejection(buildArtifact(src, options));
      expect(await outputs(dir)).toEqual([]);
      return error;
    }

    it('an absolute requires_files entry', async () => {
      const tool = await toolWat();
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', path.join(dir, 'outside.txt')]), 'tool.wasm': tool.bytes });
      expect(error.code).toBe('E-BLD-002');
      expect(error.message).toContain('absolute path');
    });

    it("a requires_files entry with a '..' component", async () => {
      const tool = await toolWat();
      await writeFiles(dir, { 'outside.txt': 'secret' });
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', '../outside.txt']), 'tool.wasm': tool.bytes });
      expect(error.code).toBe('E-BLD-002');
      expect(error.message).toContain("'..' component");
    });

    it('a requires_files entry that is a symlink', async () => {
      const tool = await toolWat();
      await writeFiles(dir, { 'real.txt': 'the target' });
      await fs.symlink(path.join(dir, 'real.txt'), path.join(src, 'link.txt'));
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', 'link.txt']), 'tool.wasm': tool.bytes });
      expect(error.code).toBe('E-BLD-002');
      expect(error.message).toContain('symlink');
    });

    it('a symlinked capsule.wasm', async () => {
      const capsule = await capsuleWat();
      await writeFiles(dir, { 'real.wasm': capsule.bytes });
      await fs.symlink(path.join(dir, 'real.wasm'), path.join(src, 'capsule.wasm'));
      const error = await refuse({ 'murmur.yaml': SCRIPT_CAPSULE });
      expect(error.code).toBe('E-BLD-002');
    });

    it('a requires_files entry reached through a symlinked directory', async () => {
      const tool = await toolWat();
      await writeFiles(dir, { 'outside/secret.txt': 'outside the source tree' });
      await fs.symlink(path.join(dir, 'outside'), path.join(src, 'linked'));
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', 'linked/secret.txt']), 'tool.wasm': tool.bytes });
      expect(error.code).toBe('E-BLD-002');
      expect(error.message).toContain('symlink');
    });

    it('a murmur.yaml that is a symlink, even to a manifest elsewhere that reads well', async () => {
      await writeFiles(dir, { 'elsewhere.yaml': SCRIPT_CAPSULE, 'capsule.wasm': (await capsuleWat()).bytes });
      await fs.symlink(path.join(dir, 'elsewhere.yaml'), path.join(src, 'murmur.yaml'));
      const error = await refuse({ 'capsule.wasm': (await capsuleWat()).bytes });
      expect(error).toMatchObject({ code: 'E-BLD-002', message: expect.stringContaining('murmur.yaml') });
      expect(error.message).toContain('symlink');
    });

    it('a murmur.yaml or a capsule.wasm that is a FIFO, at once, naming what it is', async () => {
      spawnSync('mkfifo', [path.join(src, 'capsule.wasm')]);
      const component = await refuse({ 'murmur.yaml': SCRIPT_CAPSULE });
      expect(component).toMatchObject({ code: 'E-BLD-002', message: expect.stringContaining("the capsule component 'capsule.wasm' is not a regular file") });
      await fs.rm(path.join(src, 'capsule.wasm'));
      await fs.rm(path.join(src, 'murmur.yaml'));
      spawnSync('mkfifo', [path.join(src, 'murmur.yaml')]);
      const manifest = await rejection(buildArtifact(src));
      expect(manifest).toMatchObject({ code: 'E-IO-003', message: expect.stringContaining('is a FIFO') });
    });

    it('a manifest past what a reader takes, or not UTF-8', async () => {
      const capsule = (await capsuleWat()).bytes;
      const long = await refuse({ 'murmur.yaml': `${SCRIPT_CAPSULE}x-notes: |\n${'  a note that goes on\n'.repeat(60_000)}`, 'capsule.wasm': capsule });
      expect(long).toMatchObject({ code: 'E-IO-003', message: expect.stringContaining('at most 1048576') });
      const latin1 = await refuse({ 'murmur.yaml': Buffer.concat([Buffer.from(`${SCRIPT_CAPSULE}x-note: "`), Buffer.from([0xff, 0xfe]), Buffer.from('"\n')]) });
      expect(latin1).toMatchObject({ code: 'E-MAN-002', message: expect.stringContaining('not UTF-8') });
    });

    it('more files than an archive may hold, and a file past the entry ceiling, before reading any', async () => {
      const tool = await toolWat();
      const many = Array.from({ length: 10_000 }, (_, index) => `many/f${index}`);
      await writeFiles(src, Object.fromEntries(many.map((name) => [name, 'x'])));
      const crowded = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', ...many]), 'tool.wasm': tool.bytes });
      expect(crowded).toMatchObject({ code: 'E-ART-003', message: expect.stringContaining('10002 entries') });
      await fs.rm(path.join(src, 'many'), { recursive: true });
      const previous = process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES;
      process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES = '4096';
      try {
        const large = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', 'large.bin']), 'tool.wasm': tool.bytes, 'large.bin': Buffer.alloc(5000) });
        expect(large).toMatchObject({ code: 'E-ART-002', message: expect.stringContaining("requires_files entry 'large.bin' is 5000 bytes") });
      } finally {
        if (previous === undefined) delete process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES;
        else process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES = previous;
      }
    });

    it('an output path that is a file the manifest packs, leaving that file as it was', async () => {
      const tool = await toolWat();
      const dependency = Buffer.from('a dependency the tool ships');
      await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm', 'vendor/dep.mur.zip']), 'tool.wasm': tool.bytes, 'vendor/dep.mur.zip': dependency });
      const error = await rejection(buildArtifact(src, { output: path.join(src, 'vendor', 'dep.mur.zip') }));
      expect(error).toMatchObject({
        code: 'E-BLD-002',
        message: expect.stringContaining("requires_files entry 'vendor/dep.mur.zip' is the file mur build was asked to write"),
      });
      expect(await fs.readFile(path.join(src, 'vendor', 'dep.mur.zip'))).toEqual(dependency);
      expect(await outputs(dir)).toEqual([path.join('src', 'vendor', 'dep.mur.zip')]);
    });

    it('a requires_files entry that does not exist', async () => {
      const tool = await toolWat();
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm', 'missing.txt']), 'tool.wasm': tool.bytes });
      expect(error.code).toBe('E-IO-003');
      expect(error.message).toContain("'missing.txt'");
    });

    it('two requires_files entries that pack as one archive name from two files', async () => {
      const tool = await toolWat();
      const error = await refuse({
        'murmur.yaml': toolManifest(['tool.wasm', 'docs/a.txt', 'docs/A.txt']),
        'tool.wasm': tool.bytes,
        'docs/a.txt': 'one',
        'docs/A.txt': 'two',
      });
      expect(error.code).toBe('E-BLD-002');
      expect(error.message).toContain("'docs/a.txt'");
    });

    it('an artifact name with uppercase letters or underscores', async () => {
      const tool = await toolWat();
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm'], 'My_Tool'), 'tool.wasm': tool.bytes });
      expect(error.code).toBe('E-BLD-001');
      expect(error.message).toContain("'My_Tool'");
    });

    it('a version that would put the archive anywhere but where it is asked for, or hold a control character', async () => {
      const tool = await toolWat();
      for (const version of ['1/../../../escaped', '..', '0.1.0\u001b[2J', 'x'.repeat(65)]) {
        const manifest = toolManifest(['tool.wasm']).replace('version: 0.1.0', `version: ${JSON.stringify(version)}`);
        const error = await refuse({ 'murmur.yaml': manifest, 'tool.wasm': tool.bytes });
        expect(error.code, version).toBe('E-BLD-001');
        expect(error.message).toContain('invalid artifact version');
        expect(error.path).toBe('version');
      }
      // Where `echo-tool-1/../../../escaped.mur.zip` would have put it, and one level further for good measure.
      expect(existsSync(path.resolve(src, '..', '..', 'escaped.mur.zip'))).toBe(false);
      expect(existsSync(path.resolve(src, '..', '..', '..', 'escaped.mur.zip'))).toBe(false);
    });

    it('a core wasm module where a component is expected', async () => {
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm']), 'tool.wasm': CORE_MODULE });
      expect(error.code).toBe('E-BLD-003');
      expect(error.message).toContain('tool.wasm is not a WebAssembly component');
    });

    it('a wasm tool with no root wasm', async () => {
      const error = await refuse({ 'murmur.yaml': toolManifest(['lib/tool.wasm']), 'lib/tool.wasm': CORE_MODULE });
      expect(error.code).toBe('E-BLD-003');
      expect(error.message).toContain('missing root .wasm file (expected capsule.wasm or one root *.wasm)');
    });

    it('a wasm tool with several root wasm files and no capsule.wasm', async () => {
      const tool = await toolWat();
      const error = await refuse({ 'murmur.yaml': toolManifest(['b.wasm', 'a.wasm']), 'a.wasm': tool.bytes, 'b.wasm': tool.bytes });
      expect(error.code).toBe('E-BLD-003');
      expect(error.message).toContain('multiple root .wasm files found: a.wasm, b.wasm');
    });

    it('an output path that does not end in .mur.zip', async () => {
      const tool = await toolWat();
      const error = await refuse({ 'murmur.yaml': toolManifest(['tool.wasm']), 'tool.wasm': tool.bytes }, { output: path.join(dir, 'out.zip') });
      expect(error.code).toBe('E-IO-003');
      expect(error.message).toContain('.mur.zip');
      expect(error.hint).toContain("or a directory to write echo-tool-0.1.0.mur.zip into (one that exists, or one written with a trailing '/')");
      expect(await listTree(dir)).toEqual(['src/', 'src/murmur.yaml', 'src/tool.wasm']);
    });
  });
});

describe('buildArtifact: warnings', () => {
  it('warns W-SEC-004 for a literal secret under an api_key key', async () => {
    const literal = AGENT_CAPSULE.replace('${ANTHROPIC_API_KEY}', 'sk-live-0123456789abcdef');
    await writeFiles(src, { 'murmur.yaml': literal });
    const result = await buildArtifact(src);
    const secrets = result.warnings.filter((warning) => warning.code === 'W-SEC-004');
    expect(secrets).toHaveLength(1);
    expect(secrets[0]?.path).toBe('inference.api_key');
    expect(secrets[0]?.message).not.toContain('0123456789abcdef');
  });

  it('does not warn for an api_key given as a ${VAR} reference', async () => {
    await writeFiles(src, { 'murmur.yaml': AGENT_CAPSULE });
    const result = await buildArtifact(src);
    expect(result.warnings.filter((warning) => warning.code === 'W-SEC-004')).toEqual([]);
  });

  it('warns W-BLD-002 when capsule.wasm shadows another root wasm', async () => {
    const capsule = await capsuleWat();
    const tool = await toolWat();
    await writeFiles(src, { 'murmur.yaml': toolManifest(['capsule.wasm', 'other.wasm']), 'capsule.wasm': capsule.bytes, 'other.wasm': tool.bytes });
    const result = await buildArtifact(src);
    expect(result.entries).toEqual(['murmur.yaml', 'capsule.wasm', 'other.wasm']);
    const shadow = result.warnings.filter((warning) => warning.code === 'W-BLD-002');
    expect(shadow).toHaveLength(1);
    expect(shadow[0]?.message).toContain('other.wasm');
  });

  it('does not warn W-BLD-002 for a single root wasm', async () => {
    const tool = await toolWat();
    await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm']), 'tool.wasm': tool.bytes });
    expect((await buildArtifact(src)).warnings).toEqual([]);
  });
});

describe('buildArtifact: output', () => {
  it('gives the same sha256 and bytes when built twice', async () => {
    const tool = await toolWat();
    await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm', 'docs/README.md']), 'tool.wasm': tool.bytes, 'docs/README.md': '# echo' });
    const first = await buildArtifact(src);
    const firstBytes = await fs.readFile(first.outputPath);
    await new Promise((resolve) => setTimeout(resolve, 2100));
    const now = new Date();
    await fs.utimes(path.join(src, 'tool.wasm'), now, now);
    const second = await buildArtifact(src);
    expect(second.sha256).toBe(first.sha256);
    expect(Buffer.compare(await fs.readFile(second.outputPath), firstBytes)).toBe(0);
  });

  it('replaces an existing output whole and leaves no temporary file', async () => {
    const tool = await toolWat();
    await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm']), 'tool.wasm': tool.bytes, 'echo-tool-0.1.0.mur.zip': 'an old, broken archive' });
    const result = await buildArtifact(src);
    expect(sha256Hex(await fs.readFile(result.outputPath))).toBe(result.sha256);
    expect((await entriesOf(result.outputPath)).map((entry) => entry.name)).toEqual(['murmur.yaml', 'tool.wasm']);
    expect(await listTree(src)).toEqual(['echo-tool-0.1.0.mur.zip', 'murmur.yaml', 'tool.wasm']);
  });

  it('leaves the previous archive untouched when a later build is refused', async () => {
    const tool = await toolWat();
    await writeFiles(src, { 'murmur.yaml': toolManifest(['tool.wasm']), 'tool.wasm': tool.bytes });
    const good = await buildArtifact(src);
    const before = await fs.readFile(good.outputPath);
    await writeFiles(src, { 'tool.wasm': CORE_MODULE });
    expect((await rejection(buildArtifact(src))).code).toBe('E-BLD-003');
    expect(Buffer.compare(await fs.readFile(good.outputPath), before)).toBe(0);
    expect(await listTree(src)).toEqual(['echo-tool-0.1.0.mur.zip', 'murmur.yaml', 'tool.wasm']);
  });
});
