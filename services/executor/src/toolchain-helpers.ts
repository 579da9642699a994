import { spawnSync } from 'node:child_process';
import { realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import type { CapabilityPolicy, Containment } from '@murmur/shared';
import { SYSTEM_DIRECTORIES } from './sandbox.js';

/**
 * Whether a compiler driver in `shell.allow` can *compile* inside a sealed composed root, or only
 * start (`W-SEC-012`).
 *
 * A sealed sandbox grants execute on each allowlisted binary and its ELF closure, and binds the
 * system's directories read-only and listable but never executable. A compiler driver execs
 * helpers (`cc1`, `as`, `ld`, …) that sit under `/usr` without the execute right, so `cc
 * --version` works and the first real compile does not. The helpers are found by asking the
 * driver (`-print-prog-name`), which only the GCC family answers: a warning, never a refusal.
 * Applies only to a declared `sealed` floor: below it the host's filesystem is the host's.
 *
 * Upstream's sibling check, `E-CAP-006` (an allowlisted `#!` script bound into the root without
 * its interpreter's packages), has no counterpart: this composed root never binds the directory
 * of an allowlisted script — only the system directories and the declared runtime grants — so
 * the sandbox resolves every `shell.allow` name inside those, where the condition cannot arise.
 */

type ShellGrants = Pick<CapabilityPolicy, 'shell_allow' | 'interpreter_runtime' | 'staged_runtime'>;

/** Drivers whose real work is done by helpers they exec, and the helpers to ask each about. */
const TOOLCHAIN_DRIVERS: ReadonlyMap<string, readonly string[]> = new Map([
  ['cc', ['cc1', 'cc1plus', 'as', 'ld', 'collect2']],
  ['gcc', ['cc1', 'cc1plus', 'as', 'ld', 'collect2']],
  ['g++', ['cc1plus', 'as', 'ld', 'collect2']],
  ['c++', ['cc1plus', 'as', 'ld', 'collect2']],
]);

export interface ToolchainHelperGap {
  driver: string;
  helper: string;
  resolvedPath: string;
}

/** The `PATH` directories, split as `execvp` splits them. */
export function pathDirectories(pathVariable: string | undefined = process.env.PATH): string[] {
  return (pathVariable ?? '').split(':').filter((dir) => dir !== '');
}

function isExecutableFile(file: string): boolean {
  try {
    const status = statSync(file);
    return status.isFile() && (status.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}

/** Where an allowlisted name runs from: the first executable match on `PATH`, canonical; undefined when nothing does. */
export function resolveInvokedBinary(binary: string, pathDirs: readonly string[]): string | undefined {
  if (binary === '') return undefined;
  const candidates = binary.includes('/') ? [binary] : pathDirs.map((dir) => path.join(dir, binary));
  for (const candidate of candidates) {
    if (!isExecutableFile(candidate)) continue;
    try {
      return realpathSync(candidate);
    } catch {
      // vanished between the checks: not a match
    }
  }
  return undefined;
}

/** Component-wise, so `/usrlocal/bin` is not under `/usr`. */
function underAny(file: string, roots: readonly string[]): boolean {
  return roots.some((root) => file === root || file.startsWith(root.endsWith('/') ? root : `${root}/`));
}

/** Every host directory a grant already binds with the execute right: a helper under one is covered. */
function declaredGrantDirs(policy: ShellGrants): string[] {
  return [
    ...policy.staged_runtime.map((grant) => grant.source_path),
    ...policy.interpreter_runtime.flatMap((grant) => grant.dirs.map((dir) => dir.path)),
  ].filter((dir) => path.isAbsolute(dir));
}

/**
 * Where the driver says it finds `helper` (`-print-prog-name`): an absolute path, or the name
 * itself meaning "on PATH". Anything else — a driver that does not know the flag — is no answer.
 */
function helperPath(driver: string, helper: string, pathDirs: readonly string[]): string | undefined {
  // Asked once per executor: a launch asks (`W-SEC-012`), and each answer is a process the launch
  // would wait for on the event loop every session shares.
  const key = `${driver}\0${helper}\0${pathDirs.join(':')}`;
  if (!helperPaths.has(key)) helperPaths.set(key, askHelperPath(driver, helper, pathDirs));
  return helperPaths.get(key);
}

const helperPaths = new Map<string, string | undefined>();

function askHelperPath(driver: string, helper: string, pathDirs: readonly string[]): string | undefined {
  const result = spawnSync(driver, [`-print-prog-name=${helper}`], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 });
  if (result.error || result.status !== 0) return undefined;
  const printed = result.stdout.toString('utf8').trim();
  if (printed === '') return undefined;
  const candidate = printed === helper ? resolveInvokedBinary(helper, pathDirs) : printed;
  if (candidate === undefined || !path.isAbsolute(candidate)) return undefined;
  try {
    return realpathSync(candidate);
  } catch {
    return undefined;
  }
}

/** The compiler drivers' helpers that would have no execute grant in a sealed root. */
export function toolchainHelperGaps(policy: ShellGrants, floor: Containment, pathDirs: readonly string[] = pathDirectories()): ToolchainHelperGap[] {
  if (floor !== 'sealed') return [];
  const declaredDirs = declaredGrantDirs(policy);
  const allowlisted = new Set(policy.shell_allow.flatMap((entry) => resolveInvokedBinary(entry, pathDirs) ?? []));
  const gaps: ToolchainHelperGap[] = [];
  for (const driver of policy.shell_allow) {
    const helpers = TOOLCHAIN_DRIVERS.get(path.basename(driver));
    const driverPath = helpers ? resolveInvokedBinary(driver, pathDirs) : undefined;
    if (!helpers || driverPath === undefined) continue;
    for (const helper of helpers) {
      const resolvedPath = helperPath(driverPath, helper, pathDirs);
      if (resolvedPath === undefined) continue;
      if (underAny(resolvedPath, declaredDirs) || policy.shell_allow.includes(helper) || allowlisted.has(resolvedPath)) continue;
      // An entry allowlisted twice reports each helper once.
      if (!gaps.some((gap) => gap.driver === driver && gap.helper === helper && gap.resolvedPath === resolvedPath)) gaps.push({ driver, helper, resolvedPath });
    }
  }
  return gaps;
}

/** `W-SEC-012`'s sentence for one gap, upstream's words. */
export function toolchainHelperWarning(gap: ToolchainHelperGap): string {
  return `capabilities.shell.allow grants the compiler driver '${gap.driver}', but its helper '${gap.helper}' at ${gap.resolvedPath} has no grant carrying the Landlock Execute right under the 'sealed' composed root — the fixed sealed runtime tree (${SYSTEM_DIRECTORIES.join(', ')}) is bound read-only and listable but deliberately not executable, so the driver will start and then fail partway through a real compile; declare capabilities.shell.interpreter_runtime or staged_runtime for '${gap.driver}' naming that helper's directory (${path.dirname(gap.resolvedPath)}) to grant it`;
}
