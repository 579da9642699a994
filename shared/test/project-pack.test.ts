import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fs, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BLOB_BUCKET, ProjectListingSchema, silentLog } from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { BlobCache, packProject, packProjectStore, publishProject } from '@murmur/shared/node';
import { listTree, tempDir, writeFiles } from '../../test/support/fs.js';
import { rejectionOf } from '../../test/support/refusals.js';

const sha = (text: string | Uint8Array): string => createHash('sha256').update(text).digest('hex');

let scratch: { dir: string; cleanup: () => Promise<void> };
let bus: Bus;

beforeEach(async () => {
  scratch = await tempDir('murmur-pack-');
  bus = createBus(new InProcessTransport(), silentLog);
});

afterEach(async () => {
  await bus.close();
  await scratch.cleanup();
});

const noCache = { digestCache: null } as const;

describe('packing a capsule project for staging', () => {
  it('packs what staging reads and nothing else: manifest, lock, component, named files, declared store entries', async () => {
    const project = path.join(scratch.dir, 'agent');
    await writeFiles(project, {
      'murmur.yaml':
        'name: a\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n  - name: style\n    version: local\n    runtime: skill\n    source: skills/style\n',
      'murmur.lock': 'lock_version: 1\nartifacts: []\n',
      'capsule.wasm': 'component bytes',
      'other.wasm': 'not the capsule, since capsule.wasm is there',
      'skills/style/SKILL.md': '# style',
      'skills/style/notes.txt': 'not packed',
      '.murmur/artifacts/echo-tool/0.1.0/echo-tool-0.1.0.mur.zip': 'zip',
      '.murmur/artifacts/echo-tool/0.1.0/echo-tool-0.1.0.sha256': sha('zip'),
      '.murmur/artifacts/undeclared/1.0.0/undeclared-1.0.0.mur.zip': 'not declared',
      // What an install under way has beside the version: its turn, its temporary, its backup.
      '.murmur/artifacts/echo-tool/0.1.0/.publish.writing': '4242',
      '.murmur/artifacts/echo-tool/0.1.0/.echo-tool-0.1.0.mur.zip.4242.abcdef.tmp': '',
      '.murmur/artifacts/echo-tool/0.1.0/.echo-tool-0.1.0.sha256.4242.abcdef.tmp.bak': 'old',
      'workdir/ses_1/out/result.txt': 'a session of an earlier run',
      '.env': 'SECRET=never-packed',
    });
    const packed = await packProject(project, noCache);
    expect(packed.listing.files.map((file) => file.path)).toEqual([
      '.murmur/artifacts/echo-tool/0.1.0/echo-tool-0.1.0.mur.zip',
      '.murmur/artifacts/echo-tool/0.1.0/echo-tool-0.1.0.sha256',
      'capsule.wasm',
      'murmur.lock',
      'murmur.yaml',
      'skills/style/SKILL.md',
    ]);
    expect(packed.listing.files.find((file) => file.path === 'capsule.wasm')).toEqual({
      path: 'capsule.wasm',
      sha256: sha('component bytes'),
      size: 15,
      executable: false,
    });
    expect(packed.listing.label).toBe('agent');
    // The listing is named by its own digest, and parses as the stager will parse it.
    expect(packed.ref.sha256).toBe(sha(packed.listingBytes));
    expect(ProjectListingSchema.parse(JSON.parse(Buffer.from(packed.listingBytes).toString()))).toEqual(packed.listing);
  });

  it('packs an agent without its root .wasm files, and a prompt file the manifest names', async () => {
    const project = path.join(scratch.dir, 'prompted');
    await writeFiles(project, {
      'murmur.yaml': 'name: a\nversion: 0.1.0\ninference:\n  system_prompt_file: prompts/system.md\n',
      'prompts/system.md': 'be brief',
      'stray.wasm': 'x',
    });
    expect((await packProject(project, noCache)).listing.files.map((file) => file.path)).toEqual(['murmur.yaml', 'prompts/system.md']);
  });

  it('packs a capsule.wasm that is a link to a component inside the project under its own name, and refuses one leading outside', async () => {
    const project = path.join(scratch.dir, 'linked-component');
    await writeFiles(project, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n', 'build/out.wasm': 'the component' });
    await fs.symlink('build/out.wasm', path.join(project, 'capsule.wasm'));
    const packed = await packProject(project, noCache);
    expect(packed.listing.files.map((file) => [file.path, file.sha256])).toEqual([
      ['capsule.wasm', sha('the component')],
      ['murmur.yaml', expect.any(String)],
    ]);
    await writeFiles(scratch.dir, { 'outside.wasm': 'not the project’s' });
    await fs.rm(path.join(project, 'capsule.wasm'));
    await fs.symlink(path.join(scratch.dir, 'outside.wasm'), path.join(project, 'capsule.wasm'));
    expect(await rejectionOf(packProject(project, noCache))).toMatchObject({
      code: 'E-PRJ-002',
      message: expect.stringContaining("the capsule component 'capsule.wasm' resolves to"),
    });
  });

  it('packs a file the manifest names through a symbolic link inside the project under the name the manifest gives it', async () => {
    const project = path.join(scratch.dir, 'linked');
    await writeFiles(project, {
      'murmur.yaml': 'name: a\nversion: 0.1.0\ninference:\n  system_prompt_file: prompt.md\n',
      'prompts/v2.md': 'be brief',
    });
    await fs.symlink('prompts/v2.md', path.join(project, 'prompt.md'));
    const packed = await packProject(project, noCache);
    expect(packed.listing.files.map((file) => [file.path, file.sha256])).toEqual([
      ['murmur.yaml', expect.any(String)],
      ['prompt.md', sha('be brief')],
    ]);
  });

  it('refuses, naming both, a project whose packed files differ only in case, and names a directory with a control character as ?', async () => {
    const project = path.join(scratch.dir, 'twins');
    await writeFiles(project, {
      'murmur.yaml': 'name: a\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n',
      '.murmur/artifacts/echo-tool/0.1.0/notes.txt': 'one',
      '.murmur/artifacts/echo-tool/0.1.0/NOTES.txt': 'two',
    });
    const error = await rejectionOf(packProject(project, noCache));
    expect(error.code).toBe('E-ART-001');
    expect(error.message).toMatch(
      /paths '\.murmur\/artifacts\/echo-tool\/0\.1\.0\/(NOTES|notes)\.txt' and '\.murmur\/artifacts\/echo-tool\/0\.1\.0\/(NOTES|notes)\.txt' differ only in case or Unicode form/,
    );
    const odd = path.join(scratch.dir, 'odd\u001b[2Jname');
    await writeFiles(odd, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n' });
    expect((await packProject(odd, noCache)).listing.label).toBe('odd?[2Jname');
  });

  it('packs nothing for a named file that cannot be there (a file where a directory is named), leaving its refusal to the stager', async () => {
    // Packing reads synchronously; a path through a file is ENOTDIR, not a crash of the client.
    const project = path.join(scratch.dir, 'through-a-file');
    await writeFiles(project, {
      'murmur.yaml': 'name: a\nversion: 0.1.0\ninference:\n  system_prompt_file: prompt.md/system.md\n',
      'prompt.md': 'a file, not a directory',
    });
    expect((await packProject(project, noCache)).listing.files.map((file) => file.path)).toEqual(['murmur.yaml']);
  });

  it('refuses a file the manifest names outside the capsule directory, naming it, with E-PRJ-002', async () => {
    const project = path.join(scratch.dir, 'leaky');
    await writeFiles(scratch.dir, { 'secret.md': 'outside' });
    await writeFiles(project, { 'murmur.yaml': 'name: a\nversion: 0.1.0\ninference:\n  system_prompt_file: ../secret.md\n' });
    const error = await rejectionOf(packProject(project, noCache));
    expect(error.code).toBe('E-PRJ-002');
    expect(error.message).toContain("inference.system_prompt_file '../secret.md' resolves to");
    expect(error.path).toBe('../secret.md');
    // A symlink inside that points outside is the same thing.
    await fs.symlink(path.join(scratch.dir, 'secret.md'), path.join(project, 'inside.md'));
    await fs.writeFile(path.join(project, 'murmur.yaml'), 'name: a\nversion: 0.1.0\ninference:\n  system_prompt_file: inside.md\n');
    expect((await rejectionOf(packProject(project, noCache))).code).toBe('E-PRJ-002');
  });

  it('refuses a murmur.yaml or a murmur.lock that is a FIFO or a device at once, naming what it is, rather than wait on it', async () => {
    const fifo = path.join(scratch.dir, 'fifo-manifest');
    await fs.mkdir(fifo);
    spawnSync('mkfifo', [path.join(fifo, 'murmur.yaml')]);
    expect(await rejectionOf(packProject(fifo, noCache))).toMatchObject({ code: 'E-IO-003', message: expect.stringContaining('murmur.yaml at') });
    const locked = path.join(scratch.dir, 'fifo-lock');
    await writeFiles(locked, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n' });
    spawnSync('mkfifo', [path.join(locked, 'murmur.lock')]);
    expect(await rejectionOf(packProject(locked, noCache))).toMatchObject({ code: 'E-IO-003', message: expect.stringContaining('murmur.lock at') });
    const prompted = path.join(scratch.dir, 'fifo-prompt');
    await writeFiles(prompted, { 'murmur.yaml': 'name: a\nversion: 0.1.0\ninference:\n  system_prompt_file: prompt.md\n' });
    spawnSync('mkfifo', [path.join(prompted, 'prompt.md')]);
    expect(await rejectionOf(packProject(prompted, noCache))).toMatchObject({
      code: 'E-PRJ-003',
      message: "inference.system_prompt_file 'prompt.md' is a FIFO, not a regular file: nothing of it can be staged",
    });
    const endless = path.join(scratch.dir, 'endless');
    await fs.mkdir(endless);
    await fs.symlink('/dev/zero', path.join(endless, 'murmur.yaml'));
    expect(await rejectionOf(packProject(endless, noCache))).toMatchObject({ code: 'E-IO-003', message: expect.stringContaining('is a device') });
  });

  it('refuses a component whose name is not UTF-8 as what it is, where the capsule was staged as having none', async () => {
    const dir = path.join(scratch.dir, 'latin1-name');
    await writeFiles(dir, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n' });
    writeFileSync(Buffer.concat([Buffer.from(`${dir}/`), Buffer.from([0xff, 0xfe]), Buffer.from('cap.wasm')]), 'not a component');
    expect(await rejectionOf(packProject(dir, noCache))).toMatchObject({
      code: 'E-PRJ-003',
      message: `the component "\ufffd\ufffdcap.wasm" in ${dir} has a name that is not UTF-8, which no listing can hold`,
      hint: 'rename it, e.g. to capsule.wasm',
    });
  });

  it('refuses a murmur.lock that is a directory, which no run could write a lock over, saying to remove it', async () => {
    const locked = path.join(scratch.dir, 'directory-lock');
    await writeFiles(locked, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n' });
    await fs.mkdir(path.join(locked, 'murmur.lock'));
    expect(await rejectionOf(packProject(locked, noCache))).toMatchObject({
      code: 'E-PRJ-003',
      message: `murmur.lock in ${locked} is a directory, not a lockfile: no run could pin what it resolves`,
      hint: `remove the directory ${path.join(locked, 'murmur.lock')}; the next run writes the lock`,
    });
  });

  it('refuses a directory without murmur.yaml with E-IO-001, and a project over the limit with E-PRJ-001', async () => {
    const empty = path.join(scratch.dir, 'empty');
    await fs.mkdir(empty);
    expect((await rejectionOf(packProject(empty, noCache))).code).toBe('E-IO-001');
    const big = path.join(scratch.dir, 'big');
    await writeFiles(big, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n', 'capsule.wasm': Buffer.alloc(4096) });
    const error = await rejectionOf(packProject(big, { ...noCache, maxBytes: 1024 }));
    expect(error.code).toBe('E-PRJ-001');
    expect(error.message).toContain('over the 1024-byte staging limit');
    expect(error.path).toBe('capsule.wasm');
  });

  it('packs a project store alone for a capsule staged by name, and nothing when there is none', async () => {
    const project = path.join(scratch.dir, 'store-only');
    await writeFiles(project, {
      'murmur.yaml': 'name: a\nversion: 0.1.0\n',
      '.murmur/artifacts/x/1.0.0/x-1.0.0.mur.zip': 'z',
      '.murmur/artifacts/x/1.0.0/.publish.writing': '4242',
    });
    expect((await packProjectStore(project, noCache))?.listing.files.map((file) => file.path)).toEqual(['.murmur/artifacts/x/1.0.0/x-1.0.0.mur.zip']);
    expect(await packProjectStore(path.join(scratch.dir, 'nowhere'), noCache)).toBeUndefined();
  });

  it('remembers digests of unchanged files, and hashes a file again once it changes', async () => {
    const project = path.join(scratch.dir, 'remembered');
    const digestCache = path.join(scratch.dir, 'digests.json');
    await writeFiles(project, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n', 'capsule.wasm': 'first' });
    const first = await packProject(project, { digestCache });
    expect(first.listing.files.find((file) => file.path === 'capsule.wasm')?.sha256).toBe(sha('first'));
    expect(Object.keys(JSON.parse(await fs.readFile(digestCache, 'utf8')) as object)).toHaveLength(2);
    // A remembered entry whose stat no longer matches is not trusted: the same size, other bytes.
    await fs.writeFile(path.join(project, 'capsule.wasm'), 'other');
    const second = await packProject(project, { digestCache });
    expect(second.listing.files.find((file) => file.path === 'capsule.wasm')?.sha256).toBe(sha('other'));
  });

  it('publishes each file and the listing once: what the store already holds is not sent again, what it lost is', async () => {
    const project = path.join(scratch.dir, 'published');
    await writeFiles(project, { 'murmur.yaml': 'name: a\nversion: 0.1.0\n', 'capsule.wasm': 'bytes' });
    const store = await bus.objectStore(BLOB_BUCKET);
    const packed = await packProject(project, noCache);
    await publishProject(store, packed);
    for (const file of packed.listing.files) expect(await store.info(file.sha256)).toEqual({ name: file.sha256, size: file.size });
    expect(await store.info(packed.ref.sha256)).toEqual({ name: packed.ref.sha256, size: packed.ref.size });
    const puts: string[] = [];
    const counting = {
      ...store,
      bucket: store.bucket,
      info: store.info,
      get: store.get,
      delete: store.delete,
      put: async (name: string, source: Parameters<typeof store.put>[1]) => {
        puts.push(name);
        return store.put(name, source);
      },
    };
    await publishProject(counting, packed);
    expect(puts).toEqual([]);
    const wasm = packed.listing.files.find((file) => file.path === 'capsule.wasm') as { sha256: string };
    await store.delete(wasm.sha256);
    await store.delete(packed.ref.sha256);
    await publishProject(counting, packed);
    expect(puts).toEqual([wasm.sha256, packed.ref.sha256]);
    expect(await store.info(packed.ref.sha256)).toEqual({ name: packed.ref.sha256, size: packed.ref.size });
  });
});

describe('a blob cache in front of the object store', () => {
  let cacheRoot: string;
  let cache: BlobCache;
  const fetched: string[] = [];

  beforeEach(() => {
    cacheRoot = path.join(scratch.dir, 'cache');
    fetched.length = 0;
    cache = new BlobCache(
      path.join(cacheRoot, 'blobs'),
      () => bus.objectStore(BLOB_BUCKET),
      (ref) => void fetched.push(ref.sha256),
    );
  });

  it('fetches a blob once, verified, read-only, and answers from its own copy after that', async () => {
    const bytes = Buffer.from('blob bytes');
    await (await bus.objectStore(BLOB_BUCKET)).put(sha(bytes), { bytes });
    const local = await cache.fetch({ sha256: sha(bytes), size: bytes.byteLength }, 'a test blob');
    expect(await fs.readFile(local, 'utf8')).toBe('blob bytes');
    expect((await fs.stat(local)).mode & 0o777).toBe(0o444);
    await cache.fetch({ sha256: sha(bytes), size: bytes.byteLength }, 'a test blob');
    expect(fetched).toEqual([sha(bytes)]);
  });

  it('refuses bytes that are not what their name says, keeps none of them, and takes the object out of the store', async () => {
    const store = await bus.objectStore(BLOB_BUCKET);
    const claimed = sha('the real bytes');
    await store.put(claimed, { bytes: Buffer.from('forged bytes!!') });
    const error = await rejectionOf(cache.fetch({ sha256: claimed, size: 14 }, 'hello@1.0.0: component.js'));
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toBe(
      `hello@1.0.0: component.js: object ${claimed} in the bus's object store hashes to ${sha('forged bytes!!')}; its bytes do not match its name, and were refused before use`,
    );
    expect(await store.info(claimed)).toBeUndefined();
    expect((await listTree(cacheRoot)).filter((entry) => !entry.endsWith('/'))).toEqual([]);
    const longer = sha('short');
    await store.put(longer, { bytes: Buffer.from('much longer than claimed') });
    expect((await rejectionOf(cache.fetch({ sha256: longer, size: 5 }, 'a blob'))).message).toContain('holds more than 5 bytes');
  });

  it('refuses a reference that names a blob it holds with another size, rather than count what the sender says', async () => {
    const bytes = Buffer.from('sixty-four megabytes, say');
    await (await bus.objectStore(BLOB_BUCKET)).put(sha(bytes), { bytes });
    await cache.fetch({ sha256: sha(bytes), size: bytes.byteLength }, 'a test blob');
    const error = await rejectionOf(cache.fetch({ sha256: sha(bytes), size: 0 }, 'project x: prompt.md'));
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toBe(`project x: prompt.md: named as 0 bytes, but the blob of its digest ${sha(bytes)} is ${bytes.byteLength} bytes`);
  });

  it('names a blob the store does not hold with E-IO-001', async () => {
    const error = await rejectionOf(cache.fetch({ sha256: sha('absent'), size: 6 }, 'the bundle of x'));
    expect(error.code).toBe('E-IO-001');
    expect(error.message).toContain(`the bundle of x: object ${sha('absent')} is not in the bus's object store`);
  });

  it('takes back what a refused piece of work created, and leaves what was there before', async () => {
    const store = await bus.objectStore(BLOB_BUCKET);
    const kept = Buffer.from('kept');
    await store.put(sha(kept), { bytes: kept });
    await cache.fetch({ sha256: sha(kept), size: 4 }, 'earlier work');
    const created: string[] = [];
    const fresh = Buffer.from('fresh');
    await store.put(sha(fresh), { bytes: fresh });
    await cache.fetch({ sha256: sha(fresh), size: 5 }, 'this work', created);
    await cache.fetch({ sha256: sha(kept), size: 4 }, 'this work', created);
    expect(created).toEqual([cache.pathOf(sha(fresh))]);
    await cache.forget(created);
    expect(await cache.hasLocal(sha(fresh))).toBe(false);
    expect(await cache.hasLocal(sha(kept))).toBe(true);
  });

  it('lays out a file set from verified blobs, refusing nothing it has not checked', async () => {
    const store = await bus.objectStore(BLOB_BUCKET);
    const files = [
      { path: 'component.js', text: 'export {}' },
      { path: 'bin/tool', text: '#!/bin/sh\n', executable: true },
    ];
    for (const file of files) await store.put(sha(file.text), { bytes: Buffer.from(file.text) });
    const target = path.join(scratch.dir, 'laid-out');
    await cache.materialise(
      files.map((file) => ({ path: file.path, sha256: sha(file.text), size: file.text.length, executable: file.executable === true })),
      target,
      'a bundle',
    );
    expect(await fs.readFile(path.join(target, 'component.js'), 'utf8')).toBe('export {}');
    expect((await fs.stat(path.join(target, 'bin', 'tool'))).mode & 0o111).not.toBe(0);
  });
});
