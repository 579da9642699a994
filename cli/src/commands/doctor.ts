import path from 'node:path';
import {
  type CapabilityPolicy,
  type CapsuleManifest,
  LOCKFILE_NAME,
  MurmurError,
  type MurmurLock,
  capabilityPolicy,
  currentPlatform,
  declaredArtifactGrants,
  parseCapsuleManifest,
  stagedRuntimeFloorRefusal,
  stagingPostureWarnings,
} from '@murmur/shared';
import { readLockfile } from '@murmur/shared/artifacts';
import {
  type ContainmentAssessment,
  type HostProbe,
  assessContainment,
  canSpawnSubprocesses,
  containmentRefusal,
  strongestFloor,
  subprocessRefusals,
  toolchainHelperGaps,
  toolchainHelperWarning,
} from '@murmur/executor';
import { type ArtifactCheck, checkArtifacts, localStores, undeclaredPins } from '../doctor/artifact-checks.js';
import { type ReportLine, checkHost } from '../doctor/host-checks.js';
import { checkStack } from '../doctor/stack-check.js';
import { type Output, oneLine } from '../output.js';
import { findProjectRoot } from '../project.js';
import { configuredContainment } from '../workspace-config.js';
import { packProject, packProjectStore, readManifestTextSync } from '@murmur/shared/node';

/**
 * `mur doctor`: whether `mur run` would accept this project and this machine, without running
 * anything.
 *
 * In a capsule project (the nearest `murmur.yaml` at or above the working directory), upstream's
 * checklist: one ✓/✗ line per declared artifact (installed, its bytes matching their digest and
 * `murmur.lock`), then this runtime's additions — a line for the lock itself, the host (the
 * executor's own containment probe, bubblewrap, cgroups, `nats-server`) and, when
 * `MURMUR_NATS_URL` is set, whether the stack answers. Upstream's posture warnings (staging's
 * `W-SEC-006`–`009` and `W-SEC-011`, the host's `W-SEC-012`) and the refusals a run would make (`E-CAP-003`, `E-CAP-004`,
 * `E-CAP-005`, `E-RUN-012`) go to stderr first, as warnings: doctor launches nothing, so it has
 * nothing to refuse, and one capability problem must not hide every artifact problem.
 *
 * Exit 0 when every check passes, 1 when any fails. What fails, as upstream: an artifact line,
 * and (ours) a configured stack that does not answer. A host that lacks something, and a stack
 * that is not configured, are reported and do not fail. A manifest or lock that cannot be read
 * fails before any line prints. Outside a project the host checks still run.
 */

const CHECK = '✓';
const CROSS = '✗';
const DASH = '—';

interface Project {
  root: string;
  manifestPath: string;
  manifest: CapsuleManifest;
  policy: CapabilityPolicy;
  lock: MurmurLock | undefined;
  checks: ArtifactCheck[];
}

async function loadProject(root: string, env: NodeJS.ProcessEnv, output: Output): Promise<Project> {
  const manifestPath = path.join(root, 'murmur.yaml');
  const { manifest, warnings } = parseCapsuleManifest(readManifestTextSync(manifestPath));
  for (const warning of warnings) output.warn(warning);
  // A lock that exists but does not parse is as fatal as a manifest that does not: nothing could be verified against it.
  const lock = await readLockfile(path.join(root, LOCKFILE_NAME));
  const checks = await checkArtifacts(manifest, localStores(root, env), lock);
  return { root, manifestPath, manifest, policy: capabilityPolicy(manifest), lock, checks };
}

/** `[mur doctor] warning[E-…]: …` and what it means for `mur run`: upstream's form for a refusal doctor only predicts. */
function predictedRefusal(output: Output, refusal: MurmurError, consequence: string): void {
  output.err(`[mur doctor] warning[${refusal.code}]: ${oneLine(refusal.message)}\n  ${consequence}`);
}

/** The warnings and predicted refusals, in the order staging would reach them. */
/** Says what staging would warn about and what `mur run` would refuse; returns how many refusals it predicted. */
function warnAboutPosture(project: Project, host: HostProbe, assessment: ContainmentAssessment, output: Output, stackUrl: string | undefined): number {
  let predicted = 0;
  // The host judged is this one: a run against a stack is judged by its executor's, on its machine.
  const where = stackUrl
    ? ` — on this machine: \`mur run\` against the stack at ${stackUrl} is judged by its executor's host, which 'mur doctor' does not see`
    : '';
  const { policy } = project;
  const { declared } = assessment;
  // What staging says of the manifest, in its words (the artifacts as declared: doctor resolves none).
  for (const warning of stagingPostureWarnings(policy, declaredArtifactGrants(project.manifest))) output.warn(warning);
  const staged = stagedRuntimeFloorRefusal(policy, declared);
  if (staged) {
    predicted += 1;
    predictedRefusal(
      output,
      staged,
      '`mur run` will refuse this capsule unless the floor is raised — set `capabilities.containment: sealed` in murmur.yaml, set `containment: sealed` in .murmur/config.yaml, or pass `--containment sealed`.',
    );
  }
  for (const gap of toolchainHelperGaps(policy, declared)) output.warn({ code: 'W-SEC-012', message: toolchainHelperWarning(gap) });
  if (!assessment.floorMet) {
    predicted += 1;
    predictedRefusal(
      output,
      containmentRefusal(assessment),
      `\`mur run\` will refuse this capsule here — \`mur run --explain-scope\` shows what this host gives${where}.`,
    );
  }
  // Native tools are subprocesses too: their packaging is known once the artifacts are resolved.
  const artifacts = project.checks.flatMap((check) => ('stored' in check.verdict ? [{ role: check.role, packaging: check.verdict.stored.meta.runtime }] : []));
  const canSpawn = canSpawnSubprocesses({ shellAllow: policy.shell_allow, artifacts, harness: project.manifest.inference?.transport === 'process' });
  for (const refusal of subprocessRefusals(canSpawn, host)) {
    predicted += 1;
    predictedRefusal(
      output,
      refusal,
      `\`mur run\` will refuse this capsule on this host until that is resolved${where}. Nothing in murmur.yaml can change it — the refusal is about the machine, not the manifest.`,
    );
  }
  return predicted;
}

/**
 * What staging would refuse of the project's files — a manifest, prompt or store reached through
 * a link to outside the capsule directory, a project past the staging limit — found by packing it
 * as `mur stage` and `mur run` do (nothing is uploaded or written): doctor said all was well for a
 * project every run refused.
 */
async function packingRefusal(root: string): Promise<MurmurError | undefined> {
  try {
    // With the digest cache `mur run` keeps: a file packed before, by a run or an earlier doctor, is not hashed again.
    await packProject(root);
    await packProjectStore(root);
    return undefined;
  } catch (error) {
    if (error instanceof MurmurError) return error;
    throw error;
  }
}

interface Tally {
  passed: number;
  fixes: string[];
}

/** Upstream's checklist lines, and the fix each failure asks for. */
function artifactLines(project: Project, platform: string, tally: Tally): string[] {
  const lockShown = project.lock !== undefined;
  const width = Math.max(0, ...project.checks.map((check) => check.reference.length), lockShown ? LOCKFILE_NAME.length : 0);
  const lines: string[] = [];
  const fail = (check: ArtifactCheck, why: string, fix: string, notes: string[] = []): void => {
    lines.push(`  ${CROSS}  ${check.reference.padEnd(width)}   ${platform}   ${DASH} ${why}`, ...notes);
    tally.fixes.push(fix);
  };
  for (const check of project.checks) {
    const { verdict, name, reference } = check;
    switch (verdict.kind) {
      case 'local-source':
        lines.push(`  ${CHECK}  ${reference.padEnd(width)}   local source`);
        tally.passed += 1;
        break;
      case 'ok':
        lines.push(`  ${CHECK}  ${reference.padEnd(width)}   ${platform}`);
        tally.passed += 1;
        break;
      case 'missing':
        fail(check, 'missing', `mur install ${reference}`);
        break;
      case 'lock-entry-missing':
        fail(check, `murmur.lock missing artifact entry for '${name}'`, `mur install ${reference}`);
        break;
      case 'lock-version-mismatch':
        fail(
          check,
          `murmur.lock version mismatch for '${name}': manifest requested ${check.version}, lock pinned ${verdict.pinned}`,
          `${name}: remove the stale murmur.lock entry, then run mur install ${reference}`,
        );
        break;
      case 'store-digest-mismatch':
        fail(
          check,
          `artifact integrity check failed for ${reference}`,
          `${name}: the stored bytes do not match their recorded digest ${DASH} reinstall it (mur install ${reference})`,
          [
            `        expected sha256 (${path.basename(verdict.stored.zipPath).replace(/\.mur\.zip$/, '.sha256')}): ${verdict.stored.recordedSha256}`,
            `        actual sha256 (on disk):       ${verdict.actual}`,
          ],
        );
        break;
      case 'lock-digest-mismatch':
        fail(
          check,
          `artifact integrity check failed for ${reference}`,
          `${name}: artifact on disk does not match murmur.lock ${DASH} re-publish or delete the lock`,
          [`        expected sha256 (murmur.lock): ${verdict.expected}`, `        actual sha256 (on disk):       ${verdict.actual}`],
        );
        break;
      case 'unreadable':
        fail(check, verdict.reason, `mur install ${reference}`);
        break;
    }
  }
  if (project.lock) lines.push(lockLine(project, width));
  return lines;
}

/**
 * The lock's own line: whether it agrees with the manifest for every locked artifact. Not counted
 * in the tally — each disagreement already failed its artifact's line, once.
 */
function lockLine(project: Project, width: number): string {
  const lock = project.lock as MurmurLock;
  const disagreeing = project.checks.filter((check) => check.verdict.kind.startsWith('lock-')).map((check) => check.name);
  const stale = undeclaredPins(project.manifest, lock);
  const extra = stale.length > 0 ? `; also pins ${stale.join(', ')}, which the manifest does not declare` : '';
  const label = LOCKFILE_NAME.padEnd(width);
  if (disagreeing.length > 0) return `  ${CROSS}  ${label}   disagrees with the manifest or the installed bytes for ${disagreeing.join(', ')}${extra}`;
  return `  ${CHECK}  ${label}   lock_version ${lock.lock_version}, agrees with the manifest${extra}`;
}

function reportLines(lines: ReportLine[]): string[] {
  const width = Math.max(...lines.map((line) => line.label.length));
  return lines.flatMap((line) => [`  ${line.mark}  ${line.label.padEnd(width)}   ${line.detail}`, ...line.notes.map((note) => `       ${note}`)]);
}

export async function doctorCommand(output: Output): Promise<number> {
  const env = process.env;
  const platform = currentPlatform();
  const root = findProjectRoot();
  const project = root ? await loadProject(root, env, output) : undefined;
  const host = checkHost(env);
  const tally: Tally = { passed: 0, fixes: [] };

  const stdout: string[] = [];
  let refusalsPredicted = 0;
  if (project) {
    // Where `mur run` reads them: the project's config is the one under the directory it runs in (upstream's).
    const floors = configuredContainment(env, process.cwd()).map((entry) => entry.containment);
    const assessment = assessContainment(host.probe.containment, project.policy, strongestFloor(project.policy.containment, ...floors));
    refusalsPredicted = warnAboutPosture(project, host.probe, assessment, output, env.MURMUR_NATS_URL?.trim() || undefined);
    const packing = await packingRefusal(project.root);
    if (packing) {
      predictedRefusal(output, packing, '`mur stage` and `mur run` will refuse this project as it is: nothing of it is staged.');
      tally.fixes.push(packing.hint ?? packing.message);
    }
    const containment = host.lines.find((line) => line.label === 'containment');
    if (containment && !assessment.floorMet) containment.mark = '!';
    containment?.notes.push(
      `this capsule: declared ${assessment.declared}, achieved ${assessment.achieved}, ${assessment.floorMet ? 'floor met' : `floor not met: ${assessment.shortfall}`}`,
    );
    stdout.push(`Checking ${project.manifestPath} for ${platform}...`, ...artifactLines(project, platform, tally));
  } else {
    stdout.push(`No murmur.yaml in ${process.cwd()} or any parent directory: no artifacts to check.`);
  }

  // A cgroup parent named where none can be made refuses every run on this machine, not only a
  // capsule that can spawn (`probeHost` refuses it with E-CFG-003 when not only reporting).
  const cgroupParent = env.MURMUR_CGROUP_PARENT?.trim();
  if (cgroupParent && !host.probe.cgroups.support) {
    const cgroups = host.lines.find((line) => line.label === 'cgroups');
    if (cgroups) {
      cgroups.mark = '✗';
      cgroups.notes.splice(
        0,
        cgroups.notes.length,
        `${host.probe.cgroups.reason}`,
        `every 'mur run' on this machine is refused (E-CFG-003): MURMUR_CGROUP_PARENT names '${cgroupParent}'`,
      );
    }
    tally.fixes.push(`make MURMUR_CGROUP_PARENT name a cgroup this user may create groups under (one delegated to it), or unset it`);
  }

  const stack = await checkStack(env);
  if (stack.passed === true) tally.passed += 1;
  if (stack.passed === false) tally.fixes.push("start the stack's services, or unset MURMUR_NATS_URL to run everything in-process");
  stdout.push('', `Host (${platform})`, ...reportLines([...host.lines, stack.line]), '');

  if (tally.fixes.length === 0) {
    // What this host gives is reported, not failed (it is no fault of the project); but a run it
    // would refuse is not "all passed".
    stdout.push(
      refusalsPredicted === 0
        ? 'All checks passed.'
        : `All checks of the project passed, but \`mur run\` would refuse it on this host: ${refusalsPredicted === 1 ? 'the warning' : 'the warnings'} above say${refusalsPredicted === 1 ? 's' : ''} why.`,
    );
  } else {
    const failed = tally.fixes.length;
    stdout.push(`${tally.passed} check${tally.passed === 1 ? '' : 's'} passed, ${failed} error${failed === 1 ? '' : 's'} found.`, '');
    for (const fix of tally.fixes) stdout.push(`Fix: ${fix}`);
  }
  for (const line of stdout) output.out(line);
  return tally.fixes.length === 0 ? 0 : 1;
}
