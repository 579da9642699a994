import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BLOB_BUCKET, LOCKFILE_NAME, type MurmurError, StagedPlanSchema, silentLog } from '@murmur/shared';
import { ArtifactStore, readLockfile, sha256Hex, writeLockfile } from '@murmur/shared/artifacts';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { BlobCache, uploadProject } from '@murmur/shared/node';
import { type StageCall, type StageProgress, Stager } from '@murmur/stager';
import { capsuleArchive, capsuleProject, componentArtifact, nativeTool, publishInto, skillArtifact } from '../../../test/support/artifacts.js';
import { listTree, tempDir } from '../../../test/support/fs.js';
import { capsuleWat, halfHookWat, helloCapsuleJs, toolWat, unversionedCapsuleWat } from '../../../test/support/guests.js';
import { rawZip } from '../../../test/support/raw-zip.js';
import { TranspileQueue } from '../src/transpile-queue.js';
import { ComponentCache } from '../src/transpiler.js';

interface World {
  root: string;
  globalStore: string;
  cacheDir: string;
  project: string;
  bus: Bus;
  blobs: BlobCache;
  stager: Stager;
  cleanup(): Promise<void>;
}

let world: World;

beforeEach(async () => {
  const { dir, cleanup } = await tempDir('murmur-stage-');
  const globalStore = path.join(dir, 'home', 'artifacts');
  const cacheDir = path.join(dir, 'home', 'cache');
  // The requester and the stager share an in-process bus: the project travels through its object store.
  const bus = createBus(new InProcessTransport(), silentLog);
  const blobs = new BlobCache(path.join(cacheDir, 'blobs'), () => bus.objectStore(BLOB_BUCKET));
  const stager = new Stager({ cacheDir, globalStore, log: silentLog, blobs });
  world = {
    root: dir,
    globalStore,
    cacheDir,
    project: path.join(dir, 'project'),
    bus,
    blobs,
    stager,
    async cleanup() {
      await stager.close();
      await bus.close();
      await cleanup();
    },
  };
});

afterEach(async () => {
  await world.cleanup();
});

/** The capsule directory packed and uploaded, as any requester does: a stage call for it. */
async function directory(dir = world.project, env_names?: string[]): Promise<StageCall> {
  return {
    request: {
      source: { kind: 'project', project: await uploadProject(world.bus, dir, { digestCache: path.join(world.root, 'digests.json') }) },
      ...(env_names ? { env_names } : {}),
    },
  };
}

async function refusal(call: StageCall | Promise<StageCall>): Promise<MurmurError> {
  try {
    await world.stager.stage(await call);
  } catch (error) {
    return error as MurmurError;
  }
  throw new Error('expected staging to be refused');
}

/** What staging may have written: the cache and the project (minus what the test itself put there). */
async function writtenByStaging(): Promise<{ cache: string[]; project: string[] }> {
  return { cache: await listTree(world.cacheDir), project: await listTree(world.project) };
}

const SCRIPT = 'name: hello\nversion: 0.1.0\n';
const WITH_TOOL = (version = '0.1.0') => `name: hello\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: ${version}\n`;

describe('staging a capsule directory', () => {
  it('turns a script capsule into a plan of pure data with its component transpiled into the cache', async () => {
    const capsule = await capsuleWat();
    await capsuleProject(world.project, SCRIPT, capsule.bytes);
    const plan = await world.stager.stage(await directory());

    expect(StagedPlanSchema.parse(JSON.parse(JSON.stringify(plan)))).toEqual(plan);
    expect(plan.capsule).toMatchObject({ name: 'hello', version: '0.1.0', kind: 'script' });
    const component = plan.capsule.component;
    expect(component?.sha256).toBe(capsule.sha256);
    expect(component?.cache_hit).toBe(false);
    expect(component?.exports).toContain('murmur:capsule/run@0.1.0');
    const bundleDir = world.stager.components.bundleDir(component!);
    expect(bundleDir.startsWith(world.cacheDir)).toBe(true);
    expect(component?.bundle.key).toMatch(/\/[0-9a-f]{64}$/);
    const bundle = await fs.readdir(bundleDir);
    expect(bundle).toContain('component.js');
    expect(bundle).toContain('bundle.json');
    for (const core of component?.core_modules ?? []) expect(bundle).toContain(core);
    // The plan names the bundle by content, file by file, and says nothing of where it is here.
    expect(component?.bundle.files.map((file) => file.path).sort()).toEqual(bundle.filter((file) => file !== 'bundle.json').sort());
    expect(JSON.stringify(plan)).not.toContain(world.root);
    expect(plan.lock).toEqual({ status: 'absent', entries: [] });
  });

  it('serves a second staging of the same bytes from the cache without transpiling again', async () => {
    await capsuleProject(world.project, SCRIPT, (await capsuleWat()).bytes);
    await world.stager.stage(await directory());
    const progress: StageProgress[] = [];
    const second = await world.stager.stage({ ...(await directory()), onProgress: (event) => progress.push(event) });
    expect(second.capsule.component?.cache_hit).toBe(true);
    expect(second.stats.cache_hits).toBe(1);
    expect(progress.filter((event) => event.phase === 'transpile').map((event) => (event as { state: string }).state)).toEqual(['cached']);
  });

  it('transpiles again, rather than hand on, an entry whose files are cut short of the sizes its record gives', async () => {
    await capsuleProject(world.project, SCRIPT, (await capsuleWat()).bytes);
    const first = await world.stager.stage(await directory());
    const component = first.capsule.component;
    if (!component) throw new Error('a script capsule stages its component');
    const entry = path.join(world.cacheDir, 'transpiled', component.bundle.key);
    const glue = path.join(entry, component.entry);
    const whole = await fs.readFile(glue);
    // What a crash before the files reached the disk leaves: the record whole, a file cut short.
    await fs.truncate(glue, 10);
    const second = await world.stager.stage(await directory());
    expect(second.capsule.component?.cache_hit).toBe(false);
    expect(Buffer.compare(await fs.readFile(glue), whole)).toBe(0);
  });

  it('reports a transpile as it starts and ends, with the bytes it is working on', async () => {
    const hello = await helloCapsuleJs();
    await capsuleProject(world.project, SCRIPT, hello.bytes);
    const progress: StageProgress[] = [];
    await world.stager.stage({ ...(await directory()), onProgress: (event) => progress.push(event) });
    const transpiles = progress.filter((event) => event.phase === 'transpile');
    expect(transpiles.map((event) => (event as { state: string }).state)).toEqual(['start', 'done']);
    expect(transpiles[0]).toMatchObject({ artifact: 'hello@0.1.0', bytes: hello.bytes.byteLength });
    expect((transpiles[1] as { ms: number }).ms).toBeGreaterThan(0);
    expect(progress.at(-1)?.phase).toBe('done');
  });

  it('resolves a declared tool from the global store, verifies it and transpiles it', async () => {
    const tool = await toolWat();
    const published = await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', tool.bytes));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    const plan = await world.stager.stage(await directory());
    expect(plan.artifacts).toHaveLength(1);
    expect(plan.artifacts[0]).toMatchObject({
      name: 'echo-tool',
      version: '0.1.0',
      role: 'tool',
      packaging: 'wasm',
      origin: 'global',
      sha256: published.sha256,
      description: 'the echo-tool tool',
    });
    expect(plan.artifacts[0]?.component?.exports).toContain('murmur:tool/run@0.1.0');
    expect(plan.lock.entries).toEqual([{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: published.sha256 } }]);
  });

  it('prefers the project store to the global store', async () => {
    const tool = await toolWat();
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', tool.bytes, 'tool', 'tags: [global]\n'));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    await publishInto(
      path.join(world.project, '.murmur', 'artifacts'),
      await componentArtifact('echo-tool', '0.1.0', tool.bytes, 'tool', 'tags: [project]\n'),
      'project',
    );
    const plan = await world.stager.stage(await directory());
    expect(plan.artifacts[0]?.origin).toBe('project');
  });

  it('stages a skill, naming its skill.md by content in the blob cache', async () => {
    await publishInto(world.globalStore, await skillArtifact('style-guide', '1.0.0', '# Write plainly\n'));
    await capsuleProject(
      world.project,
      'name: hello\nversion: 0.1.0\nartifacts:\n  - name: style-guide\n    version: 1.0.0\n    runtime: skill\n',
      (await capsuleWat()).bytes,
    );
    const plan = await world.stager.stage(await directory());
    const skill = plan.artifacts[0];
    expect(skill).toMatchObject({ role: 'skill', packaging: 'static' });
    const file = skill?.files.find((entry) => entry.path === 'skill.md');
    expect(file?.sha256).toBe(sha256Hex(Buffer.from('# Write plainly\n')));
    expect(await fs.readFile(world.blobs.pathOf(file!.sha256), 'utf8')).toBe('# Write plainly\n');
  });

  it('stages an agent capsule with no component of its own', async () => {
    await capsuleProject(
      world.project,
      'name: agent\nversion: 1.0.0\ninference:\n  endpoint: https://api.example.com\n  model: m\n  driver:\n    artifact: none-needed-here\n',
    );
    const plan = await world.stager.stage(await directory());
    expect(plan.capsule.kind).toBe('agent');
    expect(plan.capsule.component).toBeUndefined();
  });

  it('honours an existing murmur.lock whose pins match', async () => {
    const published = await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    await writeLockfile(path.join(world.project, LOCKFILE_NAME), {
      lock_version: 1,
      artifacts: [{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: published.sha256 } }],
    });
    const plan = await world.stager.stage(await directory());
    expect(plan.lock.status).toBe('honoured');
  });

  it("says at staging what the manifest grants that does not happen: inert sub-blocks, a native tool's block, dropped rules, interpreter grants and workdir_exec", async () => {
    const tool = await toolWat();
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', tool.bytes));
    await publishInto(world.globalStore, await componentArtifact('audit', '0.1.0', (await halfHookWat()).bytes, 'hook'));
    await publishInto(world.globalStore, await nativeTool('lister', '0.1.0', '#!/bin/sh\necho {}\n'));
    const manifest = [
      'name: hello',
      'version: 0.1.0',
      'artifacts:',
      '  - name: echo-tool',
      '    version: 0.1.0',
      '    runtime: tool',
      '    capabilities:',
      '      network:',
      '        allow: [api.example.com, elsewhere.example]',
      '      shell:',
      '        allow: [curl]',
      '      env:',
      '        allow: [HOME]',
      '  - name: audit',
      '    version: 0.1.0',
      '    runtime: hook',
      '    capabilities:',
      '      network:',
      '        allow: [collector.example:4318]',
      '      limits:',
      '        memory_bytes: 1024',
      '  - name: lister',
      '    version: 0.1.0',
      '    runtime: tool',
      '    capabilities:',
      '      network:',
      '        allow: [api.example.com]',
      'capabilities:',
      '  network:',
      '    allow: [api.example.com]',
      '  filesystem:',
      '    workdir_exec: true',
      '  shell:',
      '    allow: [python3]',
      '    interpreter_runtime:',
      '      - binary: python3',
      '        dirs: [{path: /usr/lib/python3, list_dir: true}]',
      '',
    ].join('\n');
    await capsuleProject(world.project, manifest, (await capsuleWat()).bytes);
    const plan = await world.stager.stage(await directory());
    expect(plan.warnings.map((warning) => [warning.code, warning.path])).toEqual([
      ['W-SEC-007', 'artifacts.echo-tool.capabilities.network.allow'],
      ['W-SEC-008', 'artifacts.echo-tool.capabilities'],
      ['W-SEC-006', 'artifacts.audit.capabilities'],
      ['W-SEC-008', 'artifacts.lister.capabilities'],
      ['W-SEC-009', 'capabilities.shell.interpreter_runtime'],
      ['W-SEC-011', 'capabilities.filesystem.workdir_exec'],
    ]);
    const messages = plan.warnings.map((warning) => warning.message);
    expect(messages[0]).toBe("echo-tool: network allow entry 'elsewhere.example' is not covered by the capsule's capabilities.network.allow and was dropped");
    expect(messages[1]).toContain('echo-tool: capabilities.shell, capabilities.env on a tool entry are not read');
    // A hook's own network rules are exactly its own (never dropped), its other blocks inert.
    expect(messages[2]).toContain('audit: capabilities.limits on a hook entry is not read');
    expect(messages[3]).toContain("lister: a native tool runs as a program under the capsule's own subprocess containment");
  });

  it('returns warnings for unknown top-level keys in the plan', async () => {
    await capsuleProject(world.project, `${SCRIPT}colour: blue\n`, (await capsuleWat()).bytes);
    const plan = await world.stager.stage(await directory());
    expect(plan.warnings.map((warning) => warning.code)).toEqual(['W-SEC-019']);
  });
});

describe('components the runtime shipped transpiled', () => {
  /** A stager on the world's cache whose shipped cache is `shipped`, holding `bytes` transpiled as the build does. */
  async function stagerShipping(bytes: Uint8Array): Promise<{ stager: Stager; shippedEntry: string }> {
    const shipped = path.join(world.root, 'shipped');
    const build = new ComponentCache(shipped);
    const sha256 = sha256Hex(bytes);
    await build.commit(await build.prepare(bytes, sha256, 'the build'));
    await build.close();
    const stager = new Stager({ cacheDir: world.cacheDir, globalStore: world.globalStore, log: silentLog, blobs: world.blobs, shippedCache: shipped });
    return { stager, shippedEntry: build.entryDir(sha256) };
  }

  const transpileStates = (progress: StageProgress[]) =>
    progress.filter((event) => event.phase === 'transpile').map((event) => (event as { state: string }).state);

  it('copies a shipped entry into the cache instead of transpiling the component again', async () => {
    const capsule = await capsuleWat();
    const { stager, shippedEntry } = await stagerShipping(capsule.bytes);
    await capsuleProject(world.project, SCRIPT, capsule.bytes);
    const progress: StageProgress[] = [];
    try {
      const plan = await stager.stage({ ...(await directory()), onProgress: (event) => progress.push(event) });
      expect(transpileStates(progress)).toEqual(['cached']);
      expect(plan.capsule.component?.cache_hit).toBe(true);
      const bundleDir = stager.components.bundleDir(plan.capsule.component!);
      expect(bundleDir.startsWith(world.cacheDir)).toBe(true);
      for (const file of plan.capsule.component?.bundle.files ?? []) {
        expect(await fs.readFile(path.join(bundleDir, file.path))).toEqual(await fs.readFile(path.join(shippedEntry, file.path)));
      }
    } finally {
      await stager.close();
    }
  });

  it('transpiles afresh a component whose shipped entry does not match its record, and keeps the shipped bytes out of the cache', async () => {
    const capsule = await capsuleWat();
    const { stager, shippedEntry } = await stagerShipping(capsule.bytes);
    const glue = path.join(shippedEntry, 'component.js');
    const honest = await fs.readFile(glue);
    await fs.appendFile(glue, '\nglobalThis.planted = true;\n');
    await capsuleProject(world.project, SCRIPT, capsule.bytes);
    const progress: StageProgress[] = [];
    try {
      const plan = await stager.stage({ ...(await directory()), onProgress: (event) => progress.push(event) });
      expect(transpileStates(progress)).toEqual(['start', 'done']);
      expect(plan.capsule.component?.cache_hit).toBe(false);
      expect(await fs.readFile(path.join(stager.components.bundleDir(plan.capsule.component!), 'component.js'))).toEqual(honest);
    } finally {
      await stager.close();
    }
  });
});

describe('a transpile is bounded', () => {
  /** A second stager on the same cache whose transpiles may take `timeoutMs`. */
  function stagerWithin(timeoutMs: number): Stager {
    return new Stager({ cacheDir: world.cacheDir, globalStore: world.globalStore, log: silentLog, blobs: world.blobs, transpileTimeoutMs: timeoutMs });
  }

  it('stops a transpile past its deadline with E-STG-001, keeps nothing of it, and transpiles the one queued behind it in a fresh worker', async () => {
    // The 12 MB JavaScript capsule takes about a second to transpile here; the WAT one a few milliseconds.
    const slow = await helloCapsuleJs();
    await capsuleProject(world.project, SCRIPT, slow.bytes);
    const quickDir = path.join(world.root, 'quick');
    await capsuleProject(quickDir, 'name: quick\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const stager = stagerWithin(400);
    try {
      const [slowCall, quickCall] = await Promise.all([directory(), directory(quickDir)]);
      // The quick one asks only once the slow one is transpiling: it waits behind it in the queue.
      let slowStarted = false;
      const slowStaging = stager.stage({ ...slowCall, onProgress: (event) => (slowStarted ||= event.phase === 'transpile') });
      await vi.waitFor(() => expect(slowStarted).toBe(true), { timeout: 10_000 });
      const [refused, staged] = await Promise.allSettled([slowStaging, stager.stage(quickCall)]);
      expect(refused.status).toBe('rejected');
      const error = (refused as PromiseRejectedResult).reason as MurmurError;
      expect(error.code).toBe('E-STG-001');
      expect(error.message).toContain('hello@0.1.0');
      expect(error.message).toContain(`${slow.bytes.byteLength} bytes`);
      expect(error.message).toContain('0.4 s');
      expect(error.hint).toContain('MURMUR_TRANSPILE_TIMEOUT_MS');
      expect(staged.status).toBe('fulfilled');
      const quick = (staged as PromiseFulfilledResult<Awaited<ReturnType<Stager['stage']>>>).value;
      expect(quick.capsule.component?.cache_hit).toBe(false);
      const transpiled = (await listTree(world.cacheDir)).filter((entry) => entry.startsWith('transpiled/'));
      expect(transpiled.some((entry) => entry.includes(sha256Hex(slow.bytes)))).toBe(false);
      expect(transpiled.some((entry) => entry.includes(quick.capsule.component?.sha256 as string))).toBe(true);
    } finally {
      await stager.close();
    }
  });

  it('refuses a component whose bindings transpile past the bound with E-STG-002, keeping nothing of it', async () => {
    const capsule = await capsuleWat();
    const cache = new ComponentCache(world.cacheDir, undefined, undefined, 100);
    try {
      const error = await cache.prepare(capsule.bytes, sha256Hex(capsule.bytes), 'tiny@0.1.0').then(
        () => undefined,
        (failure: MurmurError) => failure,
      );
      expect(error?.code).toBe('E-STG-002');
      expect(error?.message).toMatch(
        /^the component of tiny@0\.1\.0 \(\d+ bytes\) transpiles to \d+ bytes of JavaScript bindings, past the 100 a capsule host loads/,
      );
      expect((await listTree(world.cacheDir)).filter((entry) => entry.startsWith('transpiled/'))).toEqual([]);
    } finally {
      await cache.close();
    }
  });

  it('transpiles the same bytes staged at once only once, each staging getting its entry', async () => {
    const capsule = await capsuleWat();
    const sha256 = sha256Hex(capsule.bytes);
    const cache = new ComponentCache(world.cacheDir);
    const transpiles = vi.spyOn(TranspileQueue.prototype, 'transpile');
    try {
      const entries = await Promise.all([1, 2, 3].map((at) => cache.prepare(capsule.bytes, sha256, `copy ${at}`)));
      expect(transpiles).toHaveBeenCalledTimes(1);
      expect(new Set(entries.map((entry) => entry.temporaryDir)).size).toBe(3);
      for (const entry of entries) await cache.commit(entry);
      expect((await cache.lookup(sha256))?.sha256).toBe(sha256);
    } finally {
      transpiles.mockRestore();
      await cache.close();
    }
  });

  it('lets a worker go after a job that left the stager past its memory bound, and transpiles the next in a fresh one', async () => {
    const [first, second] = [await capsuleWat(), await toolWat()];
    const kept = new ComponentCache(path.join(world.root, 'kept'));
    const recycled = new ComponentCache(path.join(world.root, 'recycled'), undefined, undefined, undefined, 1);
    try {
      for (const cache of [kept, recycled]) for (const bytes of [first.bytes, second.bytes]) await cache.prepare(bytes, sha256Hex(bytes), 'either');
      expect(kept.workersStarted).toBe(1);
      expect(recycled.workersStarted).toBe(2);
    } finally {
      await kept.close();
      await recycled.close();
    }
  });

  it('refuses a transpile still running when the stager closes with E-STG-002, and keeps nothing of it', async () => {
    const slow = await helloCapsuleJs();
    await capsuleProject(world.project, SCRIPT, slow.bytes);
    const progress: StageProgress[] = [];
    const staging = world.stager.stage({ ...(await directory()), onProgress: (event) => progress.push(event) });
    const outcome = staging.then(
      () => undefined,
      (error: MurmurError) => error,
    );
    // Closed once the transpile has begun, not before.
    await vi.waitFor(() => expect(progress.some((event) => event.phase === 'transpile')).toBe(true), { timeout: 10_000 });
    await world.stager.close();
    const error = await outcome;
    expect(error?.code).toBe('E-STG-002');
    expect(error?.message).toContain('shutting down');
    expect((await listTree(world.cacheDir)).filter((entry) => entry.startsWith('transpiled/'))).toEqual([]);
  });
});

describe('staging refuses, and writes nothing', () => {
  it('refuses an artifact whose bytes were tampered with after publishing, before anything is compiled', async () => {
    const published = await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    const bytes = await fs.readFile(published.zipPath);
    bytes[bytes.length - 30] = (bytes[bytes.length - 30] ?? 0) ^ 0xff;
    await fs.writeFile(published.zipPath, bytes);
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    const before = await listTree(world.project);

    const error = await refusal(directory());
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toContain('echo-tool@0.1.0');
    expect(await writtenByStaging()).toEqual({ cache: [], project: before });
  });

  it('refuses an artifact whose store holds another artifact’s bytes under its name, naming both', async () => {
    // other-tool's archive, with its digest, where echo-tool@0.1.0 belongs.
    const published = await publishInto(world.globalStore, await componentArtifact('other-tool', '0.1.0', (await toolWat()).bytes));
    const target = path.join(world.globalStore, 'echo-tool', '0.1.0');
    await fs.mkdir(target, { recursive: true });
    await fs.copyFile(published.zipPath, path.join(target, 'echo-tool-0.1.0.mur.zip'));
    await fs.writeFile(path.join(target, 'echo-tool-0.1.0.sha256'), published.sha256);
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    const before = await listTree(world.project);

    const error = await refusal(directory());
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toContain('holds other-tool@0.1.0, not echo-tool@0.1.0');
    expect(await writtenByStaging()).toEqual({ cache: [], project: before });
  });

  it('names what it refuses in an uploaded project store by the project’s own path, never by the stager’s scratch copy, with a code', async () => {
    const store = path.join(world.project, '.murmur', 'artifacts', 'echo-tool', '0.1.0');
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    await fs.mkdir(store, { recursive: true });
    await fs.writeFile(path.join(store, 'echo-tool-0.1.0.mur.zip'), await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    await fs.writeFile(path.join(store, 'echo-tool-0.1.0.sha256'), '');
    const empty = await refusal(directory());
    expect(empty.code).toBe('E-REG-002');
    expect(empty.path).toBe(".murmur/artifacts/echo-tool/0.1.0/echo-tool-0.1.0.sha256 in 'project'");
    expect(JSON.stringify(empty.toJSON())).not.toContain(world.cacheDir);

    // A store's archive that is a directory: said with a code, not passed on as EISDIR.
    await fs.rm(store, { recursive: true });
    await fs.mkdir(path.join(store, 'echo-tool-0.1.0.mur.zip', 'inside'), { recursive: true });
    await fs.writeFile(path.join(store, 'echo-tool-0.1.0.mur.zip', 'inside', 'x'), 'x');
    await fs.writeFile(path.join(store, 'echo-tool-0.1.0.sha256'), 'a'.repeat(64));
    const directoryAsArchive = await refusal(directory());
    expect(directoryAsArchive.code).toBe('E-REG-002');
    expect(directoryAsArchive.message).toBe('cannot read echo-tool-0.1.0.mur.zip in the store: EISDIR');
    expect(JSON.stringify(directoryAsArchive.toJSON())).not.toContain(world.cacheDir);
  });

  it('refuses an artifact whose bytes differ from the lock’s pin', async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    await writeLockfile(path.join(world.project, LOCKFILE_NAME), {
      lock_version: 1,
      artifacts: [{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: 'f'.repeat(64) } }],
    });
    const lockBefore = await fs.readFile(path.join(world.project, LOCKFILE_NAME), 'utf8');

    const error = await refusal(directory());
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toContain('murmur.lock pins');
    expect(await listTree(world.cacheDir)).toEqual([]);
    expect(await fs.readFile(path.join(world.project, LOCKFILE_NAME), 'utf8')).toBe(lockBefore);
  });

  it('refuses a manifest version that differs from the lock’s pin with E-RUN-003', async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.2.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL('0.2.0'), (await capsuleWat()).bytes);
    await writeLockfile(path.join(world.project, LOCKFILE_NAME), {
      lock_version: 1,
      artifacts: [{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: 'a'.repeat(64) } }],
    });
    const lockBefore = await fs.readFile(path.join(world.project, LOCKFILE_NAME), 'utf8');

    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toBe("lockfile version mismatch for 'echo-tool': manifest requested 0.2.0, lock pinned 0.1.0");
    expect(await listTree(world.cacheDir)).toEqual([]);
    expect(await fs.readFile(path.join(world.project, LOCKFILE_NAME), 'utf8')).toBe(lockBefore);
  });

  it('runs the pinned version instead when asked to honour pins, and says so', async () => {
    const pinned = await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.2.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL('0.2.0'), (await capsuleWat()).bytes);
    await writeLockfile(path.join(world.project, LOCKFILE_NAME), {
      lock_version: 1,
      artifacts: [{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: pinned.sha256 } }],
    });
    const plan = await world.stager.stage({ request: { ...(await directory()).request, honour_pins: true } });
    expect(plan.artifacts[0]?.version).toBe('0.1.0');
    expect(plan.warnings.map((warning) => warning.code)).toContain('W-LCK-001');
  });

  it('refuses an artifact the lock does not mention', async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    await writeLockfile(path.join(world.project, LOCKFILE_NAME), { lock_version: 1, artifacts: [] });
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toBe("murmur.lock missing artifact entry for 'echo-tool'");
  });

  it('refuses an unparsable murmur.lock with E-RUN-003', async () => {
    await capsuleProject(world.project, SCRIPT, (await capsuleWat()).bytes);
    await fs.writeFile(path.join(world.project, LOCKFILE_NAME), 'lock_version: 7\nartifacts: []\n');
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toContain('invalid murmur.lock');
  });

  it("says a pinned version no store holds is murmur.lock's, and how to run what the manifest asks for, when pins are honoured", async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.2.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL('0.2.0'), (await capsuleWat()).bytes);
    await writeLockfile(path.join(world.project, LOCKFILE_NAME), {
      lock_version: 1,
      artifacts: [{ name: 'echo-tool', resolved_version: '8.8.8', sha256: { wasm: '0'.repeat(64) } }],
    });
    const call = await directory();
    const error = await refusal({ ...call, request: { ...call.request, honour_pins: true } });
    expect(error.code).toBe('E-RUN-008');
    expect(error.message).toBe('missing artifacts: echo-tool@8.8.8');
    // Not `mur install`, which refuses the lock's conflict with the manifest (E-REG-005).
    expect(error.hint).toContain(
      "murmur.lock pins a version no store holds for 'echo-tool' (murmur.yaml asks for 0.2.0): remove those entries from murmur.lock",
    );
    expect(error.hint).not.toContain('run `mur install`');
  });

  it('names a missing artifact with E-RUN-008 in upstream words, and where it looked', async () => {
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    const before = await listTree(world.project);
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-008');
    expect(error.message).toBe('missing artifacts: echo-tool@0.1.0');
    expect(error.hint).toContain('run `mur install` to install all manifest dependencies');
    expect(error.hint).toContain(world.globalStore);
    expect(await writtenByStaging()).toEqual({ cache: [], project: before });
  });

  it('names every missing artifact at once, in declaration order, and transpiles none of the present ones', async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    const manifest = `${WITH_TOOL()}  - name: ghost-tool\n    version: 0.0.1\n  - name: other/missing\n    version: 2.0.0\n`;
    await capsuleProject(world.project, manifest, (await capsuleWat()).bytes);
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-008');
    expect(error.message).toBe('missing artifacts: ghost-tool@0.0.1, other/missing@2.0.0');
    expect(await listTree(world.cacheDir)).toEqual([]);
  });

  it('refuses a malformed manifest before resolving anything', async () => {
    await capsuleProject(world.project, 'name: hello\nversion: 0.1.0\ncapabilities:\n  limits:\n    deadline_seconds: 0\n', (await capsuleWat()).bytes);
    const error = await refusal(directory());
    expect(error.code).toBe('E-MAN-003');
    expect(error.path).toBe('capabilities.limits.deadline_seconds');
    expect(await listTree(world.cacheDir)).toEqual([]);
  });

  it('refuses a component that exports only the unversioned interface name', async () => {
    await capsuleProject(world.project, SCRIPT, (await unversionedCapsuleWat()).bytes);
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-001');
    expect(error.message).toContain('murmur:capsule/run@0.1.0');
    expect(await listTree(world.cacheDir)).toEqual([]);
  });

  it('leaves no cache entry for any component when a later one fails to transpile', async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    // A component header over garbage: it passes the header check and fails in jco.
    const broken = Buffer.concat([Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]), Buffer.from('not a component body')]);
    await capsuleProject(world.project, WITH_TOOL(), broken);
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-001');
    expect(error.message).toContain('hello@0.1.0');
    expect(await listTree(world.cacheDir)).toEqual([]);
  });

  it('refuses a script capsule directory with no component, saying where it looked', async () => {
    await capsuleProject(world.project, SCRIPT);
    const error = await refusal(directory());
    expect(error.code).toBe('E-RUN-004');
    expect(error.message).toContain("the project 'project'");
  });

  it("refuses a local skill whose source is not in the capsule's directory, naming the field and what a source is", async () => {
    await capsuleProject(
      world.project,
      `${SCRIPT}artifacts:\n  - name: house-style\n    version: 0.1.0\n    runtime: skill\n    source: ./skills/house-style\n`,
      (await capsuleWat()).bytes,
    );
    const error = await refusal(directory());
    expect(error.code).toBe('E-IO-001');
    expect(error.message).toBe("skill source path not found: './skills/house-style' in the project 'project'");
    expect(error.path).toBe('artifacts.house-style.source');
    expect(error.hint).toBe("a skill's source is a path in the capsule's directory: its skill.md, or a directory that holds one");
  });

  it('refuses a directory without murmur.yaml with E-IO-001', async () => {
    await fs.mkdir(world.project, { recursive: true });
    const error = await refusal(directory());
    expect(error.code).toBe('E-IO-001');
  });
});

describe('every kind of bad input is refused with its code, and staging writes nothing', () => {
  const badManifests = [
    ['malformed YAML', 'name: hello\nversion: 0.1.0\ncapabilities: [\n', 'E-MAN-002'],
    ['a missing name', 'version: 0.1.0\n', 'E-MAN-001'],
    ['a zero limit', 'name: hello\nversion: 0.1.0\ncapabilities:\n  limits:\n    memory_bytes: 0\n', 'E-MAN-003'],
    ['a bad network rule', 'name: hello\nversion: 0.1.0\ncapabilities:\n  network:\n    allow: ["ftp://files.example.com"]\n', 'E-CAP-001'],
    ['a scope outside the workdir', 'name: hello\nversion: 0.1.0\ncapabilities:\n  filesystem:\n    scope: ../..\n', 'E-CAP-002'],
  ] as const;

  it.each(badManifests)('%s', async (_what, manifest, code) => {
    await capsuleProject(world.project, manifest, (await capsuleWat()).bytes);
    const before = await listTree(world.project);
    const error = await refusal(directory());
    expect(error.code).toBe(code);
    expect(await writtenByStaging()).toEqual({ cache: [], project: before });
  });

  it('an unknown key is a warning and staging goes on', async () => {
    await capsuleProject(world.project, `${SCRIPT}unexpected: true\n`, (await capsuleWat()).bytes);
    const plan = await world.stager.stage(await directory());
    expect(plan.warnings[0]).toMatchObject({ code: 'W-SEC-019' });
  });

  const hostileArchives = [
    ['a zip-slip entry', [{ name: '../../outside.txt', data: Buffer.from('x') }], 'E-ART-001'],
    ['an absolute entry', [{ name: '/etc/cron.d/evil', data: Buffer.from('x') }], 'E-ART-001'],
    ['a symlink entry', [{ name: 'link', data: Buffer.from('/etc/passwd'), unixMode: 0o120777 }], 'E-ART-001'],
    ['an entry whose header claims it is small', [{ name: 'big.bin', data: Buffer.alloc(4096, 1), claimedSize: 10 }], 'E-ART-003'],
  ] as const;

  it.each(hostileArchives)('an installed artifact with %s', async (_what, extra, code) => {
    const tool = await toolWat();
    const archive = rawZip([
      { name: 'murmur.yaml', data: Buffer.from('name: echo-tool\nversion: "0.1.0"\nruntime: tool\nrequires_files: [echo-tool.wasm]\n') },
      { name: 'echo-tool.wasm', data: tool.bytes },
      ...extra,
    ]);
    // Stored as if published by someone else: the store keeps whatever bytes it is given.
    const dir = path.join(world.globalStore, 'echo-tool', '0.1.0');
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(path.join(dir, 'echo-tool-0.1.0.mur.zip'), archive);
    await fs.writeFile(path.join(dir, 'echo-tool-0.1.0.sha256'), sha256Hex(archive));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    const before = await listTree(world.project);
    const error = await refusal(directory());
    expect(error.code).toBe(code);
    expect(await writtenByStaging()).toEqual({ cache: [], project: before });
    expect(await listTree(world.root)).not.toContain('outside.txt');
  });

  it('an installed artifact with an entry over the decompression ceiling', async () => {
    // Published under the default ceiling, staged under a lower one.
    await publishInto(world.globalStore, await skillArtifact('huge-skill', '1.0.0', 'x'.repeat(100_000)));
    const previous = process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES;
    process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES = '65536';
    try {
      await capsuleProject(
        world.project,
        'name: hello\nversion: 0.1.0\nartifacts:\n  - name: huge-skill\n    version: 1.0.0\n    runtime: skill\n',
        (await capsuleWat()).bytes,
      );
      const before = await listTree(world.project);
      const error = await refusal(directory());
      expect(error.code).toBe('E-ART-002');
      expect(error.message).toContain("'skill.md' exceeds the 65536-byte decompression ceiling");
      expect(await writtenByStaging()).toEqual({ cache: [], project: before });
    } finally {
      if (previous === undefined) delete process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES;
      else process.env.MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES = previous;
    }
  });
});

describe('staging a capsule from a registry', () => {
  it('stages a published capsule by name and version, reading its manifest from the archive', async () => {
    const capsule = await capsuleWat();
    await publishInto(
      world.globalStore,
      await capsuleArchive('name: local/worker\nversion: 0.3.0\ncapabilities:\n  env:\n    allow: [MARKER]\n', capsule.bytes),
    );
    const plan = await world.stager.stage({ request: { source: { kind: 'registry', name: 'local/worker', version: '0.3.0' } } });
    expect(plan.capsule).toMatchObject({ name: 'local/worker', version: '0.3.0', kind: 'script', origin: { kind: 'registry', origin: 'global' } });
    expect(plan.policy.env_allow).toEqual(['MARKER']);
    expect(plan.capsule.component?.sha256).toBe(capsule.sha256);
    expect(plan.lock.status).toBe('not-applicable');
    expect(plan.capsule.manifest_yaml).toContain('local/worker');
  });

  it('refuses a published capsule with neither a component nor an inference: block, saying how to make it one that runs', async () => {
    const archive = rawZip([{ name: 'murmur.yaml', data: Buffer.from('name: local/hollow\nversion: 0.1.0\n') }]);
    // Stored as if published by someone else: mur build would not pack it.
    const dir = path.join(world.globalStore, 'local', 'hollow', '0.1.0');
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(path.join(dir, 'hollow-0.1.0.mur.zip'), archive);
    await fs.writeFile(path.join(dir, 'hollow-0.1.0.sha256'), sha256Hex(archive));
    const error = await refusal({ request: { source: { kind: 'registry', name: 'local/hollow', version: '0.1.0' } } });
    expect(error.code).toBe('E-RUN-004');
    expect(error.message).toBe('capsule local/hollow@0.1.0 has no component: its archive holds no root .wasm and its manifest no inference: block');
    expect(error.hint).toContain('rebuild it with mur build from a directory that holds its component (capsule.wasm)');
  });

  it('names a capsule that is not published with E-RUN-008', async () => {
    const error = await refusal({ request: { source: { kind: 'registry', name: 'ghost', version: '1.0.0' } } });
    expect(error.code).toBe('E-RUN-008');
    expect(error.message).toContain('ghost@1.0.0');
  });

  it('refuses a capsule reference whose ${VAR} is not set in the requester’s environment', async () => {
    await capsuleProject(
      world.project,
      'name: agent\nversion: 1.0.0\ninference:\n  endpoint: https://api.example.com\n  model: m\n  api_key: ${AGENT_KEY}\n  driver:\n    artifact: d\n',
    );
    const error = await refusal(directory(world.project, ['PATH']));
    expect(error.code).toBe('E-MAN-003');
    expect(error.message).toContain('${AGENT_KEY}');
    const plan = await world.stager.stage(await directory(world.project, ['AGENT_KEY']));
    expect(plan.secret_env).toEqual(['AGENT_KEY']);
    expect(JSON.stringify(plan)).not.toContain('sk-');
  });
});

describe('the lock after staging', () => {
  it('is never written by staging itself', async () => {
    await publishInto(world.globalStore, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
    await capsuleProject(world.project, WITH_TOOL(), (await capsuleWat()).bytes);
    await world.stager.stage(await directory());
    expect(await readLockfile(path.join(world.project, LOCKFILE_NAME))).toBeUndefined();
    expect(await new ArtifactStore(path.join(world.project, '.murmur', 'artifacts'), 'project').list()).toEqual([]);
  });
});
