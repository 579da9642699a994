import { existsSync, promises as fs } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BLOB_BUCKET, silentLog } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
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

  /** Five 1 KiB blobs, the first used an hour ago, each later one a minute more recently. */
  async function agedBlobs(): Promise<string[]> {
    const paths: string[] = [];
    for (let index = 0; index < 5; index += 1) {
      const { path } = await cache.adoptBytes(Buffer.alloc(1024, index));
      const used = new Date(Date.now() - (60 - index) * 60_000);
      await fs.utimes(path, used, used);
      paths.push(path);
    }
    return paths;
  }

  it('a trim removes the blobs used least recently first, down to nine tenths of its bound, never one that work holds', async () => {
    const [oldest, second, third, fourth, newest] = (await agedBlobs()) as [string, string, string, string, string];
    const holder: CreatedEntries = [];
    // The oldest is held by work under way; the third is used again now.
    expect(await cache.holdLocal(oldest.split('/').pop() as string, holder)).toBe(true);
    await cache.adoptBytes(Buffer.alloc(1024, 2));
    const trimmed = await cache.trim(3 * 1024, 60_000);
    // 5 KiB over a 3 KiB bound: down to 2.7 KiB, the least recently used first but the held one.
    expect(trimmed).toEqual({ removed: 3, freedBytes: 3 * 1024, keptBytes: 2 * 1024 });
    expect([oldest, second, third, fourth, newest].map((file) => existsSync(file))).toEqual([true, false, true, false, false]);
    cache.release(holder);
  });

  it('a trim keeps what was used within its grace whatever the bound, and says how much is left', async () => {
    await agedBlobs();
    const trimmed = await cache.trim(1024, 61 * 60_000);
    expect(trimmed).toEqual({ removed: 0, freedBytes: 0, keptBytes: 5 * 1024 });
    expect(await cache.trim(10 * 1024, 0)).toEqual({ removed: 0, freedBytes: 0, keptBytes: 5 * 1024 });
  });

  it('a blob trimmed away is fetched again from the object store, verified, the next time work needs it', async () => {
    const bus = createBus(new InProcessTransport(), silentLog);
    try {
      const stored = new BlobCache(`${scratch.dir}/stored`, () => bus.objectStore(BLOB_BUCKET));
      const bytes = Buffer.from('a payload file, staged an hour ago');
      const { sha256, path } = await stored.adoptBytes(bytes);
      // Published from a copy: the in-process store reads a file when asked, where NATS holds the bytes.
      const published = `${scratch.dir}/published`;
      await fs.writeFile(published, bytes);
      await stored.publish({ sha256, size: bytes.byteLength }, published);
      const hourAgo = new Date(Date.now() - 3_600_000);
      await fs.utimes(path, hourAgo, hourAgo);
      expect((await stored.trim(0, 60_000)).removed).toBe(1);
      expect(existsSync(path)).toBe(false);
      expect(await stored.fetch({ sha256, size: bytes.byteLength }, 'payload.txt')).toBe(path);
      expect(await fs.readFile(path)).toEqual(bytes);
    } finally {
      await bus.close();
    }
  });
});
