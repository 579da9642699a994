import { MurmurError } from '@murmur/shared';
import { cacheDir, packageFile } from '@murmur/shared/node';
import { type CgroupProbe, probeCgroups } from './cgroup.js';
import { type ConfineProbe, keptConfinement, probeConfinement } from './confinement.js';
import { type HostContainment, hostContainment } from './containment.js';
import { type NamespaceProbe, probeNamespaces } from './sandbox.js';

/**
 * What isolation this machine can give a capsule, found by trying each mechanism once: the
 * namespaces (bubblewrap, else unshare), sealing (`murmur-confine`), and session cgroups.
 *
 * One probe for everyone who asks the question — the executor at start, `mur doctor` on the
 * machine it runs on — so a report about a host and the launches on it cannot disagree.
 */
export interface HostProbe {
  namespaces: NamespaceProbe;
  confine: ConfineProbe;
  cgroups: CgroupProbe;
  containment: HostContainment;
}

/** `murmur-confine`, built by `npm run build` beside the executor's code. */
const CONFINE_HELPER = packageFile('@murmur/executor', 'dist/confine/murmur-confine', import.meta.url, '../dist/confine/murmur-confine');

/**
 * Honours the executor's settings: `MURMUR_BWRAP`/`MURMUR_UNSHARE` (a binary, or `none`),
 * `MURMUR_CGROUP_ROOT`/`MURMUR_CGROUP_PARENT`, and `MURMUR_CONFINE` (the helper, or `none` to
 * turn sealing off on a host that should say what it is without it). A `MURMUR_CGROUP_PARENT` no
 * group can be made in is refused (`E-CFG-003`), unless the probe is only to be reported (`report`:
 * `mur doctor`, which says why).
 */
export function probeHost(env: NodeJS.ProcessEnv = process.env, options: { report?: boolean } = {}): HostProbe {
  const bwrap = env.MURMUR_BWRAP?.trim() || 'bwrap';
  const sealing = env.MURMUR_CONFINE?.trim() !== 'none';
  const helper = env.MURMUR_CONFINE?.trim() || CONFINE_HELPER;
  const cache = cacheDir(env);
  // A sandbox sealed with this bubblewrap since boot says its namespaces work, and that it seals;
  // else both are tried. A launch that fails on a kept answer forgets it (`ConfineProbe.forget`),
  // and the next probe tries both again.
  const kept = sealing && bwrap !== 'none' ? keptConfinement({ helper, bwrap, cacheDir: cache }) : undefined;
  const namespaces: NamespaceProbe = kept
    ? { tool: 'bubblewrap', binary: bwrap, reason: undefined }
    : probeNamespaces({ bwrap, unshare: env.MURMUR_UNSHARE?.trim() || undefined });
  const parent = env.MURMUR_CGROUP_PARENT?.trim() || undefined;
  const cgroups = probeCgroups(env.MURMUR_CGROUP_ROOT?.trim() || undefined, parent);
  // A parent the operator named and that cannot be used is a setting that does not hold: sessions
  // would run with no memory or task ceiling of a group, which is not what naming one asked for.
  if (parent !== undefined && !cgroups.support && !options.report) {
    throw new MurmurError('E-CFG-003', `MURMUR_CGROUP_PARENT names '${parent}', where no session cgroups can be made: ${cgroups.reason}`, {
      path: 'MURMUR_CGROUP_PARENT',
      hint: 'name a cgroup this user may create groups in (with the memory, pids and cpu controllers), or unset it to use the executor’s own',
    });
  }
  const confine: ConfineProbe = sealing
    ? (kept ?? reportedIf(options.report === true, () => probeConfinement(namespaces, { helper, cacheDir: cache })))
    : { support: undefined, reason: 'sealing is turned off on this executor (MURMUR_CONFINE=none)' };
  return { namespaces, confine, cgroups, containment: hostContainment(namespaces, confine) };
}

/**
 * The probe, or, when only reporting (`mur doctor`), its refusal as the reason sealing is not
 * achieved: a setting no sandbox can be made under (a path of the runtime's that no rule can
 * name) is what the report is for, and an executor or a run refuses it outright.
 */
function reportedIf(report: boolean, probe: () => ConfineProbe): ConfineProbe {
  try {
    return probe();
  } catch (error) {
    if (!report || !(error instanceof MurmurError)) throw error;
    return { support: undefined, reason: `${error.message} (${error.hint ?? error.code})` };
  }
}

/** The probe in four phrases: what an executor logs at start and reports with each launch. */
export function isolationSummary(probe: HostProbe): { namespaces: string; containment: string; cgroups: string; io_throttle: string } {
  const { namespaces, confine, cgroups, containment } = probe;
  const io = cgroups.support?.ioParent !== undefined ? (cgroups.support.version === 'v2' ? 'io.max' : 'blkio') : undefined;
  return {
    namespaces: namespaces.tool ?? `none (${namespaces.reason})`,
    containment: `${containment.achieved} (${containment.tier})${confine.reason ? `; not sealed: ${confine.reason}` : ''}`,
    cgroups: cgroups.support ? `${cgroups.support.version}` : `none (${cgroups.reason})`,
    io_throttle: io ?? `none (${cgroups.support?.ioUnavailable ?? cgroups.reason})`,
  };
}

/** The parts of a capsule that decide whether it can start native subprocesses. */
export interface SpawningParts {
  shellAllow: readonly string[];
  /** Its artifacts: a native tool is a subprocess. */
  artifacts: ReadonlyArray<{ role: string; packaging: string }>;
  /**
   * `inference.transport: process`: its harness is a subprocess too, and one the manifest names —
   * a path (`./harness.sh`) may be the capsule's own program. Left out, it ran as the machine's
   * root under a root executor with only unshare, and outside the tools' cgroup below sealed.
   */
  harness?: boolean | undefined;
}

/** Whether the capsule can start native subprocesses, which only a real sandbox may allow. */
export function canSpawnSubprocesses(parts: SpawningParts): boolean {
  return (
    parts.harness === true || parts.shellAllow.length > 0 || parts.artifacts.some((artifact) => artifact.role === 'tool' && artifact.packaging === 'native')
  );
}

/** What bubblewrap says when it is there and the kernel refuses it a user namespace. */
const USER_NAMESPACES_REFUSED = /bubblewrap \([^)]*\): [^;]*(namespace|Operation not permitted|Permission denied|No space left on device)/i;

/** How unprivileged user namespaces are let back in, by what turns them off. */
export const USER_NAMESPACES_HINT =
  "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces above 0; on Ubuntu 23.10 and later, AppArmor's kernel.apparmor_restrict_unprivileged_userns=0)";

/**
 * What to do about bubblewrap's refusal, by what it said: a namespace it could not make (user
 * namespaces off, or their limit reached, which the kernel says as ENOSPC), a disk with no room
 * for the sandbox's directories, or anything else, which its words say.
 */
export function sandboxFailureHint(said: string): string {
  if (/namespace|uid map|gid map|setgroups/i.test(said))
    return `bubblewrap needs unprivileged user namespaces, under their limit (user.max_user_namespaces): ${USER_NAMESPACES_HINT}`;
  if (/No space left on device|Disk quota exceeded/i.test(said))
    return "the file system bubblewrap made the sandbox's directories on is full (the workdir's, or the temporary directory's): free some space, then run it again";
  if (/Read-only file system/i.test(said))
    return "bubblewrap could not write where it makes the sandbox's directories: name a workdir on a writable file system";
  return "bubblewrap's words above say what it could not do; 'mur doctor' checks what the sandbox needs";
}

/**
 * Why this host refuses a capsule that can spawn (`E-CAP-005` without namespaces, `E-RUN-012`
 * without a cgroup to bound the subprocess tree), in the order a launch checks them; empty when
 * it does not. Every refusal, not the first: a report names both problems at once, a launch
 * throws the first.
 */
export function subprocessRefusals(
  canSpawn: boolean,
  probe: Pick<HostProbe, 'namespaces' | 'cgroups'>,
  uid: number | undefined = process.getuid?.(),
): MurmurError[] {
  if (!canSpawn) return [];
  const refusals: MurmurError[] = [];
  if (probe.namespaces.tool === 'unshare' && uid === 0) {
    // unshare's user namespace maps the sandbox's root to the user that made it: to root itself,
    // with every capability, and with no composed root the tools see this machine as it is. A
    // probe's shell tool read /etc/shadow, rewrote the executor's code and the cache every later
    // (sealed) session runs, and left its session's cgroup.
    refusals.push(
      new MurmurError(
        'E-CAP-005',
        "this executor runs as root and has only unshare's namespaces (no bubblewrap): the capsule's subprocesses would run as this machine's root, with every capability and this machine's own files around them",
        {
          hint: "install bubblewrap ('apt-get install bubblewrap') so tools run in a composed root, run the executor as an unprivileged user, or remove shell.allow and native tools from the manifest to run the capsule as pure WebAssembly",
        },
      ),
    );
  }
  if (probe.namespaces.tool === undefined) {
    refusals.push(
      new MurmurError(
        'E-CAP-005',
        `this host cannot give the capsule's subprocess tree its own namespaces, so capabilities.network.allow and the workdir boundary cannot be enforced for it: ${probe.namespaces.reason}`,
        {
          // bubblewrap there and refused its namespaces: installing it again changes nothing.
          hint: USER_NAMESPACES_REFUSED.test(probe.namespaces.reason ?? '')
            ? `bubblewrap is installed, and the kernel refused it user namespaces: ${USER_NAMESPACES_HINT}; or remove shell.allow and native tools from the manifest to run the capsule as pure WebAssembly`
            : "install bubblewrap ('apt-get install bubblewrap'), or remove shell.allow and native tools from the manifest to run the capsule as pure WebAssembly",
        },
      ),
    );
  }
  if (probe.cgroups.support === undefined) {
    refusals.push(
      new MurmurError(
        'E-RUN-012',
        `this capsule can spawn native subprocesses but no cgroup could be created to bound them (${probe.cgroups.reason}); the runtime refuses to launch rather than run a subprocess tree with no aggregate memory/pids/cpu ceiling`,
        {
          hint: 'run the executor where it may create cgroups: as root, or in a cgroup subtree delegated to its user that has the memory, pids and cpu controllers, named by MURMUR_CGROUP_PARENT (on cgroup v2 with systemd: systemd-run --user --scope -p Delegate=yes, then run there)',
        },
      ),
    );
  }
  return refusals;
}
