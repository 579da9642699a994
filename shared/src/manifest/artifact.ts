import * as z from 'zod';
import { MurmurError, type MurmurWarning } from '../errors.js';
import { type CapsuleManifest, type ParseCapsuleManifestOptions, parseCapsuleManifest } from './capsule.js';
import { type IssueParams, issueToError, yamlTypeName } from './issues.js';
import { ARTIFACT_ROLES } from './roles.js';
import { parseYamlSource } from './yaml-source.js';

/**
 * The manifest inside a `.mur.zip`: an artifact's own description of itself (a tool, a driver,
 * a hook or a skill), or, for a packaged capsule, the capsule manifest itself. The two are told
 * apart by `runtime:`, which every artifact manifest has and a capsule manifest never does.
 */

const MANIFEST_FILE = 'murmur.yaml';

/** How the payload is packed and resolved: a component, a native binary, or a static file (a skill). */
export const PACKAGING_TYPES = ['wasm', 'native', 'static'] as const;
export const PackagingTypeSchema = z.enum(PACKAGING_TYPES);
export type PackagingType = z.infer<typeof PackagingTypeSchema>;

export const HOOK_BINDINGS = [
  'on-stage',
  'on-session-start',
  'on-task-start',
  'on-inference',
  'on-tool-call',
  'on-shell',
  'on-compaction',
  'on-task-end',
  'on-session-end',
] as const;
export type HookBinding = (typeof HOOK_BINDINGS)[number];
export const COMMIT_POLICIES = ['none', 'replace-context', 'write-manifests', 'reopen-task'] as const;
export type CommitPolicy = (typeof COMMIT_POLICIES)[number];

/** The commit policy each binding honours; every other binding honours only `none`. */
const HONORED_POLICY: Partial<Record<HookBinding, CommitPolicy>> = {
  'on-stage': 'write-manifests',
  'on-compaction': 'replace-context',
  'on-task-end': 'reopen-task',
};

function refine(ctx: z.core.$RefinementCtx, path: PropertyKey[], message: string, params: IssueParams = {}): void {
  ctx.addIssue({ code: 'custom', message, path, params });
}

const InputSchemaSchema = z.union([z.string(), z.record(z.string(), z.unknown())]).transform((value, ctx) => {
  if (typeof value !== 'string') return value;
  try {
    const parsed: unknown = JSON.parse(value);
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
  } catch {
    // reported below
  }
  refine(ctx, [], 'must be a JSON object (as a string) or a YAML mapping');
  return z.NEVER;
});

/**
 * An artifact's description and tags as registries index them: a line or a paragraph, shown by
 * search and kept in every index, not a payload. Held to these where an archive is made or
 * published (`indexEntryRefusal`), never where one already stored is read.
 */
export const MAX_DESCRIPTION_CHARS = 4096;
export const MAX_TAGS = 32;
export const MAX_TAG_CHARS = 64;

/**
 * The refusal of a packaged manifest whose description or tags are past what an index keeps, as
 * `code` (`mur build`'s or a publish's), `label` before the message; undefined when they are not.
 */
export function indexEntryRefusal(packaged: PackagedManifest, code: 'E-BLD-001' | 'E-MAN-003', label?: string): MurmurError | undefined {
  const { description } = packaged.manifest;
  const tags = packaged.kind === 'artifact' ? packaged.manifest.tags : [];
  const long = tags.find((tag) => tag.length > MAX_TAG_CHARS);
  const found: [path: string, problem: string] | undefined =
    description !== undefined && description.length > MAX_DESCRIPTION_CHARS
      ? ['description', `the description is ${description.length} characters; a packaged one is at most ${MAX_DESCRIPTION_CHARS}`]
      : tags.length > MAX_TAGS
        ? ['tags', `${tags.length} tags; a packaged artifact has at most ${MAX_TAGS}`]
        : long !== undefined
          ? ['tags', `the tag '${long.slice(0, 40)}…' is ${long.length} characters; a tag is at most ${MAX_TAG_CHARS}`]
          : undefined;
  if (found === undefined) return undefined;
  const [path, problem] = found;
  return new MurmurError(code, label === undefined ? problem : `${label}: ${problem}`, {
    path,
    hint: 'registries index the description and tags for search: keep them to a paragraph and a few words',
  });
}

export const ArtifactManifestSchema = z
  .object({
    name: z.string(),
    version: z.string(),
    runtime: z.string(),
    implementation: z.unknown().optional(),
    execution: z.string().optional(),
    requires_files: z.array(z.string()).optional(),
    description: z.string().optional(),
    tags: z.array(z.string()).default([]),
    input_schema: InputSchemaSchema.optional(),
    /** Upstream's alias of `input_schema`. */
    input: InputSchemaSchema.optional(),
    output_schema: InputSchemaSchema.optional(),
    binding: z.string().optional(),
    execution_mode: z.string().optional(),
    commit_policy: z.string().optional(),
  })
  .superRefine((manifest, ctx) => {
    if (manifest.execution !== undefined && !(PACKAGING_TYPES as readonly string[]).includes(manifest.execution.trim().toLowerCase())) {
      refine(ctx, ['execution'], `field 'execution' has invalid type (expected one of: wasm, native, static, got ${manifest.execution})`, {
        whole: true,
      });
    }
    // A role no runtime plays: packed and published, it ran as whatever a capsule declared it as.
    if (!(ARTIFACT_ROLES as readonly string[]).includes(manifest.runtime)) {
      refine(ctx, ['runtime'], `field 'runtime' has invalid value '${manifest.runtime.slice(0, 40)}' (expected one of: ${ARTIFACT_ROLES.join(', ')})`, {
        whole: true,
      });
    }
    if (manifest.runtime === 'hook') checkHookContract(manifest, ctx);
  })
  .transform((manifest) => {
    const { input, implementation, ...rest } = manifest;
    const inputSchema = manifest.input_schema ?? input;
    return {
      ...rest,
      implementation: implementation === 'native' ? ('native' as const) : ('wasm' as const),
      ...(inputSchema === undefined ? {} : { input_schema: inputSchema }),
      requires_files: manifest.requires_files ?? (manifest.runtime === 'skill' ? ['skill.md'] : []),
    };
  });
export type ArtifactManifest = z.output<typeof ArtifactManifestSchema>;

function checkHookContract(
  manifest: { binding?: string | undefined; execution_mode?: string | undefined; commit_policy?: string | undefined },
  ctx: z.core.$RefinementCtx,
): void {
  const problem = hookContractProblem(manifest);
  if (problem) refine(ctx, [problem.key], problem.message);
}

/** The first way a hook's binding, mode and policy fail the contract (§1.8), checked in upstream's order. */
function hookContractProblem(manifest: {
  binding?: string | undefined;
  execution_mode?: string | undefined;
  commit_policy?: string | undefined;
}): { key: 'binding' | 'execution_mode' | 'commit_policy'; message: string } | undefined {
  const binding = manifest.binding;
  const mode = manifest.execution_mode ?? 'blocking';
  const policy = manifest.commit_policy ?? 'none';
  if (binding !== undefined && !(HOOK_BINDINGS as readonly string[]).includes(binding)) {
    return { key: 'binding', message: `unknown binding '${binding}'; expected: ${HOOK_BINDINGS.join(', ')}` };
  }
  if (mode !== 'blocking' && mode !== 'async') return { key: 'execution_mode', message: `unknown execution_mode '${mode}'; expected: blocking, async` };
  if (!(COMMIT_POLICIES as readonly string[]).includes(policy)) {
    return { key: 'commit_policy', message: `unknown commit_policy '${policy}'; expected: ${COMMIT_POLICIES.join(', ')}` };
  }
  if (mode === 'async' && policy !== 'none') {
    return { key: 'commit_policy', message: `async-with-commit not supported: execution_mode 'async' requires commit_policy 'none' (got '${policy}')` };
  }
  if (binding === 'on-stage' && mode === 'async') {
    return { key: 'execution_mode', message: "on-stage hooks must be blocking; execution_mode 'async' is not valid for binding 'on-stage'" };
  }
  if (binding !== undefined && policy !== 'none') {
    const honored = HONORED_POLICY[binding as HookBinding] ?? 'none';
    if (honored !== policy) {
      const suffix = binding === 'on-inference' ? " (on-inference commits an 'artifact' output, which has no commit_policy spelling)" : '';
      return {
        key: 'commit_policy',
        message: `commit_policy '${policy}' is not valid for binding '${binding}'; binding '${binding}' honors commit_policy '${honored}'${suffix}`,
      };
    }
  }
  return undefined;
}

/**
 * The packaging type: `execution` when declared, else skill → static, a native tool → native,
 * everything else → wasm.
 */
export function packagingTypeOf(manifest: ArtifactManifest): PackagingType {
  const declared = manifest.execution?.trim().toLowerCase();
  if (declared !== undefined && (PACKAGING_TYPES as readonly string[]).includes(declared)) return declared as PackagingType;
  if (manifest.runtime === 'skill') return 'static';
  if (manifest.runtime === 'tool' && manifest.implementation === 'native') return 'native';
  return 'wasm';
}

function describeKey(_path: ReadonlyArray<PropertyKey>, dotted: string): string {
  return `invalid value for '${dotted}'`;
}

/** Parses an artifact's own `murmur.yaml`. Refusals carry upstream's codes and name the field. */
export function parseArtifactManifest(text: string, file = MANIFEST_FILE): ArtifactManifest {
  const source = parseYamlSource(text, file);
  const raw = source.value;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new MurmurError('E-MAN-003', `${file}: field '<root>' has invalid type (expected mapping, got ${yamlTypeName(raw ?? null)})`, { path: '<root>' });
  }
  const result = ArtifactManifestSchema.safeParse(raw);
  if (!result.success) {
    const order = ['name', 'version', 'runtime'];
    const rank = (issue: z.core.$ZodIssue): number => {
      const index = order.indexOf(String(issue.path[0]));
      return index === -1 ? order.length : index;
    };
    const [first] = [...result.error.issues].sort((left, right) => rank(left) - rank(right));
    throw issueToError(first as z.core.$ZodIssue, { file, source, requiredTopLevel: new Set(order), describeKey });
  }
  return result.data;
}

/** What a `.mur.zip`'s manifest turned out to be. */
export type PackagedManifest =
  | { kind: 'artifact'; manifest: ArtifactManifest; warnings: MurmurWarning[] }
  | { kind: 'capsule'; manifest: CapsuleManifest; warnings: MurmurWarning[] };

/** Whether a parsed YAML mapping is an artifact manifest (it has `runtime:`) or a capsule manifest. */
export function isArtifactManifestShape(raw: unknown): boolean {
  return raw !== null && typeof raw === 'object' && !Array.isArray(raw) && Object.hasOwn(raw, 'runtime');
}

export function parsePackagedManifest(text: string, options: ParseCapsuleManifestOptions = {}): PackagedManifest {
  const raw = parseYamlSource(text, options.file ?? MANIFEST_FILE).value;
  if (isArtifactManifestShape(raw)) return { kind: 'artifact', manifest: parseArtifactManifest(text, options.file), warnings: [] };
  const parsed = parseCapsuleManifest(text, options);
  return { kind: 'capsule', manifest: parsed.manifest, warnings: parsed.warnings };
}

/** `name@version` of whichever manifest it is. */
export function manifestIdentity(packaged: PackagedManifest): { name: string; version: string } {
  return { name: packaged.manifest.name, version: packaged.manifest.version };
}

export { artifactNameProblem, artifactVersionProblem } from './artifact-name.js';

export const RESERVED_VERSIONS = ['latest', 'stable', 'edge'] as const;

export function isReservedVersion(version: string): boolean {
  return (RESERVED_VERSIONS as readonly string[]).includes(version.trim().toLowerCase());
}
