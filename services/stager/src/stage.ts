import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import {
  type ArtifactDeclaration,
  type BlobRefJson,
  type CapsuleManifest,
  type CapsuleOrigin,
  type FileSet,
  type LockedArtifact,
  type Log,
  MurmurError,
  type MurmurLock,
  type MurmurWarning,
  type StageProgress,
  type StageRequest,
  StageRequestSchema,
  type StagedArtifact,
  type StagedPlan,
  type TranspiledComponent,
  LOCKFILE_NAME,
  capabilityPolicy,
  FileSetSchema,
  LifecycleSchema,
  packagingTypeOf,
  parseArtifactManifest,
  parseCapsuleManifest,
  referencedEnvNames,
  stagingPostureWarnings,
} from '@murmur/shared';
import {
  type ArtifactSource,
  ArtifactStore,
  MAX_MANIFEST_BYTES,
  MurZip,
  RegistryChain,
  type ResolvedArtifact,
  RoostRegistryClient,
  assertStorable,
  isWasmComponent,
  missingPayload,
  readLockfile,
  sha256Hex,
  storeSource,
  verifyResolved,
} from '@murmur/shared/artifacts';
import {
  type BlobCache,
  type CreatedEntries,
  defaultArtifactsDir,
  shippedCacheDir,
  globalStoreDir,
  maxProjectBytesFromEnv,
  removeEmptyParents,
  writeFileAtomic,
} from '@murmur/shared/node';
import { type CapsuleFile, type OpenedProject, openProject } from './projects.js';
import { ComponentCache, type PendingEntry } from './transpiler.js';

/**
 * Staging: from a capsule (a project its requester packed and uploaded, or `name@version` in a
 * registry) to a staged plan that names no path on this machine.
 *
 * Three phases, so a failure writes nothing:
 * 1. **Resolve and verify.** The uploaded project is fetched and every file's digest verified;
 *    every artifact is found (project store, global store, roost), its bytes hashed and compared
 *    with what its source recorded and with `murmur.lock`'s pin, and its archive vetted — all
 *    before anything is compiled. Any refusal ends staging here.
 * 2. **Prepare.** Components not yet in the cache are transpiled into temporary directories beside
 *    their cache entries, and payload files taken into the blob cache.
 * 3. **Commit.** The temporaries are renamed into place together, or, if anything failed, all
 *    removed with every blob this staging fetched or wrote. Then every bundle and payload file the
 *    plan names is published to the bus's object store, where an executor on any machine finds it.
 *    The lock is never written here: a first run writes it, from the plan.
 */

export type { StageProgress } from '@murmur/shared';

export interface StagerOptions {
  cacheDir: string;
  /** This machine's blobs, in front of the bus's object store. */
  blobs: BlobCache;
  /** The most an uploaded project may hold (`MURMUR_MAX_PROJECT_BYTES`). */
  maxProjectBytes?: number;
  /** The machine's global store; defaults to `$MURMUR_HOME/artifacts`. */
  globalStore?: string;
  /** roost's base URL; when set, roost is asked after the local stores. */
  roostUrl?: string;
  /**
   * Where a user reaches that roost (`MURMUR_ROOST_PUBLIC_URL`; `roostUrl` otherwise): what a
   * refusal for a missing artifact tells them to publish to. A stack's stager reads its own stores,
   * not the user's, so its roost is the one store a user can reach.
   */
  roostPublicUrl?: string;
  /** The artifacts shipped with the runtime, asked last; undefined finds them, null turns them off. */
  defaultStore?: string | null;
  /** How long one component may take to transpile (`MURMUR_TRANSPILE_TIMEOUT_MS`, 120 s). */
  transpileTimeoutMs?: number;
  /** The most JavaScript a component's transpiled bindings may come to (`TRANSPILED_GLUE_MAX_BYTES`; smaller in tests). */
  transpiledGlueMaxBytes?: number;
  /** Components the runtime's build transpiled (`drivers/dist`); undefined finds them, null turns them off. */
  shippedCache?: string | null;
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
  /** The digest of its bytes when it is already known and verified (an uploaded project's file). */
  knownSha256?: string;
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
  assign: (files: FileSet) => void;
}

/** What one staging will write, held until it commits or rolls back as one. */
interface Transaction {
  componentNeeds: ComponentNeed[];
  extractionNeeds: ExtractionNeed[];
  openZips: MurZip[];
  pendingComponents: PendingEntry[];
  indexWrites: Array<{ file: string; content: string }>;
  /** Blobs this staging fetched or wrote: taken back if it is refused. */
  created: CreatedEntries;
  /** Scratch directories (an opened project), removed whatever happens. */
  scratch: string[];
  committed: boolean;
}

function newTransaction(): Transaction {
  return { componentNeeds: [], extractionNeeds: [], openZips: [], pendingComponents: [], indexWrites: [], created: [], scratch: [], committed: false };
}

const PAYLOAD_INDEX_FORMAT = 2;

const CAPSULE_EXPORT = 'murmur:capsule/run@0.1.0';
const TOOL_EXPORT = 'murmur:tool/run@0.1.0';
const HOOK_EXPORT = 'murmur:hook/lifecycle@0.5.0';

function exportFor(role: ArtifactDeclaration['runtime']): string {
  return role === 'hook' ? HOOK_EXPORT : TOOL_EXPORT;
}

export class Stager {
  readonly components: ComponentCache;

  constructor(private readonly options: StagerOptions) {
    const shippedCache = options.shippedCache === undefined ? shippedCacheDir() : (options.shippedCache ?? undefined);
    this.components = new ComponentCache(options.cacheDir, options.transpileTimeoutMs, shippedCache, options.transpiledGlueMaxBytes);
  }

  private chain(project: OpenedProject | undefined): RegistryChain {
    const sources: ArtifactSource[] = [];
    if (project) sources.push(project.store());
    sources.push(storeSource(new ArtifactStore(this.options.globalStore ?? globalStoreDir(), 'global')));
    if (this.options.roostUrl) sources.push(new RoostRegistryClient(this.options.roostUrl));
    const shipped = this.options.defaultStore === undefined ? defaultArtifactsDir() : (this.options.defaultStore ?? undefined);
    if (shipped) sources.push(storeSource(new ArtifactStore(shipped, 'default')));
    return new RegistryChain(sources);
  }

  /**
   * How to reach this stager's roost, for a refusal's hint: `mur publish` and `mur install` write
   * to the user's own machine, which a stack's stager never reads.
   */
  private roostAdvice(what: string): string {
    const url = this.options.roostPublicUrl ?? this.options.roostUrl;
    return url ? `; or publish ${what} to the roost staging reads ('mur publish <zip> --registry ${url}'), the way to a stack's stager` : '';
  }

  async stage(call: StageCall): Promise<StagedPlan> {
    const started = performance.now();
    const request = StageRequestSchema.parse(call.request);
    const progress = call.onProgress ?? (() => {});
    const tx = newTransaction();
    try {
      // ── phase 1: resolve and verify ────────────────────────────────────────
      const loaded = await this.loadCapsule(request, progress, tx);
      const { manifest, manifestText, origin, warnings, project } = loaded;
      const chain = this.chain(project);
      const lock = origin.kind === 'project' && project ? await readProjectLock(project) : undefined;
      const lockPath = origin.kind === 'project' ? LOCKFILE_NAME : undefined;

      // Every pin is checked, then every artifact resolved, before any is staged: a capsule missing
      // three artifacts is told about all three at once, and nothing is compiled for it.
      const pinContext = { lock, lockPath, honourPins: request.honour_pins, warnings };
      const wanted = manifest.artifacts.map((declaration) => ({
        declaration,
        pin: declaration.source === undefined ? pinOf(declaration, pinContext) : undefined,
      }));
      const resolutions = await resolveAll(wanted, chain, progress, this.roostAdvice('each'));

      const staged: StagedArtifact[] = [];
      const lockEntries: LockedArtifact[] = [];
      for (const { declaration, pin } of wanted) {
        const artifact = await this.stageArtifact(declaration, pin && { ...pin, resolved: resolutions.get(declaration) as ResolvedArtifact }, {
          capsule: loaded,
          openZips: tx.openZips,
        });
        staged.push(artifact.staged);
        if (artifact.lockEntry) lockEntries.push(artifact.lockEntry);
        if (artifact.component) tx.componentNeeds.push(artifact.component);
        if (artifact.extraction) tx.extractionNeeds.push(artifact.extraction);
      }

      const kind = manifest.inference !== undefined ? 'agent' : 'script';
      let capsuleComponent: TranspiledComponent | undefined;
      if (kind === 'script') {
        const own = loaded.zip ? undefined : findCapsuleWasm(loaded);
        tx.componentNeeds.push({
          label: `${manifest.name}@${manifest.version}`,
          load: () => this.capsuleComponentBytes(loaded, own),
          ...(own ? { knownSha256: own.file.sha256 } : {}),
          ...(loaded.zipSha256 && loaded.rootWasm ? { archive: { zipSha256: loaded.zipSha256, entry: loaded.rootWasm } } : {}),
          requiredExport: CAPSULE_EXPORT,
          assign: (component) => (capsuleComponent = component),
        });
      }
      const promptFile = request.system_prompt_overridden ? undefined : manifest.inference?.system_prompt_file;
      const systemPromptFile = promptFile === undefined ? undefined : { path: promptFile, text: await readCapsuleText(loaded, promptFile) };
      const compactionFile = manifest.inference?.compaction?.system_prompt_file;
      const compactionPromptFile =
        compactionFile === undefined
          ? undefined
          : { path: compactionFile, text: await readCapsuleText(loaded, compactionFile, 'inference.compaction.system_prompt_file') };

      await this.prepare(tx, progress);
      await this.commit(tx);

      const policy = capabilityPolicy(manifest);
      // Said here, where the artifacts are resolved (a native tool is known only now), so that
      // `mur run` and `mur stage` say them on stderr before anything runs.
      warnings.push(...stagingPostureWarnings(policy, staged));
      const baseLifecycle = LifecycleSchema.parse(manifest.lifecycle ?? {});
      const lifecycle = { ...baseLifecycle, ...stripUndefined(request.lifecycle_override ?? {}) };
      const cacheHits = [...staged.map((artifact) => artifact.component), capsuleComponent].filter((component) => component?.cache_hit).length;
      const plan: StagedPlan = {
        plan_version: 1,
        staged_at: new Date().toISOString(),
        capsule: {
          name: manifest.name,
          version: manifest.version,
          kind,
          origin,
          manifest,
          manifest_yaml: manifestText,
          ...(capsuleComponent ? { component: capsuleComponent } : {}),
          ...(systemPromptFile ? { system_prompt_file: systemPromptFile } : {}),
          ...(compactionPromptFile ? { compaction_prompt_file: compactionPromptFile } : {}),
        },
        ...(loaded.projectRef ? { project: loaded.projectRef } : {}),
        artifacts: staged,
        policy,
        lifecycle,
        lock:
          origin.kind === 'project'
            ? { status: lock ? 'honoured' : 'absent', entries: lock ? lock.artifacts : lockEntries }
            : { status: 'not-applicable', entries: lockEntries },
        secret_env: referencedEnvNames(manifestText),
        warnings,
        stats: { duration_ms: 0, components: tx.componentNeeds.length, cache_hits: cacheHits },
      };
      await this.publish(plan);
      const durationMs = performance.now() - started;
      plan.stats.duration_ms = durationMs;
      progress({ phase: 'done', ms: durationMs });
      return plan;
    } finally {
      await this.rollback(tx);
    }
  }

  /**
   * Every bundle and payload file the plan names, in the bus's object store: an executor on another
   * machine fetches them from there (one that shares this cache finds them already).
   */
  private async publish(plan: StagedPlan): Promise<void> {
    await Promise.all([
      ...(plan.capsule.component ? [this.publishComponent(plan.capsule.component)] : []),
      ...plan.artifacts.map((artifact) => this.publishArtifact(artifact)),
    ]);
  }

  private publishComponent(component: TranspiledComponent): Promise<void> {
    return this.options.blobs.publishAll(component.bundle.files, (file) => path.join(this.components.bundleDir(component), file.path));
  }

  private async publishArtifact(artifact: StagedArtifact): Promise<void> {
    const { blobs } = this.options;
    await Promise.all([
      ...(artifact.component ? [this.publishComponent(artifact.component)] : []),
      blobs.publishAll(artifact.files, (file) => blobs.pathOf(file.sha256)),
    ]);
  }

  /**
   * One artifact on its own, for `manage.pull()` at run time: resolved, verified and transpiled
   * exactly as a declared one would be (no lock is consulted; the puller checks its own).
   */
  async stageOne(request: { name: string; version: string; project?: BlobRefJson | undefined }): Promise<StagedArtifact> {
    const tx = newTransaction();
    try {
      const project = request.project ? await this.openProject(request.project, tx, () => {}) : undefined;
      const chain = this.chain(project);
      const declaration: ArtifactDeclaration = { name: request.name, version: request.version, runtime: 'tool', local_source: false, prompt_payload: false };
      const pin: ArtifactPin = { version: request.version, pinnedSha: undefined };
      const resolutions = await resolveAll([{ declaration, pin }], chain, () => {}, this.roostAdvice('it'));
      const artifact = await this.stageArtifact(
        declaration,
        { ...pin, resolved: resolutions.get(declaration) as ResolvedArtifact },
        {
          capsule: { files: new Map(), label: project ? `the project '${project.label}'` : `${request.name}@${request.version}` },
          openZips: tx.openZips,
        },
      );
      if (artifact.component) tx.componentNeeds.push(artifact.component);
      if (artifact.extraction) tx.extractionNeeds.push(artifact.extraction);
      await this.prepare(tx, () => {});
      await this.commit(tx);
      await this.publishArtifact(artifact.staged);
      // What the artifact is, not what it was asked for as: a pulled skill is a skill (its skill.md
      // installed and read), as upstream's pull installs a static package's. Declared as a tool, it
      // went into the workdir as a tool with no component, and no call could reach it.
      return artifact.staged.packaging === 'static' ? { ...artifact.staged, role: 'skill' } : artifact.staged;
    } finally {
      await this.rollback(tx);
    }
  }

  private openProject(ref: BlobRefJson, tx: Transaction, progress: (progress: StageProgress) => void): Promise<OpenedProject> {
    return openProject({
      blobs: this.options.blobs,
      ref,
      scratchRoot: path.join(this.options.cacheDir, 'staging'),
      maxBytes: this.options.maxProjectBytes ?? maxProjectBytesFromEnv(),
      created: tx.created,
      onFetch: (what, bytes) => progress({ phase: 'fetch', what, bytes }),
    }).then((project) => {
      tx.scratch.push(project.dir);
      return project;
    });
  }

  /** Phase 2: cache hits read, misses transpiled into temporaries, payloads taken into the blob cache. */
  private async prepare(tx: Transaction, progress: (progress: StageProgress) => void): Promise<void> {
    for (const need of tx.componentNeeds) {
      // Warm path: an archive seen before names its component's digest (as an uploaded project
      // does), so a cache hit costs no inflate and no hash of the component.
      const indexed = need.knownSha256 ?? (need.archive ? await this.archiveIndex(need.archive.zipSha256, need.archive.entry) : undefined);
      const known = indexed ? await this.components.lookup(indexed) : undefined;
      if (known) {
        progress({ phase: 'transpile', artifact: need.label, bytes: known.size_bytes, state: 'cached' });
        checkExport(known, need);
        need.assign(known);
        continue;
      }
      const bytes = await need.load();
      const sha256 = sha256Hex(bytes);
      if (need.archive) tx.indexWrites.push({ file: this.archiveIndexFile(need.archive.zipSha256), content: JSON.stringify({ [need.archive.entry]: sha256 }) });
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
    for (const need of tx.extractionNeeds) need.assign(await this.payloadOf(need.zip, need.sha256, need.skip, tx));
  }

  /**
   * An archive's payload files (all but its manifest and its component) as blobs, recorded by the
   * archive's digest so the next staging of the same archive neither inflates nor hashes them.
   */
  private async payloadOf(zip: MurZip, zipSha256: string, skip: ReadonlySet<string>, tx: Transaction): Promise<FileSet> {
    const indexFile = this.payloadIndexFile(zipSha256, skip);
    const recorded = await readPayloadIndex(indexFile);
    if (recorded && (await Promise.all(recorded.map((file) => this.options.blobs.holdLocal(file.sha256, tx.created)))).every(Boolean)) return recorded;
    const files: FileSet = [];
    for (const name of zip.names) {
      if (skip.has(name)) continue;
      const bytes = await zip.read(name);
      const { sha256 } = await this.options.blobs.adoptBytes(bytes, tx.created);
      files.push({ path: name, sha256, size: bytes.byteLength, executable: zip.isExecutable(name) });
    }
    tx.indexWrites.push({ file: indexFile, content: JSON.stringify({ format: PAYLOAD_INDEX_FORMAT, files }) });
    return files;
  }

  /** Phase 3: every temporary renamed into place together. */
  private async commit(tx: Transaction): Promise<void> {
    for (const entry of tx.pendingComponents) await this.components.commit(entry);
    tx.pendingComponents.length = 0;
    for (const write of tx.indexWrites) {
      await fs.mkdir(path.dirname(write.file), { recursive: true });
      await writeFileAtomic(write.file, write.content);
    }
    tx.committed = true;
  }

  /** Whatever was not committed is removed, with any directory it created; scratch always. */
  private async rollback(tx: Transaction): Promise<void> {
    for (const entry of tx.pendingComponents) await this.components.discard(entry);
    if (tx.committed) this.options.blobs.release(tx.created);
    else await this.options.blobs.forget(tx.created);
    for (const dir of tx.scratch) {
      await fs.rm(dir, { recursive: true, force: true });
      await removeEmptyParents(path.dirname(dir), this.options.cacheDir);
    }
    for (const zip of tx.openZips) zip.close();
  }

  private async loadCapsule(
    request: ReturnType<typeof StageRequestSchema.parse>,
    progress: (progress: StageProgress) => void,
    tx: Transaction,
  ): Promise<LoadedCapsule> {
    if (request.source.kind === 'project') {
      const project = await this.openProject(request.source.project, tx, progress);
      const manifestFile = project.files.get('murmur.yaml');
      if (!manifestFile) {
        throw new MurmurError('E-IO-001', `murmur.yaml not found in the uploaded project '${project.label}'`, {
          path: 'murmur.yaml',
          hint: 'pack the directory that holds murmur.yaml',
        });
      }
      // The bound an archive's manifest is held to (a manifest's size is what parsing it costs).
      if (manifestFile.file.size > MAX_MANIFEST_BYTES) {
        throw new MurmurError(
          'E-MAN-002',
          `murmur.yaml of the project '${project.label}' is ${manifestFile.file.size} bytes; a manifest is at most ${MAX_MANIFEST_BYTES}`,
          {
            path: 'murmur.yaml',
            hint: 'a manifest names what the capsule is and may do; long text (a system prompt) belongs in a file of its own',
          },
        );
      }
      const manifestText = await fs.readFile(manifestFile.local, 'utf8');
      const { manifest, warnings } = parseCapsuleManifest(manifestText, { env: presence(request.env_names) });
      return {
        manifest,
        manifestText,
        origin: { kind: 'project', digest: project.digest, label: project.label },
        warnings: [...warnings],
        project,
        projectRef: request.source.project,
        files: project.files,
        label: `the project '${project.label}'`,
      };
    }
    const { name, version } = request.source;
    const project = request.source.project ? await this.openProject(request.source.project, tx, progress) : undefined;
    const chain = this.chain(project);
    progress({ phase: 'resolve', artifact: `${name}@${version}` });
    const resolved = await chain.resolve(name, version);
    if (!resolved) {
      throw new MurmurError('E-RUN-008', `capsule ${name}@${version} is not installed: looked in ${chain.describeSearch()}`, {
        path: `${name}@${version}`,
        // Outside a capsule project, only the global store can take it.
        hint: `publish it ('mur publish <zip>') or install it ('mur install ${name}@${version}' in a capsule project, 'mur install -g ${name}@${version}' anywhere)${this.roostAdvice('it')}`,
      });
    }
    const sha256 = verifyResolved(resolved);
    const zip = await MurZip.open(resolved.bytes, { label: `${name}@${version}` });
    tx.openZips.push(zip);
    const manifestText = await zip.manifestText();
    const { manifest, warnings } = parseCapsuleManifest(manifestText, { env: presence(request.env_names) });
    if (manifest.name !== name || manifest.version !== version) {
      throw new MurmurError('E-REG-002', `${resolved.location} holds ${manifest.name}@${manifest.version}, not ${name}@${version}`, {
        path: resolved.location,
      });
    }
    const rootWasm = zip.hasRootWasm() ? zip.rootWasmName() : undefined;
    // A packaged capsule's own files (a system prompt, skills) are read from its payload.
    const payload = await this.payloadOf(zip, sha256, new Set(['murmur.yaml', ...(rootWasm ? [rootWasm] : [])]), tx);
    const files = new Map<string, CapsuleFile>(payload.map((file) => [file.path, { file, local: this.options.blobs.pathOf(file.sha256) }]));
    return {
      manifest,
      manifestText,
      origin: { kind: 'registry', name, version, origin: resolved.origin, sha256 },
      warnings: [...warnings],
      ...(project ? { project } : {}),
      ...(request.source.project ? { projectRef: request.source.project } : {}),
      files,
      label: `${name}@${version}`,
      zip,
      rootWasm,
      zipSha256: sha256,
    };
  }

  /** The script capsule's own component: the uploaded project's, or the packaged capsule's root wasm. */
  private async capsuleComponentBytes(loaded: LoadedCapsule, own: CapsuleFile | undefined): Promise<Buffer> {
    const label = `${loaded.manifest.name}@${loaded.manifest.version}`;
    let bytes: Buffer;
    if (loaded.zip) {
      if (!loaded.rootWasm)
        throw new MurmurError('E-RUN-004', `capsule ${label} has no component: its archive holds no root .wasm and its manifest no inference: block`, {
          hint: 'rebuild it with mur build from a directory that holds its component (capsule.wasm), or give its manifest an inference: block to make it an agent capsule',
        });
      bytes = await loaded.zip.read(loaded.rootWasm);
    } else {
      bytes = await fs.readFile((own as CapsuleFile).local);
    }
    if (!isWasmComponent(bytes)) {
      throw new MurmurError(
        'E-RUN-001',
        `failed to compile capsule component for ${label}: it is not a WebAssembly component (a core module, or not wasm at all)`,
        {
          hint: 'build it as a component: componentize-js, cargo component, or wasm-tools component new',
        },
      );
    }
    return bytes;
  }

  private async stageArtifact(
    declaration: ArtifactDeclaration,
    /** The pinned version and where it was found; absent only for a local-source skill. */
    found: (ArtifactPin & { resolved: ResolvedArtifact }) | undefined,
    context: {
      /** The capsule's own files, where a local skill's `source` is found. */
      capsule: Pick<LoadedCapsule, 'files' | 'label'>;
      openZips: MurZip[];
    },
  ): Promise<{ staged: StagedArtifact; lockEntry?: LockedArtifact; component?: ComponentNeed; extraction?: ExtractionNeed }> {
    const { name } = declaration;
    if (declaration.source !== undefined || !found) return { staged: stageLocalSkill(declaration, context.capsule) };
    const { version, pinnedSha, resolved } = found;
    const sha256 = verifyResolved(resolved);
    if (pinnedSha !== undefined && pinnedSha !== sha256) {
      throw new MurmurError(
        'E-REG-002',
        `artifact integrity check failed for ${name}@${version}: ${resolved.location} hashes to ${sha256}, but murmur.lock pins ${pinnedSha}`,
        {
          path: resolved.location,
          hint: 'the installed bytes are not the ones the lock pinned; reinstall the pinned artifact, or delete the lock entry if the change is intended',
        },
      );
    }

    const label = `${name}@${version}`;
    const zip = await MurZip.open(resolved.bytes, { label });
    context.openZips.push(zip);
    const manifestText = await zip.manifestText();
    const own = parseArtifactManifest(manifestText, `${label}: murmur.yaml`);
    // As a packaged capsule is held to its name: bytes stored under one artifact's name may be another's.
    if (own.name !== name || own.version !== version) {
      throw new MurmurError('E-REG-002', `${resolved.location} holds ${own.name}@${own.version}, not ${label}`, {
        path: resolved.location,
        hint: `reinstall it ('mur install ${label}') from a registry that holds it`,
      });
    }
    const packaging = packagingTypeOf(own);
    const staged: StagedArtifact = {
      name,
      version,
      role: declaration.runtime,
      packaging,
      origin: resolved.origin,
      sha256,
      manifest_yaml: manifestText,
      files: [],
      ...(own.description !== undefined ? { description: own.description } : {}),
      ...(own.input_schema !== undefined ? { input_schema: own.input_schema } : {}),
      ...(declaration.capabilities !== undefined ? { capabilities: declaration.capabilities } : {}),
      ...(declaration.gateway !== undefined ? { gateway: declaration.gateway } : {}),
      ...(declaration.runtime === 'hook'
        ? {
            hook: {
              binding: own.binding,
              execution_mode: own.execution_mode === 'async' ? ('async' as const) : ('blocking' as const),
              commit_policy: own.commit_policy ?? 'none',
              on_overflow: declaration.on_overflow ?? 'drop',
            },
          }
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
            throw new MurmurError('E-RUN-001', `failed to compile component for ${label}: ${wasmName} is not a WebAssembly component`, {
              hint: 'rebuild the artifact as a component',
            });
          }
          return bytes;
        },
        archive: { zipSha256: sha256, entry: wasmName },
        requiredExport: exportFor(declaration.runtime),
        assign: (built) => (staged.component = built),
      };
    } else {
      const missing = missingPayload(zip, packaging === 'native' ? 'native' : 'static', name, label);
      if (missing) throw missing;
    }
    skip.add('murmur.yaml');
    const extraction: ExtractionNeed | undefined = zip.names.some((entry) => !skip.has(entry))
      ? { zip, sha256, skip, assign: (files) => (staged.files = files) }
      : undefined;
    return { staged, lockEntry, ...(component ? { component } : {}), ...(extraction ? { extraction } : {}) };
  }

  private archiveIndexFile(zipSha256: string): string {
    return path.join(this.options.cacheDir, 'archives', `${zipSha256}.json`);
  }

  /**
   * Where the payload of this archive is recorded, for the entries a staging leaves out of it:
   * one archive staged in two roles (a capsule, then a skill) leaves out different entries, and
   * the second must not be given the first's list.
   */
  private payloadIndexFile(zipSha256: string, skip: ReadonlySet<string>): string {
    const left =
      skip.size === 0
        ? ''
        : `.${createHash('sha256')
            .update(JSON.stringify([...skip].sort()))
            .digest('hex')
            .slice(0, 16)}`;
    return path.join(this.options.cacheDir, 'archives', `${zipSha256}${left}.payload.json`);
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

  async close(): Promise<void> {
    await this.components.close();
  }
}

interface LoadedCapsule {
  manifest: CapsuleManifest;
  manifestText: string;
  origin: CapsuleOrigin;
  warnings: MurmurWarning[];
  /** The requester's project (an uploaded one, or the project store sent with a registry source). */
  project?: OpenedProject;
  projectRef?: BlobRefJson;
  /** The capsule's own files by path, verified and on this machine. */
  files: Map<string, CapsuleFile>;
  /** How the requester knows the capsule, for messages. */
  label: string;
  zip?: MurZip;
  rootWasm?: string | undefined;
  zipSha256?: string;
}

async function readProjectLock(project: OpenedProject): Promise<MurmurLock | undefined> {
  try {
    return await readLockfile(path.join(project.dir, LOCKFILE_NAME));
  } catch (error) {
    // The lock's path on this machine is a scratch directory; the requester knows it as murmur.lock.
    if (error instanceof MurmurError)
      throw new MurmurError(error.code, error.message.replaceAll(path.join(project.dir, LOCKFILE_NAME), LOCKFILE_NAME), {
        path: LOCKFILE_NAME,
        ...(error.hint ? { hint: error.hint } : {}),
      });
    throw error;
  }
}

/** A path the manifest gives relative to itself, as a key of the capsule's files (undefined when it climbs out). */
function capsulePath(relative: string): string | undefined {
  const normal = path.posix.normalize(relative.replaceAll('\\', '/'));
  if (normal.startsWith('../') || normal === '..' || path.posix.isAbsolute(normal)) return undefined;
  return normal === '.' ? '' : normal.replace(/\/$/, '');
}

/** `inference.system_prompt_file` (or the compaction hook's), read at staging from the capsule's own files. */
async function readCapsuleText(capsule: LoadedCapsule, relative: string, manifestPath = 'inference.system_prompt_file'): Promise<string> {
  const key = capsulePath(relative);
  const found = key === undefined ? undefined : capsule.files.get(key);
  if (!found) {
    throw new MurmurError('E-RUN-009', `cannot read the system prompt file '${relative}' of ${capsule.label}: it is not in the capsule's directory`, {
      hint: 'check the path in murmur.yaml (relative to the manifest directory), or pass --system-prompt',
      path: manifestPath,
    });
  }
  // Its text travels in the plan, and so in every launch of it: held to what one bus message carries.
  const size = (await fs.stat(found.local)).size;
  if (size > MAX_PROMPT_FILE_BYTES) {
    throw new MurmurError(
      'E-RUN-009',
      `the system prompt file '${relative}' of ${capsule.label} is ${size} bytes; a prompt file is at most ${MAX_PROMPT_FILE_BYTES}`,
      {
        hint: 'a system prompt is instructions, not material: put reference material in files the agent reads, or in a skill',
        path: manifestPath,
      },
    );
  }
  return fs.readFile(found.local, 'utf8');
}

/** The largest system prompt file a plan carries (1 MiB, a manifest's own ceiling). */
const MAX_PROMPT_FILE_BYTES = 1024 * 1024;

/** The version an artifact runs at and the digest the lock holds it to (none without a lock). */
interface ArtifactPin {
  version: string;
  pinnedSha: string | undefined;
}

/**
 * `murmur.lock`'s word on one declared artifact. With a lock, an artifact it does not mention, or
 * pins at another version, is refused (`E-RUN-003`) unless pins are honoured, when the pinned
 * version runs with a warning.
 */
function pinOf(
  declaration: ArtifactDeclaration,
  context: { lock: MurmurLock | undefined; lockPath: string | undefined; honourPins: boolean; warnings: MurmurWarning[] },
): ArtifactPin {
  const { name, version } = declaration;
  // A name or version no store can hold (a range, `>=1.0`) is refused as such, lock or no lock:
  // told it was missing from the lock, its user was told to install what no install takes.
  assertStorable(name, version);
  if (!context.lock) return { version, pinnedSha: undefined };
  const pin = context.lock.artifacts.find((entry) => entry.name === name);
  if (!pin) {
    throw new MurmurError('E-RUN-003', `murmur.lock missing artifact entry for '${name}'`, {
      path: context.lockPath,
      hint: `install it ('mur install ${name}@${version}') to pin it, or delete murmur.lock to re-pin everything on the next run`,
    });
  }
  if (pin.resolved_version === version) return { version, pinnedSha: pin.sha256.wasm };
  if (!context.honourPins) {
    throw new MurmurError('E-RUN-003', `lockfile version mismatch for '${name}': manifest requested ${version}, lock pinned ${pin.resolved_version}`, {
      path: context.lockPath,
      hint: `to upgrade, remove the '${name}' entry from murmur.lock, then run 'mur install ${name}@${version}' (or the capsule, which pins it again)`,
    });
  }
  context.warnings.push({
    code: 'W-LCK-001',
    message: `murmur.yaml asks for ${name}@${version} but murmur.lock pins ${pin.resolved_version}; running the pinned version (remove the lock entry to upgrade)`,
    path: `artifacts.${name}`,
  });
  return { version: pin.resolved_version, pinnedSha: pin.sha256.wasm };
}

/**
 * Every pinned artifact looked up along the chain. Staging never pulls: what no store holds is
 * missing, and all that is missing is refused in one `E-RUN-008` in upstream's words
 * (`missing artifacts: a@1, b@2`), so one `mur install` fixes the lot.
 */
async function resolveAll(
  wanted: ReadonlyArray<{ declaration: ArtifactDeclaration; pin: ArtifactPin | undefined }>,
  chain: RegistryChain,
  progress: (progress: StageProgress) => void,
  /** What the hint adds about the stager's roost (`Stager.roostAdvice`). */
  roostAdvice: string,
): Promise<Map<ArtifactDeclaration, ResolvedArtifact>> {
  const found = new Map<ArtifactDeclaration, ResolvedArtifact>();
  const missing: string[] = [];
  /** Missing at the version murmur.lock pins where murmur.yaml asks for another: `mur install` refuses that conflict. */
  const pinnedAway: string[] = [];
  for (const { declaration, pin } of wanted) {
    if (!pin) continue;
    const reference = `${declaration.name}@${pin.version}`;
    progress({ phase: 'resolve', artifact: reference });
    const resolved = await chain.resolve(declaration.name, pin.version);
    if (resolved) found.set(declaration, resolved);
    else {
      missing.push(reference);
      if (pin.version !== declaration.version) pinnedAway.push(`'${declaration.name}' (murmur.yaml asks for ${declaration.version})`);
    }
  }
  if (missing.length > 0) {
    throw new MurmurError('E-RUN-008', `missing artifacts: ${missing.join(', ')}`, {
      path: missing.join(', '),
      hint:
        pinnedAway.length > 0
          ? `murmur.lock pins a version no store holds for ${pinnedAway.join(', ')}: remove those entries from murmur.lock to run what murmur.yaml asks for (it is pinned again), or install the pinned version (looked in ${chain.describeSearch()})`
          : `run \`mur install\` to install all manifest dependencies (looked in ${chain.describeSearch()})${roostAdvice}`,
    });
  }
  return found;
}

/** A local-source skill: `skill.md` from the capsule's own files, never locked, never resolved. */
function stageLocalSkill(declaration: ArtifactDeclaration, capsule: Pick<LoadedCapsule, 'files' | 'label'>): StagedArtifact {
  const source = declaration.source as string;
  const key = capsulePath(source);
  const where = {
    path: `artifacts.${declaration.name}.source`,
    hint: "a skill's source is a path in the capsule's directory: its skill.md, or a directory that holds one",
  };
  let skill: CapsuleFile | undefined = key === undefined ? undefined : capsule.files.get(key);
  if (!skill && key !== undefined) {
    const inDirectory = [...capsule.files.entries()].filter(([file]) => path.posix.dirname(file) === (key === '' ? '.' : key));
    if (inDirectory.length === 0) throw new MurmurError('E-IO-001', `skill source path not found: '${source}' in ${capsule.label}`, where);
    skill = inDirectory.find(([file]) => path.posix.basename(file).toLowerCase() === 'skill.md')?.[1];
    if (!skill) throw new MurmurError('E-IO-001', `skill source directory '${source}' in ${capsule.label} contains no skill.md`, where);
  }
  if (!skill) throw new MurmurError('E-IO-001', `skill source path not found: '${source}' in ${capsule.label}`, where);
  return {
    name: declaration.name,
    version: declaration.version,
    role: declaration.runtime,
    packaging: 'static',
    origin: 'local',
    manifest_yaml: `name: ${declaration.name}\nversion: local\nruntime: skill\n`,
    files: [{ ...skill.file, path: 'skill.md' }],
  };
}

async function readPayloadIndex(file: string): Promise<FileSet | undefined> {
  try {
    const index = JSON.parse(await fs.readFile(file, 'utf8')) as { format?: unknown; files?: unknown };
    if (index.format !== PAYLOAD_INDEX_FORMAT) return undefined;
    const parsed = FileSetSchema.safeParse(index.files);
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

function checkExport(component: TranspiledComponent, need: ComponentNeed): void {
  if (!component.exports.includes(need.requiredExport)) {
    throw new MurmurError(
      'E-RUN-001',
      `component ${need.label} is missing the export ${need.requiredExport}; it exports ${component.exports.length > 0 ? component.exports.join(', ') : 'nothing'}`,
      {
        hint: 'rebuild the artifact against the versioned WIT (only versioned export names resolve)',
      },
    );
  }
}

/** `capsule.wasm`, else the only root `*.wasm` among the uploaded project's files. */
function findCapsuleWasm(capsule: LoadedCapsule): CapsuleFile {
  const roots = [...capsule.files.keys()].filter((file) => !file.includes('/') && file.endsWith('.wasm'));
  const named = roots.includes('capsule.wasm') ? 'capsule.wasm' : roots.length === 1 ? roots[0] : undefined;
  if (named) return capsule.files.get(named) as CapsuleFile;
  if (roots.length === 0) {
    throw new MurmurError('E-RUN-004', `no capsule component found in ${capsule.label} (expected capsule.wasm or exactly one root *.wasm)`, {
      hint: 'put the capsule component beside murmur.yaml as capsule.wasm, or add an inference: block for an agent capsule',
    });
  }
  throw new MurmurError('E-RUN-004', `multiple root *.wasm files found in ${capsule.label}: ${roots.sort().join(', ')} (set capsule.wasm explicitly)`);
}

/** An env lookup that knows which names are set and nothing about their values. */
function presence(names: readonly string[]): Record<string, string> {
  return Object.fromEntries(names.map((name) => [name, '']));
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
