import { statSync } from 'node:fs';
import path from 'node:path';
import type { StagedPlan } from '@murmur/shared';
import { environmentWithEnvFile } from '../env-file.js';
import { type Output, UsageError, formatBytes, oneLine } from '../output.js';
import { terminalProgress } from '../progress.js';
import { findProjectRoot } from '../project.js';
import { openRuntime } from '../runtime.js';
import { type CliStageSource, stageThroughBus } from '../staging.js';
import { STOP_SIGNALS } from '../stop-signals.js';

export interface StageOptions {
  capsule?: string;
  capsuleVersion?: string;
  json?: boolean;
  verbose?: boolean;
  /** False for `--no-env-file`: the project's `.env` is not read. */
  envFile?: boolean;
}

function stageSourceFor(directory: string | undefined, options: StageOptions): CliStageSource {
  for (const [flag, value] of [
    ['--capsule', options.capsule],
    ['--capsule-version', options.capsuleVersion],
  ] as const) {
    if (value !== undefined && value.trim() === '')
      throw new UsageError(`${flag} is empty`, {
        path: flag,
        hint: 'e.g. mur stage --capsule hello --capsule-version 0.1.0, or mur stage <dir> for a project',
      });
  }
  if (options.capsule !== undefined) {
    if (!options.capsuleVersion) throw new UsageError('--capsule needs --capsule-version', { hint: 'e.g. mur stage --capsule hello --capsule-version 0.1.0' });
    if (directory !== undefined)
      throw new UsageError(`a directory ('${directory}') and --capsule each name the capsule to stage: give one`, {
        path: '--capsule',
        hint: `mur stage ${directory} stages a project; mur stage --capsule ${options.capsule} --capsule-version ${options.capsuleVersion} an installed capsule`,
      });
    return { kind: 'registry', name: options.capsule, version: options.capsuleVersion, projectDir: findProjectRoot() ?? process.cwd() };
  }
  // Alone it would be ignored, and the project here staged instead of the capsule meant.
  if (options.capsuleVersion !== undefined)
    throw new UsageError('--capsule-version needs --capsule', {
      path: '--capsule-version',
      hint: `e.g. mur stage --capsule <name> --capsule-version ${options.capsuleVersion}`,
    });
  return { kind: 'directory', dir: path.resolve(directory ?? '.') };
}

/**
 * `mur stage [dir]`: resolve, verify and transpile a capsule, and say what was staged.
 *
 * The names a manifest's `${VAR}`s may use are `mur run`'s: the environment and the project's
 * `.env`, so staging never refuses what a run takes. In-process, an interrupt is held until the
 * staging under way has ended — the stager then removes its scratch copy of the project, which an
 * exit at once would leave in the cache — and the command exits 130; a second one leaves at once.
 */
export async function stageCommand(directory: string | undefined, options: StageOptions, output: Output): Promise<number> {
  const source = stageSourceFor(directory, options);
  // What is no directory is the stager's to refuse, by what it is, not a .env's to fail on beneath it.
  const projectDir =
    source.kind === 'directory' ? (statSync(source.dir, { throwIfNoEntry: false })?.isDirectory() ? source.dir : undefined) : source.projectDir;
  const env = environmentWithEnvFile(options.envFile === false ? undefined : projectDir);
  const progress = terminalProgress(output);
  let heldSignal: NodeJS.Signals | undefined;
  const holdSignal = (signal: NodeJS.Signals): void => {
    if (heldSignal) process.exit(130);
    heldSignal = signal;
    progress.stop();
    output.err(`mur: ${signal}: stopping once the staging under way has ended and cleaned up after itself (again to leave at once)`);
  };
  const runtime = await openRuntime(options.verbose === undefined ? {} : { verbose: options.verbose });
  // Against a stack the stager cleans up whatever becomes of this process: nothing to wait for.
  if (runtime.inProcess) for (const signal of STOP_SIGNALS) process.on(signal, holdSignal);
  try {
    const plan = await stageThroughBus(runtime.bus, source, { env_names: Object.keys(env) }, progress.report);
    if (heldSignal) return 130;
    for (const warning of plan.warnings) output.warn(warning);
    if (options.json) output.out(JSON.stringify(plan));
    else for (const line of describePlan(plan)) output.out(line);
    return 0;
  } catch (error) {
    if (heldSignal) return 130;
    throw error;
  } finally {
    progress.stop();
    await runtime.close();
    for (const signal of STOP_SIGNALS) process.off(signal, holdSignal);
  }
}

function shortSha(sha256: string | undefined): string {
  return sha256 ? sha256.slice(0, 12) : '-';
}

export function describePlan(plan: StagedPlan): string[] {
  const { capsule, policy } = plan;
  const lines = [`staged ${capsule.name}@${capsule.version} (${capsule.kind} capsule) in ${Math.round(plan.stats.duration_ms)} ms`];
  lines.push(
    `  from:       ${capsule.origin.kind === 'project' ? `the project '${capsule.origin.label}' (uploaded as ${shortSha(capsule.origin.digest)})` : `${capsule.origin.name}@${capsule.origin.version} (${capsule.origin.origin} store)`}`,
  );
  if (capsule.component) {
    const component = capsule.component;
    lines.push(`  component:  ${formatBytes(component.size_bytes)}, sha256 ${shortSha(component.sha256)}, ${component.cache_hit ? 'cache hit' : 'transpiled'}`);
    lines.push(`              bundle ${component.bundle.key} (${component.bundle.files.length} files)`);
  }
  lines.push(`  artifacts:  ${plan.artifacts.length === 0 ? 'none' : ''}`.trimEnd());
  for (const artifact of plan.artifacts) {
    const component = artifact.component ? `, ${artifact.component.cache_hit ? 'cache hit' : 'transpiled'}` : '';
    lines.push(
      `    ${artifact.name}@${artifact.version}  ${artifact.role}/${artifact.packaging}  from ${artifact.origin}  sha256 ${shortSha(artifact.sha256)}${component}`,
    );
  }
  lines.push(`  network:    ${policy.network_allow.length === 0 ? 'none' : policy.network_allow.join(', ')}`);
  lines.push(`  env:        ${policy.env_allow.length === 0 ? 'none' : policy.env_allow.join(', ')}`);
  lines.push(`  shell:      ${policy.shell_allow.length === 0 ? 'none' : policy.shell_allow.join(', ')}`);
  lines.push(`  filesystem: ${policy.filesystem_scope === '.' ? 'the whole workdir' : policy.filesystem_scope}`);
  lines.push(`  limits:     deadline ${policy.limits.deadline_seconds}s, memory ${formatBytes(policy.limits.memory_bytes)}`);
  lines.push(`  lifecycle:  ${plan.lifecycle.task_acceptance}/${plan.lifecycle.after_task}`);
  const lock = plan.lock;
  lines.push(
    `  lock:       ${lock.status === 'honoured' ? 'honoured (murmur.lock)' : lock.status === 'absent' ? `none yet; a first run pins ${lock.entries.length} artifact${lock.entries.length === 1 ? '' : 's'}` : 'not applicable (staged from a registry)'}`,
  );
  // Each line quotes the capsule's own words (its grants, its names): one line each, whatever they hold.
  return lines.map(oneLine);
}
