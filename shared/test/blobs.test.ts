import { existsSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BlobCache, type CreatedEntries } from '@murmur/shared/node';
import { listTree, tempDir } from '../../test/support/fs.js';

describe('a machine’s blob cache, shared by pieces of work', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let cache: BlobCache;

  beforeEach(async () => {
    scratch = await tempDir('murmur-blobs-');
    cache = new BlobCache(`${scratch.dir}/blobs`, () => Promise.reject(new Error('these cases use no object store')));
  });

  afterEach(async () => {
    await scratch.cleanup();
  });

  it('a refused piece of work takes back the blobs it wrote, but not one another piece is using meanwhile', async () => {
    const first: CreatedEntries = [];
    const second: CreatedEntries = [];
    const shared = await cache.adoptBytes(Buffer.from('a component both stagings read'), first);
    const own = await cache.adoptBytes(Buffer.from('what only the refused one wrote'), first);
    expect((await cache.adoptBytes(Buffer.from('a component both stagings read'), second)).path).toBe(shared.path);
    await cache.forget(first);
    expect(existsSync(shared.path)).toBe(true);
    expect(existsSync(own.path)).toBe(false);
    // The second is refused too: the blob the first wrote is no one's now, but it did not write it.
    await cache.forget(second);
    expect(existsSync(shared.path)).toBe(true);
  });

  it('a blob whose users all finished is taken back by a later refusal of the piece that wrote it', async () => {
    const writer: CreatedEntries = [];
    const reader: CreatedEntries = [];
    await cache.adoptBytes(Buffer.from('read, then let go'), writer);
    await cache.adoptBytes(Buffer.from('read, then let go'), reader);
    cache.release(reader);
    await cache.forget(writer);
    expect(await listTree(scratch.dir)).toEqual([]);
  });
});
