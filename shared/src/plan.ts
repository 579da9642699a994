import * as z from 'zod';
import { MurmurErrorJsonSchema, MurmurWarningSchema } from './wire.js';
import { LockedArtifactSchema } from './lockfile.js';
import { ArtifactRoleSchema, CapabilitiesSchema, CapsuleManifestSchema, GatewaySchema, LifecycleSchema } from './manifest/capsule.js';
import { PackagingTypeSchema } from './manifest/artifact.js';
import { CapabilityPolicySchema } from './policy.js';

/**
 * The stager's answer: everything an executor needs to run a capsule, as pure data. Paths point
 * into the content-addressed cache, which the executor reads and never writes; the executor
 * materialises the workdir from this on the machine that runs the capsule.
 */

const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex sha256');

/** A component transpiled by jco, ready to instantiate: `<bundle_dir>/<entry>` plus its core modules. */
export const TranspiledComponentSchema = z.object({
  /** sha256 of the component's `.wasm` bytes: the cache key. */
  sha256: sha256Hex,
  size_bytes: z.number().int().nonnegative(),
  bundle_dir: z.string(),
  /** The instantiation-mode module to import, relative to `bundle_dir`. */
  entry: z.string(),
  core_modules: z.array(z.string()),
  imports: z.array(z.string()),
  exports: z.array(z.string()),
  /** Whether this staging found it in the cache rather than transpiling it. */
  cache_hit: z.boolean(),
});
export type TranspiledComponent = z.infer<typeof TranspiledComponentSchema>;

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
  /** Where the archive's other files were extracted (skill.md, bin/<name>), in the cache. */
  extracted_dir: z.string().optional(),
  component: TranspiledComponentSchema.optional(),
  /** The operator's per-artifact grant from the capsule manifest (never the artifact's own). */
  capabilities: CapabilitiesSchema.optional(),
  gateway: GatewaySchema.optional(),
  hook: HookContractSchema.optional(),
});
export type StagedArtifact = z.infer<typeof StagedArtifactSchema>;

export const CapsuleOriginSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('directory'), manifest_dir: z.string() }),
  z.object({ kind: z.literal('registry'), name: z.string(), version: z.string(), origin: ArtifactOriginSchema, sha256: sha256Hex, extracted_dir: z.string() }),
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
    /** Where relative manifest paths (system_prompt_file, local skills) resolve. */
    manifest_dir: z.string(),
    manifest: CapsuleManifestSchema,
    manifest_yaml: z.string(),
    /** The script capsule's own component; absent for an agent capsule. */
    component: TranspiledComponentSchema.optional(),
  }),
  artifacts: z.array(StagedArtifactSchema),
  policy: CapabilityPolicySchema,
  lifecycle: LifecycleSchema,
  lock: z.object({
    /** `murmur.lock` beside the manifest, when the capsule came from a directory. */
    path: z.string().optional(),
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
  z.object({ kind: z.literal('directory'), manifest_dir: z.string().min(1) }),
  z.object({ kind: z.literal('registry'), name: z.string().min(1), version: z.string().min(1) }),
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
  /** The project whose store is searched first when staging from a registry. */
  project_dir: z.string().optional(),
  lifecycle_override: LifecycleOverrideSchema.optional(),
  /**
   * `false` (staging's own rule): an artifact whose manifest version differs from its lock pin is
   * refused with E-RUN-003. `true` (what `mur run` asks for, as upstream): the pinned version runs,
   * with a warning saying so.
   */
  honour_pins: z.boolean().default(false),
});
export type StageRequest = z.input<typeof StageRequestSchema>;

export { MurmurErrorJsonSchema };

/** One artifact staged on its own: what `manage.pull()` asks for at run time. */
export const StageArtifactRequestSchema = z.object({
  name: z.string().min(1),
  version: z.string().min(1),
  project_dir: z.string().optional(),
});
