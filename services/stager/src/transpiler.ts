import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BUNDLE_RECORD_FILE, type FileSet, MurmurError, TRANSPILER_ID, type TranspiledComponent, bundleRecordOf, componentOfRecord } from '@murmur/shared';
import { removeEmptyParents, renameDirectoryIntoPlace, temporarySibling } from '@murmur/shared/node';
import { type TranspileOutcome, TranspileQueue } from './transpile-queue.js';

/**
 * Components transpiled once by jco into a content-addressed cache:
 * `<cache>/transpiled/<transpiler>/<sha256 of the .wasm>/`, holding the instantiation-mode module
 * (`component.js`), its core modules and `bundle.json` (which records each file's sha256, so a
 * plan can name the bundle by content and an executor elsewhere can fetch and verify it). The
 * same key is where an executor on any machine keeps the bundle. An entry is written in full to a
 * temporary sibling and renamed into place, so a reader finds a whole entry or none, and two
 * stagers racing on the same bytes both end up reading the same entry.
 */

/**
 * How long one component may take to transpile: a 12 MB one takes about a second here, so this
 * is far past any honest component, and short enough that one made to keep jco busy holds this
 * stager's later stagings for two minutes, not for good.
 */
export const DEFAULT_TRANSPILE_TIMEOUT_MS = 120_000;
const ENTRY_NAME = 'component';

/** A transpiled entry not yet in the cache: committed or discarded as one with the rest of a staging. */
export interface PendingEntry {
  temporaryDir: string;
  finalDir: string;
  component: TranspiledComponent;
}

export class ComponentCache {
  private readonly transpiler: TranspileQueue;

  /** `transpileTimeoutMs`: how long one component may take to transpile (`MURMUR_TRANSPILE_TIMEOUT_MS`). */
  constructor(
    readonly cacheDir: string,
    transpileTimeoutMs = DEFAULT_TRANSPILE_TIMEOUT_MS,
  ) {
    this.transpiler = new TranspileQueue(transpileTimeoutMs);
  }

  private get root(): string {
    return path.join(this.cacheDir, 'transpiled', TRANSPILER_ID);
  }

  entryDir(sha256: string): string {
    return path.join(this.root, sha256);
  }

  /** The local directory of a bundle this cache holds (or will, once committed). */
  bundleDir(component: TranspiledComponent): string {
    return path.join(this.cacheDir, 'transpiled', component.bundle.key);
  }

  /** The cached entry for these bytes, or undefined when it has not been transpiled yet. */
  async lookup(sha256: string): Promise<TranspiledComponent | undefined> {
    try {
      const record: unknown = JSON.parse(await fs.readFile(path.join(this.entryDir(sha256), BUNDLE_RECORD_FILE), 'utf8'));
      const component = componentOfRecord(record, sha256);
      return component?.bundle.key === `${TRANSPILER_ID}/${sha256}` ? component : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Transpiles `bytes` into a temporary directory beside the cache entry it will become. Nothing
   * is visible in the cache until `commit`.
   */
  async prepare(bytes: Uint8Array, sha256: string, label: string): Promise<PendingEntry> {
    const reply = await this.transpiler.transpile(ENTRY_NAME, bytes);
    if (reply.kind !== 'done') throw transpileRefusal(reply, label, bytes.byteLength);
    const finalDir = this.entryDir(sha256);
    const temporaryDir = temporarySibling(finalDir);
    await fs.mkdir(temporaryDir, { recursive: true });
    try {
      const files: FileSet = [];
      for (const [file, content] of Object.entries(reply.files).sort(([a], [b]) => (a < b ? -1 : 1))) {
        const target = path.join(temporaryDir, file);
        if (path.dirname(target) !== temporaryDir || file === BUNDLE_RECORD_FILE)
          throw new MurmurError('E-STG-002', `the stager could not transpile the component of ${label}: jco produced an unexpected file name '${file}'`);
        await fs.writeFile(target, content);
        files.push({ path: file, sha256: createHash('sha256').update(content).digest('hex'), size: content.byteLength, executable: false });
      }
      const entry = `${ENTRY_NAME}.js`;
      const coreModules = Object.keys(reply.files)
        .filter((file) => file.endsWith('.wasm'))
        .sort();
      const component: TranspiledComponent = {
        sha256,
        size_bytes: bytes.byteLength,
        bundle: { key: `${TRANSPILER_ID}/${sha256}`, files },
        entry,
        core_modules: coreModules,
        imports: reply.imports,
        exports: reply.exports,
        cache_hit: false,
      };
      await fs.writeFile(path.join(temporaryDir, BUNDLE_RECORD_FILE), JSON.stringify(bundleRecordOf(component), null, 2));
      return { temporaryDir, finalDir, component };
    } catch (error) {
      await fs.rm(temporaryDir, { recursive: true, force: true });
      throw error;
    }
  }

  /** Moves a prepared entry into place. Losing a race to an identical entry is fine. */
  async commit(pending: PendingEntry): Promise<void> {
    await renameDirectoryIntoPlace(pending.temporaryDir, pending.finalDir);
  }

  async discard(pending: PendingEntry): Promise<void> {
    await fs.rm(pending.temporaryDir, { recursive: true, force: true });
    await removeEmptyParents(path.dirname(pending.temporaryDir), this.cacheDir);
  }

  close(): Promise<void> {
    return this.transpiler.close();
  }
}

/** Why a component was not transpiled, as the staging's refusal: whose the fault is decides the code. */
function transpileRefusal(outcome: Exclude<TranspileOutcome, { kind: 'done' }>, label: string, sizeBytes: number): MurmurError {
  switch (outcome.kind) {
    case 'refused':
      return new MurmurError('E-RUN-001', `failed to compile component for ${label}: ${outcome.message}`, {
        hint: 'the artifact is not a valid WebAssembly component; rebuild it (componentize-js, cargo component, wasm-tools component new)',
      });
    case 'timed-out':
      return new MurmurError(
        'E-STG-001',
        `transpiling the component of ${label} (${sizeBytes} bytes) took longer than ${outcome.timeoutMs / 1000} s, so it was stopped; nothing of it was kept`,
      );
    case 'failed':
      return new MurmurError(
        'E-STG-002',
        `the stager could not transpile the component of ${label} (${sizeBytes} bytes): ${outcome.message}; nothing of it was kept`,
      );
  }
}
