import { MurmurError, hasControlCharacter, numberSetting } from '@murmur/shared';
import { HARNESS_TRANSCRIPT_LIMIT_BYTES } from './harness-sessions.js';

/**
 * The executor's numbers from its environment, read once when it starts: a malformed one refuses
 * the start (`E-CFG-003`, naming the variable) instead of surfacing in the middle of a session — a
 * deadline's timer is no place to find out that `MURMUR_HARD_LIMIT_GRACE_MS` says `10s`.
 */
export interface ExecutorSettings {
  /** How often the executor tells the stack it is alive (`MURMUR_EXECUTOR_HEARTBEAT_MS`, 1 s). */
  heartbeatMs: number;
  /** How long past its deadline, or past its workdir ceiling, a session may run before it is killed whole (`MURMUR_HARD_LIMIT_GRACE_MS`, 10 s). */
  hardLimitGraceMs: number;
  /** How long a child the model delegated to may run before its watcher ends it (`MURMUR_DELEGATION_DEADLINE_SECS`, 600). */
  delegationDeadlineSecs: number;
  /** How often a session's workdir is measured against its ceiling (`MURMUR_WORKDIR_CHECK_MS`, 10 s). */
  workdirCheckMs: number;
  /** How many entries (files, directories, links) a session's workdir may hold (`MURMUR_WORKDIR_MAX_ENTRIES`, 1 000 000). */
  workdirMaxEntries: number;
  /** The cap on one harness run (`MURMUR_HARNESS_RUN_CAP_SECS`, upstream's 10 minutes). */
  harnessRunCapMs: number;
  /** The largest harness transcript kept for a context (`MURMUR_HARNESS_TRANSCRIPT_MAX_BYTES`, 16 MiB; at most 32 MiB, which a host is sent whole). */
  harnessTranscriptMaxBytes: number;
  /** How many delegations deep a child may run below the session a person or client launched (`MURMUR_DELEGATION_MAX_DEPTH`, 4; 0: none may delegate). */
  delegationMaxDepth: number;
  /** How many delegated sessions one delegation tree may have running at once, its root not counted (`MURMUR_DELEGATION_MAX_TREE`, 16). */
  delegationMaxTree: number;
  /** Where a runtime grant's tree may lie (`MURMUR_RUNTIME_GRANT_ROOTS`, `:`-separated; `DEFAULT_RUNTIME_GRANT_ROOTS`). */
  runtimeGrantRoots: readonly string[];
}

/**
 * Where installed runtimes live on a host (a distribution's, `/opt`'s, Nix's, snaps'): a capsule's
 * runtime grant (`interpreter_runtime`, `staged_runtime`) names a tree here, or in a place its
 * executor's operator adds. A manifest is the capsule's word, and a runtime grant is bound into its
 * sandbox readable and executable: anywhere else on the host (a user's home, another launcher's
 * `--workdir`, a directory a local user can swap for a link) is the operator's to allow, not the
 * capsule's to name.
 */
export const DEFAULT_RUNTIME_GRANT_ROOTS = ['/usr', '/opt', '/lib', '/lib32', '/lib64', '/libx32', '/nix/store', '/snap'] as const;

/** `MURMUR_RUNTIME_GRANT_ROOTS`: absolute directories, `:`-separated; unset or empty, the defaults. */
export function runtimeGrantRoots(env: NodeJS.ProcessEnv): readonly string[] {
  const given = env.MURMUR_RUNTIME_GRANT_ROOTS?.trim();
  if (!given) return DEFAULT_RUNTIME_GRANT_ROOTS;
  const roots = given.split(':').filter((root) => root.trim() !== '');
  const bad = roots.find((root) => !root.startsWith('/') || hasControlCharacter(root));
  if (bad !== undefined)
    throw new MurmurError('E-CFG-003', `MURMUR_RUNTIME_GRANT_ROOTS names ${JSON.stringify(bad)}, which is no absolute directory`, {
      path: 'MURMUR_RUNTIME_GRANT_ROOTS',
      hint: `give absolute directories separated by ':', e.g. ${[...DEFAULT_RUNTIME_GRANT_ROOTS.slice(0, 2), '/srv/runtimes'].join(':')} (unset: ${DEFAULT_RUNTIME_GRANT_ROOTS.join(':')})`,
    });
  return roots;
}

export function executorSettings(env: NodeJS.ProcessEnv): ExecutorSettings {
  const ms = { unit: 'milliseconds' };
  const seconds = { unit: 'seconds', fractional: true };
  return {
    heartbeatMs: numberSetting(env, 'MURMUR_EXECUTOR_HEARTBEAT_MS', 1_000, ms),
    hardLimitGraceMs: numberSetting(env, 'MURMUR_HARD_LIMIT_GRACE_MS', 10_000, ms),
    delegationDeadlineSecs: numberSetting(env, 'MURMUR_DELEGATION_DEADLINE_SECS', 600, seconds),
    workdirCheckMs: numberSetting(env, 'MURMUR_WORKDIR_CHECK_MS', 10_000, ms),
    workdirMaxEntries: numberSetting(env, 'MURMUR_WORKDIR_MAX_ENTRIES', 1_000_000, { unit: 'entries' }),
    harnessRunCapMs: Math.round(numberSetting(env, 'MURMUR_HARNESS_RUN_CAP_SECS', 600, seconds) * 1000),
    harnessTranscriptMaxBytes: numberSetting(env, 'MURMUR_HARNESS_TRANSCRIPT_MAX_BYTES', HARNESS_TRANSCRIPT_LIMIT_BYTES, {
      unit: 'bytes',
      most: { value: 32 * 1024 * 1024, because: 'one answer to a capsule host' },
    }),
    delegationMaxDepth: numberSetting(env, 'MURMUR_DELEGATION_MAX_DEPTH', 4, { unit: 'delegations', zero: true }),
    delegationMaxTree: numberSetting(env, 'MURMUR_DELEGATION_MAX_TREE', 16, { unit: 'sessions', zero: true }),
    runtimeGrantRoots: runtimeGrantRoots(env),
  };
}
