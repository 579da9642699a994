import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BUNDLE_RECORD_FILE, BundleRecordSchema, type FileSet, TRANSPILER_ID, type TranspiledComponent } from '@murmur/shared';
import { type BlobCache, pathExists, renameDirectoryIntoPlace, temporarySibling } from '@murmur/shared/node';
import { keepGlueCache } from './glue-cache.js';
import { keepWatchedModule } from './host/grow-watch.js';
import type { HostComponent } from './host/protocol.js';

/** The digest of a file list, whatever its order: two lists with one digest name the same files with the same contents. */
function fileListDigest(files: FileSet): string {
  const listed = [...files]
    .sort((left, right) => (left.path < right.path ? -1 : left.path > right.path ? 1 : 0))
    .map((file) => [file.path, file.sha256, file.size, file.executable]);
  return createHash('sha256').update(JSON.stringify(listed)).digest('hex');
}

/**
 * The directory a fetched bundle is kept in, beside the stager's under its transpiler: named by
 * the digest of its whole file list, so only a plan that names exactly these files finds them.
 */
export function fetchedBundleName(files: FileSet): string {
  return `fetched-${fileListDigest(files)}`;
}

/**
 * A plan's components, made loadable on this machine. A plan comes over the bus from any client
 * that may launch, so what it says a bundle holds is trusted for that plan alone:
 *
 * - a stager's own transpile, at the bundle's key (`<cache>/transpiled/<key>/`), is used when a
 *   stager shares this cache and its record (`bundle.json`, which only a stager writes) names
 *   exactly the plan's files;
 * - anything else is fetched file by file from the bus's object store, every digest verified, into
 *   a temporary sibling renamed into place whole, under the digest of the plan's file list
 *   (`fetchedBundleName`): a directory there exists only complete, so finding one is a local hit.
 *
 * Never at the key: a fetched copy written there was found by every later plan naming that key —
 * another user's, and a stager sharing the cache, which then staged it as its own transpile — with
 * whatever files the first plan had named: one forged launch put its code in everyone's capsule.
 */
export class LocalBundles {
  private readonly pending = new Map<string, Promise<string>>();
  private readonly deriving = new Map<string, Promise<void>>();
  /** The digest of the files a stager's entry at a key holds, by its directory: read once, since it never changes. */
  private readonly stagerHeld = new Map<string, string>();

  constructor(
    private readonly cacheDir: string,
    private readonly blobs: BlobCache,
  ) {}

  /** Where every bundle of this runtime's transpiler lives here (a pooled sandbox reads them all). */
  get transpilerDir(): string {
    return path.join(this.cacheDir, 'transpiled', TRANSPILER_ID);
  }

  /** The component as the host loads it, its bundle on this machine. `label` names it in a refusal. */
  async local(component: TranspiledComponent, label: string): Promise<HostComponent> {
    const dir = await this.placeOf(component);
    let fetching = this.pending.get(dir);
    if (!fetching && !(await pathExists(dir))) {
      fetching = this.fetch(component, dir, label).finally(() => this.pending.delete(dir));
      this.pending.set(dir, fetching);
    }
    if (fetching) await fetching;
    await this.keepDerived(dir, component);
    const { bundle: _bundle, cache_hit: _hit, ...rest } = component;
    return { ...rest, bundle_dir: dir };
  }

  /** The stager's directory at the bundle's key when it holds exactly the plan's files, else the fetched copy's. */
  private async placeOf(component: TranspiledComponent): Promise<string> {
    const { key, files } = component.bundle;
    const transpiled = path.join(this.cacheDir, 'transpiled', ...key.split('/'));
    let held = this.stagerHeld.get(transpiled);
    if (held === undefined) {
      const record = await fs
        .readFile(path.join(transpiled, BUNDLE_RECORD_FILE), 'utf8')
        .then((text) => BundleRecordSchema.safeParse(JSON.parse(text)))
        .catch(() => undefined);
      // Kept once read: a stager's entry is renamed into place whole and never changed after.
      if (record?.success) {
        held = fileListDigest(record.data.files);
        this.stagerHeld.set(transpiled, held);
      }
    }
    return held === fileListDigest(files) ? transpiled : path.join(this.cacheDir, 'transpiled', key.slice(0, key.lastIndexOf('/')), fetchedBundleName(files));
  }

  /**
   * What the host is given beside a bundle, made once per bundle on this machine: the core
   * modules' watched forms (`grow-watch`) and the glue's code cache (`glue-cache.ts`). Made here,
   * because the capsule host may not write into the cache. A failure only costs the host the pass
   * (the watch) or the head start (the cache); a failed watch is tried again at the next launch.
   */
  private keepDerived(dir: string, component: TranspiledComponent): Promise<void> {
    let keeping = this.deriving.get(dir);
    if (!keeping) {
      keeping = Promise.all([...component.core_modules.map((file) => keepWatchedModule(path.join(dir, file))), keepGlueCache(path.join(dir, component.entry))])
        .then(() => undefined)
        .catch(() => {
          this.deriving.delete(dir);
        });
      this.deriving.set(dir, keeping);
    }
    return keeping;
  }

  private async fetch(component: TranspiledComponent, dir: string, label: string): Promise<string> {
    await fs.mkdir(path.dirname(dir), { recursive: true });
    const temporary = temporarySibling(dir);
    try {
      await this.blobs.materialise(component.bundle.files, temporary, `the transpiled bundle of ${label}`);
    } catch (error) {
      await fs.rm(temporary, { recursive: true, force: true });
      throw error;
    }
    await renameDirectoryIntoPlace(temporary, dir);
    return dir;
  }
}
