import { numberSetting } from '@murmur/shared';

/**
 * The executor's numbers from its environment, read once when it starts: a malformed one refuses
 * the start (`E-CFG-003`, naming the variable) instead of surfacing in the middle of a session — a
 * deadline's timer is no place to find out that `MURMUR_HARD_LIMIT_GRACE_MS` says `10s`.
 */
export interface ExecutorSettings {
  /** How long past its deadline a session may run before it is killed whole (`MURMUR_HARD_LIMIT_GRACE_MS`, 10 s). */
  hardLimitGraceMs: number;
  /** How long a child the model delegated to may run before its watcher ends it (`MURMUR_DELEGATION_DEADLINE_SECS`, 600). */
  delegationDeadlineSecs: number;
  /** How often a session's workdir is measured against its ceiling (`MURMUR_WORKDIR_CHECK_MS`, 10 s). */
  workdirCheckMs: number;
  /** The cap on one harness run (`MURMUR_HARNESS_RUN_CAP_SECS`, upstream's 10 minutes). */
  harnessRunCapMs: number;
}

export const DEFAULT_EXECUTOR_SETTINGS: ExecutorSettings = {
  hardLimitGraceMs: 10_000,
  delegationDeadlineSecs: 600,
  workdirCheckMs: 10_000,
  harnessRunCapMs: 10 * 60 * 1000,
};

export function executorSettings(env: NodeJS.ProcessEnv): ExecutorSettings {
  const defaults = DEFAULT_EXECUTOR_SETTINGS;
  return {
    hardLimitGraceMs: numberSetting(env, 'MURMUR_HARD_LIMIT_GRACE_MS', defaults.hardLimitGraceMs, { unit: 'milliseconds' }),
    delegationDeadlineSecs: numberSetting(env, 'MURMUR_DELEGATION_DEADLINE_SECS', defaults.delegationDeadlineSecs, { unit: 'seconds', fractional: true }),
    workdirCheckMs: numberSetting(env, 'MURMUR_WORKDIR_CHECK_MS', defaults.workdirCheckMs, { unit: 'milliseconds' }),
    harnessRunCapMs: Math.round(
      numberSetting(env, 'MURMUR_HARNESS_RUN_CAP_SECS', defaults.harnessRunCapMs / 1000, { unit: 'seconds', fractional: true }) * 1000,
    ),
  };
}
