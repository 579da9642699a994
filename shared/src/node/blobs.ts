import { createHash } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import path from 'node:path';
import type { ObjectStore } from '../bus/objects.js';
import { MurmurError } from '../errors.js';
import { BLOB_BUCKET, type SetFile } from '../file-set.js';
import type { Log } from '../log.js';
import { numberSetting } from '../settings.js';
import { removeEmptyParents, temporarySibling } from './atomic.js';
import { inSlices } from './slices.js';

/**
 * A machine's local cache of blobs — bytes named by their sha256 — in front of the bus's object
 * store. What one service makes (a transpiled bundle, an extracted payload, an uploaded project
 * file) it publishes under its digest; a service on another machine that needs it fetches it into
 * its own cache, **verifying the digest before the bytes are used**, and keeps it, so the second
 * time it is a local hit. A local entry exists only once verified: it is written to a temporary
 * sibling while it is hashed and renamed into place only when the digest matched.
 *
 * Layout: `<dir>/<first two hex digits>/<sha256>`, read-only files, each one's time the last time
 * work used it (`trim` keeps the cache within a bound by that).
 */
export interface BlobRef {
  readonly sha256: string;
  readonly size: number;
}

/**
 * Collects the cache entries a piece of work created, so work that is then refused can take back
 * what it wrote (a refused staging leaves nothing behind) without touching entries that were
 * there before it, or that another piece of work is using meanwhile.
 */
export type CreatedEntries = string[];

/** How recently used a blob is kept whatever the bound (`BlobCache.trim`): longer than any staging or launch holds a path. */
export const BLOB_TRIM_GRACE_MS = 10 * 60 * 1000;
/** How often the services trim their blob caches. */
export const BLOB_TRIM_EVERY_MS = 60 * 1000;
/** The bound of a service's blob cache unless its operator says otherwise (`MURMUR_BLOB_CACHE_MAX_BYTES`). */
export const DEFAULT_BLOB_CACHE_MAX_BYTES = 16 * 1024 * 1024 * 1024;

export class BlobCache {
  private readonly fetching = new Map<string, Promise<string>>();
  /**
   * The pieces of work using each blob now (by their `CreatedEntries`), whichever of them fetched
   * it: a refused one takes back only the blobs no other is using. A staging refused while another
   * read the same component lost it under that one (ENOENT, uncoded), which was then refused too.
   */
  private readonly users = new Map<string, Set<CreatedEntries>>();
  /** Blobs a refusal is removing now: a piece of work that wants one waits, and then fetches it again. */
  private readonly removing = new Map<string, Promise<void>>();

  /**
   * @param dir the local cache directory (`<cache>/blobs`)
   * @param objects the bus's object store bucket, opened on first use
   */
  /**
   * @param onFetched told of each blob fetched from the object store (not of local hits)
   */
  constructor(
    readonly dir: string,
    private readonly objects: () => Promise<ObjectStore>,
    private readonly onFetched: (ref: BlobRef, what: string) => void = () => {},
  ) {}

  pathOf(sha256: string): string {
    return path.join(this.dir, sha256.slice(0, 2), sha256);
  }

  async hasLocal(sha256: string): Promise<boolean> {
    return (await fs.stat(this.pathOf(sha256)).catch(() => undefined))?.isFile() === true;
  }

  /** Whether the blob is here, held for `created` from now on (so no other work's refusal removes it). */
  async holdLocal(sha256: string, created: CreatedEntries): Promise<boolean> {
    await this.use(this.pathOf(sha256), created);
    return this.hasLocal(sha256);
  }

  /** Takes bytes in hand into the cache under their digest (computed here). */
  async adoptBytes(bytes: Uint8Array, created?: CreatedEntries): Promise<{ sha256: string; path: string }> {
    const hash = createHash('sha256');
    await inSlices(bytes, (slice) => hash.update(slice));
    const sha256 = hash.digest('hex');
    const target = this.pathOf(sha256);
    await this.use(target, created);
    if (!(await this.hasLocal(sha256))) {
      await fs.mkdir(path.dirname(target), { recursive: true });
      const temporary = temporarySibling(target);
      try {
        await fs.writeFile(temporary, bytes, { mode: 0o444 });
        await fs.rename(temporary, target);
        created?.push(target);
      } catch (error) {
        await fs.rm(temporary, { force: true });
        throw namingItsFile(error, target);
      }
    }
    return { sha256, path: target };
  }

  /**
   * Makes sure the object store holds `file`'s bytes under `sha256`; nothing is sent when it
   * already does. The file is opened only if the store needs it (and, in-process, only when
   * someone reads it).
   */
  async publish(ref: BlobRef, file: string): Promise<void> {
    const store = await this.objects();
    if ((await store.info(ref.sha256))?.size === ref.size) return;
    await store.put(ref.sha256, { size: ref.size, open: () => createReadStream(file) });
  }

  /** Publishes every file of a set, from wherever `locate` says each one is on this machine. */
  async publishAll(files: readonly SetFile[], locate: (file: SetFile) => string): Promise<void> {
    await Promise.all(files.map((file) => this.publish(file, locate(file))));
  }

  /**
   * A verified local copy of the blob: the cache's own when it has one, else fetched from the
   * object store, hashed as it streams in, and kept only when its digest and size are the ones
   * asked for. `what` names the blob in a refusal (`hello@0.1.0: component.core.wasm`).
   */
  async fetch(ref: BlobRef, what: string, created?: CreatedEntries): Promise<string> {
    const target = this.pathOf(ref.sha256);
    await this.use(target, created);
    const local = await fs.stat(target).catch(() => undefined);
    if (local?.isFile()) {
      // The copy here was verified when it came; the size a reference gives is what its sender
      // says, and what limits are counted by: one that names a held blob as smaller is refused.
      if (local.size !== ref.size)
        throw new MurmurError('E-REG-002', `${what}: named as ${ref.size} bytes, but the blob of its digest ${ref.sha256} is ${local.size} bytes`, {
          hint: 'the listing or plan that named it is not what was packed: pack and send it again',
        });
      return target;
    }
    let pending = this.fetching.get(ref.sha256);
    if (!pending) {
      pending = this.fetchOnce(ref, what).finally(() => this.fetching.delete(ref.sha256));
      this.fetching.set(ref.sha256, pending);
      const fetched = await pending;
      created?.push(fetched);
      return fetched;
    }
    return pending;
  }

  /** Removes entries a refused piece of work created and no other is using (see `CreatedEntries`). */
  async forget(created: CreatedEntries): Promise<void> {
    this.release(created);
    for (const entry of created.splice(0)) {
      if (this.users.has(entry)) continue;
      await this.remove(entry);
    }
  }

  /**
   * Keeps the cache within `maxBytes`: when its blobs hold more, those used least recently are
   * removed first, down to nine tenths of the bound, so that a cache near its bound is not swept
   * again at every blob. Never one that work under way holds, nor one used within `graceMs` (work
   * may keep the path of a blob it fetched without holding it). A removed blob is only a cache
   * miss: the next work that needs it fetches it again from the object store, verified as ever.
   * With every blob in use or recent, the cache stays over its bound until the next trim.
   */
  async trim(maxBytes: number, graceMs = BLOB_TRIM_GRACE_MS, now = Date.now()): Promise<{ removed: number; freedBytes: number; keptBytes: number }> {
    const blobs: Array<{ file: string; size: number; usedMs: number }> = [];
    for (const shard of await fs.readdir(this.dir).catch(() => [] as string[])) {
      if (!/^[0-9a-f]{2}$/.test(shard)) continue;
      for (const name of await fs.readdir(path.join(this.dir, shard)).catch(() => [] as string[])) {
        // Temporaries are the leftover sweeper's (`cache-leftovers.ts`), not the bound's.
        if (!/^[0-9a-f]{64}$/.test(name)) continue;
        const file = path.join(this.dir, shard, name);
        const stat = await fs.lstat(file).catch(() => undefined);
        if (stat?.isFile()) blobs.push({ file, size: stat.size, usedMs: stat.mtimeMs });
      }
    }
    const total = blobs.reduce((sum, blob) => sum + blob.size, 0);
    let kept = total;
    let removed = 0;
    if (total > maxBytes) {
      const target = Math.floor(maxBytes * 0.9);
      for (const blob of blobs.sort((a, b) => a.usedMs - b.usedMs)) {
        if (kept <= target || now - blob.usedMs < graceMs) break;
        if (this.users.has(blob.file) || this.removing.has(blob.file)) continue;
        await this.remove(blob.file);
        kept -= blob.size;
        removed += 1;
      }
    }
    return { removed, freedBytes: total - kept, keptBytes: kept };
  }

  /** Removes `entry`, said to be under way at once (before any wait), so work that wants it meanwhile waits and fetches it again. */
  private async remove(entry: string): Promise<void> {
    const removal = (async () => {
      await fs.rm(entry, { force: true });
      await removeEmptyParents(path.dirname(entry), path.dirname(this.dir));
    })();
    this.removing.set(entry, removal);
    try {
      await removal;
    } finally {
      if (this.removing.get(entry) === removal) this.removing.delete(entry);
    }
  }

  /** A piece of work is over (kept or refused): the blobs it used are no longer held for it. */
  release(created: CreatedEntries): void {
    // Only blobs in use are here: as many as the work under way reads, not the cache's whole.
    for (const [entry, users] of this.users) {
      users.delete(created);
      if (users.size === 0) this.users.delete(entry);
    }
  }

  /**
   * Holds `entry` for `created` — at once, so no removal begun after this call takes it — and,
   * once any removal of it already under way is over (the caller then finds it gone, and fetches
   * it again), marks it used now, which is what `trim` keeps by.
   */
  private async use(entry: string, created: CreatedEntries | undefined): Promise<void> {
    if (created !== undefined) {
      let users = this.users.get(entry);
      if (users === undefined) {
        users = new Set();
        this.users.set(entry, users);
      }
      users.add(created);
    }
    await this.removing.get(entry)?.catch(() => {});
    const now = new Date();
    await fs.utimes(entry, now, now).catch(() => {});
  }

  private async fetchOnce(ref: BlobRef, what: string): Promise<string> {
    const target = this.pathOf(ref.sha256);
    if (await this.hasLocal(ref.sha256)) return target;
    const store = await this.objects();
    const chunks = await store.get(ref.sha256);
    if (!chunks) {
      throw new MurmurError('E-IO-001', `${what}: object ${ref.sha256} is not in the bus's object store (bucket ${BLOB_BUCKET})`, {
        path: `${BLOB_BUCKET}/${ref.sha256}`,
        hint: 'whoever made it has not published it, or the store lost it: stage the capsule again',
      });
    }
    await fs.mkdir(path.dirname(target), { recursive: true });
    const temporary = temporarySibling(target);
    const handle = await fs.open(temporary, 'wx', 0o600);
    const hash = createHash('sha256');
    let received = 0;
    try {
      for await (const chunk of chunks) {
        received += chunk.byteLength;
        if (received > ref.size) break;
        hash.update(chunk);
        await handle.write(chunk);
      }
      await handle.close();
      const actual = hash.digest('hex');
      if (received !== ref.size || actual !== ref.sha256) {
        // An object whose bytes are not what its name says is wrong for everyone who reads it:
        // it is taken out of the store, so the next staging publishes the right bytes again. Only
        // then: a reference that understates an object's size (its reading stops early) or names
        // a good object with the wrong size is wrong, not the object, which others still read.
        const objectIsBad = received <= ref.size && actual !== ref.sha256;
        if (objectIsBad) await store.delete(ref.sha256).catch(() => {});
        throw new MurmurError(
          'E-REG-002',
          received !== ref.size
            ? `${what}: object ${ref.sha256} in the bus's object store holds ${received > ref.size ? `more than ${ref.size}` : received} bytes, not the ${ref.size} it was published as; refused before use`
            : `${what}: object ${ref.sha256} in the bus's object store hashes to ${actual}; its bytes do not match its name, and were refused before use`,
          {
            path: `${BLOB_BUCKET}/${ref.sha256}`,
            hint: objectIsBad
              ? 'the bad object was removed from the store: stage the capsule again (it republishes the right bytes), and find out who wrote that object'
              : 'the object was left as it is (its bytes may be right under their name): whatever named it with this size is wrong; stage the capsule again',
          },
        );
      }
      await fs.chmod(temporary, 0o444);
      await fs.rename(temporary, target);
      this.onFetched(ref, what);
      return target;
    } catch (error) {
      await handle.close().catch(() => {});
      await fs.rm(temporary, { force: true });
      throw namingItsFile(error, target);
    }
  }

  /**
   * A verified blob as an executable file of its own, `<cache>/executables/<sha256>/<name>`, mode
   * 0555: what a sandbox runs a native tool from. Never the workdir copy, which the guest can
   * rewrite; and never the blob itself, whose mode says data. Made once, by rename.
   */
  async executable(ref: BlobRef, name: string, what: string): Promise<string> {
    if (name === '' || name.includes('/') || name === '.' || name === '..') throw new MurmurError('E-ART-001', `${what}: '${name}' cannot name an executable`);
    const target = path.join(path.dirname(this.dir), 'executables', ref.sha256, name);
    const existing = await fs.stat(target).catch(() => undefined);
    if (existing?.isFile() && existing.size === ref.size) return target;
    const source = await this.fetch(ref, what);
    await fs.mkdir(path.dirname(target), { recursive: true });
    const temporary = `${target}.${process.pid}.${Date.now()}.tmp`;
    try {
      await fs.copyFile(source, temporary);
      await fs.chmod(temporary, 0o555);
      await fs.rename(temporary, target);
    } catch (error) {
      await fs.rm(temporary, { force: true });
      throw error;
    }
    return target;
  }

  /**
   * Writes a set's files under `directory` (which must not exist yet), each from a verified blob:
   * hard-linked where the cache is on the same filesystem (cheap, and safe for directories no
   * guest can write), copied otherwise or when `copy` asks for it.
   */
  async materialise(files: readonly SetFile[], directory: string, what: string, options: { copy?: boolean; created?: CreatedEntries } = {}): Promise<void> {
    const base = path.resolve(directory);
    await fs.mkdir(base, { recursive: true });
    for (const file of files) {
      const source = await this.fetch(file, `${what}: ${file.path}`, options.created);
      const target = path.resolve(base, file.path);
      if (!target.startsWith(`${base}${path.sep}`)) throw new MurmurError('E-ART-001', `${what}: '${file.path}' resolves outside ${base}`);
      await fs.mkdir(path.dirname(target), { recursive: true });
      // A link shares the blob's inode (and its read-only mode); an executable is always a copy.
      const copy = options.copy === true || file.executable;
      await placeFile(source, target, copy);
      if (copy) await fs.chmod(target, file.executable ? 0o755 : 0o644);
    }
  }
}

async function placeFile(source: string, target: string, copy: boolean): Promise<void> {
  if (!copy) {
    try {
      await fs.link(source, target);
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'EXDEV' && code !== 'EPERM' && code !== 'EMLINK') throw error;
    }
  }
  await fs.copyFile(source, target);
  await fs.chmod(target, 0o644);
}

/** The sha256 and size of a file, streamed (a 12 MB component is never held whole for this). */
export async function hashFile(file: string): Promise<BlobRef> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).byteLength;
  }
  return { sha256: hash.digest('hex'), size };
}

/** `MURMUR_BLOB_CACHE_MAX_BYTES`: the bound a service keeps its blob cache within (16 GiB unless set). */
export function blobCacheMaxBytes(env: NodeJS.ProcessEnv): number {
  return numberSetting(env, 'MURMUR_BLOB_CACHE_MAX_BYTES', DEFAULT_BLOB_CACHE_MAX_BYTES, { unit: 'bytes' });
}

/**
 * Trims `blobs` to `maxBytes` now and every `BLOB_TRIM_EVERY_MS` (`BlobCache.trim`), saying in
 * `log` what it removed, and when what is left is still over the bound; returns the stop. Every
 * upload and archive a stager is sent lands in its cache, so one never trimmed grows with every
 * project it ever staged, and a sender of archives that inflate to their ceiling fills its disk.
 */
export function keepBlobsWithin(blobs: BlobCache, maxBytes: number, log: Log): () => void {
  let running = false;
  const trim = async (): Promise<void> => {
    if (running) return;
    running = true;
    try {
      const { removed, freedBytes, keptBytes } = await blobs.trim(maxBytes);
      if (removed > 0)
        log.info(
          { cache: blobs.dir, removed, freed_bytes: freedBytes, kept_bytes: keptBytes },
          'removed the blobs used least recently, to keep the cache within MURMUR_BLOB_CACHE_MAX_BYTES',
        );
      if (keptBytes > maxBytes)
        log.warn(
          { cache: blobs.dir, kept_bytes: keptBytes, max_bytes: maxBytes },
          `the blob cache holds more than MURMUR_BLOB_CACHE_MAX_BYTES, all of it in use or used within ${BLOB_TRIM_GRACE_MS / 60_000} minutes; it is trimmed again in ${BLOB_TRIM_EVERY_MS / 1000} s`,
        );
    } catch (error) {
      log.warn({ cache: blobs.dir, err: error }, 'could not trim the blob cache');
    } finally {
      running = false;
    }
  };
  void trim();
  const timer = setInterval(() => void trim(), BLOB_TRIM_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * A file operation's failure with the file it was for: a `write` that failed (a full disk) names
 * none, and a service's refusal then said only `ENOSPC` with no file system to free space on.
 */
function namingItsFile(error: unknown, file: string): unknown {
  const failure = error as NodeJS.ErrnoException;
  if (typeof failure?.code === 'string' && failure.path === undefined) failure.path = file;
  return error;
}
