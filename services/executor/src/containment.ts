import { type CapabilityPolicy, type Containment, MurmurError } from '@murmur/shared';
import type { ConfineProbe } from './confinement.js';
import type { NamespaceProbe } from './sandbox.js';

/**
 * What containment a session gets here, and whether that meets what it declared.
 *
 * The classes are upstream's, ordered `advisory` < `scoped` < `sealed`; what this host achieves:
 *
 * | mechanism (`enforcement_tier`) | class |
 * |---|---|
 * | `mountns+pivot_root+landlock+seccomp`: bubblewrap's composed root, sealed by `murmur-confine` (a network namespace where unlisted connects are refused, Landlock, seccomp, no capabilities) | `sealed` |
 * | `mountns+pivot_root`: bubblewrap's composed root alone | `scoped` |
 * | `namespaces`: `unshare`'s namespaces, no composed root | `advisory` |
 * | `none` | `advisory` |
 *
 * Every session gets the strongest this host has, whatever it declared: a capsule that asks for
 * less is not given less. `workdir_exec` caps the class at `advisory` on every host, because a
 * binary written into the workdir then runs whatever `shell.allow` says.
 */

export type EnforcementTier = 'mountns+pivot_root+landlock+seccomp' | 'mountns+pivot_root' | 'namespaces' | 'none';

export const CONTAINMENT_RANK: Record<Containment, number> = { advisory: 0, scoped: 1, sealed: 2 };

export interface HostContainment {
  tier: EnforcementTier;
  /** The class this host backs, before a capsule's own `workdir_exec`. */
  achieved: Containment;
  namespaces: NamespaceProbe;
  confine: ConfineProbe;
}

export function hostContainment(namespaces: NamespaceProbe, confine: ConfineProbe): HostContainment {
  if (namespaces.tool === 'bubblewrap' && confine.support) return { tier: 'mountns+pivot_root+landlock+seccomp', achieved: 'sealed', namespaces, confine };
  if (namespaces.tool === 'bubblewrap') return { tier: 'mountns+pivot_root', achieved: 'scoped', namespaces, confine };
  if (namespaces.tool === 'unshare') return { tier: 'namespaces', achieved: 'advisory', namespaces, confine };
  return { tier: 'none', achieved: 'advisory', namespaces, confine };
}

export interface ContainmentAssessment {
  declared: Containment;
  achieved: Containment;
  floorMet: boolean;
  /** Why the floor is not met; undefined when it is. */
  shortfall: string | undefined;
  tier: EnforcementTier;
}

/** The strongest of the floors a launch was given (manifest, workspace config, `--containment`). */
export function strongestFloor(...floors: Array<Containment | undefined>): Containment {
  return floors.reduce<Containment>(
    (strongest, floor) => (floor !== undefined && CONTAINMENT_RANK[floor] > CONTAINMENT_RANK[strongest] ? floor : strongest),
    'advisory',
  );
}

const WORKDIR_EXEC_SHORTFALL =
  'capabilities.filesystem.workdir_exec: true keeps the execute right on the session workdir, so a binary the capsule compiles, downloads or renames inside it runs regardless of capabilities.shell.allow — the allowlist stops being an enforceable property of this capsule. No host can back a class above advisory for it. Either remove workdir_exec (the allowlist is then enforced by the kernel on the resolved path) or lower the declared containment floor to advisory';

export function assessContainment(host: HostContainment, policy: Pick<CapabilityPolicy, 'workdir_exec'>, declared: Containment): ContainmentAssessment {
  const achieved: Containment = policy.workdir_exec ? 'advisory' : host.achieved;
  const floorMet = CONTAINMENT_RANK[declared] <= CONTAINMENT_RANK[achieved];
  let shortfall: string | undefined;
  if (!floorMet) {
    if (policy.workdir_exec) shortfall = WORKDIR_EXEC_SHORTFALL;
    else if (declared === 'sealed') shortfall = host.confine.reason ?? 'sealed needs bubblewrap and murmur-confine, which this host does not have';
    else
      shortfall = `scoped needs a composed read-only root (bubblewrap), which this host does not give: ${host.namespaces.reason ?? `only ${host.namespaces.tool} works here`}`;
  }
  return { declared, achieved, floorMet, shortfall, tier: host.tier };
}

/** `E-CAP-003`, said the way upstream says it, with the cause and what to do. */
export function containmentRefusal(assessment: ContainmentAssessment): MurmurError {
  const { declared, achieved } = assessment;
  return new MurmurError(
    'E-CAP-003',
    `declared containment class '${declared}' is not achievable on this host (achieved: '${achieved}'): ${assessment.shortfall}`,
    {
      hint: `lower the declared floor to '${achieved}' (capabilities.containment in murmur.yaml, containment in .murmur/config.yaml or in $MURMUR_HOME/config.yaml, or --containment; the strongest of them holds), or run on a host that provides '${declared}' — mur run --explain-scope shows what this host gives`,
      path: 'capabilities.containment',
    },
  );
}

/**
 * The trace's `effective_grants` (and what `mur run --explain-scope --json` prints): upstream's
 * keys, in upstream's order.
 */
export function effectiveGrants(assessment: ContainmentAssessment, policy: CapabilityPolicy): Record<string, unknown> {
  return {
    declared_containment: assessment.declared,
    achieved_containment: assessment.achieved,
    floor_met: assessment.floorMet,
    ...(assessment.shortfall !== undefined ? { shortfall_reason: assessment.shortfall } : {}),
    enforcement_tier: assessment.tier,
    filesystem_scope: policy.filesystem_scope,
    workdir_exec: policy.workdir_exec,
    network_allow: policy.network_allow,
    unix_sockets: policy.unix_sockets,
    shell_allow: policy.shell_allow,
    spawn_allow: policy.spawn_allow,
    env_allow: policy.env_allow,
    interpreter_runtime_grants: policy.interpreter_runtime.flatMap((grant) =>
      grant.dirs.map((dir) => `${grant.binary}: ${dir.path}${dir.list_dir ? ' (list_dir)' : ''}`),
    ),
    staged_runtime_grants: policy.staged_runtime.map((grant) => `${grant.binary}: ${grant.source_path} (pin: ${grant.pin})`),
  };
}
