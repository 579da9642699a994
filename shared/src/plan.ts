import * as z from 'zod';
import { MurmurErrorJsonSchema, MurmurWarningSchema } from './wire.js';
import { LockedArtifactSchema } from './lockfile.js';
import { ArtifactRoleSchema, CapabilitiesSchema, CapsuleManifestSchema, GatewaySchema, LifecycleSchema } from './manifest/capsule.js';
import { PackagingTypeSchema } from './manifest/artifact.js';
import { CapabilityPolicySchema } from './policy.js';
import { FileSetSchema, Sha256HexSchema } from './file-set.js';

/**
 * The stager's answer: everything an executor needs to run a capsule, as pure data that means the
 * same on every machine. It names no path on the stager's disk: a transpiled bundle and every
 * payload file are named by content (a file set of sha256 digests, the bytes in the bus's object
 * store), and the executor that runs the capsule fetches what it lacks into its own cache,
 * verifies it, and materialises the workdir from this.
 */

const sha256Hex = Sha256HexSchema;

/** Where a transpiled bundle lives in any machine's cache: `<cache>/transpiled/<key>/`. */
export const BundleKeySchema = z.string().regex(/^[a-z0-9][a-z0-9._-]*\/[0-9a-f]{64}$/, 'must be <transpiler>/<sha256>');

/**
 * The transpiler whose output a bundle is (`<cache>/transpiled/<id>/<sha256>/`): its version and
 * mode are part of every bundle's key, so a change of either never reads an old bundle.
 */
export const TRANSPILER_ID = 'jco-1.35.0-instantiation-async.v2';

/**
 * How jco makes the bundle `TRANSPILER_ID` names, for the stager and for any test that builds a
 * bundle the executor runs: the instantiation-mode module (the executor instantiates it afresh for
 * every call, with an import object it builds), no typings, and a component's own `err` thrown as
 * it is rather than wrapped (the runner tells a guest's `err` from a trap by it). Changing one is
 * changing the bundle's format: `TRANSPILER_ID` changes with it.
 */
export const TRANSPILE_OPTIONS = { instantiation: 'async', noTypescript: true, quiet: true, noComponentErrorWrapping: true } as const;

/** A transpiled component's fields, unchecked against each other (for schemas made from it: a refined schema cannot be picked apart). */
export const TranspiledComponentFields = z.object({
  /** sha256 of the component's `.wasm` bytes: the cache key. */
  sha256: sha256Hex,
  size_bytes: z.number().int().nonnegative(),
  /** The transpiled files by content, and where they go in a cache. */
  bundle: z.object({ key: BundleKeySchema, files: FileSetSchema }),
  /** The instantiation-mode module to import, relative to the bundle's directory: one of its files. */
  entry: z.string(),
  /** The core modules, each one of the bundle's files. */
  core_modules: z.array(z.string()),
  imports: z.array(z.string()),
  exports: z.array(z.string()),
  /** Whether this staging found it in the cache rather than transpiling it. */
  cache_hit: z.boolean(),
});

/** A component transpiled by jco, ready to instantiate once its bundle is on the machine: `<bundle>/<entry>` plus its core modules. */
export const TranspiledComponentSchema = TranspiledComponentFields.superRefine((component, context) => {
  // What the executor reads and derives from (a watched module, a code cache beside the glue)
  // is only ever a file the bundle brought, written by the executor itself: never a path the
  // plan names outside it (`../../x`), a device or a pipe.
  const files = new Set(component.bundle.files.map((file) => file.path));
  const named: Array<[string, Array<string | number>]> = [
    [component.entry, ['entry']],
    ...component.core_modules.map((file, index): [string, Array<string | number>] => [file, ['core_modules', index]]),
  ];
  for (const [file, at] of named) {
    if (!files.has(file)) context.addIssue({ code: 'custom', path: at, message: `'${file}' is not one of the bundle's files` });
  }
});
export type TranspiledComponent = z.infer<typeof TranspiledComponentSchema>;

/** The record a bundle's directory holds beside its files, in every cache (stager's and executor's alike). */
export const BUNDLE_RECORD_FILE = 'bundle.json';

/**
 * `bundle.json`: what a cache knows of a bundle it holds, so that a stager finds a component
 * already transpiled whoever put it there — itself, or an executor sharing its cache that fetched
 * the bundle first (without the record, that stager would transpile the component again at every
 * staging, and lose each time the race to put it in place).
 */
export const BundleRecordSchema = TranspiledComponentFields.omit({ bundle: true, cache_hit: true }).extend({
  transpiler: z.string(),
  files: FileSetSchema,
});
export type BundleRecord = z.infer<typeof BundleRecordSchema>;

/** A component's record, as its bundle's directory keeps it. */
export function bundleRecordOf(component: TranspiledComponent): BundleRecord {
  const { bundle, cache_hit: _hit, ...rest } = component;
  return { ...rest, transpiler: bundle.key.slice(0, bundle.key.lastIndexOf('/')), files: bundle.files };
}

/** The component a bundle record describes, found in a cache; undefined when the record is not one of `sha256` or names files it does not hold. */
export function componentOfRecord(record: unknown, sha256: string): TranspiledComponent | undefined {
  const parsed = BundleRecordSchema.safeParse(record);
  if (!parsed.success || parsed.data.sha256 !== sha256) return undefined;
  const { transpiler, files, ...rest } = parsed.data;
  const component = TranspiledComponentSchema.safeParse({ ...rest, bundle: { key: `${transpiler}/${sha256}`, files }, cache_hit: true });
  return component.success ? component.data : undefined;
}

export const ArtifactOriginSchema = z.enum(['project', 'global', 'roost', 'default', 'local']);
export type ArtifactOrigin = z.infer<typeof ArtifactOriginSchema>;

export const HookContractSchema = z.object({
  binding: z.string().optional(),
  execution_mode: z.enum(['blocking', 'async']),
  commit_policy: z.string(),
  on_overflow: z.enum(['drop', 'block']),
});

export const StagedArtifactSchema = z.object({
  name: z.string(),
  version: z.string(),
  role: ArtifactRoleSchema,
  packaging: PackagingTypeSchema,
  origin: ArtifactOriginSchema,
  /** sha256 of the `.mur.zip` bytes (what `murmur.lock` pins); absent for a local-source skill. */
  sha256: sha256Hex.optional(),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown()).optional(),
  /** The artifact's own `murmur.yaml`, written to `tools/<name>/murmur.yaml` in the workdir. */
  manifest_yaml: z.string(),
  /** The archive's other files (skill.md, bin/<name>, …) by content: what the executor writes under `tools/<name>/`. */
  files: FileSetSchema.default([]),
  component: TranspiledComponentSchema.optional(),
  /** The operator's per-artifact grant from the capsule manifest (never the artifact's own). */
  capabilities: CapabilitiesSchema.optional(),
  gateway: GatewaySchema.optional(),
  hook: HookContractSchema.optional(),
});
export type StagedArtifact = z.infer<typeof StagedArtifactSchema>;

/** A blob named by content: the sha256 of its bytes and their number. */
export const BlobRefSchema = z.object({ sha256: sha256Hex, size: z.number().int().nonnegative() });
export type BlobRefJson = z.infer<typeof BlobRefSchema>;

export const CapsuleOriginSchema = z.discriminatedUnion('kind', [
  /** A capsule project a client packed and uploaded (`ProjectListing`), named by the digest of its listing. */
  z.object({ kind: z.literal('project'), digest: sha256Hex, label: z.string() }),
  z.object({ kind: z.literal('registry'), name: z.string(), version: z.string(), origin: ArtifactOriginSchema, sha256: sha256Hex }),
]);
export type CapsuleOrigin = z.infer<typeof CapsuleOriginSchema>;

export const StagedPlanSchema = z.object({
  plan_version: z.literal(1),
  staged_at: z.string(),
  capsule: z.object({
    name: z.string(),
    version: z.string(),
    kind: z.enum(['script', 'agent']),
    origin: CapsuleOriginSchema,
    manifest: CapsuleManifestSchema,
    manifest_yaml: z.string(),
    /** The script capsule's own component; absent for an agent capsule. */
    component: TranspiledComponentSchema.optional(),
    /** `inference.system_prompt_file`, read at staging (relative to the manifest) so no machine needs the capsule's directory. */
    system_prompt_file: z.object({ path: z.string(), text: z.string() }).optional(),
    /** `inference.compaction.system_prompt_file`, read at staging the same way (passed verbatim to the on-compaction hook). */
    compaction_prompt_file: z.object({ path: z.string(), text: z.string() }).optional(),
  }),
  /**
   * The requester's project as it was uploaded (for a registry source: its project store), so
   * whatever stages on the session's behalf later (`manage.pull()`) searches the same store.
   */
  project: BlobRefSchema.optional(),
  artifacts: z.array(StagedArtifactSchema),
  policy: CapabilityPolicySchema,
  lifecycle: LifecycleSchema,
  lock: z.object({
    /** `honoured`: a lock existed and every pin matched. `absent`: none yet; `entries` is what a first run writes. */
    status: z.enum(['honoured', 'absent', 'not-applicable']),
    entries: z.array(LockedArtifactSchema),
  }),
  /** `${VAR}` names the manifest refers to, resolved at launch and never carried here. */
  secret_env: z.array(z.string()),
  warnings: z.array(MurmurWarningSchema),
  stats: z.object({
    duration_ms: z.number().nonnegative(),
    components: z.number().int().nonnegative(),
    cache_hits: z.number().int().nonnegative(),
  }),
});
export type StagedPlan = z.infer<typeof StagedPlanSchema>;

export const LifecycleOverrideSchema = z.object({
  task_acceptance: z.enum(['none', 'single', 'queue']).optional(),
  after_task: z.enum(['exit', 'sleep']).optional(),
});
export type LifecycleOverride = z.infer<typeof LifecycleOverrideSchema>;

export const StageSourceSchema = z.discriminatedUnion('kind', [
  /** A packed capsule project (`packProject`), its files and listing already in the object store. */
  z.object({ kind: z.literal('project'), project: BlobRefSchema }),
  /**
   * A capsule by name from the registries. `project` is the requester's project store, packed
   * (`packProjectStore`), searched first as a project store on the requester's machine would be.
   */
  z.object({ kind: z.literal('registry'), name: z.string().min(1), version: z.string().min(1), project: BlobRefSchema.optional() }),
]);
export type StageSource = z.infer<typeof StageSourceSchema>;

export const StageRequestSchema = z.object({
  source: StageSourceSchema,
  /**
   * The names (never the values) of the variables set in the requester's environment: a
   * `${VAR}` reference to a name not among them is refused at staging, while no secret ever
   * travels in a request or a plan.
   */
  env_names: z.array(z.string()).default([]),
  lifecycle_override: LifecycleOverrideSchema.optional(),
  /**
   * `false` (staging's own rule): an artifact whose manifest version differs from its lock pin is
   * refused with E-RUN-003. `true` (what `mur run` asks for, as upstream): the pinned version runs,
   * with a warning saying so.
   */
  honour_pins: z.boolean().default(false),
  /**
   * `mur run --system-prompt` replaces the manifest's prompt, so `inference.system_prompt_file` is
   * not read: a file that is not there cannot fail a launch told not to use it (upstream's rule).
   */
  system_prompt_overridden: z.boolean().default(false),
  /**
   * A token naming this staging: when given, the stager reports its progress on
   * `stage.<token>.progress` and keeps reporting while it works, so the requester can show it and
   * can tell a stager that is busy from one that is gone.
   */
  progress: z
    .string()
    .regex(/^[A-Za-z0-9_-]{8,64}$/)
    .optional(),
  /** The W3C traceparent the staging continues (a delegation's parent session); absent starts a trace. */
  traceparent: z.string().max(512).optional(),
});
export type StageRequest = z.input<typeof StageRequestSchema>;

/** What a stager says while it works: a phase, or only that it is still at it. */
export const StageProgressSchema = z.discriminatedUnion('phase', [
  z.object({ phase: z.literal('resolve'), artifact: z.string(), origin: z.string().optional() }),
  z.object({ phase: z.literal('transpile'), artifact: z.string(), bytes: z.number(), state: z.enum(['start', 'done', 'cached']), ms: z.number().optional() }),
  z.object({ phase: z.literal('fetch'), what: z.string(), bytes: z.number() }),
  z.object({ phase: z.literal('done'), ms: z.number() }),
  z.object({ phase: z.literal('working'), stager_id: z.string() }),
  /** Waiting for one of the stager's slots (`MURMUR_STAGER_CONCURRENCY`), behind `ahead` others; said again as that changes. */
  z.object({ phase: z.literal('queued'), stager_id: z.string(), ahead: z.number().int().nonnegative() }),
]);
export type StageProgress = z.infer<typeof StageProgressSchema>;

export { MurmurErrorJsonSchema };

/** One artifact staged on its own: what `manage.pull()` asks for at run time. */
export const StageArtifactRequestSchema = z.object({
  name: z.string().min(1),
  version: z.string().min(1),
  /** The session's project store, as its staging was given it. */
  project: BlobRefSchema.optional(),
});
