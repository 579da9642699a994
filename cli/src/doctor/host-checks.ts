import { spawnSync } from 'node:child_process';
import { type HostProbe, pathDirectories, probeHost, resolveInvokedBinary } from '@murmur/executor';

/**
 * What this machine gives the capsules `mur` runs on it: the containment tier and why (the
 * executor's own probe, asked here rather than re-derived), bubblewrap, session cgroups, and
 * `nats-server` for running the stack. A finding here is information, never a failure by itself:
 * whether it stops a capsule depends on the capsule, and that is said as upstream says it, as a
 * warning naming the code `mur run` would refuse with.
 */

/**
 * `✓` works; `!` missing or weaker, which some capsules would mind; `-` not set up, which is fine;
 * `✗` a failed check (the stack, when one is configured).
 */
export type Mark = '✓' | '✗' | '!' | '-';

export interface ReportLine {
  mark: Mark;
  label: string;
  detail: string;
  /** Indented lines under it: the why, the parts. */
  notes: string[];
}

export interface HostReport {
  probe: HostProbe;
  lines: ReportLine[];
}

/** The first line a `--version` prints, or undefined when the binary does not run. */
function versionOf(binary: string): string | undefined {
  const result = spawnSync(binary, ['--version'], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 5_000 });
  if (result.error || result.status !== 0) return undefined;
  const text = `${result.stdout.toString('utf8')}\n${result.stderr.toString('utf8')}`;
  return text
    .split('\n')
    .find((line) => line.trim() !== '')
    ?.trim();
}

function containmentLine(probe: HostProbe): ReportLine {
  const { containment, namespaces, confine } = probe;
  const detail = `${containment.achieved} (${containment.tier})`;
  switch (containment.tier) {
    case 'mountns+pivot_root+landlock+seccomp':
      return {
        mark: '✓',
        label: 'containment',
        detail,
        notes: ['why: bubblewrap composes a read-only root and murmur-confine seals it (its own network namespace, Landlock, seccomp, no capabilities)'],
      };
    case 'mountns+pivot_root':
      return { mark: '!', label: 'containment', detail, notes: [`why: bubblewrap composes a read-only root; not sealed: ${confine.reason}`] };
    case 'namespaces':
      return { mark: '!', label: 'containment', detail, notes: [`why: unshare gives the namespaces but no composed root; ${namespaces.reason}`] };
    case 'none':
      return {
        mark: '!',
        label: 'containment',
        detail,
        notes: [`why: no sandbox, so only pure-WebAssembly capsules run: ${namespaces.reason}`],
      };
  }
}

function bubblewrapLine(probe: HostProbe, env: NodeJS.ProcessEnv): ReportLine {
  const configured = env.MURMUR_BWRAP?.trim() || 'bwrap';
  if (configured === 'none') return { mark: '-', label: 'bubblewrap', detail: 'turned off (MURMUR_BWRAP=none)', notes: [] };
  const binary = resolveInvokedBinary(configured, pathDirectories(env.PATH));
  if (binary === undefined) {
    return {
      mark: '!',
      label: 'bubblewrap',
      detail: `${configured} not found on PATH`,
      notes: ['sandboxes get no composed root (containment above advisory needs it): apt-get install bubblewrap'],
    };
  }
  const version = versionOf(binary) ?? 'version unknown';
  if (probe.namespaces.tool === 'bubblewrap') return { mark: '✓', label: 'bubblewrap', detail: `${version} (${binary})`, notes: [] };
  return { mark: '!', label: 'bubblewrap', detail: `${version} (${binary}), but it cannot make a sandbox here`, notes: [`${probe.namespaces.reason}`] };
}

function cgroupsLine(probe: HostProbe): ReportLine {
  const { support, reason } = probe.cgroups;
  if (support) {
    const where = support.version === 'v2' ? support.memoryParent : `memory ${support.memoryParent}, pids ${support.pidsParent}, cpu ${support.cpuParent}`;
    return {
      mark: '✓',
      label: 'cgroups',
      detail: `${support.version}: this user can make a session cgroup with memory, pids and cpu limits`,
      notes: [
        `under ${where}`,
        support.ioParent === undefined
          ? `the tools' I/O is not throttled (cgroup_io_bytes_per_sec): ${support.ioUnavailable}`
          : `the tools' I/O is throttled on the workdir's disk (cgroup_io_bytes_per_sec), under ${support.ioParent}`,
      ],
    };
  }
  return {
    mark: '!',
    label: 'cgroups',
    detail: 'this user cannot make a session cgroup with memory, pids and cpu limits',
    notes: [`${reason}`, 'capsules that can start subprocesses are refused here (E-RUN-012)'],
  };
}

function natsServerLine(env: NodeJS.ProcessEnv): ReportLine {
  const configured = env.MURMUR_NATS_SERVER_BIN?.trim() || 'nats-server';
  const binary = resolveInvokedBinary(configured, pathDirectories(env.PATH));
  if (binary === undefined) {
    return {
      mark: '-',
      label: 'nats-server',
      detail: `${configured} not found on PATH`,
      notes: ['only needed to run the stack on this machine; mur alone runs everything in-process'],
    };
  }
  return { mark: '✓', label: 'nats-server', detail: `${versionOf(binary) ?? 'version unknown'} (${binary})`, notes: [] };
}

export function checkHost(env: NodeJS.ProcessEnv = process.env): HostReport {
  const probe = probeHost(env, { report: true });
  return { probe, lines: [containmentLine(probe), bubblewrapLine(probe, env), cgroupsLine(probe), natsServerLine(env)] };
}
