import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type ArtifactMeta, MurmurError, fallbackMeta } from '@murmur/shared';
import { ArtifactStore, sha256Hex, storeSource, verifyResolved } from '@murmur/shared/artifacts';
import { listTree, tempDir, writeFiles } from '../../test/support/fs.js';
import { rejectionOf as rejection } from '../../test/support/refusals.js';

function meta(overrides: Partial<ArtifactMeta> = {}): ArtifactMeta {
  return {
    name: 'echo-tool',
    version: '0.1.0',
    runtime: 'wasm',
    artifact_runtime: 'tool',
    platforms: [],
    description: 'echoes its input',
    tags: ['demo', 'echo'],
    ...overrides,
  };
}

/** Every file under `root` with its bytes: for "no byte of the store changed" checks. */
async function snapshot(root: string): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const entry of await listTree(root)) {
    if (entry.endsWith('/')) continue;
    files[entry] = (await fs.readFile(path.join(root, entry))).toString('base64');
  }
  return files;
}

let dir: string;
let root: string;
let store: ArtifactStore;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('murmur-store-'));
  root = path.join(dir, 'artifacts');
  store = new ArtifactStore(root, 'global');
});

afterEach(async () => {
  await cleanup();
});

const ZIP_A = Buffer.from('pretend zip A: the store never opens what it keeps');
const ZIP_B = Buffer.from('pretend zip B: different bytes, different digest');

describe('ArtifactStore.publish', () => {
  it('writes exactly the zip, its sha256 and its meta under <name>/<version>/', async () => {
    const result = await store.publish(ZIP_A, meta());
    expect(await listTree(root)).toEqual([
      'echo-tool/',
      'echo-tool/0.1.0/',
      'echo-tool/0.1.0/echo-tool-0.1.0.meta.json',
      'echo-tool/0.1.0/echo-tool-0.1.0.mur.zip',
      'echo-tool/0.1.0/echo-tool-0.1.0.sha256',
    ]);
    const versionDir = path.join(root, 'echo-tool', '0.1.0');
    expect(result.zipPath).toBe(path.join(versionDir, 'echo-tool-0.1.0.mur.zip'));
    expect(Buffer.compare(await fs.readFile(result.zipPath), ZIP_A)).toBe(0);
    expect(result.sha256).toBe(sha256Hex(ZIP_A));
  });

  it('records the sha256 as lowercase hex with no trailing newline', async () => {
    await store.publish(ZIP_A, meta());
    const sha = await fs.readFile(path.join(root, 'echo-tool', '0.1.0', 'echo-tool-0.1.0.sha256'), 'utf8');
    expect(sha).toMatch(/^[0-9a-f]{64}$/);
    expect(sha).toBe(sha256Hex(ZIP_A));
  });

  it("writes the meta as pretty JSON under 'meta' with upstream's key order", async () => {
    await store.publish(ZIP_A, {
      tags: ['t'],
      description: null,
      platforms: [],
      artifact_runtime: 'tool',
      runtime: 'wasm',
      version: '0.1.0',
      name: 'echo-tool',
    });
    const written = await fs.readFile(path.join(root, 'echo-tool', '0.1.0', 'echo-tool-0.1.0.meta.json'), 'utf8');
    const expected = {
      meta: { name: 'echo-tool', version: '0.1.0', runtime: 'wasm', artifact_runtime: 'tool', platforms: [], description: null, tags: ['t'] },
    };
    expect(written).toBe(JSON.stringify(expected, null, 2));
    const parsed = JSON.parse(written) as { meta: Record<string, unknown> };
    expect(Object.keys(parsed)).toEqual(['meta']);
    expect(Object.keys(parsed.meta)).toEqual(['name', 'version', 'runtime', 'artifact_runtime', 'platforms', 'description', 'tags']);
  });

  it('leaves no temporary files behind', async () => {
    await store.publish(ZIP_A, meta());
    await store.publish(ZIP_B, meta({ version: '0.2.0' }));
    const hidden = (await listTree(root)).filter((entry) => path.basename(entry).startsWith('.') || entry.endsWith('.tmp'));
    expect(hidden).toEqual([]);
  });

  it('refuses to publish a version that is already stored and changes no byte of the store', async () => {
    await store.publish(ZIP_A, meta());
    const before = await snapshot(root);
    const error = await rejection(store.publish(ZIP_B, meta({ description: 'a second try' })));
    expect(error.code).toBe('E-REG-003');
    expect(error.message).toContain('echo-tool@0.1.0');
    expect(await snapshot(root)).toEqual(before);
  });

  it('refuses a version whose sha256 sidecar alone exists', async () => {
    await writeFiles(root, { 'echo-tool/0.1.0/echo-tool-0.1.0.sha256': sha256Hex(ZIP_B) });
    const before = await snapshot(root);
    expect((await rejection(store.publish(ZIP_A, meta()))).code).toBe('E-REG-003');
    expect(await snapshot(root)).toEqual(before);
  });

  it('publishes over a zip without its digest, what a publish that died between its two steps leaves, rather than refusing that version for good', async () => {
    await writeFiles(root, { 'echo-tool/0.1.0/echo-tool-0.1.0.mur.zip': ZIP_B.toString() });
    expect(await store.resolve('echo-tool', '0.1.0', 'unknown')).toBeUndefined();
    const published = await store.publish(ZIP_A, meta());
    expect(published.sha256).toBe(sha256Hex(ZIP_A));
    expect(Buffer.compare(await fs.readFile(published.zipPath), ZIP_A)).toBe(0);
    expect((await store.resolve('echo-tool', '0.1.0', 'unknown'))?.recordedSha256).toBe(sha256Hex(ZIP_A));
  });

  it('lists no version a publish that died before its digest left, a meta beside its zip or a platform build alone, and publishes over it with its own meta', async () => {
    await writeFiles(root, {
      'echo-tool/0.1.0/echo-tool-0.1.0.mur.zip': ZIP_B.toString(),
      'echo-tool/0.1.0/echo-tool-0.1.0.meta.json': JSON.stringify({ meta: meta({ runtime: 'native', artifact_runtime: 'tool', description: 'what died' }) }),
      'native-tool/1.0.0/native-tool-1.0.0-linux-x86_64.mur.zip': ZIP_B.toString(),
    });
    expect(await store.list()).toEqual([]);
    await store.publish(ZIP_A, meta());
    expect(await store.list()).toEqual([meta()]);
  });

  it('refuses a name, a version and a platform that together would name a file longer than a file system takes, before it makes anything', async () => {
    const name = 'n'.repeat(100);
    const version = `1.${'0'.repeat(62)}`;
    const platform = `${'o'.repeat(32)}-${'a'.repeat(32)}`;
    const error = await rejection(store.publish(ZIP_A, meta({ name, version, runtime: 'native', platforms: [[`${'o'.repeat(32)}`, `${'a'.repeat(32)}`]] })));
    expect(error.code).toBe('E-REG-006');
    expect(error.message).toBe(
      `${'n'.repeat(60)}…@1.${'0'.repeat(38)}… for ${platform} would name a store file of 269 bytes as it is written, more than the 255 a file name may have`,
    );
    expect(await listTree(dir)).toEqual([]);
    // The longest name and version alone fit.
    await store.publish(ZIP_A, meta({ name, version }));
    expect(await store.list()).toHaveLength(1);
  });

  it('says what it was writing and into which store when the system refuses the write, with the system’s reason', async () => {
    // A file where the store's directory should be: what a full disk or a read-only store is to a write, a refusal by the system.
    await fs.writeFile(path.join(dir, 'not-a-directory'), '');
    const blocked = new ArtifactStore(path.join(dir, 'not-a-directory', 'artifacts'), 'global');
    for (const write of [() => blocked.publish(ZIP_A, meta()), () => blocked.install(ZIP_A, meta(), sha256Hex(ZIP_A))]) {
      const error = await rejection(write());
      expect(error.code).toBe('E-IO-003');
      expect(error.message).toContain(`could not write echo-tool@0.1.0 into the global store at ${path.join(dir, 'not-a-directory', 'artifacts')}: ENOTDIR`);
      expect(error.hint).toContain('a file is where a directory is expected');
    }
  });

  it('refuses reserved versions in any case and writes nothing', async () => {
    for (const version of ['latest', 'Stable', 'EDGE']) {
      const error = await rejection(store.publish(ZIP_A, meta({ version })));
      expect(error.code, version).toBe('E-REG-004');
      expect(error.message).toContain(`'${version}'`);
      // Nor installed: what no registry could publish does not get in from a zip.
      const installed = await rejection(store.install(ZIP_A, meta({ version }), sha256Hex(ZIP_A)));
      expect(installed.code, version).toBe('E-REG-004');
      expect(installed.message).toContain('cannot be installed');
    }
    expect(await listTree(dir)).toEqual([]);
  });

  it('stores a namespaced name one directory deeper, keeping the last segment in file names', async () => {
    await store.publish(ZIP_A, meta({ name: 'local/worker', version: '0.2.0' }));
    expect(await listTree(root)).toEqual([
      'local/',
      'local/worker/',
      'local/worker/0.2.0/',
      'local/worker/0.2.0/worker-0.2.0.meta.json',
      'local/worker/0.2.0/worker-0.2.0.mur.zip',
      'local/worker/0.2.0/worker-0.2.0.sha256',
    ]);
    expect((await store.list()).map((entry) => `${entry.name}@${entry.version}`)).toEqual(['local/worker@0.2.0']);
    const resolved = await store.resolve('local/worker', '0.2.0', 'unknown');
    expect(resolved?.recordedSha256).toBe(sha256Hex(ZIP_A));
  });

  it('lists a namespaced artifact beside a plain one whose version is its last segment: each of local/worker@0.2.0 and local@worker', async () => {
    await store.publish(ZIP_A, meta({ name: 'local/worker', version: '0.2.0' }));
    await store.publish(ZIP_B, meta({ name: 'local', version: 'worker' }));
    expect((await store.list()).map((entry) => `${entry.name}@${entry.version}`)).toEqual(['local@worker', 'local/worker@0.2.0']);
  });

  it("refuses a namespaced version named as another artifact's files are, so no publish makes a directory where vic@2's archive or digest is read", async () => {
    await store.publish(ZIP_A, meta({ name: 'vic', version: '2' }));
    const before = await snapshot(root);
    for (const version of ['vic-2-linux-x86_64.mur.zip', 'vic-2-linux-x86_64.sha256', 'vic-2.MUR.ZIP', 'vic-2.meta.json']) {
      const error = await rejection(store.publish(ZIP_B, meta({ name: 'vic/2', version })));
      expect(error.code, version).toBe('E-REG-006');
      expect(error.message).toContain(`'${version}' cannot be an artifact version in a store: it must not end in`);
    }
    expect(await snapshot(root)).toEqual(before);
    expect((await store.resolve('vic', '2', 'linux-x86_64'))?.bytesSha256).toBe(sha256Hex(ZIP_A));
    expect((await store.list()).map((entry) => `${entry.name}@${entry.version}`)).toEqual(['vic@2']);
  });

  it('refuses names and versions that could escape or hide in the store, writing nothing', async () => {
    const cases: Array<Partial<ArtifactMeta>> = [
      { name: '../x' },
      { name: 'a/b/c' },
      { name: '.hidden' },
      { name: '/abs' },
      { name: 'ns/..' },
      { version: '..' },
      { version: '../1.0.0' },
      { version: '.1.0' },
      { version: '1.0/2' },
    ];
    for (const overrides of cases) {
      const error = await rejection(store.publish(ZIP_A, meta(overrides)));
      expect(error.code, JSON.stringify(overrides)).toBe('E-REG-006');
    }
    expect(await listTree(dir)).toEqual([]);
  });

  it('refuses a platform that is not os-arch, so no variant lands outside its version directory, writing nothing', async () => {
    for (const platform of [
      ['linux', 'x/../../../../escaped/pwn'],
      ['linux', 'X86'],
      ['linux-gnu', 'x86_64'],
      ['', 'x86_64'],
    ] as Array<[string, string]>) {
      const error = await rejection(store.publish(ZIP_A, meta({ runtime: 'native', platforms: [platform] })));
      expect(error.code, platform.join('-')).toBe('E-REG-006');
      expect(error.message).toContain('cannot name a platform');
    }
    expect((await rejection(store.resolve('echo-tool', '0.1.0', 'x/../../../secret/private'))).code).toBe('E-REG-006');
    expect(await listTree(dir)).toEqual([]);
  });

  it('keeps the meta of a native version when its build for another platform is published after, adding the platform', async () => {
    await store.publish(ZIP_A, meta({ runtime: 'native', platforms: [['linux', 'x86_64']] }));
    await store.publish(ZIP_B, meta({ runtime: 'native', platforms: [['linux', 'aarch64']] }));
    const kept = await store.readMeta('echo-tool', '0.1.0');
    expect(kept.runtime).toBe('native');
    expect(kept.platforms).toEqual([
      ['linux', 'x86_64'],
      ['linux', 'aarch64'],
    ]);
    expect((await store.resolve('echo-tool', '0.1.0', 'linux-x86_64'))?.bytes).toEqual(ZIP_A);
    expect((await store.resolve('echo-tool', '0.1.0', 'linux-aarch64'))?.bytes).toEqual(ZIP_B);
  });

  it('adds no platform variant to a version published for every platform: it would shadow it there', async () => {
    await store.publish(ZIP_A, meta());
    const shadowing = await rejection(store.publish(ZIP_B, meta({ runtime: 'native', platforms: [['linux', 'x86_64']] })));
    expect(shadowing.code).toBe('E-REG-003');
    expect(shadowing.message).toContain("only a native artifact's build for another platform may be added to a published version");
    expect((await store.readMeta('echo-tool', '0.1.0')).runtime).toBe('wasm');
    expect((await store.resolve('echo-tool', '0.1.0', 'linux-x86_64'))?.bytes).toEqual(ZIP_A);
  });

  it('publishes one variant of a version at a time: of a generic and a platform build sent at once, one is stored and the other refused', async () => {
    for (let round = 0; round < 5; round += 1) {
      const version = `0.5.${round}`;
      const outcomes = await Promise.allSettled([
        store.publish(ZIP_A, meta({ version })),
        store.publish(ZIP_B, meta({ version, runtime: 'native', platforms: [['linux', 'x86_64']] })),
      ]);
      expect(
        outcomes.filter((outcome) => outcome.status === 'fulfilled'),
        version,
      ).toHaveLength(1);
      const refused = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
      expect((refused?.reason as { code?: string } | undefined)?.code).toBe('E-REG-003');
      const files = await fs.readdir(path.join(root, 'echo-tool', version));
      expect(
        files.filter((file) => file.endsWith('.mur.zip')),
        version,
      ).toHaveLength(1);
    }
    // Two platforms' builds at once are both kept, and the meta names both.
    await Promise.all([
      store.publish(ZIP_A, meta({ version: '0.6.0', runtime: 'native', platforms: [['linux', 'x86_64']] })),
      store.publish(ZIP_B, meta({ version: '0.6.0', runtime: 'native', platforms: [['linux', 'aarch64']] })),
    ]);
    expect((await store.readMeta('echo-tool', '0.6.0')).platforms).toHaveLength(2);
  });

  it('refuses to resolve a name that could escape the store', async () => {
    expect((await rejection(store.resolve('../x', '1.0.0'))).code).toBe('E-REG-006');
    expect((await rejection(store.resolve('x', '..'))).code).toBe('E-REG-006');
  });

  it('refuses a name or a version too long for a file name as E-REG-006 with a hint, not as a failed open (ENAMETOOLONG)', async () => {
    const long = await rejection(store.resolve('a'.repeat(300), '1.0.0'));
    expect(long.code).toBe('E-REG-006');
    expect(long.message).toBe(`'${'a'.repeat(60)}…' cannot name an artifact: a name is at most 100 characters (this one is 300)`);
    expect(long.hint).toContain('as its murmur.yaml names it');
    expect((await rejection(store.resolve(`ns/${'b'.repeat(101)}`, '1.0.0'))).code).toBe('E-REG-006');
    expect((await rejection(store.resolve('x', `1.0.0-${'c'.repeat(60)}`))).code).toBe('E-REG-006');
    expect(await store.resolve('a'.repeat(100), '1.0.0')).toBeUndefined();
    // At both limits a publish writes its files, temporary names and all.
    const longest = meta({ name: 'a'.repeat(100), version: `1.0.0-${'c'.repeat(58)}` });
    await store.publish(ZIP_A, longest);
    expect((await store.resolve(longest.name, longest.version))?.meta.version).toBe(longest.version);
  });
});

describe('ArtifactStore.resolve', () => {
  const generic = 'echo-tool/0.1.0/echo-tool-0.1.0';
  const variant = 'echo-tool/0.1.0/echo-tool-0.1.0-linux-x86_64';

  it('prefers the platform variant when both its zip and its sha256 exist', async () => {
    await writeFiles(root, {
      [`${generic}.mur.zip`]: ZIP_A,
      [`${generic}.sha256`]: sha256Hex(ZIP_A),
      [`${variant}.mur.zip`]: ZIP_B,
      [`${variant}.sha256`]: sha256Hex(ZIP_B),
    });
    const resolved = await store.resolve('echo-tool', '0.1.0', 'linux-x86_64');
    expect(resolved?.platform).toBe('linux-x86_64');
    expect(resolved?.zipPath).toBe(path.join(root, `${variant}.mur.zip`));
    expect(Buffer.compare(resolved?.bytes ?? Buffer.alloc(0), ZIP_B)).toBe(0);
    expect(resolved?.recordedSha256).toBe(sha256Hex(ZIP_B));
  });

  it('falls back to the generic pair when there is no variant for the platform', async () => {
    await writeFiles(root, {
      [`${generic}.mur.zip`]: ZIP_A,
      [`${generic}.sha256`]: sha256Hex(ZIP_A),
      [`${variant}.mur.zip`]: ZIP_B,
      [`${variant}.sha256`]: sha256Hex(ZIP_B),
    });
    const resolved = await store.resolve('echo-tool', '0.1.0', 'darwin-aarch64');
    expect(resolved?.platform).toBeUndefined();
    expect(resolved?.zipPath).toBe(path.join(root, `${generic}.mur.zip`));
    expect(Buffer.compare(resolved?.bytes ?? Buffer.alloc(0), ZIP_A)).toBe(0);
  });

  it('falls back to the generic pair when the platform zip has no sha256', async () => {
    await writeFiles(root, {
      [`${generic}.mur.zip`]: ZIP_A,
      [`${generic}.sha256`]: sha256Hex(ZIP_A),
      [`${variant}.mur.zip`]: ZIP_B,
    });
    const resolved = await store.resolve('echo-tool', '0.1.0', 'linux-x86_64');
    expect(resolved?.platform).toBeUndefined();
    expect(Buffer.compare(resolved?.bytes ?? Buffer.alloc(0), ZIP_A)).toBe(0);
    expect(resolved?.recordedSha256).toBe(sha256Hex(ZIP_A));
  });

  it('finds nothing when neither pair is whole', async () => {
    await writeFiles(root, { [`${generic}.mur.zip`]: ZIP_A, [`${variant}.sha256`]: sha256Hex(ZIP_B) });
    expect(await store.resolve('echo-tool', '0.1.0', 'linux-x86_64')).toBeUndefined();
    expect(await store.resolve('echo-tool', '9.9.9', 'linux-x86_64')).toBeUndefined();
    expect(await store.resolve('never-stored', '0.1.0')).toBeUndefined();
  });

  it('trims whitespace around the recorded sha256', async () => {
    await writeFiles(root, { [`${generic}.mur.zip`]: ZIP_A, [`${generic}.sha256`]: `  ${sha256Hex(ZIP_A)}\n` });
    expect((await store.resolve('echo-tool', '0.1.0', 'unknown'))?.recordedSha256).toBe(sha256Hex(ZIP_A));
  });

  it('refuses an empty sha256 sidecar', async () => {
    for (const content of ['', ' \n']) {
      await writeFiles(root, { [`${generic}.mur.zip`]: ZIP_A, [`${generic}.sha256`]: content });
      const error = await rejection(store.resolve('echo-tool', '0.1.0', 'unknown'));
      expect(error.code).toBe('E-REG-002');
      expect(error.message).toContain('echo-tool@0.1.0');
      expect(error.message).toContain('empty sha256');
    }
  });

  it('gives the fallback meta when no meta file is stored', async () => {
    await writeFiles(root, { [`${generic}.mur.zip`]: ZIP_A, [`${generic}.sha256`]: sha256Hex(ZIP_A) });
    const resolved = await store.resolve('echo-tool', '0.1.0', 'unknown');
    expect(resolved?.meta).toEqual({ name: 'echo-tool', version: '0.1.0', runtime: 'wasm', artifact_runtime: '', platforms: [], description: null, tags: [] });
    expect(resolved?.meta).toEqual(fallbackMeta('echo-tool', '0.1.0'));
  });

  it('gives the fallback meta when the meta file is not valid JSON', async () => {
    await writeFiles(root, {
      [`${generic}.mur.zip`]: ZIP_A,
      [`${generic}.sha256`]: sha256Hex(ZIP_A),
      [`${generic}.meta.json`]: '{"meta": {"name": ',
    });
    expect((await store.resolve('echo-tool', '0.1.0', 'unknown'))?.meta).toEqual(fallbackMeta('echo-tool', '0.1.0'));
  });

  it('refuses a FIFO or a device at a store file by what it is, naming it, where reading it waited for ever or without end', async () => {
    await store.publish(ZIP_A, meta());
    const metaFile = path.join(root, `${generic}.meta.json`);
    await fs.rm(metaFile);
    execFileSync('mkfifo', [metaFile]);
    for (const read of [() => store.resolve('echo-tool', '0.1.0', 'unknown'), () => store.list()]) {
      const error = await rejection(read());
      expect(error).toBeInstanceOf(MurmurError);
      expect(error).toMatchObject({ code: 'E-REG-002', path: metaFile });
      expect(error.message).toContain('echo-tool-0.1.0.meta.json in the store is a FIFO, not a regular file');
    }
    await fs.rm(metaFile);
    const zipFile = path.join(root, `${generic}.mur.zip`);
    await fs.rm(zipFile);
    await fs.symlink('/dev/zero', zipFile);
    expect(await rejection(store.resolve('echo-tool', '0.1.0', 'unknown'))).toMatchObject({ code: 'E-REG-002', path: zipFile });
  });

  it('returns the published meta with the bytes', async () => {
    await store.publish(ZIP_A, meta());
    const resolved = await store.resolve('echo-tool', '0.1.0', 'unknown');
    expect(resolved?.meta).toEqual(meta());
    expect(resolved?.name).toBe('echo-tool');
    expect(resolved?.version).toBe('0.1.0');
  });
});

describe('ArtifactStore.list', () => {
  it('is sorted by name, then version', async () => {
    await store.publish(ZIP_A, meta({ name: 'zeta-tool', version: '0.1.0' }));
    await store.publish(ZIP_A, meta({ name: 'alpha-tool', version: '0.2.0' }));
    await store.publish(ZIP_A, meta({ name: 'alpha-tool', version: '0.1.0' }));
    await store.publish(ZIP_A, meta({ name: 'local/worker', version: '1.0.0' }));
    const listed = await store.list();
    expect(listed.map((entry) => `${entry.name}@${entry.version}`)).toEqual(['alpha-tool@0.1.0', 'alpha-tool@0.2.0', 'local/worker@1.0.0', 'zeta-tool@0.1.0']);
    expect(listed[0]).toEqual(meta({ name: 'alpha-tool', version: '0.1.0' }));
  });

  it('skips version directories that do not hold a whole artifact', async () => {
    await store.publish(ZIP_A, meta());
    await writeFiles(root, {
      'echo-tool/0.2.0/echo-tool-0.2.0.mur.zip': ZIP_A,
      'echo-tool/0.3.0/echo-tool-0.3.0.sha256': sha256Hex(ZIP_A),
      'echo-tool/0.4.0/echo-tool-0.4.0.meta.json': JSON.stringify({ meta: meta({ version: '0.4.0' }) }),
      'echo-tool/0.5.0/.echo-tool-0.5.0.mur.zip.123.abc.tmp': ZIP_A,
    });
    await fs.mkdir(path.join(root, 'echo-tool', '0.6.0'), { recursive: true });
    expect((await store.list()).map((entry) => `${entry.name}@${entry.version}`)).toEqual(['echo-tool@0.1.0']);
  });

  it('is empty when the store does not exist yet', async () => {
    expect(await store.list()).toEqual([]);
  });
});

describe('ArtifactStore.install', () => {
  it('overwrites an existing version once the bytes match the expected sha256', async () => {
    await store.publish(ZIP_A, meta());
    const result = await store.install(ZIP_B, meta({ description: 'reinstalled' }), sha256Hex(ZIP_B));
    const versionDir = path.join(root, 'echo-tool', '0.1.0');
    expect(result.zipPath).toBe(path.join(versionDir, 'echo-tool-0.1.0.mur.zip'));
    expect(Buffer.compare(await fs.readFile(result.zipPath), ZIP_B)).toBe(0);
    expect(await fs.readFile(path.join(versionDir, 'echo-tool-0.1.0.sha256'), 'utf8')).toBe(sha256Hex(ZIP_B));
    expect((await store.resolve('echo-tool', '0.1.0', 'unknown'))?.meta.description).toBe('reinstalled');
    expect(await listTree(root)).toEqual([
      'echo-tool/',
      'echo-tool/0.1.0/',
      'echo-tool/0.1.0/echo-tool-0.1.0.meta.json',
      'echo-tool/0.1.0/echo-tool-0.1.0.mur.zip',
      'echo-tool/0.1.0/echo-tool-0.1.0.sha256',
    ]);
  });

  it('installs into an empty store', async () => {
    await store.install(ZIP_A, meta(), sha256Hex(ZIP_A));
    const resolved = await store.resolve('echo-tool', '0.1.0', 'unknown');
    expect(resolved?.recordedSha256).toBe(sha256Hex(ZIP_A));
    expect(resolved?.meta).toEqual(meta());
  });

  it('refuses bytes that do not hash to the expected sha256 and leaves the old files intact', async () => {
    await store.publish(ZIP_A, meta());
    const before = await snapshot(root);
    const error = await rejection(store.install(ZIP_B, meta(), sha256Hex(ZIP_A)));
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toContain('echo-tool@0.1.0');
    expect(await snapshot(root)).toEqual(before);
  });
});

describe('verifyResolved', () => {
  it('accepts untouched bytes and returns their digest', async () => {
    await store.publish(ZIP_A, meta());
    const resolved = await storeSource(store).resolve('echo-tool', '0.1.0');
    expect(resolved).toBeDefined();
    expect(verifyResolved(resolved!)).toBe(sha256Hex(ZIP_A));
    expect(verifyResolved({ ...resolved!, claimedSha256: sha256Hex(ZIP_A).toUpperCase() })).toBe(sha256Hex(ZIP_A));
  });

  it('refuses bytes changed after publishing, naming name@version', async () => {
    const { zipPath } = await store.publish(ZIP_A, meta());
    await fs.writeFile(zipPath, Buffer.concat([ZIP_A, Buffer.from('tampered')]));
    const resolved = await storeSource(store).resolve('echo-tool', '0.1.0');
    expect(resolved).toBeDefined();
    let caught: unknown;
    try {
      verifyResolved(resolved!);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(MurmurError);
    expect((caught as MurmurError).code).toBe('E-REG-002');
    expect((caught as MurmurError).message).toContain('echo-tool@0.1.0');
    expect((caught as MurmurError).message).toContain(zipPath);
  });
});
