import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TRANSPILER_ID, silentLog } from '@murmur/shared';
import { ArtifactStore, inspectArchive, writeMurZip } from '@murmur/shared/artifacts';
import { LEFTOVER_SWEEP_EVERY_MS, sweepCacheLeftovers, sweepCacheLeftoversIfDue, sweepStoreLeftovers, temporarySibling } from '@murmur/shared/node';
import { tempDir } from '../../test/support/fs.js';

/** A cache as interrupted writes leave it: what each kind of leftover looks like, and real entries beside them. */
describe('sweeping a cache for what interrupted writes left', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let cache: string;
  const hoursAgo = (hours: number): Date => new Date(Date.now() - hours * 60 * 60 * 1000);

  beforeEach(async () => {
    scratch = await tempDir('murmur-leftovers-');
    cache = path.join(scratch.dir, 'cache');
  });
  afterEach(() => scratch.cleanup());

  async function file(relative: string, age: Date, content = 'x'): Promise<string> {
    const target = path.join(cache, relative);
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.writeFile(target, content);
    await fs.utimes(target, age, age);
    return target;
  }

  async function dir(target: string, age: Date): Promise<string> {
    await fs.mkdir(target, { recursive: true });
    await fs.writeFile(path.join(target, 'component.js'), 'x');
    await fs.utimes(path.join(target, 'component.js'), age, age);
    await fs.utimes(target, age, age);
    return target;
  }

  const exists = (target: string): Promise<boolean> =>
    fs.lstat(target).then(
      () => true,
      () => false,
    );

  it('removes temporaries and staging scratch copies not written to for a day, and nothing else: an hours-old one may be a long staging’s', async () => {
    const bundle = path.join(cache, 'transpiled', TRANSPILER_ID, 'a'.repeat(64));
    const oldTranspile = await dir(temporarySibling(path.join(cache, 'transpiled', TRANSPILER_ID, 'b'.repeat(64))), hoursAgo(26));
    const liveTranspile = await dir(temporarySibling(path.join(cache, 'transpiled', TRANSPILER_ID, 'c'.repeat(64))), hoursAgo(3));
    const oldBlob = await file(path.relative(cache, temporarySibling(path.join(cache, 'blobs', 'ab', 'ab'.repeat(32)))), hoursAgo(30));
    const oldDerived = await file(path.relative(cache, temporarySibling(path.join(bundle, 'component.js.v8cache'))), hoursAgo(30));
    const oldScratch = await dir(path.join(cache, 'staging', '0123456789abcdef-0123456789ab'), hoursAgo(50));
    const liveScratch = await dir(path.join(cache, 'staging', 'fedcba9876543210-fedcba987654'), hoursAgo(6));
    // Real entries, however old: a bundle, a blob, an archive index.
    await dir(bundle, hoursAgo(100));
    const blob = await file(path.join('blobs', 'cd', 'cd'.repeat(32)), hoursAgo(100));
    const index = await file(path.join('archives', `${'e'.repeat(64)}.json`), hoursAgo(100));

    const removed = await sweepCacheLeftovers(cache);
    expect(removed.sort()).toEqual([oldTranspile, oldBlob, oldDerived, oldScratch].sort());
    for (const gone of [oldTranspile, oldBlob, oldDerived, oldScratch]) expect(await exists(gone), gone).toBe(false);
    for (const kept of [liveTranspile, liveScratch, bundle, path.join(bundle, 'component.js'), blob, index]) expect(await exists(kept), kept).toBe(true);
  });

  it('removes a leftover that is a link as a link, never what it points at', async () => {
    const outside = await dir(path.join(scratch.dir, 'outside'), hoursAgo(5));
    const link = temporarySibling(path.join(cache, 'transpiled', TRANSPILER_ID, 'd'.repeat(64)));
    await fs.mkdir(path.dirname(link), { recursive: true });
    await fs.symlink(outside, link);
    await fs.lutimes(link, hoursAgo(26), hoursAgo(26));
    expect(await sweepCacheLeftovers(cache)).toEqual([link]);
    expect(await exists(link)).toBe(false);
    expect(await fs.readdir(outside)).toEqual(['component.js']);
  });

  it('sweeps only when the last sweep of that cache is older than asked, whichever process made it', async () => {
    const first = await file(path.relative(cache, temporarySibling(path.join(cache, 'blobs', 'ab', 'ab'.repeat(32)))), hoursAgo(26));
    await sweepCacheLeftoversIfDue(cache, LEFTOVER_SWEEP_EVERY_MS, silentLog);
    expect(await exists(first)).toBe(false);
    const second = await file(path.relative(cache, temporarySibling(path.join(cache, 'blobs', 'cd', 'cd'.repeat(32)))), hoursAgo(26));
    await sweepCacheLeftoversIfDue(cache, LEFTOVER_SWEEP_EVERY_MS, silentLog);
    expect(await exists(second)).toBe(true);
    // Due again once its marker is older than the interval.
    await fs.utimes(path.join(cache, '.leftovers-swept'), hoursAgo(2), hoursAgo(2));
    await sweepCacheLeftoversIfDue(cache, LEFTOVER_SWEEP_EVERY_MS, silentLog);
    expect(await exists(second)).toBe(false);
  });

  it('sweeps a store of what a killed publish or install left, day-old temporaries and backups, and takes a directory named staging for the artifact it is', async () => {
    // `cache` stands for a store's root here: the layout is the store's.
    const version = path.join('echo-tool', '0.1.0');
    const oldZip = await file(path.relative(cache, temporarySibling(path.join(cache, version, 'echo-tool-0.1.0.mur.zip'))), hoursAgo(30));
    const oldBackup = await file(`${path.relative(cache, temporarySibling(path.join(cache, 'ns', 'tool', '1.0.0', 'tool-1.0.0.sha256')))}.bak`, hoursAgo(30));
    const liveMeta = await file(path.relative(cache, temporarySibling(path.join(cache, version, 'echo-tool-0.1.0.meta.json'))), hoursAgo(1));
    const published = await file(path.join(version, 'echo-tool-0.1.0.mur.zip'), hoursAgo(100));
    const staging = await file(path.join('staging', '0.1.0', 'staging-0.1.0.mur.zip'), hoursAgo(100));
    expect((await sweepStoreLeftovers(cache)).sort()).toEqual([oldZip, oldBackup].sort());
    for (const kept of [liveMeta, published, staging]) expect(await exists(kept), kept).toBe(true);
  });

  it('has a command’s store swept before its first write, so a publish that was killed leaves nothing for good', async () => {
    const left = await file(path.relative(cache, temporarySibling(path.join(cache, 'echo-tool', '0.1.0', 'echo-tool-0.1.0.mur.zip'))), hoursAgo(30));
    const bytes = await writeMurZip([
      { name: 'murmur.yaml', data: Buffer.from('name: notes\nversion: 1.0.0\nruntime: skill\n') },
      { name: 'skill.md', data: Buffer.from('# notes\n') },
    ]);
    await new ArtifactStore(cache, 'global', { interruptible: true }).publish(bytes, (await inspectArchive(bytes, 'notes')).meta);
    expect(await exists(left)).toBe(false);
  });
});
