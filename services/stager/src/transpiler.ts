import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BUNDLE_RECORD_FILE, type FileSet, MurmurError, TRANSPILER_ID, type TranspiledComponent, bundleRecordOf, componentOfRecord } from '@murmur/shared';
import { sha256Hex } from '@murmur/shared/artifacts';
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

/**
 * The most JavaScript a component's bindings may transpile to. jco writes the lifting and lowering
 * of each value out in full, so a type or a component nested to refer to itself twice at every
 * level doubles the bindings at every level: a component of 1.3 KB came to 409 MB, one of 300 KB
 * to 674 MB (past what V8 holds as a string, so no host could ever load it), each cached,
 * published to every executor and never evicted. The largest honest bindings here are ~1.5 MB
 * (a 12 MB componentize-js capsule's).
 */
export const TRANSPILED_GLUE_MAX_BYTES = 32 * 1024 * 1024;
const ENTRY_NAME = 'component';

/** A transpiled entry not yet in the cache: committed or discarded as one with the rest of a staging. */
export interface PendingEntry {
  temporaryDir: string;
  finalDir: string;
  component: TranspiledComponent;
}

export class ComponentCache {
  private readonly transpiler: TranspileQueue;
  /** Transpiles under way, by the component's digest: the same bytes staged at once are transpiled once. */
  private readonly inFlight = new Map<string, Promise<TranspileOutcome>>();

  /**
   * `transpileTimeoutMs`: how long one component may take to transpile (`MURMUR_TRANSPILE_TIMEOUT_MS`).
   * `shippedCacheDir`: a read-only cache of the same layout, made by the runtime's build
   * (`shippedCacheDir()` in shared), whose entries are copied in rather than transpiled again.
   */
  constructor(
    readonly cacheDir: string,
    transpileTimeoutMs = DEFAULT_TRANSPILE_TIMEOUT_MS,
    private readonly shippedCacheDir?: string,
    private readonly glueMaxBytes = TRANSPILED_GLUE_MAX_BYTES,
    recycleAboveRssBytes?: number,
  ) {
    this.transpiler = new TranspileQueue(transpileTimeoutMs, recycleAboveRssBytes);
  }

  /** Transpiler workers started so far (`TranspileQueue.workersStarted`). */
  get workersStarted(): number {
    return this.transpiler.workersStarted;
  }

  /** `bytes` transpiled, or the transpile of the same bytes already under way. */
  private transpileOnce(sha256: string, bytes: Uint8Array): Promise<TranspileOutcome> {
    let outcome = this.inFlight.get(sha256);
    if (!outcome) {
      const started = this.transpiler.transpile(ENTRY_NAME, bytes);
      this.inFlight.set(sha256, started);
      void started.finally(() => {
        if (this.inFlight.get(sha256) === started) this.inFlight.delete(sha256);
      });
      outcome = started;
    }
    return outcome;
  }

  entryDir(sha256: string): string {
    return entryIn(this.cacheDir, sha256);
  }

  /** The local directory of a bundle this cache holds (or will, once committed). */
  bundleDir(component: TranspiledComponent): string {
    return path.join(this.cacheDir, 'transpiled', component.bundle.key);
  }

  /**
   * The cached entry for these bytes, or undefined when it has not been transpiled yet. An entry
   * the runtime shipped is copied into this cache first, so what a plan names is always here.
   */
  async lookup(sha256: string): Promise<TranspiledComponent | undefined> {
    const dir = this.entryDir(sha256);
    const local = await readEntry(dir, sha256);
    if (local && (await filesHaveRecordedSizes(dir, local))) return local;
    // An entry whose files are not the sizes its record gives (cut short by a crash before they
    // reached the disk, or a full one) was handed on for ever, each run trapping in its glue: it is
    // taken out of the way, and these bytes are transpiled again.
    if (local) await removeDamagedEntry(dir);
    return this.adoptShipped(sha256);
  }

  /**
   * The shipped entry for these bytes, copied whole into this cache: each file is checked against
   * the digest and size its record gives, so a damaged install is transpiled afresh rather than
   * handed on (the executor verifies a bundle by the same record). Written to a temporary
   * sibling and renamed into place, as a transpiled entry is; it is committed at once rather
   * than with its staging, since it is the same content-addressed entry whichever staging made it.
   */
  private async adoptShipped(sha256: string): Promise<TranspiledComponent | undefined> {
    if (this.shippedCacheDir === undefined) return undefined;
    const source = entryIn(this.shippedCacheDir, sha256);
    const component = await readEntry(source, sha256);
    if (!component) return undefined;
    const finalDir = this.entryDir(sha256);
    const temporaryDir = temporarySibling(finalDir);
    try {
      await fs.mkdir(temporaryDir, { recursive: true });
      for (const file of component.bundle.files) {
        // A transpiled entry is flat, as `prepare` writes it.
        if (path.basename(file.path) !== file.path) throw new Error(`'${file.path}' is not a file of the entry's own`);
        const bytes = await fs.readFile(path.join(source, file.path));
        if (bytes.byteLength !== file.size || sha256Hex(bytes) !== file.sha256) throw new Error(`${file.path} does not match its record`);
        await fs.writeFile(path.join(temporaryDir, file.path), bytes);
      }
      await fs.writeFile(path.join(temporaryDir, BUNDLE_RECORD_FILE), JSON.stringify(bundleRecordOf(component), null, 2));
      await renameDirectoryIntoPlace(temporaryDir, finalDir);
    } catch {
      await fs.rm(temporaryDir, { recursive: true, force: true });
      return undefined;
    }
    return readEntry(finalDir, sha256);
  }

  /**
   * Transpiles `bytes` into a temporary directory beside the cache entry it will become. Nothing
   * is visible in the cache until `commit`.
   */
  async prepare(bytes: Uint8Array, sha256: string, label: string): Promise<PendingEntry> {
    const reply = await this.transpileOnce(sha256, bytes);
    if (reply.kind !== 'done') throw transpileRefusal(reply, label, bytes.byteLength);
    const glueBytes = Object.entries(reply.files).reduce((sum, [file, content]) => sum + (file.endsWith('.wasm') ? 0 : content.byteLength), 0);
    if (glueBytes > this.glueMaxBytes)
      throw new MurmurError(
        'E-STG-002',
        `the component of ${label} (${bytes.byteLength} bytes) transpiles to ${glueBytes} bytes of JavaScript bindings, past the ${this.glueMaxBytes} a capsule host loads: it is refused, and nothing of it is kept`,
        {
          hint: 'bindings this large come of types or components nested to double at every level; give the component interfaces of an ordinary shape',
        },
      );
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
        files.push({ path: file, sha256: sha256Hex(content), size: content.byteLength, executable: false });
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

/** Where a cache rooted at `cacheDir` keeps the entry of the component whose bytes hash to `sha256`. */
function entryIn(cacheDir: string, sha256: string): string {
  return path.join(cacheDir, 'transpiled', TRANSPILER_ID, sha256);
}

/**
 * Whether each file an entry's record names is there at the size it gives: a stat each, on every
 * cache hit (a digest of a 12 MB bundle at every staging would cost more than the staging).
 */
async function filesHaveRecordedSizes(dir: string, component: TranspiledComponent): Promise<boolean> {
  for (const file of component.bundle.files) {
    const size = await fs.stat(path.join(dir, file.path)).then(
      (stat) => stat.size,
      () => undefined,
    );
    if (size !== file.size) return false;
  }
  return true;
}

/** Moves a damaged entry aside, then removes it: a staging that finds it meanwhile finds none. */
async function removeDamagedEntry(dir: string): Promise<void> {
  const aside = temporarySibling(dir);
  await fs.rename(dir, aside).then(
    () => fs.rm(aside, { recursive: true, force: true }),
    () => undefined,
  );
}

/** The component an entry's record describes, or undefined when there is no whole entry there for these bytes. */
async function readEntry(dir: string, sha256: string): Promise<TranspiledComponent | undefined> {
  try {
    const record: unknown = JSON.parse(await fs.readFile(path.join(dir, BUNDLE_RECORD_FILE), 'utf8'));
    const component = componentOfRecord(record, sha256);
    return component?.bundle.key === `${TRANSPILER_ID}/${sha256}` ? component : undefined;
  } catch {
    return undefined;
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
