import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import {
  type ArtifactDeclaration,
  type CapsuleManifest,
  type CapsuleOrigin,
  type LockedArtifact,
  type Log,
  MurmurError,
  type MurmurLock,
  type MurmurWarning,
  type StageRequest,
  StageRequestSchema,
  type StagedArtifact,
  type StagedPlan,
  type TranspiledComponent,
  LOCKFILE_NAME,
  capabilityPolicy,
  LifecycleSchema,
  packagingTypeOf,
  parseArtifactManifest,
  parseCapsuleManifest,
  referencedEnvNames,
} from '@murmur/shared';
import {
  ArtifactStore,
  MurZip,
  RegistryChain,
  type ResolvedArtifact,
  RoostRegistryClient,
  isWasmComponent,
  readLockfile,
  sha256Hex,
  storeSource,
  verifyResolved,
} from '@murmur/shared/artifacts';
import { defaultArtifactsDir, globalStoreDir, projectStoreDir, renameDirectoryIntoPlace, temporarySibling, writeFileAtomic } from '@murmur/shared/node';
import { ComponentCache, type PendingEntry, removeEmptyParents } from './transpiler.js';

/**
 * Staging: from a manifest (a directory, or `name@version` in a registry) to a staged plan.
 *
 * Three phases, so a failure writes nothing:
 * 1. **Resolve and verify.** Every artifact is found (project store, global store, roost), its
 *    bytes hashed and compared with what its source recorded and with `murmur.lock`'s pin, and its
 *    archive vetted — all before anything is compiled. Any refusal ends staging here.
 * 2. **Prepare.** Components not yet in the cache are transpiled, and payloads extracted, into
 *    temporary directories beside their cache entries.
 * 3. **Commit.** The temporaries are renamed into place together, or, if anything in phase 2
 *    failed, all removed. The lock is never written here: a first run writes it, from the plan.
 */

export type StageProgress =
  | { phase: 'resolve'; artifact: string; origin?: string }
  | { phase: 'transpile'; artifact: string; bytes: number; state: 'start' | 'done' | 'cached'; ms?: number }
  | { phase: 'done'; ms: number };

export interface StagerOptions {
  cacheDir: string;
  /** The machine's global store; defaults to `$MURMUR_HOME/artifacts`. */
  globalStore?: string;
  /** roost's base URL; when set, roost is asked after the local stores. */
  roostUrl?: string;
  /** The artifacts shipped with the runtime, asked last; undefined finds them, null turns them off. */
  defaultStore?: string | null;
  log: Log;
}

export interface StageCall {
  request: StageRequest;
  onProgress?: (progress: StageProgress) => void;
}

interface ComponentNeed {
  label: string;
  /** The component's bytes, checked to be a component; read only when the cache cannot answer. */
  load(): Promise<Buffer>;
  /** The archive the component sits in, whose index may already know its digest. */
  archive?: { zipSha256: string; entry: string };
  /** The export the runtime will call, checked before anything is committed. */
  requiredExport: string;
  assign: (component: TranspiledComponent) => void;
}

interface ExtractionNeed {
  zip: MurZip;
  sha256: string;
  skip: Set<string>;
  assign: (dir: string) => void;
}

/** What one staging will write, held until it commits or rolls back as one. */
interface Transaction {
  componentNeeds: ComponentNeed[];
  extractionNeeds: ExtractionNeed[];
  openZips: MurZip[];
  pending: Array<{ temporaryDir: string; finalDir: string }>;
  pendingComponents: PendingEntry[];
  indexWrites: Array<{ zipSha256: string; entry: string; sha256: string }>;
}

function newTransaction(): Transaction {
  return { componentNeeds: [], extractionNeeds: [], openZips: [], pending: [], pendingComponents: [], indexWrites: [] };
}

const CAPSULE_EXPORT = 'murmur:capsule/run@0.1.0';
const TOOL_EXPORT = 'murmur:tool/run@0.1.0';
const HOOK_EXPORT = 'murmur:hook/lifecycle@0.5.0';

function exportFor(role: ArtifactDeclaration['runtime']): string {
  return role === 'hook' ? HOOK_EXPORT : TOOL_EXPORT;
}

export class Stager {
  readonly components: ComponentCache;

  constructor(private readonly options: StagerOptions) {
    this.components = new ComponentCache(options.cacheDir);
  }

  private chain(projectDir: string | undefined): RegistryChain {
    const sources = [];
    if (projectDir) sources.push(storeSource(new ArtifactStore(projectStoreDir(projectDir), 'project')));
    sources.push(storeSource(new ArtifactStore(this.options.globalStore ?? globalStoreDir(), 'global')));
    if (this.options.roostUrl) sources.push(new RoostRegistryClient(this.options.roostUrl));
    const shipped = this.options.defaultStore === undefined ? defaultArtifactsDir() : (this.options.defaultStore ?? undefined);
    if (shipped) sources.push(storeSource(new ArtifactStore(shipped, 'default')));
    return new RegistryChain(sources);
  }

  async stage(call: StageCall): Promise<StagedPlan> {
    const started = performance.now();
    const request = StageRequestSchema.parse(call.request);
    const progress = call.onProgress ?? (() => {});
    const tx = newTransaction();
    try {
      // ── phase 1: resolve and verify ────────────────────────────────────────
      const loaded = await this.loadCapsule(request, progress, tx.openZips);
      const { manifest, manifestText, manifestDir, origin, warnings } = loaded;
      const projectDir = origin.kind === 'directory' ? manifestDir : request.project_dir;
      const chain = this.chain(projectDir);
      const lockPath = origin.kind === 'directory' ? path.join(manifestDir, LOCKFILE_NAME) : undefined;
      const lock = lockPath ? await readLockfile(lockPath) : undefined;

      const staged: StagedArtifact[] = [];
      const lockEntries: LockedArtifact[] = [];
      for (const declaration of manifest.artifacts) {
        const artifact = await this.stageArtifact(declaration, { chain, lock, lockPath, manifestDir, origin, honourPins: request.honour_pins, warnings, progress, openZips: tx.openZips });
        staged.push(artifact.staged);
        if (artifact.lockEntry) lockEntries.push(artifact.lockEntry);
        if (artifact.component) tx.componentNeeds.push(artifact.component);
        if (artifact.extraction) tx.extractionNeeds.push(artifact.extraction);
      }

      if (loaded.zip && loaded.zipSha256) {
        // A packaged capsule's own files (a system prompt, skills) are read from its extraction.
        tx.extractionNeeds.push({ zip: loaded.zip, sha256: loaded.zipSha256, skip: new Set(loaded.rootWasm ? [loaded.rootWasm] : []), assign: () => {} });
      }

      const kind = manifest.inference !== undefined ? 'agent' : 'script';
      let capsuleComponent: TranspiledComponent | undefined;
      if (kind === 'script') {
        tx.componentNeeds.push({
          label: `${manifest.name}@${manifest.version}`,
          load: () => this.capsuleComponentBytes(loaded),
          ...(loaded.zipSha256 && loaded.rootWasm ? { archive: { zipSha256: loaded.zipSha256, entry: loaded.rootWasm } } : {}),
          requiredExport: CAPSULE_EXPORT,
          assign: (component) => (capsuleComponent = component),
        });
      }

      await this.prepare(tx, progress);
      await this.commit(tx);

      const policy = capabilityPolicy(manifest);
      const baseLifecycle = LifecycleSchema.parse(manifest.lifecycle ?? {});
      const lifecycle = { ...baseLifecycle, ...stripUndefined(request.lifecycle_override ?? {}) };
      const cacheHits = [...staged.map((artifact) => artifact.component), capsuleComponent].filter((component) => component?.cache_hit).length;
      const durationMs = performance.now() - started;
      progress({ phase: 'done', ms: durationMs });
      return {
        plan_version: 1,
        staged_at: new Date().toISOString(),
        capsule: {
          name: manifest.name,
          version: manifest.version,
          kind,
          origin,
          manifest_dir: manifestDir,
          manifest,
          manifest_yaml: manifestText,
          ...(capsuleComponent ? { component: capsuleComponent } : {}),
        },
        artifacts: staged,
        policy,
        lifecycle,
        lock: lockPath ? { path: lockPath, status: lock ? 'honoured' : 'absent', entries: lock ? lock.artifacts : lockEntries } : { status: 'not-applicable', entries: lockEntries },
        secret_env: referencedEnvNames(manifestText),
        warnings,
        stats: { duration_ms: durationMs, components: tx.componentNeeds.length, cache_hits: cacheHits },
      };
    } finally {
      await this.rollback(tx);
    }
  }

  /**
   * One artifact on its own, for `manage.pull()` at run time: resolved, verified and transpiled
   * exactly as a declared one would be (no lock is consulted; the puller checks its own).
   */
  async stageOne(request: { name: string; version: string; project_dir?: string | undefined }): Promise<StagedArtifact> {
    const tx = newTransaction();
    try {
      const chain = this.chain(request.project_dir);
      const declaration: ArtifactDeclaration = { name: request.name, version: request.version, runtime: 'tool', local_source: false, prompt_payload: false };
      const artifact = await this.stageArtifact(declaration, {
        chain,
        lock: undefined,
        lockPath: undefined,
        manifestDir: request.project_dir ?? process.cwd(),
        origin: { kind: 'directory', manifest_dir: request.project_dir ?? process.cwd() },
        honourPins: false,
        warnings: [],
        progress: () => {},
        openZips: tx.openZips,
      });
      if (artifact.component) tx.componentNeeds.push(artifact.component);
      if (artifact.extraction) tx.extractionNeeds.push(artifact.extraction);
      await this.prepare(tx, () => {});
      await this.commit(tx);
      return artifact.staged;
    } finally {
      await this.rollback(tx);
    }
  }

  /** Phase 2: cache hits read, misses transpiled and payloads extracted into temporaries. */
  private async prepare(tx: Transaction, progress: (progress: StageProgress) => void): Promise<void> {
    for (const need of tx.componentNeeds) {
      // Warm path: an archive seen before names its component's digest, so a cache hit costs no
      // inflate and no hash of the component (the archive's own digest was verified above).
      const indexed = need.archive ? await this.archiveIndex(need.archive.zipSha256, need.archive.entry) : undefined;
      const known = indexed ? await this.components.lookup(indexed) : undefined;
      if (known) {
        progress({ phase: 'transpile', artifact: need.label, bytes: known.size_bytes, state: 'cached' });
        checkExport(known, need);
        need.assign(known);
        continue;
      }
      const bytes = await need.load();
      const sha256 = sha256Hex(bytes);
      if (need.archive) tx.indexWrites.push({ ...need.archive, sha256 });
      const hit = await this.components.lookup(sha256);
      if (hit) {
        progress({ phase: 'transpile', artifact: need.label, bytes: bytes.byteLength, state: 'cached' });
        checkExport(hit, need);
        need.assign(hit);
        continue;
      }
      progress({ phase: 'transpile', artifact: need.label, bytes: bytes.byteLength, state: 'start' });
      const transpileStarted = performance.now();
      const prepared = await this.components.prepare(bytes, sha256, need.label);
      tx.pendingComponents.push(prepared);
      checkExport(prepared.component, need);
      need.assign(prepared.component);
      progress({ phase: 'transpile', artifact: need.label, bytes: bytes.byteLength, state: 'done', ms: performance.now() - transpileStarted });
    }
    for (const need of tx.extractionNeeds) {
      const finalDir = path.join(this.options.cacheDir, 'extracted', need.sha256);
      need.assign(finalDir);
      if (existsSync(finalDir)) continue;
      const temporaryDir = temporarySibling(finalDir);
      tx.pending.push({ temporaryDir, finalDir });
      await need.zip.extractTo(temporaryDir, need.skip);
    }
  }

  /** Phase 3: every temporary renamed into place together. */
  private async commit(tx: Transaction): Promise<void> {
    for (const entry of tx.pendingComponents) await this.components.commit(entry);
    for (const entry of tx.pending) await renameDirectoryIntoPlace(entry.temporaryDir, entry.finalDir);
    tx.pendingComponents.length = 0;
    tx.pending.length = 0;
    for (const write of tx.indexWrites) await this.recordArchiveIndex(write.zipSha256, write.entry, write.sha256);
  }

  /** Whatever was not committed is removed, with any directory it created. */
  private async rollback(tx: Transaction): Promise<void> {
    for (const entry of tx.pendingComponents) await this.components.discard(entry);
    for (const entry of tx.pending) {
      await fs.rm(entry.temporaryDir, { recursive: true, force: true });
      await removeEmptyParents(path.dirname(entry.temporaryDir), this.options.cacheDir);
    }
    for (const zip of tx.openZips) zip.close();
  }

  private async loadCapsule(request: ReturnType<typeof StageRequestSchema.parse>, progress: (progress: StageProgress) => void, openZips: MurZip[]): Promise<LoadedCapsule> {
    if (request.source.kind === 'directory') {
      const manifestDir = path.resolve(request.source.manifest_dir);
      const manifestPath = path.join(manifestDir, 'murmur.yaml');
      let manifestText: string;
      try {
        manifestText = await fs.readFile(manifestPath, 'utf8');
      } catch (error) {
        const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
        throw new MurmurError(missing ? 'E-IO-001' : 'E-IO-003', missing ? `murmur.yaml not found at ${manifestPath}` : `failed to read murmur.yaml at ${manifestPath}: ${(error as Error).message}`, {
          path: manifestPath,
          hint: missing ? 'pass the directory that holds murmur.yaml, or --manifest <path>' : undefined,
        });
      }
      const { manifest, warnings } = parseCapsuleManifest(manifestText, { env: presence(request.env_names) });
      return { manifest, manifestText, manifestDir, origin: { kind: 'directory', manifest_dir: manifestDir }, warnings: [...warnings] };
    }
    const { name, version } = request.source;
    const chain = this.chain(request.project_dir);
    progress({ phase: 'resolve', artifact: `${name}@${version}` });
    const resolved = await chain.resolve(name, version);
    if (!resolved) {
      throw new MurmurError('E-RUN-008', `capsule ${name}@${version} is not installed: looked in ${chain.describeSearch()}`, {
        path: `${name}@${version}`,
        hint: `publish it ('mur publish <zip>') or install it ('mur install ${name}@${version}')`,
      });
    }
    const sha256 = verifyResolved(resolved);
    const zip = await MurZip.open(resolved.bytes, { label: `${name}@${version}` });
    openZips.push(zip);
    const manifestText = await zip.manifestText();
    const { manifest, warnings } = parseCapsuleManifest(manifestText, { env: presence(request.env_names) });
    if (manifest.name !== name || manifest.version !== version) {
      throw new MurmurError('E-REG-002', `${resolved.location} holds ${manifest.name}@${manifest.version}, not ${name}@${version}`, { path: resolved.location });
    }
    const extractedDir = path.join(this.options.cacheDir, 'extracted', sha256);
    const rootWasm = zip.hasRootWasm() ? zip.rootWasmName() : undefined;
    return {
      manifest,
      manifestText,
      manifestDir: extractedDir,
      origin: { kind: 'registry', name, version, origin: resolved.origin, sha256, extracted_dir: extractedDir },
      warnings: [...warnings],
      zip,
      rootWasm,
      zipSha256: sha256,
    };
  }

  /** The script capsule's own component: beside its manifest, or the packaged capsule's root wasm. */
  private async capsuleComponentBytes(loaded: LoadedCapsule): Promise<Buffer> {
    const label = `${loaded.manifest.name}@${loaded.manifest.version}`;
    let bytes: Buffer;
    if (loaded.zip) {
      if (!loaded.rootWasm) throw new MurmurError('E-RUN-004', `capsule ${label} has no component: its archive holds no root .wasm and its manifest no inference: block`);
      bytes = await loaded.zip.read(loaded.rootWasm);
    } else {
      bytes = await fs.readFile(await findCapsuleWasm(loaded.manifestDir));
    }
    if (!isWasmComponent(bytes)) {
      throw new MurmurError('E-RUN-001', `failed to compile capsule component for ${label}: it is not a WebAssembly component (a core module, or not wasm at all)`, {
        hint: 'build it as a component: componentize-js, cargo component, or wasm-tools component new',
      });
    }
    return bytes;
  }

  private async stageArtifact(
    declaration: ArtifactDeclaration,
    context: {
      chain: RegistryChain;
      lock: MurmurLock | undefined;
      lockPath: string | undefined;
      manifestDir: string;
      origin: CapsuleOrigin;
      honourPins: boolean;
      warnings: MurmurWarning[];
      progress: (progress: StageProgress) => void;
      openZips: MurZip[];
    },
  ): Promise<{ staged: StagedArtifact; lockEntry?: LockedArtifact; component?: ComponentNeed; extraction?: ExtractionNeed }> {
    const { name } = declaration;
    if (declaration.source !== undefined) return { staged: await this.stageLocalSkill(declaration, context.manifestDir) };

    let version = declaration.version;
    let pinnedSha: string | undefined;
    if (context.lock) {
      const pin = context.lock.artifacts.find((entry) => entry.name === name);
      if (!pin) {
        throw new MurmurError('E-RUN-003', `murmur.lock missing artifact entry for '${name}'`, {
          path: context.lockPath,
          hint: `install it ('mur install ${name}@${version}') to pin it, or delete murmur.lock to re-pin everything on the next run`,
        });
      }
      if (pin.resolved_version !== version) {
        if (!context.honourPins) {
          throw new MurmurError('E-RUN-003', `lockfile version mismatch for '${name}': manifest requested ${version}, lock pinned ${pin.resolved_version}`, {
            path: context.lockPath,
            hint: `to upgrade, remove the '${name}' entry from murmur.lock (or run 'mur install ${name}@${version}')`,
          });
        }
        context.warnings.push({ code: 'W-LCK-001', message: `murmur.yaml asks for ${name}@${version} but murmur.lock pins ${pin.resolved_version}; running the pinned version (remove the lock entry to upgrade)`, path: `artifacts.${name}` });
        version = pin.resolved_version;
      }
      pinnedSha = pin.sha256.wasm;
    }

    context.progress({ phase: 'resolve', artifact: `${name}@${version}` });
    const resolved: ResolvedArtifact | undefined = await context.chain.resolve(name, version);
    if (!resolved) {
      throw new MurmurError('E-RUN-008', `artifact ${name}@${version} is not installed: looked in ${context.chain.describeSearch()}`, {
        path: `${name}@${version}`,
        hint: `install it with 'mur install ${name}@${version}', or publish it to the global store with 'mur publish'`,
      });
    }
    const sha256 = verifyResolved(resolved);
    if (pinnedSha !== undefined && pinnedSha !== sha256) {
      throw new MurmurError('E-REG-002', `artifact integrity check failed for ${name}@${version}: ${resolved.location} hashes to ${sha256}, but murmur.lock pins ${pinnedSha}`, {
        path: resolved.location,
        hint: 'the installed bytes are not the ones the lock pinned; reinstall the pinned artifact, or delete the lock entry if the change is intended',
      });
    }

    const label = `${name}@${version}`;
    const zip = await MurZip.open(resolved.bytes, { label });
    context.openZips.push(zip);
    const manifestText = await zip.manifestText();
    const own = parseArtifactManifest(manifestText, `${label}: murmur.yaml`);
    const packaging = packagingTypeOf(own);
    const staged: StagedArtifact = {
      name,
      version,
      role: declaration.runtime,
      packaging,
      origin: resolved.origin,
      sha256,
      manifest_yaml: manifestText,
      ...(own.description !== undefined ? { description: own.description } : {}),
      ...(own.input_schema !== undefined ? { input_schema: own.input_schema } : {}),
      ...(declaration.capabilities !== undefined ? { capabilities: declaration.capabilities } : {}),
      ...(declaration.gateway !== undefined ? { gateway: declaration.gateway } : {}),
      ...(declaration.runtime === 'hook'
        ? { hook: { binding: own.binding, execution_mode: own.execution_mode === 'async' ? ('async' as const) : ('blocking' as const), commit_policy: own.commit_policy ?? 'none', on_overflow: declaration.on_overflow ?? 'drop' } }
        : {}),
    };
    const lockEntry: LockedArtifact = { name, resolved_version: version, sha256: { wasm: sha256 } };
    const skip = new Set<string>();
    let component: ComponentNeed | undefined;
    const needsComponent = declaration.runtime === 'driver' || declaration.runtime === 'hook' || (declaration.runtime === 'tool' && packaging === 'wasm');
    if (needsComponent) {
      const wasmName = zip.rootWasmName();
      skip.add(wasmName);
      component = {
        label,
        load: async () => {
          const bytes = await zip.read(wasmName);
          if (!isWasmComponent(bytes)) {
            throw new MurmurError('E-RUN-001', `failed to compile component for ${label}: ${wasmName} is not a WebAssembly component`, { hint: 'rebuild the artifact as a component' });
          }
          return bytes;
        },
        archive: { zipSha256: sha256, entry: wasmName },
        requiredExport: exportFor(declaration.runtime),
        assign: (built) => (staged.component = built),
      };
    } else if (packaging === 'native') {
      const binary = `bin/${name.split('/').pop() as string}`;
      if (!zip.has(binary)) throw new MurmurError('E-ART-003', `${label}: failed to read native binary at '${binary}' from the archive (ensure the binary is at ${binary} inside the .mur.zip)`);
    } else if (!zip.has('skill.md')) {
      throw new MurmurError('E-ART-003', `${label}: skill.md not found at the archive root (ensure skill.md is at the root of the .mur.zip)`);
    }
    skip.add('murmur.yaml');
    const extraction: ExtractionNeed | undefined = zip.names.some((entry) => !skip.has(entry)) ? { zip, sha256, skip, assign: (dir) => (staged.extracted_dir = dir) } : undefined;
    return { staged, lockEntry, ...(component ? { component } : {}), ...(extraction ? { extraction } : {}) };
  }

  /** A local-source skill: `skill.md` read from beside the manifest, never locked, never resolved. */
  private async stageLocalSkill(declaration: ArtifactDeclaration, manifestDir: string): Promise<StagedArtifact> {
    const source = declaration.source as string;
    const target = path.resolve(manifestDir, source);
    const stat = await fs.stat(target).catch(() => undefined);
    if (!stat) throw new MurmurError('E-IO-001', `skill source path not found: ${target}`, { path: `artifacts.${declaration.name}.source` });
    let skillFile = target;
    if (stat.isDirectory()) {
      const match = (await fs.readdir(target)).find((file) => file.toLowerCase() === 'skill.md');
      if (!match) throw new MurmurError('E-IO-001', `skill source directory '${target}' contains no skill.md`, { path: `artifacts.${declaration.name}.source` });
      skillFile = path.join(target, match);
    }
    await fs.access(skillFile);
    return {
      name: declaration.name,
      version: declaration.version,
      role: declaration.runtime,
      packaging: 'static',
      origin: 'local',
      manifest_yaml: `name: ${declaration.name}\nversion: local\nruntime: skill\n`,
      extracted_dir: path.dirname(skillFile),
    };
  }

  private archiveIndexFile(zipSha256: string): string {
    return path.join(this.options.cacheDir, 'archives', `${zipSha256}.json`);
  }

  /** The digest of `entry` in the archive with this digest, if a previous staging recorded it. */
  private async archiveIndex(zipSha256: string, entry: string): Promise<string | undefined> {
    try {
      const index = JSON.parse(await fs.readFile(this.archiveIndexFile(zipSha256), 'utf8')) as Record<string, string>;
      const digest = index[entry];
      return typeof digest === 'string' && /^[0-9a-f]{64}$/.test(digest) ? digest : undefined;
    } catch {
      return undefined;
    }
  }

  private async recordArchiveIndex(zipSha256: string, entry: string, sha256: string): Promise<void> {
    const file = this.archiveIndexFile(zipSha256);
    await fs.mkdir(path.dirname(file), { recursive: true });
    await writeFileAtomic(file, JSON.stringify({ [entry]: sha256 }));
  }

  async close(): Promise<void> {
    await this.components.close();
  }
}

interface LoadedCapsule {
  manifest: CapsuleManifest;
  manifestText: string;
  manifestDir: string;
  origin: CapsuleOrigin;
  warnings: MurmurWarning[];
  zip?: MurZip;
  rootWasm?: string | undefined;
  zipSha256?: string;
}

function checkExport(component: TranspiledComponent, need: ComponentNeed): void {
  if (!component.exports.includes(need.requiredExport)) {
    throw new MurmurError('E-RUN-001', `component ${need.label} is missing the export ${need.requiredExport}; it exports ${component.exports.length > 0 ? component.exports.join(', ') : 'nothing'}`, {
      hint: 'rebuild the artifact against the versioned WIT (only versioned export names resolve)',
    });
  }
}

/** `capsule.wasm`, else the only root `*.wasm` in the manifest's directory. */
async function findCapsuleWasm(dir: string): Promise<string> {
  const files = (await fs.readdir(dir, { withFileTypes: true })).filter((entry) => entry.isFile() && entry.name.endsWith('.wasm')).map((entry) => entry.name);
  if (files.includes('capsule.wasm')) return path.join(dir, 'capsule.wasm');
  if (files.length === 1) return path.join(dir, files[0] as string);
  if (files.length === 0) {
    throw new MurmurError('E-RUN-004', `no capsule component found in ${dir} (expected capsule.wasm or exactly one root *.wasm)`, {
      hint: 'put the capsule component beside murmur.yaml as capsule.wasm, or add an inference: block for an agent capsule',
    });
  }
  throw new MurmurError('E-RUN-004', `multiple root *.wasm files found in ${dir}: ${files.sort().join(', ')} (set capsule.wasm explicitly)`);
}

/** An env lookup that knows which names are set and nothing about their values. */
function presence(names: readonly string[]): Record<string, string> {
  return Object.fromEntries(names.map((name) => [name, '']));
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
