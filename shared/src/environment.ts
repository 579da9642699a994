import type { CapabilityPolicy } from './policy.js';

/**
 * What environment a capsule's code sees (upstream §1.5.3 and §7.5).
 *
 * Nothing is inherited. A WASM guest sees the names `capabilities.env.allow` lists that are set
 * on the launching side, minus anything credential-shaped or the runtime's own settings
 * (`RUNTIME_OWNED_PATTERNS`), and then the runtime's own `MURMUR_*` values, applied last so
 * allowlisting one of those names never shadows the runtime's value. A subprocess (shell or native
 * tool) starts from a short list of harmless host variables instead, with the same scrub and a
 * synthetic `HOME` inside the workdir.
 */

/** Credential-shaped names, always scrubbed. `*X*` contains, `*X` suffix, `X*` prefix, else exact. */
export const CREDENTIAL_PATTERNS = [
  'ANTHROPIC_API_KEY',
  'OPENAI_API_KEY',
  'GOOGLE_API_KEY',
  'HUGGING_FACE_HUB_TOKEN',
  'NEXUS_API_KEY',
  'AWS_*',
  'GITHUB_TOKEN',
  'GH_TOKEN',
  'DOCKER_*',
  'KUBECONFIG',
  'NPM_TOKEN',
  'PYPI_TOKEN',
  'CARGO_REGISTRY_TOKEN',
  '*_API_KEY',
] as const;

/** Host variables a subprocess may start from, when set. */
export const SUBPROCESS_BASELINE = ['PATH', 'HOME', 'USER', 'LANG', 'LC_ALL', 'TMPDIR', 'TEMP', 'TMP', 'CARGO_HOME', 'RUSTUP_HOME', 'TERM'] as const;

/** Case-sensitive glob with a leading and/or trailing `*` only. */
export function globMatches(pattern: string, name: string): boolean {
  const leading = pattern.startsWith('*');
  const trailing = pattern.length > 1 && pattern.endsWith('*');
  const core = pattern.slice(leading ? 1 : 0, trailing ? -1 : undefined);
  if (leading && trailing) return name.includes(core);
  if (leading) return name.endsWith(core);
  if (trailing) return name.startsWith(core);
  return name === pattern;
}

export function isCredentialShaped(name: string, extraPatterns: readonly string[] = []): boolean {
  return [...CREDENTIAL_PATTERNS, ...extraPatterns].some((pattern) => globMatches(pattern, name));
}

/**
 * Names that configure the runtime itself, never a capsule, whatever a manifest allows: `MURMUR_*`
 * (the bus URL with its token, the door's and roost's tokens, the dashboard's; upstream reserves
 * the prefix for the runtime's own values, which are set apart and applied last) and the
 * OpenTelemetry exporter's `OTEL_EXPORTER_OTLP_*` (the operator's collector headers and client
 * keys). These are the launcher's environment, which `mur run` against a stack always carries
 * (`MURMUR_NATS_URL`): allowlisted, they gave a capsule the credentials of the control plane.
 */
export const RUNTIME_OWNED_PATTERNS = ['MURMUR_*', 'OTEL_EXPORTER_OTLP_*'] as const;

export function isRuntimeOwned(name: string): boolean {
  return RUNTIME_OWNED_PATTERNS.some((pattern) => globMatches(pattern, name));
}

/**
 * Whether a launcher's variable may reach a harness (`transport: process`), or a delegated child
 * as its parent forwards it: the runtime's own never, and nothing the capsule's `shell.strip_env`
 * strips; a credential-shaped name does (a harness is given its model's key, a child resolves its
 * own secrets with it), where a capsule's code is given none (`isGivenToCapsules`).
 */
export function isGivenToHarness(name: string, stripped: readonly string[]): boolean {
  return !isRuntimeOwned(name) && !stripped.some((pattern) => globMatches(pattern, name));
}

/** Whether a launcher's variable may reach a capsule's code: neither credential-shaped nor the runtime's own. */
export function isGivenToCapsules(name: string, extraPatterns: readonly string[] = []): boolean {
  return !isCredentialShaped(name, extraPatterns) && !isRuntimeOwned(name);
}

export type Environment = Record<string, string>;

/**
 * A WASM guest's environment: `env.allow` ∩ `host`, minus credential-shaped names (and the
 * policy's `shell.strip_env` patterns), then `runtime` applied last.
 */
export function guestEnvironment(
  policy: Pick<CapabilityPolicy, 'env_allow' | 'shell_strip_env'>,
  host: Readonly<Record<string, string | undefined>>,
  runtime: Environment,
): Environment {
  const env: Environment = {};
  for (const name of policy.env_allow) {
    const value = host[name];
    if (value === undefined || !isGivenToCapsules(name, policy.shell_strip_env)) continue;
    env[name] = value;
  }
  return { ...env, ...runtime };
}

/**
 * What of a launcher's environment reaches a harness, or a delegated child as its parent forwards
 * it: `env.allow` ∩ `host`, as far as `isGivenToHarness` lets each through.
 */
export function harnessEnvironment(
  policy: Pick<CapabilityPolicy, 'env_allow' | 'shell_strip_env'>,
  host: Readonly<Record<string, string | undefined>>,
): Environment {
  const env: Environment = {};
  for (const name of policy.env_allow) {
    const value = host[name];
    if (value !== undefined && isGivenToHarness(name, policy.shell_strip_env)) env[name] = value;
  }
  return env;
}

/**
 * A subprocess's environment: the baseline host variables, the caller's overrides, the policy's
 * `shell.baseline_env` names, minus credentials and `shell.strip_env`, and `HOME`/`USERPROFILE`
 * pointing at `capsuleHome` whatever anything else said.
 */
export function subprocessEnvironment(
  policy: Pick<CapabilityPolicy, 'shell_strip_env' | 'shell_baseline_env'>,
  host: Readonly<Record<string, string | undefined>>,
  overrides: ReadonlyArray<readonly [string, string]>,
  capsuleHome: string,
): Environment {
  const env: Environment = {};
  for (const name of SUBPROCESS_BASELINE) {
    const value = host[name];
    if (value !== undefined) env[name] = value;
  }
  for (const [name, value] of overrides) env[name] = value;
  for (const name of policy.shell_baseline_env) {
    const value = host[name];
    if (value !== undefined && isGivenToCapsules(name)) env[name] = value;
  }
  for (const name of Object.keys(env)) if (isCredentialShaped(name, policy.shell_strip_env)) delete env[name];
  env.HOME = capsuleHome;
  env.USERPROFILE = capsuleHome;
  return env;
}
