import { existsSync } from 'node:fs';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BUNDLE_RECORD_FILE, TRANSPILER_ID, type TranspiledComponent, bundleRecordOf } from '@murmur/shared';
import { type BlobCache, renameDirectoryIntoPlace, temporarySibling } from '@murmur/shared/node';
import { keepGlueCache } from './glue-cache.js';
import { keepWatchedModule } from './host/grow-watch.js';
import type { HostComponent } from './host/protocol.js';

/**
 * A plan's components, made loadable on this machine: each bundle in `<cache>/transpiled/<key>/`,
 * the same place a stager on this machine keeps it (so an executor beside its stager finds it
 * there), else fetched file by file from the bus's object store, every digest verified, into a
 * temporary sibling renamed into place whole, with the bundle's record (`bundle.json`) as a stager
 * writes it. A directory at the key exists only complete, so finding one is a local hit.
 */
export class LocalBundles {
  private readonly pending = new Map<string, Promise<string>>();
  private readonly deriving = new Map<string, Promise<void>>();

  constructor(
    private readonly cacheDir: string,
    private readonly blobs: BlobCache,
  ) {}

  /** Where every bundle of this runtime's transpiler lives here (a pooled sandbox reads them all). */
  get transpilerDir(): string {
    return path.join(this.cacheDir, 'transpiled', TRANSPILER_ID);
  }

  dirOf(component: TranspiledComponent): string {
    return path.join(this.cacheDir, 'transpiled', ...component.bundle.key.split('/'));
  }

  /** The component as the host loads it, its bundle on this machine. `label` names it in a refusal. */
  async local(component: TranspiledComponent, label: string): Promise<HostComponent> {
    const dir = this.dirOf(component);
    if (!existsSync(dir)) {
      let fetching = this.pending.get(dir);
      if (!fetching) {
        fetching = this.fetch(component, dir, label).finally(() => this.pending.delete(dir));
        this.pending.set(dir, fetching);
      }
      await fetching;
    }
    await this.keepDerived(dir, component);
    const { bundle: _bundle, cache_hit: _hit, ...rest } = component;
    return { ...rest, bundle_dir: dir };
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
      // Its record as a stager writes it: a stager sharing this cache then finds it transpiled.
      await fs.writeFile(path.join(temporary, BUNDLE_RECORD_FILE), JSON.stringify(bundleRecordOf(component), null, 2));
    } catch (error) {
      await fs.rm(temporary, { recursive: true, force: true });
      throw error;
    }
    await renameDirectoryIntoPlace(temporary, dir);
    return dir;
  }
}
