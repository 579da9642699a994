import type { MurmurWarning } from './errors.js';
import { MurmurError } from './errors.js';
import type { ArtifactRole, Capabilities, Containment } from './manifest/capsule.js';
import { type NetworkAllowRule, ceilingCovers, parseNetworkAllowRule, parseNetworkAllowRules } from './network-rules.js';
import type { CapabilityPolicy } from './policy.js';

/**
 * What a capsule's own declarations say about its containment, decided from the manifest alone
 * (no host is asked): upstream's staging-time posture warnings and the `staged_runtime` floor
 * refusal. Values, not printed lines, so staging and `mur doctor` say the same words.
 */

/**
 * `W-SEC-009`, once per grant: an `interpreter_runtime` grant reaches host directories outside
 * the workdir, which ties the capsule to one host's interpreter layout.
 */
export function interpreterRuntimeWarnings(policy: Pick<CapabilityPolicy, 'interpreter_runtime'>): MurmurWarning[] {
  return policy.interpreter_runtime.map((grant) => {
    const dirs = grant.dirs.map((dir) => `${dir.path} (${dir.list_dir ? 'list_dir' : 'no-list'})`).join(', ');
    return {
      code: 'W-SEC-009',
      message: `capabilities.shell.interpreter_runtime grants '${grant.binary}' host directories outside the workdir [${dirs}] — this couples the capsule to a specific host distro/interpreter-version layout (e.g. /usr/lib/python3.11 breaks the moment the host ships Python 3.12); the durable fix is the staged runtime bind-mount, which this grant only bridges until`,
      path: 'capabilities.shell.interpreter_runtime',
    };
  });
}

/**
 * `W-SEC-011`: `workdir_exec` trades away an enforcement property (anything written into the
 * workdir runs, allowlist or not), which a class in a JSON field is too easy to miss.
 */
export function workdirExecWarning(policy: Pick<CapabilityPolicy, 'workdir_exec'>): MurmurWarning | undefined {
  if (!policy.workdir_exec) return undefined;
  return {
    code: 'W-SEC-011',
    message:
      "capabilities.filesystem.workdir_exec is true — the session workdir keeps its Landlock Execute right, so anything the capsule writes there can run regardless of capabilities.shell.allow; this capsule reports containment class 'advisory' on every host, including a Landlock-capable one",
    path: 'capabilities.filesystem.workdir_exec',
  };
}

/** A capsule's artifact entry as its per-artifact grant is read: role, packaging, the operator's block. */
export interface GrantedArtifact {
  name: string;
  role: ArtifactRole;
  /** `native` for a tool that runs as a program; unknown until the artifact is resolved. */
  packaging?: string | undefined;
  capabilities?: Capabilities | undefined;
}

/** The only sub-blocks of an artifact entry's `capabilities` the runtime reads (upstream's §1.4). */
const READ_PER_ARTIFACT = new Set(['network', 'filesystem']);

/**
 * An artifact's own network rules, as the runtime holds it to them: a hook exactly its entry's
 * (it inherits nothing, so nothing narrows it); a tool or a driver the entries the capsule's own
 * rules cover, the others `dropped` (`W-SEC-007`). Undefined when the entry declares none: the
 * artifact then goes by the capsule's rules (a hook by none).
 */
export function artifactNetworkRules(
  ceiling: readonly NetworkAllowRule[],
  artifact: Pick<GrantedArtifact, 'role' | 'capabilities'>,
): { kept: NetworkAllowRule[]; dropped: string[] } | undefined {
  const declared = artifact.capabilities?.network?.allow;
  if (declared === undefined) return undefined;
  const kept: NetworkAllowRule[] = [];
  const dropped: string[] = [];
  for (const entry of declared) {
    const rule = parseNetworkAllowRule(entry);
    if (artifact.role === 'hook' || ceilingCovers(ceiling, rule)) kept.push(rule);
    else dropped.push(entry);
  }
  return { kept, dropped };
}

/**
 * The warnings a capsule's artifact grants earn at staging, once the artifacts are resolved:
 * `W-SEC-007` for each tool or driver rule the capsule's own rules do not cover (dropped, so the
 * artifact cannot reach it), `W-SEC-006` (a hook) and `W-SEC-008` (a tool or a driver) for a
 * sub-block the runtime does not read there, and `W-SEC-008` for any block on a native tool, which
 * runs as a program under the capsule's own subprocess containment. Each is something the
 * manifest says that does not happen, which nobody should find out from a refused request.
 */
export function artifactGrantWarnings(policy: Pick<CapabilityPolicy, 'network_allow'>, artifacts: readonly GrantedArtifact[]): MurmurWarning[] {
  const ceiling = parseNetworkAllowRules(policy.network_allow);
  const warnings: MurmurWarning[] = [];
  for (const artifact of artifacts) {
    const block = artifact.capabilities;
    if (block === undefined || artifact.role === 'skill') continue;
    const path = `artifacts.${artifact.name}.capabilities`;
    if (artifact.role === 'tool' && artifact.packaging === 'native') {
      warnings.push({
        code: 'W-SEC-008',
        message: `${artifact.name}: a native tool runs as a program under the capsule's own subprocess containment (capabilities.network, filesystem and shell), so its entry's capabilities block is not read; remove it, or grant what the tool needs in the capsule's capabilities`,
        path,
      });
      continue;
    }
    for (const entry of artifactNetworkRules(ceiling, artifact)?.dropped ?? []) {
      warnings.push({
        code: 'W-SEC-007',
        message: `${artifact.name}: network allow entry '${entry}' is not covered by the capsule's capabilities.network.allow and was dropped`,
        path: `${path}.network.allow`,
      });
    }
    const inert = Object.keys(block).filter((key) => !READ_PER_ARTIFACT.has(key) && block[key as keyof Capabilities] !== undefined);
    if (inert.length === 0) continue;
    const listed = inert.map((key) => `capabilities.${key}`).join(', ');
    const [is, it] = inert.length === 1 ? ['is', 'it'] : ['are', 'them'];
    warnings.push(
      artifact.role === 'hook'
        ? {
            code: 'W-SEC-006',
            message: `${artifact.name}: ${listed} on a hook entry ${is} not read — a hook is given only its entry's network and filesystem grants; remove ${it}`,
            path,
          }
        : {
            code: 'W-SEC-008',
            message: `${artifact.name}: ${listed} on a ${artifact.role} entry ${is} not read — a ${artifact.role} is narrowed only by its entry's network and filesystem grants, and otherwise holds the capsule's; remove ${it}, or set ${it} in the capsule's capabilities`,
            path,
          },
    );
  }
  return warnings;
}

/** A manifest's artifact entries as grants, before any is resolved (a native tool is not known yet). */
export function declaredArtifactGrants(manifest: {
  artifacts: ReadonlyArray<{ name: string; runtime: ArtifactRole; capabilities?: Capabilities | undefined }>;
}): GrantedArtifact[] {
  return manifest.artifacts.map((artifact) => ({ name: artifact.name, role: artifact.runtime, capabilities: artifact.capabilities }));
}

/**
 * Every warning a capsule's declarations earn at staging, in upstream's order of the codes: what
 * the artifact grants say that does not happen (`W-SEC-006/007/008`), each `interpreter_runtime`
 * grant (`W-SEC-009`), and `workdir_exec` (`W-SEC-011`). The host's own (`W-SEC-012`) is the
 * executor's to say at launch, on the machine the tools run on.
 */
export function stagingPostureWarnings(
  policy: Pick<CapabilityPolicy, 'network_allow' | 'interpreter_runtime' | 'workdir_exec'>,
  artifacts: readonly GrantedArtifact[],
): MurmurWarning[] {
  const workdirExec = workdirExecWarning(policy);
  return [...artifactGrantWarnings(policy, artifacts), ...interpreterRuntimeWarnings(policy), ...(workdirExec ? [workdirExec] : [])];
}

/**
 * `E-CAP-004`: a `staged_runtime` tree is bound into the composed root, which only a declared
 * `sealed` floor builds; below it the interpreter would simply be absent. Decided against the
 * declared floor, never the host: a host that could seal does not help a capsule that did not ask.
 */
export function stagedRuntimeFloorRefusal(policy: Pick<CapabilityPolicy, 'staged_runtime'>, declared: Containment): MurmurError | undefined {
  if (policy.staged_runtime.length === 0 || declared === 'sealed') return undefined;
  const binaries = policy.staged_runtime.map((grant) => grant.binary).join(', ');
  return new MurmurError(
    'E-CAP-004',
    `capabilities.shell.staged_runtime is declared for ${binaries} but the effective containment floor is '${declared}' — staging a runtime tree requires the 'sealed' floor, because there is no composed root to bind-mount it into below that`,
    { path: 'capabilities.shell.staged_runtime' },
  );
}

/**
 * The capability categories a capsule holds, in upstream's fixed order (the trace's
 * `session_start.capabilities` and a hook's `session-context.capabilities`): `network` with any
 * allow rule, `filesystem` with a declared scope (`.` too, as upstream's `Some(scope)`), `shell`
 * with any binary.
 */
export function capabilityCategories(
  policy: Pick<CapabilityPolicy, 'network_allow' | 'filesystem_scope' | 'shell_allow'> & { filesystem_scope_declared?: boolean | undefined },
): string[] {
  return [
    ...(policy.network_allow.length > 0 ? ['network'] : []),
    ...(policy.filesystem_scope_declared || policy.filesystem_scope !== '.' ? ['filesystem'] : []),
    ...(policy.shell_allow.length > 0 ? ['shell'] : []),
  ];
}

/**
 * What a sandbox at `tier` (an executor's `enforcement_tier`) does not hold a capsule's
 * subprocesses to — its shell and native tools, its harness — in the words a launcher reads;
 * empty when sealed. The executor says it with a launch and in the bootstrap log, and `mur run
 * --explain-scope` works it out from the grants' tier, so both say the same. A WebAssembly guest
 * is held by the host's grants on every tier: these are the tools' alone. A class is a floor the manifest may demand,
 * so a class below `sealed` that says nothing of what it lacks left a capsule with a shell to
 * find out (QA: `network.allow` listed as granted where no tool could connect anywhere).
 */
export function unenforcedForTools(tier: string, policy: Pick<CapabilityPolicy, 'workdir_exec'>): string[] {
  const unenforced: string[] = [];
  if (tier === 'none') unenforced.push('any sandbox at all: no namespaces (a capsule that can start subprocesses is refused here, E-CAP-005)');
  if (tier === 'namespaces')
    unenforced.push(
      "the workdir boundary: there is no composed root, so tools see and write this machine's files as the executor's user, the executor's own code and cache (which later sessions run) among them",
    );
  if (tier === 'mountns+pivot_root' || tier === 'namespaces') {
    unenforced.push(
      'network.allow: the tools have no network at all, so every connection they make is refused (the capsule’s own requests still go by its rules)',
    );
    unenforced.push('shell.allow past the program a tool starts: without Landlock an allowed interpreter or shell runs any program it can reach');
    unenforced.push("seccomp: the tools' system calls are not filtered");
    unenforced.push("max_processes: the tools' tasks are bounded by cgroup_pids_max alone");
  }
  if (policy.workdir_exec && tier !== 'none') unenforced.push('shell.allow against the workdir: workdir_exec lets a program written there run');
  return unenforced;
}
