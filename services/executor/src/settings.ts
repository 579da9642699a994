import { numberSetting } from '@murmur/shared';
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
  };
}
