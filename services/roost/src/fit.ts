import path from 'node:path';
import {
  type CapabilityPolicy,
  type Containment,
  CONTAINMENT_CLASSES,
  type NetworkAllowRule,
  type SpawnAxis,
  ceilingCovers,
  parseNetworkAllowRule,
  validateFilesystemScope,
} from '@murmur/shared';

/**
 * Whether one capability envelope fits inside another, axis by axis: what roost checks before it
 * approves a spawn (the child's manifest envelope inside the parent's reported one) and again when
 * a child registers (the envelope its runtime reports inside the one that was approved).
 *
 * - network: every child rule is covered by some ceiling rule (`ceilingCovers`: an unset scheme or
 *   port on the ceiling is a wildcard, never the other way round), and so is every rule of its
 *   hooks (`HookReach`); unix sockets only if the ceiling has them.
 * - filesystem: the child's scope equals the ceiling's or lies beneath it (`.` covers the whole
 *   workdir), compared component by component after `.`/`..` are folded; `workdir_exec` only if
 *   the ceiling has it.
 * - env: `env.allow` is a subset.
 * - shell: a harness (`inference.transport: process`) only under a ceiling that runs the same one
 *   (it is given its env's credentials, which a `shell.allow` subprocess is not); `shell.allow` and
 *   `baseline_env` are subsets; every pattern the ceiling strips
 *   (`strip_env`) the child strips too; an interpreter directory grant must be covered by one the
 *   ceiling gives the same binary (equal or beneath it, `list_dir` only if the ceiling lists);
 *   a staged runtime must be one the ceiling stages (same binary, source and pin).
 * - spawn: `spawn.allow` is a subset.
 * - limits: every `limits.*` and `resources.*` value is at most the ceiling's.
 * - containment: the child may not declare a weaker floor than the ceiling's
 *   (advisory < scoped < sealed): a parent that asked to be sealed cannot hand work to something
 *   content to run advisory.
 *
 * The first misfit is reported, naming its axis and the offending value.
 */
export interface Misfit {
  axis: SpawnAxis;
  reason: string;
}

/** Whose envelope is the ceiling, for messages: "the parent's", "the approved capsule's". */
export interface FitOptions {
  ceiling: string;
}

/** Folds `.` and `..` out of a workdir-relative scope; `[]` is the whole workdir. */
export function scopeComponents(scope: string): string[] {
  const valid = validateFilesystemScope(scope);
  const components: string[] = [];
  for (const component of valid.split(/[/\\]+/)) {
    if (component === '' || component === '.') continue;
    if (component === '..') components.pop();
    else components.push(component);
  }
  return components;
}

/** Whether `inner` is `outer` or beneath it. */
function componentsWithin(inner: readonly string[], outer: readonly string[]): boolean {
  return outer.length <= inner.length && outer.every((component, index) => inner[index] === component);
}

function hostPathWithin(inner: string, outer: string): boolean {
  const a = path.posix.normalize(inner).replace(/\/+$/, '') || '/';
  const b = path.posix.normalize(outer).replace(/\/+$/, '') || '/';
  return a === b || b === '/' || a.startsWith(`${b}/`);
}

function containmentRank(containment: Containment): number {
  return CONTAINMENT_CLASSES.indexOf(containment);
}

function parseRules(entries: readonly string[]): Array<{ entry: string; rule: NetworkAllowRule | undefined }> {
  return entries.map((entry) => {
    try {
      return { entry, rule: parseNetworkAllowRule(entry) };
    } catch {
      return { entry, rule: undefined };
    }
  });
}

/** The first of `entries` that no rule of `ceiling` covers, and whether it is a rule at all. */
function firstUncovered(entries: readonly string[], ceiling: readonly string[]): { entry: string; valid: boolean } | undefined {
  const ceilingRules = parseRules(ceiling)
    .map(({ rule }) => rule)
    .filter((rule): rule is NetworkAllowRule => rule !== undefined);
  for (const { entry, rule } of parseRules(entries)) {
    if (rule === undefined) return { entry, valid: false };
    if (!ceilingCovers(ceilingRules, rule)) return { entry, valid: true };
  }
  return undefined;
}

function checkNetwork(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  const uncovered = firstUncovered(child.network_allow, ceiling.network_allow);
  if (uncovered)
    return {
      axis: 'network',
      reason: uncovered.valid
        ? `network: child rule '${uncovered.entry}' is not covered by ${owner} capabilities.network.allow`
        : `network: child rule '${uncovered.entry}' is not a valid network rule, so nothing covers it`,
    };
  if (child.unix_sockets && !ceiling.unix_sockets) {
    return { axis: 'network', reason: `network: child asks for capabilities.network.unix_sockets, which ${owner} capabilities do not grant` };
  }
  return undefined;
}

function checkFilesystem(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  let childScope: string[];
  let ceilingScope: string[];
  try {
    childScope = scopeComponents(child.filesystem_scope);
  } catch {
    return { axis: 'filesystem', reason: `filesystem: child scope '${child.filesystem_scope}' is not a valid workdir-relative scope` };
  }
  try {
    ceilingScope = scopeComponents(ceiling.filesystem_scope);
  } catch {
    return {
      axis: 'filesystem',
      reason: `filesystem: ${owner} scope '${ceiling.filesystem_scope}' is not a valid workdir-relative scope, so it covers nothing`,
    };
  }
  if (!componentsWithin(childScope, ceilingScope)) {
    return {
      axis: 'filesystem',
      reason: `filesystem: child scope '${child.filesystem_scope}' is not within ${owner} capabilities.filesystem.scope '${ceiling.filesystem_scope}'`,
    };
  }
  if (child.workdir_exec && !ceiling.workdir_exec) {
    return { axis: 'filesystem', reason: `filesystem: child asks for capabilities.filesystem.workdir_exec, which ${owner} capabilities do not grant` };
  }
  return undefined;
}

function missing(childList: readonly string[], ceilingList: readonly string[]): string | undefined {
  const allowed = new Set(ceilingList);
  return childList.find((entry) => !allowed.has(entry));
}

function checkEnv(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  const extra = missing(child.env_allow, ceiling.env_allow);
  if (extra !== undefined) return { axis: 'env', reason: `env: child variable '${extra}' is not in ${owner} capabilities.env.allow` };
  return undefined;
}

function checkShell(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  // A harness is a host program the child starts, given the credentials of its env.allow (a
  // subprocess of shell.allow is given none): only a ceiling that runs the same harness has as much.
  const harness = child.harness_command;
  if (harness !== undefined && harness !== ceiling.harness_command) {
    return {
      axis: 'shell',
      reason: `shell: child runs its inference as the host program '${harness}' (inference.transport: process), which ${owner} capabilities do not run as their own harness`,
    };
  }
  const binary = missing(child.shell_allow, ceiling.shell_allow);
  if (binary !== undefined) return { axis: 'shell', reason: `shell: child binary '${binary}' is not in ${owner} capabilities.shell.allow` };
  const baseline = missing(child.shell_baseline_env, ceiling.shell_baseline_env);
  if (baseline !== undefined)
    return { axis: 'shell', reason: `shell: child passes '${baseline}' to subprocesses, which is not in ${owner} capabilities.shell.baseline_env` };
  const unstripped = missing(ceiling.shell_strip_env, child.shell_strip_env);
  if (unstripped !== undefined)
    return { axis: 'shell', reason: `shell: child does not strip '${unstripped}', which ${owner} capabilities.shell.strip_env strips` };
  for (const grant of child.interpreter_runtime) {
    const ceilingDirs = ceiling.interpreter_runtime.filter((candidate) => candidate.binary === grant.binary).flatMap((candidate) => candidate.dirs);
    for (const dir of grant.dirs) {
      const covered = ceilingDirs.some((outer) => hostPathWithin(dir.path, outer.path) && (outer.list_dir || !dir.list_dir));
      if (!covered) {
        return {
          axis: 'shell',
          reason: `shell: child grants '${grant.binary}' ${dir.list_dir ? 'listing of' : 'access to'} '${dir.path}', which ${owner} capabilities.shell.interpreter_runtime does not`,
        };
      }
    }
  }
  for (const grant of child.staged_runtime) {
    const staged = ceiling.staged_runtime.some(
      (candidate) => candidate.binary === grant.binary && candidate.source_path === grant.source_path && candidate.pin === grant.pin,
    );
    if (!staged) {
      return {
        axis: 'shell',
        reason: `shell: child stages '${grant.binary}' from '${grant.source_path}' (pin '${grant.pin}'), which ${owner} capabilities.shell.staged_runtime does not`,
      };
    }
  }
  return undefined;
}

function checkSpawn(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  const extra = missing(child.spawn_allow, ceiling.spawn_allow);
  if (extra !== undefined) return { axis: 'spawn', reason: `spawn: child may spawn '${extra}', which is not in ${owner} capabilities.spawn.allow` };
  return undefined;
}

function checkLimits(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  for (const group of ['limits', 'resources'] as const) {
    const ceilingValues = ceiling[group] as Record<string, number>;
    for (const [name, value] of Object.entries(child[group] as Record<string, number>)) {
      const bound = ceilingValues[name];
      if (bound !== undefined && value > bound) {
        return { axis: 'limits', reason: `limits: child capabilities.${group}.${name} ${value} exceeds ${owner} ${bound}` };
      }
    }
  }
  return undefined;
}

function checkContainment(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  if (containmentRank(child.containment) < containmentRank(ceiling.containment)) {
    return { axis: 'containment', reason: `containment: child declares '${child.containment}', a weaker floor than ${owner} '${ceiling.containment}'` };
  }
  return undefined;
}

const CHECKS: ReadonlyArray<(child: CapabilityPolicy, ceiling: CapabilityPolicy, owner: string) => Misfit | undefined> = [
  checkNetwork,
  checkFilesystem,
  checkEnv,
  checkShell,
  checkSpawn,
  checkLimits,
  checkContainment,
];

/**
 * A hook's own network rules (its entry's `capabilities.network.allow`). A hook is given exactly
 * these when it runs (upstream's §1.4: it inherits nothing, so nothing narrows it), so they are a
 * child's reach as much as its capsule-wide rules are, and are held to the ceiling the same way.
 */
export interface HookReach {
  hook: string;
  allow: readonly string[];
}

/** The hooks' rules of a capsule manifest's artifacts: what `findMisfit` checks besides its envelope. */
export function hookReachOf(artifacts: ReadonlyArray<{ name: string; runtime: string; capabilities?: { network?: { allow?: string[] } } }>): HookReach[] {
  return artifacts
    .filter((artifact) => artifact.runtime === 'hook' && (artifact.capabilities?.network?.allow?.length ?? 0) > 0)
    .map((artifact) => ({ hook: artifact.name, allow: artifact.capabilities?.network?.allow ?? [] }));
}

function checkHooks(hooks: readonly HookReach[], ceiling: CapabilityPolicy, owner: string): Misfit | undefined {
  for (const { hook, allow } of hooks) {
    const uncovered = firstUncovered(allow, ceiling.network_allow);
    if (uncovered)
      return {
        axis: 'network',
        reason: `network: hook '${hook}' rule '${uncovered.entry}' is not covered by ${owner} capabilities.network.allow (a hook is given exactly its own rules, which nothing narrows)`,
      };
  }
  return undefined;
}

/** The first axis on which `child` (and its hooks' rules) does not fit inside `ceiling`, or undefined when it fits. */
export function findMisfit(
  child: CapabilityPolicy,
  ceiling: CapabilityPolicy,
  options: FitOptions = { ceiling: "the parent's" },
  hooks: readonly HookReach[] = [],
): Misfit | undefined {
  for (const check of CHECKS) {
    const misfit = check(child, ceiling, options.ceiling);
    if (misfit) return misfit;
  }
  return checkHooks(hooks, ceiling, options.ceiling);
}
