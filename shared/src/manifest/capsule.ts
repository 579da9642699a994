import * as z from 'zod';
import { type EnvLookup, envReferenceName, resolveEnvReference } from '../env-reference.js';
import { isRuntimeOwned } from '../environment.js';
import { MurmurError, type MurmurWarning } from '../errors.js';
import { SCORER_TYPES } from '../eval.js';
import { validateFilesystemScope } from '../filesystem-scope.js';
import { hasControlCharacter } from '../file-set.js';
import { shownUrl } from '../shown-url.js';
import { parseNetworkAllowRule } from '../network-rules.js';
import { artifactNameProblem } from './artifact-name.js';
import { type IssueParams, issueToError, yamlPath } from './issues.js';
import { isSafeContextId } from '../session-rpc.js';
import { ARTIFACT_ROLES } from './roles.js';
import { parseYamlSource } from './yaml-source.js';
import { unknownNestedKeys } from './unknown-keys.js';

/**
 * The capsule manifest, `murmur.yaml`: what a capsule is and exactly what it may do.
 *
 * Every key of upstream Murmur's manifest, plus the seeds' additions (namespaced names, a
 * driver's `gateway`, `spawn.allow` ceilings, `trace.capture`). Values are validated here, once:
 * a network rule that does not parse or a filesystem scope that climbs out of the workdir is
 * refused when the manifest is read, before anything is resolved, compiled or written.
 *
 * Capability sub-blocks stay optional in the parsed value because their *presence* means something
 * on a per-artifact entry (no block inherits the ceiling; `allow: []` grants nothing). The
 * capsule-wide defaults are applied by `capabilityPolicy()`, not baked into the parse.
 */

const MANIFEST_FILE = 'murmur.yaml';

function refine(ctx: z.core.$RefinementCtx, path: PropertyKey[], message: string, params: IssueParams = {}): void {
  ctx.addIssue({ code: 'custom', message, path, params });
}

const trimmed = z.string().transform((value) => value.trim());
/** A string that counts as absent when blank, as upstream treats `otel_endpoint: ""`. */
const optionalText = trimmed.transform((value) => (value === '' ? undefined : value)).optional();
const stringList = z.array(z.string());

/** Limits and resources: whole numbers, and zero is refused because it would forbid everything. */
const positiveCount = z
  .number()
  .int()
  .refine((value) => value > 0, { message: 'must be greater than zero' });

/**
 * The longest duration a manifest may give, in seconds (about 23 days): node's timers hold at most
 * 2^31−1 ms (~24.8 days) and fire at once past it, so a longer deadline would end a session the
 * moment it started. What is left below that bound is room for the executor's grace.
 */
export const LONGEST_DURATION_SECONDS = 2_000_000;

/** A duration in whole seconds that a timer can hold. */
const durationSeconds = positiveCount.refine((value) => value <= LONGEST_DURATION_SECONDS, {
  message: `must be at most ${LONGEST_DURATION_SECONDS} seconds (about 23 days)`,
});

function trimmedEnum<const T extends readonly [string, ...string[]]>(values: T) {
  return z.preprocess((value) => (typeof value === 'string' ? value.trim() : value), z.enum(values));
}

// ── capabilities ────────────────────────────────────────────────────────────

const NetworkCapabilitySchema = z
  .object({
    allow: stringList.default([]),
    unix_sockets: z.boolean().default(false),
  })
  .superRefine((network, ctx) => {
    network.allow.forEach((entry, index) => {
      try {
        parseNetworkAllowRule(entry);
      } catch (error) {
        if (!(error instanceof MurmurError)) throw error;
        refine(ctx, ['allow', index], error.message.replace('invalid network capability allow entry', 'invalid network allow entry'), {
          murmurCode: 'E-CAP-001',
          whole: true,
        });
      }
    });
  });

const FilesystemCapabilitySchema = z
  .object({
    scope: optionalText,
    workdir_exec: z.boolean().default(false),
  })
  .superRefine((filesystem, ctx) => {
    if (filesystem.scope === undefined) return;
    try {
      validateFilesystemScope(filesystem.scope);
    } catch (error) {
      if (!(error instanceof MurmurError)) throw error;
      refine(ctx, ['scope'], error.message.replace('invalid filesystem capability scope', 'invalid filesystem scope'), {
        murmurCode: 'E-CAP-002',
        whole: true,
      });
    }
  });

const InterpreterRuntimeGrantSchema = z.object({
  binary: z.string(),
  dirs: z.array(
    z.object({ path: z.string(), list_dir: z.boolean({ error: 'must set list_dir explicitly to true or false — enumerability is never inferred' }) }),
  ),
});

const StagedRuntimeGrantSchema = z.object({
  binary: z.string(),
  source_path: z.string(),
  pin: trimmed,
});

/**
 * Why a runtime grant may not name `hostPath`: a `.` or `..` in it; `/` is every file of the host; `/proc`, `/sys` and
 * `/dev` are mounted fresh in the sandbox, so no runtime tree is there; and `/tmp` is the session's
 * own, which a grant of it hid behind the host's, read-only (a grant under `/tmp` is bound as any).
 */
function sandboxOwnPath(hostPath: string): string | undefined {
  const written = hostPath.split('/');
  // Folded as text, `a/link/..` is `a`; the kernel goes where the link leads and up from there.
  if (written.some((part) => part === '.' || part === '..'))
    return `'${hostPath}' holds '.' or '..': name the directory as it is, since a link before a '..' is followed to wherever it leads`;
  const parts = written.filter((part) => part !== '');
  const [top] = parts;
  if (top === undefined) return `'${hostPath}' is the host's whole filesystem — name the directories the runtime needs`;
  if (top === 'proc' || top === 'sys' || top === 'dev') return `'${hostPath}' lies in /${top}, which the sandbox mounts fresh — no runtime tree is there`;
  if (top === 'tmp' && parts.length === 1)
    return `'${hostPath}' is the sandbox's own /tmp, which the grant would hide — name the directory under /tmp that holds the runtime`;
  return undefined;
}

const ShellCapabilitySchema = z
  .object({
    allow: stringList,
    strip_env: stringList.optional(),
    baseline_env: stringList.optional(),
    interpreter_runtime: z.array(InterpreterRuntimeGrantSchema).default([]),
    staged_runtime: z.array(StagedRuntimeGrantSchema).default([]),
  })
  .superRefine((shell, ctx) => {
    if (shell.allow.length === 0) refine(ctx, ['allow'], 'must contain at least one binary');
    const allowed = new Set(shell.allow);
    const interpreted = new Set<string>();
    for (const [index, grant] of shell.interpreter_runtime.entries()) {
      const base = ['interpreter_runtime', index];
      if (grant.binary.trim() === '') {
        refine(ctx, [...base, 'binary'], 'must name a binary');
        continue;
      }
      if (!allowed.has(grant.binary)) {
        refine(
          ctx,
          [...base, 'binary'],
          `'${grant.binary}' is not in capabilities.shell.allow — interpreter_runtime can only narrow filesystem access for an already-allowlisted binary, never grant exec`,
        );
        continue;
      }
      interpreted.add(grant.binary);
      if (grant.dirs.length === 0) {
        refine(ctx, [...base, 'dirs'], 'must name at least one directory');
        continue;
      }
      grant.dirs.forEach((dir, dirIndex) => {
        if (dir.path.trim() === '') refine(ctx, [...base, 'dirs', dirIndex, 'path'], 'must name a host directory');
        // The sandbox's spec is one rule per line: a path is one line.
        else if (hasControlCharacter(dir.path)) refine(ctx, [...base, 'dirs', dirIndex, 'path'], 'must not contain a control character (a newline, a tab, …)');
        else if (!dir.path.startsWith('/')) {
          refine(
            ctx,
            [...base, 'dirs', dirIndex, 'path'],
            `'${dir.path}' must be an absolute host path (start with '/') — these are filesystem paths outside the workdir`,
          );
        } else {
          const sandboxOwn = sandboxOwnPath(dir.path);
          if (sandboxOwn) refine(ctx, [...base, 'dirs', dirIndex, 'path'], sandboxOwn);
        }
      });
    }
    for (const [index, grant] of shell.staged_runtime.entries()) {
      const base = ['staged_runtime', index];
      if (grant.binary.trim() === '') {
        refine(ctx, [...base, 'binary'], 'must name a binary');
        continue;
      }
      if (!allowed.has(grant.binary)) {
        refine(
          ctx,
          [...base, 'binary'],
          `'${grant.binary}' is not in capabilities.shell.allow — staged_runtime can only stage the runtime tree behind an already-allowlisted binary, never grant exec`,
        );
        continue;
      }
      if (interpreted.has(grant.binary)) {
        refine(
          ctx,
          [...base, 'binary'],
          `'${grant.binary}' also has a capabilities.shell.interpreter_runtime grant — the two are mutually exclusive per binary; remove the interpreter_runtime grant for '${grant.binary}'`,
        );
        continue;
      }
      if (grant.source_path.trim() === '') {
        refine(ctx, [...base, 'source_path'], 'must name the host directory holding the pinned runtime tree');
        continue;
      }
      if (hasControlCharacter(grant.source_path)) {
        refine(ctx, [...base, 'source_path'], 'must not contain a control character (a newline, a tab, …)');
        continue;
      }
      if (!grant.source_path.startsWith('/')) {
        refine(
          ctx,
          [...base, 'source_path'],
          `'${grant.source_path}' must be an absolute host path (start with '/') — staged-runtime sources are host filesystem paths outside the workdir`,
        );
        continue;
      }
      const sandboxOwn = sandboxOwnPath(grant.source_path);
      if (sandboxOwn) {
        refine(ctx, [...base, 'source_path'], sandboxOwn);
        continue;
      }
      if (grant.pin === '') {
        refine(ctx, [...base, 'pin'], `'${grant.source_path}' must declare a non-empty pin identifying which build this tree is — it is never inferred`);
      }
    }
  });

const AllowListSchema = z.object({ allow: stringList.default([]) });

const LimitsSchema = z.object({
  memory_bytes: positiveCount.optional(),
  table_elements: positiveCount.optional(),
  instances: positiveCount.optional(),
  deadline_seconds: durationSeconds.optional(),
});

/**
 * Ceilings the kernel itself bounds: a session's `pids.max` is at most 4 194 304 (PID_MAX_LIMIT),
 * and the session group adds its host's own tasks to the capsule's; a CPU share past 1 024 CPUs
 * is no ceiling. Past these the launch failed writing the cgroup, with the kernel's bare EINVAL.
 */
const MOST_CGROUP_PIDS = 4_194_304 - 256;
const MOST_CGROUP_CPU_PERCENT = 1024 * 100;
/**
 * The fewest descriptors a tool can start with: its three standard streams, and what its loader
 * and the sandbox's helper open before it runs. Below it every tool failed inside the helper
 * (`Too many open files`, exit 125) while the session ended `ok`.
 */
export const FEWEST_OPEN_FILES = 8;

const ResourcesSchema = z.object({
  max_processes: positiveCount.optional(),
  max_open_files: positiveCount
    .refine((value) => value >= FEWEST_OPEN_FILES, {
      message: `must be at least ${FEWEST_OPEN_FILES} (a program's standard streams and the files its loader opens; below it no tool can start)`,
    })
    .optional(),
  max_file_size_bytes: positiveCount.optional(),
  cpu_seconds: positiveCount.optional(),
  memory_bytes: positiveCount.optional(),
  cgroup_memory_bytes: positiveCount.optional(),
  cgroup_pids_max: positiveCount
    .refine((value) => value <= MOST_CGROUP_PIDS, {
      message: `must be at most ${MOST_CGROUP_PIDS} (the kernel's limit on a group's tasks, less the host's own)`,
    })
    .optional(),
  cgroup_cpu_percent: positiveCount
    .refine((value) => value <= MOST_CGROUP_CPU_PERCENT, { message: `must be at most ${MOST_CGROUP_CPU_PERCENT} (100 for each of 1 024 CPUs)` })
    .optional(),
  cgroup_io_bytes_per_sec: positiveCount.optional(),
  workdir_max_bytes: positiveCount.optional(),
});

export const CONTAINMENT_CLASSES = ['advisory', 'scoped', 'sealed'] as const;
export const ContainmentSchema = trimmedEnum(CONTAINMENT_CLASSES);
export type Containment = z.infer<typeof ContainmentSchema>;

export const CapabilitiesSchema = z.object({
  network: NetworkCapabilitySchema.optional(),
  filesystem: FilesystemCapabilitySchema.optional(),
  shell: ShellCapabilitySchema.optional(),
  spawn: AllowListSchema.optional(),
  env: AllowListSchema.optional(),
  limits: LimitsSchema.optional(),
  resources: ResourcesSchema.optional(),
  containment: ContainmentSchema.optional(),
});
export type Capabilities = z.infer<typeof CapabilitiesSchema>;

// ── artifacts ───────────────────────────────────────────────────────────────

export { ARTIFACT_ROLES };
export const ArtifactRoleSchema = z.enum(ARTIFACT_ROLES);
export type ArtifactRole = z.infer<typeof ArtifactRoleSchema>;

/** A driver's own inference gateway: where it talks and with which key (the seeds' form). */
export const GatewaySchema = z.object({
  endpoint: trimmed,
  api_key: optionalText,
});

const ArtifactDeclarationSchema = z
  .object({
    name: trimmed,
    version: optionalText,
    runtime: z.string().default('tool'),
    source: optionalText,
    local_source: z.boolean().optional(),
    prompt_payload: z.boolean().optional(),
    capabilities: CapabilitiesSchema.optional(),
    on_overflow: z.string().optional(),
    gateway: GatewaySchema.optional(),
    /** Set by this schema (below), and read back when a parsed manifest travels in a plan. */
    declared_version: optionalText,
  })
  .superRefine((artifact, ctx) => {
    if (artifact.name === '') return refine(ctx, ['name'], "missing required field 'name'");
    // Artifact names become directory names in the workdir and the stores: hold them to the
    // artifact-name shape here, where a hostile packaged capsule's manifest is first read.
    const nameProblem = artifactNameProblem(artifact.name);
    if (nameProblem) return refine(ctx, ['name'], `invalid artifact name '${artifact.name}': ${nameProblem}`);
    const runtime = artifact.runtime;
    if (runtime === 'wasm' || runtime === 'native') {
      return refine(ctx, ['runtime'], `use 'runtime: tool'; implementation is declared in the artifact's own manifest (got '${runtime}')`);
    }
    if (!(ARTIFACT_ROLES as readonly string[]).includes(runtime)) {
      return refine(ctx, ['runtime'], `unknown runtime '${runtime}'; expected one of: ${ARTIFACT_ROLES.join(', ')}`);
    }
    const isSkill = runtime === 'skill';
    if (artifact.source !== undefined && !(artifact.local_source ?? isSkill)) {
      return refine(ctx, ['source'], `artifact '${artifact.name}' declares 'source:' but does not declare 'local_source: true' (runtime: ${runtime})`);
    }
    if (artifact.source === undefined && artifact.version === undefined) return refine(ctx, ['version'], "missing required field 'version'");
    if (artifact.capabilities !== undefined && isSkill) {
      return refine(
        ctx,
        ['capabilities'],
        `artifact '${artifact.name}' declares per-artifact 'capabilities:' but has 'runtime: skill'; per-artifact capabilities are only recognized on 'runtime: hook', 'runtime: tool', and 'runtime: driver' entries — use the capsule-wide top-level 'capabilities:' block instead`,
      );
    }
    if (artifact.on_overflow !== undefined) {
      if (runtime !== 'hook') {
        return refine(
          ctx,
          ['on_overflow'],
          `artifact '${artifact.name}' declares 'on_overflow:' but has 'runtime: ${runtime}'; the key governs an async hook's job queue and is only recognized on 'runtime: hook' entries`,
        );
      }
      if (artifact.on_overflow !== 'drop' && artifact.on_overflow !== 'block') {
        return refine(ctx, ['on_overflow'], `artifact '${artifact.name}' declares unknown on_overflow '${artifact.on_overflow}'; expected: drop, block`);
      }
    }
    if (artifact.gateway !== undefined && runtime !== 'driver') {
      return refine(
        ctx,
        ['gateway'],
        `artifact '${artifact.name}' declares 'gateway:' but has 'runtime: ${runtime}'; a gateway is the inference endpoint of a 'runtime: driver' entry`,
      );
    }
    if (artifact.gateway !== undefined) checkEndpoint(ctx, ['gateway', 'endpoint'], artifact.gateway.endpoint);
    return undefined;
  })
  .transform((artifact) => {
    const runtime = artifact.runtime as ArtifactRole;
    const isSkill = runtime === 'skill';
    return {
      name: artifact.name,
      // A local-source artifact is never resolved from a registry; upstream names its version `local`.
      version: artifact.source === undefined ? (artifact.version as string) : 'local',
      // What the manifest wrote for a local-source artifact, which reports name it by (as upstream's doctor does).
      ...(artifact.source !== undefined && (artifact.declared_version ?? artifact.version) !== undefined
        ? { declared_version: (artifact.declared_version ?? artifact.version) as string }
        : {}),
      runtime,
      ...(artifact.source === undefined ? {} : { source: artifact.source }),
      local_source: artifact.local_source ?? isSkill,
      prompt_payload: artifact.prompt_payload ?? isSkill,
      ...(artifact.capabilities === undefined ? {} : { capabilities: artifact.capabilities }),
      ...(runtime === 'hook' ? { on_overflow: (artifact.on_overflow ?? 'drop') as 'drop' | 'block' } : {}),
      ...(artifact.gateway === undefined ? {} : { gateway: artifact.gateway }),
    };
  });
export type ArtifactDeclaration = z.output<typeof ArtifactDeclarationSchema>;

// ── inference ───────────────────────────────────────────────────────────────

function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * What is wrong with an inference endpoint, if anything: it carries prompts and keys, so
 * `https://` anywhere, plain `http://` only to this machine.
 */
/**
 * What is wrong with `endpoint` as an inference endpoint, or undefined. `variable`: the endpoint
 * is that variable's value, which is said by the variable's name and never shown — a variable
 * holding a key rather than a URL would otherwise be printed in the error, and a delegated child's
 * error is read by its parent's model.
 */
function endpointProblem(endpoint: string, variable?: string): string | undefined {
  // Shown without its user, password or query, any of which may be a credential (the error is read
  // by a parent's model too); one that does not parse is shown as it was written.
  const shown = variable === undefined ? `'${URL.canParse(endpoint) ? shownUrl(endpoint) : endpoint}'` : `the value of \${${variable}}`;
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return `failed to parse ${shown} as a URL`;
  }
  const scheme = url.protocol.slice(0, -1);
  // The endpoint is handed to the capsule's guests (`MURMUR_INFERENCE_ENDPOINT`), where the key is not.
  if (url.username !== '' || url.password !== '')
    return `${shown} carries credentials in its URL, and the endpoint is given to the capsule's own code: put the key in inference.api_key`;
  if (scheme === 'https') return undefined;
  if (scheme === 'http') {
    return isLoopbackHost(url.hostname)
      ? undefined
      : `${shown} uses plain http:// with non-loopback host${variable === undefined ? ` '${url.hostname}'` : ''} — use https:// for remote endpoints, or http://localhost or a loopback IP literal for local inference`;
  }
  return `unsupported scheme${variable === undefined ? ` '${scheme}'` : ''} in ${shown} — expected http or https`;
}

/** The endpoint rule at parse; a `${VAR}` reference is held to it once resolved, at launch (`resolveManifestSecrets`). */
function checkEndpoint(ctx: z.core.$RefinementCtx, path: PropertyKey[], endpoint: string): void {
  if (endpoint === '') refine(ctx, path, 'missing required field');
  else if (envReferenceName(endpoint) === undefined) {
    const problem = endpointProblem(endpoint);
    if (problem) refine(ctx, path, problem);
  }
}

const DriverSchema = z.object({
  // Absent is refused with the driver's own code where the inference block is checked (E-RUN-005).
  artifact: trimmed.default(''),
  config: z.record(z.string(), z.unknown()).nullable().optional(),
});

const CompactionSchema = z
  .object({
    threshold: z.number().optional(),
    model: optionalText,
    system_prompt: z.string().optional(),
    system_prompt_file: optionalText,
    dump_summaries: z.boolean().default(false),
  })
  .superRefine((compaction, ctx) => {
    const threshold = compaction.threshold;
    if (threshold !== undefined && !(threshold > 0 && threshold <= 1)) refine(ctx, ['threshold'], `must be in (0.0, 1.0] but got ${threshold}`);
    if (compaction.system_prompt !== undefined && compaction.system_prompt_file !== undefined) {
      refine(ctx, ['system_prompt'], 'at most one of inference.compaction.system_prompt, inference.compaction.system_prompt_file may be set');
    }
  });

export const InferenceSchema = z
  .object({
    transport: trimmedEnum(['http', 'process']).default('http'),
    endpoint: optionalText,
    model: optionalText,
    api_key: optionalText,
    driver: DriverSchema.optional(),
    /** Upstream's older spelling of `driver`; `driver` wins when both are present. */
    provider: DriverSchema.optional(),
    max_tokens: positiveCount.optional(),
    max_turns: positiveCount.default(10),
    max_task_reopens: z.number().int().nonnegative().default(1),
    system_prompt: optionalText,
    system_prompt_file: optionalText,
    system_prompt_artifact: optionalText,
    command: optionalText,
    compaction: CompactionSchema.optional(),
  })
  .superRefine((inference, ctx) => {
    const prompts = [inference.system_prompt, inference.system_prompt_file, inference.system_prompt_artifact].filter((value) => value !== undefined);
    if (prompts.length > 1) refine(ctx, ['system_prompt'], 'at most one of system_prompt, system_prompt_file, system_prompt_artifact may be set');
    if (inference.transport === 'process') {
      const invalid = 'is not valid with transport: process';
      if (inference.driver !== undefined || inference.provider !== undefined) refine(ctx, ['driver', 'artifact'], invalid);
      if (inference.endpoint !== undefined) refine(ctx, ['endpoint'], invalid);
      if (inference.api_key !== undefined) refine(ctx, ['api_key'], invalid);
      if (inference.max_tokens !== undefined) refine(ctx, ['max_tokens'], invalid);
      if (inference.command === undefined) refine(ctx, ['command'], 'missing required field');
      return;
    }
    if (inference.model === undefined) refine(ctx, ['model'], 'missing required field');
    const driver = inference.driver ?? inference.provider;
    // Upstream's code for it: the driver is not configured (SPEC §1.6), not a manifest's type error.
    if (driver === undefined) refine(ctx, ['driver'], 'missing required field: no driver is configured', { murmurCode: 'E-RUN-005' });
    else if (driver.artifact === '') refine(ctx, ['driver', 'artifact'], 'missing required field: no driver is configured', { murmurCode: 'E-RUN-005' });
    if (inference.endpoint !== undefined) checkEndpoint(ctx, ['endpoint'], inference.endpoint);
  })
  .transform(({ provider, ...inference }) => {
    const driver = inference.driver ?? provider;
    return {
      ...inference,
      ...(driver === undefined ? {} : { driver: { artifact: driver.artifact, ...(driver.config ? { config: driver.config } : {}) } }),
      max_tokens: inference.transport === 'http' ? (inference.max_tokens ?? 8192) : undefined,
    };
  });
export type Inference = z.output<typeof InferenceSchema>;

// ── lifecycle, context, trace, observability ────────────────────────────────

export const LifecycleSchema = z.object({
  task_acceptance: trimmedEnum(['none', 'single', 'queue']).default('single'),
  after_task: trimmedEnum(['exit', 'sleep']).default('exit'),
  queue_depth: positiveCount.default(1),
  input_timeout_secs: durationSeconds.optional(),
  conversation: trimmedEnum(['stateless', 'threaded']).default('stateless'),
});
export type Lifecycle = z.output<typeof LifecycleSchema>;

/**
 * One `observability.eval.scorers[]` entry as written: `name` defaults to the type, `max` and
 * `expected` to upstream's values, when hooks are given it (`evalConfigForHooks`). A type no
 * scorer has is warned about at parse and skipped, not refused, as upstream skips it.
 */
const ScorerSchema = z.object({
  type: trimmed,
  name: optionalText,
  max: z.number().int().nonnegative().optional(),
  expected: stringList.optional(),
});

const ObservabilitySchema = z.object({
  otel_endpoint: optionalText,
  eval: z
    .object({
      dataset_id: z.string().optional(),
      scorers: z.array(ScorerSchema).default([]),
    })
    .optional(),
});

const TraceSchema = z.object({
  include_tool_output: z.boolean().default(false),
  /** `content` records prompts and tool output as well as their sizes; `metadata` only sizes. */
  capture: trimmedEnum(['metadata', 'content']).optional(),
});

// ── the manifest ────────────────────────────────────────────────────────────

/** Top-level keys, in the order upstream checks them: the first refusal in this order is reported. */
export const CAPSULE_MANIFEST_KEYS = [
  'name',
  'version',
  'mur_version',
  'description',
  'artifacts',
  'capabilities',
  'inference',
  'context',
  'observability',
  'trace',
  'network',
  'lifecycle',
  'registry',
  'requires_files',
] as const;

export const CapsuleManifestSchema = z
  .object({
    name: trimmed,
    version: trimmed,
    mur_version: optionalText,
    description: optionalText,
    artifacts: z.array(ArtifactDeclarationSchema).default([]),
    capabilities: CapabilitiesSchema.optional(),
    inference: InferenceSchema.optional(),
    context: z
      .object({
        max_tokens: positiveCount.optional(),
        /** Where a threaded conversation is kept beyond the capsule: `conversations/<record>/`; `off` keeps none. */
        record: optionalText,
      })
      .superRefine((context, ctx) => {
        if (context.record !== undefined && context.record !== 'off' && !isSafeContextId(context.record)) {
          refine(ctx, ['record'], `'${context.record}' is not a record name: use letters, digits, '.', '_' and '-' (or 'off' to keep none)`);
        }
      })
      .optional(),
    observability: ObservabilitySchema.optional(),
    trace: TraceSchema.optional(),
    network: z.object({ internal_port: z.number().int().min(0).max(65535).optional() }).optional(),
    lifecycle: LifecycleSchema.optional(),
    /** Where `mur publish` and `mur install` look when no `--registry` is given. */
    registry: z.object({ remote_url: optionalText, default: optionalText }).optional(),
    /** Extra files `mur build` packs beside `murmur.yaml` and `capsule.wasm`. */
    requires_files: stringList.optional(),
  })
  .superRefine((manifest, ctx) => {
    if (manifest.name === '') refine(ctx, ['name'], "missing required field 'name'", { murmurCode: 'E-MAN-001', whole: true });
    if (manifest.version === '') refine(ctx, ['version'], "missing required field 'version'", { murmurCode: 'E-MAN-001', whole: true });
    // Name and version are printed on lines of their own (mur run -v, mur trace show, mur ps): one
    // holding a line break or an escape would add lines of its choosing there (a forged `status:  ok`).
    // mur build holds them to the artifact rules; a run of an unbuilt project takes other names, as upstream's.
    for (const field of ['name', 'version'] as const) {
      if (hasControlCharacter(manifest[field]))
        refine(
          ctx,
          [field],
          `'${field}' must not hold a control character (a line break, a tab, an escape), as ${JSON.stringify(manifest[field].slice(0, 60))} does: it is printed on a line of its own`,
        );
    }
    const seen = new Map<string, number>();
    manifest.artifacts.forEach((artifact, index) => {
      const earlier = seen.get(artifact.name);
      if (earlier !== undefined) refine(ctx, ['artifacts', index, 'name'], `artifact '${artifact.name}' is declared twice (also at index ${earlier})`);
      seen.set(artifact.name, index);
    });
    // AF_UNIX is a subprocess's grant (a WebAssembly guest has no sockets at all), so on a capsule
    // that starts no shell binary it could only ever mean something nobody reviewed.
    if (manifest.capabilities?.network?.unix_sockets === true && (manifest.capabilities.shell?.allow.length ?? 0) === 0) {
      refine(
        ctx,
        ['capabilities', 'network', 'unix_sockets'],
        'grants AF_UNIX sockets to subprocesses, but the capsule declares no capabilities.shell.allow, so nothing could use it; declare the shell binaries that need unix sockets, or remove the grant',
      );
    }
    const inference = manifest.inference;
    if (inference === undefined) return;
    if (inference.transport === 'http' && inference.endpoint === undefined) {
      const driverName = inference.driver?.artifact;
      const driver = manifest.artifacts.find((artifact) => artifact.name === driverName);
      if (driver?.gateway === undefined) {
        refine(ctx, ['inference', 'endpoint'], "missing required field (or declare 'gateway.endpoint' on the driver artifact)");
      }
    }
    const promptArtifact = inference.system_prompt_artifact;
    if (promptArtifact !== undefined) {
      const declared = manifest.artifacts.find((artifact) => artifact.name === promptArtifact);
      if (declared === undefined) refine(ctx, ['inference', 'system_prompt_artifact'], `artifact '${promptArtifact}' is not declared in artifacts:`);
      else if (!declared.prompt_payload) {
        refine(
          ctx,
          ['inference', 'system_prompt_artifact'],
          `artifact '${promptArtifact}' (runtime: ${declared.runtime}) does not declare 'prompt_payload: true', which system_prompt_artifact requires`,
        );
      }
    }
  });
export type CapsuleManifest = z.output<typeof CapsuleManifestSchema>;

export interface ParsedManifest<T> {
  manifest: T;
  warnings: MurmurWarning[];
}

export interface ParseCapsuleManifestOptions {
  /** `murmur.yaml`, or whatever the file is to be called in messages. */
  file?: string;
  /**
   * Variables `${VAR}` references are checked against. A reference to an unset variable is
   * refused here, at parse; the value itself stays a reference in the parsed manifest, so no
   * secret rides along in a staged plan (which the stager caches and the bus carries to any
   * executor). The values go only in a launch, to the executor that resolves them
   * (`resolveManifestSecrets`): the bus is the stack's control plane, which `MURMUR_NATS_TOKEN`
   * guards. Omit to skip the check.
   */
  env?: EnvLookup;
}

/** Values that may be `${VAR}` references: the endpoints and keys an operator injects. */
export function secretReferencePaths(manifest: CapsuleManifest): Array<{ path: string; value: string }> {
  const paths: Array<{ path: string; value: string }> = [];
  const add = (path: string, value: string | undefined): void => {
    if (value !== undefined) paths.push({ path, value });
  };
  add('inference.api_key', manifest.inference?.api_key);
  add('inference.endpoint', manifest.inference?.endpoint);
  manifest.artifacts.forEach((artifact, index) => {
    add(`artifacts[${index}].gateway.endpoint`, artifact.gateway?.endpoint);
    add(`artifacts[${index}].gateway.api_key`, artifact.gateway?.api_key);
  });
  add('observability.otel_endpoint', manifest.observability?.otel_endpoint);
  return paths;
}

function describeKey(path: ReadonlyArray<PropertyKey>, dotted: string): string {
  const [section, index] = path;
  if (section === 'artifacts' && typeof index === 'number') return `invalid artifact declaration at index ${index} ('${dotted}')`;
  if (section === 'capabilities') return `invalid capability config for '${dotted}'`;
  if (section === 'inference') return `invalid inference config for '${dotted}'`;
  if (section === 'context') return `invalid context config for '${dotted}'`;
  return `invalid value for '${dotted}'`;
}

const REQUIRED_TOP_LEVEL = new Set(['name', 'version']);

/**
 * Parses and validates `murmur.yaml` text. Throws the first refusal (in upstream's check order)
 * as a `MurmurError` naming the YAML path and line; returns unknown top-level keys as `W-SEC-019`
 * warnings for the caller to print, because a misspelt key silently doing nothing is a security
 * problem (`capabilites:` grants the defaults, not what the author wrote).
 */
export function parseCapsuleManifest(text: string, options: ParseCapsuleManifestOptions = {}): ParsedManifest<CapsuleManifest> {
  const file = options.file ?? MANIFEST_FILE;
  const source = parseYamlSource(text, file);
  const raw = source.value;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new MurmurError(
      'E-MAN-003',
      `${file}: field '<root>' has invalid type (expected mapping, got ${raw === null || raw === undefined ? 'null' : Array.isArray(raw) ? 'sequence' : typeof raw})`,
      { path: '<root>' },
    );
  }
  const warnings: MurmurWarning[] = [];
  const known = new Set<string>(CAPSULE_MANIFEST_KEYS);
  for (const key of Object.keys(raw)) {
    if (!known.has(key))
      warnings.push({ code: 'W-SEC-019', message: `${file}: unrecognized key '${key}' (line ${source.lineOf([key]) ?? '?'}); it is ignored`, path: key });
  }
  for (const at of unknownNestedKeys(CapsuleManifestSchema, raw)) {
    const dotted = at
      .map((part) => (typeof part === 'number' ? `[${part}]` : part))
      .join('.')
      .replace(/\.\[/g, '[');
    warnings.push({ code: 'W-SEC-019', message: `${file}: unrecognized key '${dotted}' (line ${source.lineOf(at) ?? '?'}); it is ignored`, path: dotted });
  }
  const result = CapsuleManifestSchema.safeParse(raw);
  if (!result.success) {
    const order = (issue: z.core.$ZodIssue): number => {
      const index = (CAPSULE_MANIFEST_KEYS as readonly string[]).indexOf(String(issue.path[0]));
      return index === -1 ? CAPSULE_MANIFEST_KEYS.length : index;
    };
    const [first] = [...result.error.issues].sort((left, right) => order(left) - order(right));
    throw issueToError(first as z.core.$ZodIssue, { file, source, requiredTopLevel: REQUIRED_TOP_LEVEL, describeKey });
  }
  const manifest = result.data;
  manifest.observability?.eval?.scorers.forEach((scorer, index) => {
    if ((SCORER_TYPES as readonly string[]).includes(scorer.type)) return;
    const at = ['observability', 'eval', 'scorers', index, 'type'];
    warnings.push({
      code: 'W-SEC-019',
      message: `${file}: unknown scorer type '${scorer.type}' at observability.eval.scorers[${index}] (line ${source.lineOf(at) ?? '?'}); it is skipped (known: ${SCORER_TYPES.join(', ')})`,
      path: `observability.eval.scorers[${index}].type`,
    });
  });
  for (const { path, value } of secretReferencePaths(manifest)) refuseRuntimeOwnedReference(file, path, value);
  if (options.env !== undefined) {
    for (const { path, value } of secretReferencePaths(manifest)) {
      const resolved = resolveEnvReference(value, options.env);
      if (!resolved.ok) {
        throw new MurmurError('E-MAN-003', `${file}: ${path} references \${${resolved.name}} but the environment variable is not set`, {
          path,
          hint: `export ${resolved.name} before running, or put it in the project's .env file`,
        });
      }
    }
  }
  return { manifest, warnings };
}

/**
 * A `${VAR}` reference to one of the runtime's own settings (`MURMUR_*`, `OTEL_EXPORTER_OTLP_*`):
 * resolved, `inference.api_key: ${MURMUR_DOOR_AUTH}` sent the door's operator token to whatever
 * endpoint the capsule names, and an endpoint from `${MURMUR_NATS_URL}` gave every tool the bus.
 */
function refuseRuntimeOwnedReference(file: string, path: string, value: string): void {
  const name = envReferenceName(value);
  if (name === undefined || !isRuntimeOwned(name)) return;
  throw new MurmurError('E-MAN-003', `${file}: ${path} references \${${name}}, one of the runtime's own settings, which no capsule is given`, {
    path,
    hint: `name a variable of the capsule's own for ${path} (ANTHROPIC_API_KEY, say), set where mur runs`,
  });
}

/**
 * A copy of the manifest with every `${VAR}` reference replaced by its value. An endpoint that came
 * from a variable is held to the endpoint rule now, as a written one was at parse.
 */
export function resolveManifestSecrets(manifest: CapsuleManifest, env: EnvLookup): CapsuleManifest {
  const resolve = (path: string, value: string | undefined): string | undefined => {
    if (value === undefined) return undefined;
    refuseRuntimeOwnedReference(MANIFEST_FILE, path, value);
    const resolved = resolveEnvReference(value, env);
    if (!resolved.ok)
      throw new MurmurError('E-MAN-003', `${MANIFEST_FILE}: ${path} references \${${resolved.name}} but the environment variable is not set`, { path });
    return resolved.value;
  };
  const resolveEndpoint = (path: string, value: string | undefined): string | undefined => {
    const resolved = resolve(path, value);
    const variable = value === undefined ? undefined : envReferenceName(value);
    const problem = resolved === undefined || variable === undefined ? undefined : endpointProblem(resolved, variable);
    if (problem) throw new MurmurError('E-MAN-003', `${MANIFEST_FILE}: invalid inference config for '${path}' (from ${value}): ${problem}`, { path });
    return resolved;
  };
  const copy: CapsuleManifest = structuredClone(manifest);
  if (copy.inference) {
    const apiKey = resolve('inference.api_key', copy.inference.api_key);
    const endpoint = resolveEndpoint('inference.endpoint', copy.inference.endpoint);
    if (apiKey !== undefined) copy.inference.api_key = apiKey;
    if (endpoint !== undefined) copy.inference.endpoint = endpoint;
  }
  copy.artifacts.forEach((artifact, index) => {
    if (!artifact.gateway) return;
    artifact.gateway.endpoint = resolveEndpoint(`artifacts[${index}].gateway.endpoint`, artifact.gateway.endpoint) ?? '';
    const apiKey = resolve(`artifacts[${index}].gateway.api_key`, artifact.gateway.api_key);
    if (apiKey !== undefined) artifact.gateway.api_key = apiKey;
  });
  if (copy.observability?.otel_endpoint !== undefined) {
    const written = copy.observability.otel_endpoint;
    const resolved = resolve('observability.otel_endpoint', written);
    // A collector's URL, which hooks are given in their environment: a variable's value that is
    // not one (a key named where a URL belongs) is refused, never handed to a guest.
    const variable = envReferenceName(written);
    if (variable !== undefined && resolved !== undefined && !isHttpUrl(resolved))
      throw new MurmurError(
        'E-MAN-003',
        `${MANIFEST_FILE}: invalid value for 'observability.otel_endpoint' (from ${written}): the value of \${${variable}} is not an http(s) URL`,
        { path: 'observability.otel_endpoint' },
      );
    copy.observability.otel_endpoint = resolved;
  }
  return copy;
}

function isHttpUrl(text: string): boolean {
  try {
    const { protocol } = new URL(text);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

/** Whether the manifest describes an agent capsule (an inference loop) rather than a script capsule. */
export function isAgentCapsule(manifest: CapsuleManifest): boolean {
  return manifest.inference !== undefined;
}

export { yamlPath };
