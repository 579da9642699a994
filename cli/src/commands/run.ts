import { existsSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';
import {
  CONTAINMENT_CLASSES,
  type CapabilityPolicy,
  type Containment,
  LOCKFILE_NAME,
  type LaunchReply,
  type LaunchRequestSchema,
  type LifecycleOverride,
  type SessionEnded,
  LifecycleOverrideSchema,
  MurmurError,
  capabilityPolicy,
  declaredArtifactGrants,
  stagingPostureWarnings,
  commands,
  executorLostSetting,
  newSessionId,
  parseCapsuleManifest,
  spawnerHandleFromEnv,
  topics,
  upsertLockEntry,
  numberSetting,
  isLoopbackName,
  hostHeaderName,
  isSafeContextId,
  SAFE_CONTEXT_ID_RULE,
  RUNTIME_VERSION,
  type StagedPlan,
  unenforcedForTools,
  WATCHER_BUCKET,
  lostSessionKey,
  sessionLostWithExecutor,
  executorLostAfterMs,
} from '@murmur/shared';
import { type Bus, busRoundTrip } from '@murmur/shared/bus';
import type { z } from 'zod';
import { pinFirstRun, readLockfile, withLockfileTurn, writeLockfile } from '@murmur/shared/artifacts';
import { hasControllingTerminal, locateHarness, readManifestTextSync, resolvedPath, systemFailureCode, systemFailureHint } from '@murmur/shared/node';
import { environmentWithEnvFile } from '../env-file.js';
import { type Output, TerminalSafeStream, UsageError, oneLine } from '../output.js';
import { OUTPUT_PENDING_MAX_BYTES, OutputRelay } from '../output-relay.js';
import { terminalProgress } from '../progress.js';
import { findProjectRoot } from '../project.js';
import { busClosedError, openRuntime } from '../runtime.js';
import { FETCHED_FILE_MAX_BYTES, fetchSessionFile } from '../session-files.js';
import { launchEnvironment, sessionDoor, watchSessionEnd } from '../session-launch.js';
import { type CliStageSource, stageThroughBus, uploadStageSource } from '../staging.js';
import { configuredContainment } from '../workspace-config.js';
import { STOP_SIGNALS } from '../stop-signals.js';
import { readTaskFile } from '../task-file.js';

export interface RunOptions {
  manifest?: string;
  capsule?: string;
  capsuleVersion?: string;
  workdir?: string;
  task?: string;
  json?: boolean;
  envFile?: boolean;
  verbose?: boolean;
  bind?: string;
  systemPrompt?: string;
  context?: string;
  resume?: string;
  forgetSession?: boolean;
  lifecycleTaskAcceptance?: string;
  lifecycleAfterTask?: string;
  containment?: string;
  explainScope?: boolean;
}

const LAUNCH_TIMEOUT_MS = 60_000;

/**
 * `--task`: a file's content when it names a file, else the text itself. Something that is there
 * but is not a file it can read (a directory, a file it may not read, one too large to launch) is
 * refused: running its path as the task would be a run nobody meant.
 */
function taskText(task: string | undefined, output: Output): string | undefined {
  if (task === undefined) return undefined;
  let stat: ReturnType<typeof statSync>;
  try {
    stat = statSync(task, { throwIfNoEntry: false });
  } catch {
    // A name that cannot even be looked up (too long, a file where a directory would be) names no file here.
    stat = undefined;
  }
  if (stat === undefined) {
    // Upstream's rule (a file is copied, anything else is the text) turns a mistyped path into a
    // task that reads as that path: said, so the run is not taken for the one meant.
    if (looksLikeAPath(task)) output.err(`warning: --task '${task}' is not a file here, so the task is that text as written`);
    return task;
  }
  return readTaskFile(task, `--task '${task}'`, 'name a file whose content is the task, or give the task itself as text');
}

/**
 * `--bind`: an address or a host name to listen on. An empty one, or a bare number (`0`, which
 * the resolver reads as 0.0.0.0), would put the door on every interface without saying so, and
 * what is no name at all (`not an address`) would pass for one beyond loopback until the door
 * failed to listen. Refused before anything else is done.
 */
function refuseBind(bind: string): void {
  // An address and a port together would be looked up as a host name, and fail as one.
  if (/^(\[[^\]]*\]|[^:]+):\d+$/.test(bind))
    throw new UsageError(`--bind takes an address, not an address and a port: '${bind}'`, {
      path: '--bind',
      hint: "e.g. --bind 127.0.0.1; the door's port is the manifest's network.internal_port (unset or 0: any free port)",
    });
  const name = bind.trim().replace(/^\[(.*)\]$/, '$1');
  // A host name is one a `Host` header would name as written: no space, path, user or port in it.
  if (name === '' || (isIP(name) === 0 && (/^[\d.]+$/.test(name) || hostHeaderName(name) !== name.toLowerCase())))
    throw new UsageError(`--bind takes an IP address or a host name: '${bind}' is ${name === '' ? 'empty' : 'neither'}`, {
      path: '--bind',
      hint: 'e.g. --bind 127.0.0.1 (the default); --bind 0.0.0.0 listens on every interface, when that is meant',
    });
}

/**
 * What a given `--bind` comes to, said once the capsule is staged and its kind known: nothing for
 * a script capsule, which has no door, nor against a stack, whose doors listen where they were
 * started; a door beyond loopback, which without MURMUR_DOOR_AUTH answers whoever reaches it.
 */
function warnOfBind(bind: string | undefined, plan: StagedPlan, inProcess: boolean, output: Output): void {
  if (bind === undefined) return;
  if (plan.capsule.kind !== 'agent') {
    output.err(`warning: --bind changes nothing here: ${plan.capsule.name} is a script capsule (no inference:), which has no door`);
    return;
  }
  if (!inProcess) {
    output.err(
      "warning: --bind changes nothing against a stack: the session is served by the stack's doors, which listen where they were started (MURMUR_DOOR_HOST)",
    );
    return;
  }
  const name = bind.trim().replace(/^\[(.*)\]$/, '$1');
  if (!isLoopbackName(isIP(name) === 6 ? `[${name}]` : name) && !process.env.MURMUR_DOOR_AUTH?.trim())
    output.err(`warning: --bind ${bind} puts the session's door beyond this machine's loopback, and without MURMUR_DOOR_AUTH it answers whoever reaches it`);
}

/** One word that names a file or a directory: a path's start (`./`, `../`, `/`, `~/`), or a task file's ending. */
function looksLikeAPath(text: string): boolean {
  return !/\s/.test(text) && (/^(\.{1,2}\/|\/|~\/)/.test(text) || /\.(md|txt|markdown)$/i.test(text));
}

function lifecycleOverride(options: RunOptions): LifecycleOverride | undefined {
  const flags = {
    task_acceptance: ['--lifecycle-task-acceptance', options.lifecycleTaskAcceptance],
    after_task: ['--lifecycle-after-task', options.lifecycleAfterTask],
  } as const;
  const override: Record<string, string> = {};
  for (const [field, [flag, value]] of Object.entries(flags)) {
    if (value === undefined) continue;
    // Said here, naming the flag, rather than by the bus as a payload that breaks its contract.
    const modes = LifecycleOverrideSchema.shape[field as keyof typeof flags].unwrap().options;
    if (!(modes as readonly string[]).includes(value)) {
      throw new UsageError(`${flag} must be one of: ${modes.join(', ')}; got '${value}'`, {
        path: flag,
        hint: `e.g. mur run ${flag} ${modes[0]}`,
      });
    }
    override[field] = value;
  }
  return Object.keys(override).length > 0 ? (override as LifecycleOverride) : undefined;
}

/** How often, and how far apart, a run back on its bus asks its session's executor how the session stands. */
const END_ASK_ATTEMPTS = 30;
const END_ASK_PAUSE_MS = 1_000;

/** `MURMUR_TIMING=1`: where a run's start-up time goes, on stderr. */
function timing(label: string): void {
  if (process.env.MURMUR_TIMING) process.stderr.write(`[timing] ${label} ${performance.now().toFixed(0)}ms\n`);
}

/** `--containment`: one of the classes, said the way upstream says it when it is not. */
function flagContainment(value: string | undefined): Containment | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (!(CONTAINMENT_CLASSES as readonly string[]).includes(trimmed)) {
    throw new UsageError(`--containment must be one of: ${CONTAINMENT_CLASSES.join(', ')}; got '${value}'`, {
      path: '--containment',
      hint: 'e.g. mur run --containment sealed',
    });
  }
  return trimmed as Containment;
}

/** What an executor would give this policy: the trace's `effective_grants`, exactly. */
async function explainScope(bus: Bus, policy: CapabilityPolicy, floor: Containment | undefined): Promise<Record<string, unknown>> {
  const reply = await bus.request(commands.explainScope, { policy, ...(floor ? { containment_floor: floor } : {}) }, { timeoutMs: 10_000 });
  return reply.effective_grants;
}

/** `--explain-scope`'s report, upstream's layout. */
function scopeReport(grants: Record<string, unknown>): string {
  const list = (label: string, values: unknown): string[] => {
    const entries = Array.isArray(values) ? values.map(String) : [];
    return entries.length === 0 ? [`  ${label}: <none>`] : [`  ${label}:`, ...entries.map((entry) => `    - ${entry}`)];
  };
  const met = grants.floor_met === true;
  const lines = [
    'Containment',
    `  declared:  ${String(grants.declared_containment)}`,
    `  achieved:  ${String(grants.achieved_containment)}`,
    `  floor met: ${met ? 'yes' : 'no'}`,
    ...(met ? [] : [`  reason:    ${String(grants.shortfall_reason)}`]),
    `  mechanism: ${String(grants.enforcement_tier)}`,
    '',
    'Effective grants',
    `  filesystem scope: ${grants.filesystem_scope === null || grants.filesystem_scope === undefined ? '<none>' : String(grants.filesystem_scope)}`,
    `  workdir exec:     ${String(grants.workdir_exec)}`,
    ...list('network allow', grants.network_allow),
    `  unix sockets:     ${String(grants.unix_sockets)}`,
    ...list('shell allow', grants.shell_allow),
    ...list('spawn allow', grants.spawn_allow),
    ...list('env allow', grants.env_allow),
    ...list('interpreter runtime', grants.interpreter_runtime_grants),
    ...list('staged runtime', grants.staged_runtime_grants),
  ];
  const spawns = Array.isArray(grants.shell_allow) && grants.shell_allow.length > 0;
  const unenforced = spawns ? unenforcedForTools(String(grants.enforcement_tier), { workdir_exec: grants.workdir_exec === true }) : [];
  if (unenforced.length > 0) lines.push('', 'Not enforced here for subprocesses (shell and native tools)', ...unenforced.map((gap) => `  - ${gap}`));
  if (!met) lines.push('', 'This is a report only — `mur run` without --explain-scope would refuse to launch here.');
  // What an operator reviews an untrusted capsule by: its grants are its own words, one line each.
  return lines.map(oneLine).join('\n');
}

/**
 * A `--workdir` that holds the project (the directory itself, or one above it) hands the capsule
 * the project's own files to read and rewrite — its `.env`, `murmur.yaml`, `murmur.lock`. That may
 * be meant (an agent set to work on the project), so it is said, not refused.
 */
function warnOfProjectInWorkdir(workdir: string, projectDir: string, output: Output): void {
  const relative = path.relative(resolvedPath(workdir), resolvedPath(projectDir));
  if (relative.startsWith('..') || path.isAbsolute(relative)) return;
  output.err(
    `warning: --workdir ${workdir} holds the project ${projectDir}: the capsule can read and change its files (.env, murmur.yaml, murmur.lock among them)`,
  );
}

/** `mur_version`: a manifest written for another mur is run all the same, said once (upstream: a warning only). */
function warnOfMurVersion(wanted: string | undefined, output: Output): void {
  if (wanted === undefined || wanted.trim() === '' || wanted.trim() === RUNTIME_VERSION) return;
  output.err(`warning: murmur.yaml names mur_version ${oneLine(wanted.trim())}, and this is mur ${RUNTIME_VERSION}; running it with this one`);
}

/** `-v` for an agent, as upstream prints it: what answers its turns, and how many skills it was given. */
function agentLines(plan: StagedPlan): string[] {
  const inference = plan.capsule.manifest.inference;
  if (plan.capsule.kind !== 'agent' || !inference) return [];
  const model = inference.model ?? 'no model named';
  const driver = inference.transport === 'process' ? `${inference.command ?? ''} process (${model})` : `${inference.driver?.artifact ?? 'none'} (${model})`;
  const skills = plan.artifacts.filter((artifact) => artifact.role === 'skill').length;
  return [`driver: ${oneLine(driver)}`, `skills: ${skills} installed`];
}

/** `--system-prompt` replaces an agent's prompt; a capsule without `inference:` has none, so the flag is refused (upstream's words). */
function refuseSystemPromptWithoutInference(options: RunOptions, manifest: { inference?: unknown }): void {
  if (options.systemPrompt === undefined || manifest.inference !== undefined) return;
  throw new MurmurError('E-IO-003', '--system-prompt requires an agent capsule: this manifest has no inference: block', {
    hint: 'add an inference: block to murmur.yaml, or drop --system-prompt',
    path: '--system-prompt',
  });
}

/**
 * `mur run`: stage a capsule, launch it in an executor, and wait for it to end.
 *
 * Output as upstream: `session: <id>` (and `workdir:` with `-v`) when it starts, the capsule's own
 * output while it runs, and last `status:  ok|failed|trapped`; exit 0 only for ok. A run stopped by
 * its own interrupt says `status:  stopped` for the failure it caused, and exits 130. With `--json`
 * stdout carries exactly one line, the launch line, and nothing else.
 */
export async function runCommand(options: RunOptions, output: Output): Promise<number> {
  timing('run command loaded');
  const flagFloor = flagContainment(options.containment);
  // The declared floor is the strongest of the manifest's, the workspace config's and the flag's.
  const floors = [...configuredContainment(process.env, process.cwd()).map((entry) => entry.containment), ...(flagFloor ? [flagFloor] : [])];
  const floor = floors.reduce<Containment | undefined>(
    (strongest, next) => (strongest === undefined || CONTAINMENT_CLASSES.indexOf(next) > CONTAINMENT_CLASSES.indexOf(strongest) ? next : strongest),
    undefined,
  );
  if (options.forgetSession && options.context === undefined && options.resume === undefined)
    throw new UsageError('--forget-session needs the context whose harness session to forget', {
      path: '--forget-session',
      hint: 'e.g. mur run --forget-session --context <id>',
    });
  const fromRegistry = options.capsule !== undefined;
  if (fromRegistry && !options.capsuleVersion)
    throw new UsageError('--capsule needs --capsule-version', { hint: 'e.g. mur run --capsule hello --capsule-version 0.1.0' });
  if (options.bind !== undefined) refuseBind(options.bind);
  // Each pair names one thing twice: taking either would run what the other did not mean.
  if (fromRegistry && options.manifest !== undefined)
    throw new UsageError('--manifest and --capsule each name the capsule to run: give one', {
      path: '--manifest',
      hint: `mur run --manifest ${options.manifest} runs a project; mur run --capsule ${options.capsule} --capsule-version <v> runs an installed capsule`,
    });
  if (options.context !== undefined && options.resume !== undefined)
    throw new UsageError('--context and --resume each name the context of the task: give one', {
      path: '--resume',
      hint: '--resume <id> is --context <id> refused when no conversation is recorded for it',
    });
  for (const [flag, id] of [
    ['--context', options.context],
    ['--resume', options.resume],
  ] as const) {
    // Empty, it names no context at all (and the launch's contract refuses it after staging).
    if (id === '') throw new UsageError(`${flag} is empty`, { path: flag, hint: `name the context, e.g. mur run ${flag} support-42, or leave ${flag} out` });
    // Any other id runs, as upstream's (a context id that is no plain name costs its conversation
    // its file and nothing else), but not silently: the user meant it to be kept.
    if (id !== undefined && !isSafeContextId(id))
      output.err(`warning: ${flag} '${id.slice(0, 64)}' is not a plain name (${SAFE_CONTEXT_ID_RULE}), so no conversation is kept for it`);
  }
  // Alone it would be ignored, and the manifest here run instead of the capsule meant.
  if (!fromRegistry && options.capsuleVersion)
    throw new UsageError('--capsule-version needs --capsule', {
      hint: `e.g. mur run --capsule <name> --capsule-version ${options.capsuleVersion}`,
    });
  if (options.workdir !== undefined && options.workdir.trim() === '')
    throw new UsageError('--workdir is empty', {
      path: '--workdir',
      hint: 'name the directory the session works in, or leave --workdir out for a fresh one',
    });
  const manifestPath = path.resolve(options.manifest ?? 'murmur.yaml');
  if (!fromRegistry && !existsSync(manifestPath)) {
    throw new MurmurError(
      'E-IO-001',
      options.manifest === undefined ? `murmur.yaml not found at ${manifestPath}` : `the manifest --manifest names was not found: ${manifestPath}`,
      {
        hint: 'run mur run in a capsule directory, or pass --manifest <file> or --capsule <name> --capsule-version <v>',
      },
    );
  }
  if (!fromRegistry && statSync(manifestPath).isDirectory()) {
    throw new MurmurError(
      'E-IO-001',
      `${options.manifest === undefined ? 'murmur.yaml here is' : '--manifest names'} a directory, not a manifest: ${manifestPath}`,
      {
        hint: existsSync(path.join(manifestPath, 'murmur.yaml'))
          ? `pass the manifest in it: --manifest ${path.join(manifestPath, 'murmur.yaml')}`
          : 'pass the murmur.yaml file of the capsule to run',
      },
    );
  }
  const manifestDir = path.dirname(manifestPath);
  const projectDir = fromRegistry ? findProjectRoot() : manifestDir;
  if (options.workdir !== undefined && projectDir !== undefined) warnOfProjectInWorkdir(path.resolve(options.workdir), projectDir, output);
  const env = options.envFile === false ? environmentWithEnvFile(undefined) : environmentWithEnvFile(projectDir);
  const override = lifecycleOverride(options);
  // Read before anything is staged: a task file that is refused leaves nothing behind.
  const task = taskText(options.task, output);

  // A session launched under a spawner handle (a delegated child started as `mur run`) reports its
  // ending to that spawner. A handle that is set and unreadable refuses the run: work whose origin
  // and outcome reach nobody is not started.
  const spawner = spawnerHandleFromEnv(process.env);
  const progress = terminalProgress(output);
  const localBase = fromRegistry ? process.cwd() : manifestDir;
  // Until the session's own handler takes over after its launch, a signal is held rather than
  // left to its default, which ends mur at once and leaves the warm host's sandbox, its cgroups
  // and a running record behind: a run not yet launched then launches nothing, one being launched
  // is stopped as any interrupted session is, and everything is closed on the way out. A second
  // signal leaves at once.
  let heldSignal: NodeJS.Signals | undefined;
  const holdSignal = (signal: NodeJS.Signals): void => {
    if (heldSignal) process.exit(130);
    heldSignal = signal;
    output.err(`mur: ${signal}: stopping once what is under way is done, launching nothing new (again to leave at once)`);
  };
  // One listener per signal for the whole run, whose target changes: removing a signal's last
  // listener and adding another closes and reopens node's watcher of it, and a signal that came
  // in between was seen to be lost.
  let onStopSignal: (signal: NodeJS.Signals) => void = holdSignal;
  const stopSignalListener = (signal: NodeJS.Signals): void => onStopSignal(signal);
  for (const signal of STOP_SIGNALS) process.on(signal, stopSignalListener);
  // In-process, one host is started in its sandbox while the capsule is staged, for this run's
  // workdir: as the runtime opens, since its start is most of a run's wait. Not for a run that only
  // explains the scope, which launches nothing.
  const warmHostBase = options.workdir === undefined && !options.explainScope ? localBase : undefined;
  const runtime = await openRuntime({ executor: true, warmHostBase }).catch((error: unknown) => {
    for (const signal of STOP_SIGNALS) process.off(signal, stopSignalListener);
    throw error;
  });
  timing('runtime open');
  // The lock is the launcher's: only this machine holds the project it belongs to.
  const lockPath = fromRegistry ? undefined : path.join(manifestDir, LOCKFILE_NAME);
  const source: CliStageSource = fromRegistry
    ? { kind: 'registry', name: options.capsule as string, version: options.capsuleVersion as string, projectDir }
    : { kind: 'directory', dir: manifestDir, manifest: manifestPath };
  // The upload starts while the executor is asked about the scope (on the stack, a few round trips
  // each): it changes nothing anyone sees. A refusal that comes first still comes first; the
  // upload's own failure is reported when staging waits for it.
  const uploading = options.explainScope ? undefined : uploadStageSource(runtime.bus, source);
  uploading?.catch(() => {});
  try {
    // The containment floor is decided before anything is staged or written (upstream's order):
    // the grants come from the manifest alone, the achievable class from an executor.
    if (!fromRegistry) {
      // Named in refusals as the user named it: --manifest may name a file not called murmur.yaml.
      const parsed = parseCapsuleManifest(readManifestTextSync(manifestPath), { env, file: path.basename(manifestPath) });
      const { manifest } = parsed;
      // Upstream's order: the version warned of, the scope explained (and --explain-scope done), then the prompt refused.
      warnOfMurVersion(manifest.mur_version, output);
      const policy = capabilityPolicy(manifest);
      // A floor above advisory is the only thing here an executor can refuse: advisory, the lowest
      // class, is met on every host. A run that declares none does not pay a round trip to ask
      // (on a stack, ~6 ms of a WAT capsule's ~120); its launch checks the floor again anyway.
      const declaresFloor = [policy.containment, floor].some((declared) => declared !== undefined && declared !== 'advisory');
      const grants = options.explainScope || declaresFloor ? await explainScope(runtime.bus, policy, floor) : undefined;
      timing('scope explained');
      if (options.explainScope && grants) {
        // Staging, which says the manifest's warnings, does not happen here: what the manifest
        // alone shows is said now (a native tool is not known until its archive is read).
        for (const warning of [...parsed.warnings, ...stagingPostureWarnings(policy, declaredArtifactGrants(manifest))]) output.warn(warning);
        output.out(options.json ? JSON.stringify(grants) : scopeReport(grants));
        return 0;
      }
      refuseSystemPromptWithoutInference(options, manifest);
      if (grants && grants.floor_met !== true) {
        throw new MurmurError(
          'E-CAP-003',
          `declared containment class '${String(grants.declared_containment)}' is not achievable on this host (achieved: '${String(grants.achieved_containment)}'): ${String(grants.shortfall_reason)}`,
          {
            hint: `lower the declared floor to '${String(grants.achieved_containment)}' (capabilities.containment in murmur.yaml, containment in .murmur/config.yaml, or --containment), or run on a host that provides '${String(grants.declared_containment)}' — mur run --explain-scope shows what this host gives`,
            path: 'capabilities.containment',
          },
        );
      }
      // The harness must be there before anything is staged (upstream's order): a run that cannot
      // start its inference pulls and compiles nothing.
      if (manifest.inference?.transport === 'process' && manifest.inference.command) locateHarness(manifest.inference.command, env.PATH);
    }
    const plan = await stageThroughBus(
      runtime.bus,
      uploading ?? source,
      {
        env_names: Object.keys(env),
        honour_pins: true,
        system_prompt_overridden: options.systemPrompt !== undefined,
        ...(override ? { lifecycle_override: override } : {}),
      },
      progress.report,
    );
    progress.stop();
    timing('staged');
    if (options.explainScope) {
      const grants = await explainScope(runtime.bus, plan.policy, floor);
      output.out(options.json ? JSON.stringify(grants) : scopeReport(grants));
      return 0;
    }
    // A packaged capsule's manifest is known only now, still before anything is launched.
    if (fromRegistry) {
      warnOfMurVersion(plan.capsule.manifest.mur_version, output);
      refuseSystemPromptWithoutInference(options, plan.capsule.manifest);
    }
    // Held while staging (the runtime opening, the capsule staged): nothing is launched, nor pinned.
    if (heldSignal) return 130;
    for (const warning of plan.warnings) output.warn(warning);
    warnOfBind(options.bind, plan, runtime.inProcess, output);
    // A script capsule runs its task once, whatever the lifecycle says: a flag that asks otherwise is said to do nothing.
    if (override && plan.capsule.kind === 'script') {
      const flags = Object.keys(override).map((field) => `--lifecycle-${field.replace('_', '-')}`);
      output.err(
        `warning: ${flags.join(' and ')} ${flags.length > 1 ? 'change' : 'changes'} nothing here: ${plan.capsule.name} is a script capsule (no inference:), which runs its task once`,
      );
    }

    const sessionId = newSessionId();
    const { ended, subscription: endWatch } = watchSessionEnd(runtime.bus, sessionId);
    const subscriptions = [endWatch];
    const terminalStreams = { stdout: new TerminalSafeStream(), stderr: new TerminalSafeStream() };
    const relays = {
      stdout: new OutputRelay(process.stdout, 'stdout', output.err, OUTPUT_PENDING_MAX_BYTES, "the capsule's stdout"),
      stderr: new OutputRelay(process.stderr, 'stderr', output.err, OUTPUT_PENDING_MAX_BYTES, "the capsule's stderr"),
    };
    const relay = (chunk: { stream: 'stdout' | 'stderr'; text: string }): void => {
      const stream = chunk.stream === 'stdout' ? process.stdout : process.stderr;
      relays[chunk.stream].write(stream.isTTY ? terminalStreams[chunk.stream].write(chunk.text) : chunk.text);
    };
    // Held until the launch lines are out: the capsule's first output and the launch's answer can
    // come in one read off the bus, and the output went first, before `session:` (a reader of the
    // first line took it for the session's). At most a launch's worth is held.
    let held: Array<{ stream: 'stdout' | 'stderr'; text: string }> | undefined = [];
    let heldBytes = 0;
    const releaseHeld = (): void => {
      for (const chunk of held ?? []) relay(chunk);
      held = undefined;
    };
    // With --json the capsule's stderr alone is relayed: stdout is the launch line and nothing else.
    subscriptions.push(
      runtime.bus.subscribe(topics.sessionOutput.at(sessionId), (chunk) => {
        if (options.json && chunk.stream !== 'stderr') return;
        if (held === undefined) return relay(chunk);
        held.push(chunk);
        heldBytes += chunk.text.length;
        if (heldBytes > OUTPUT_PENDING_MAX_BYTES) releaseHeld();
      }),
    );
    // What the session pulls at run time is pinned here, where the lock is; one write at a time.
    let pinning = Promise.resolve();
    if (lockPath) {
      subscriptions.push(
        runtime.bus.subscribe(topics.sessionPinned.at(sessionId), ({ artifact }) => {
          pinning = pinning
            .then(() =>
              // A lock that cannot be read is left as it is (the warning below), never written over.
              withLockfileTurn(lockPath, async () => {
                const lock = await readLockfile(lockPath);
                // A pin written since the run staged (another install, an edit) is not the session's to
                // override, as upstream's pull refuses to: left as it is, and said.
                const pinned = lock?.artifacts.find((entry) => entry.name === artifact.name);
                if (pinned && (pinned.resolved_version !== artifact.resolved_version || pinned.sha256.wasm !== artifact.sha256.wasm)) {
                  output.err(
                    `warning: the session pulled ${artifact.name}@${artifact.resolved_version}, but ${lockPath} now pins ${pinned.name}@${pinned.resolved_version}; the pin is left as it is (murmur.lock conflict)`,
                  );
                  return;
                }
                if (!pinned) await writeLockfile(lockPath, upsertLockEntry(lock, artifact));
              }),
            )
            .catch((error: unknown) =>
              output.err(`warning: could not pin ${artifact.name}@${artifact.resolved_version} in ${lockPath}: ${(error as Error).message}`),
            );
        }),
      );
    }
    await runtime.bus.flush();

    if (heldSignal) return 130;
    const door = await sessionDoor(runtime, plan, sessionId, { bind: options.bind ?? '127.0.0.1', sole: true });
    const url = door?.url;
    const a2aTimeout = numberSetting(env, 'MURMUR_A2A_TIMEOUT_SECS', undefined, { unit: 'seconds', fractional: true, zero: true });
    const resultFetchMaxBytes = numberSetting(env, 'MURMUR_RESULT_FETCH_MAX_BYTES', FETCHED_FILE_MAX_BYTES, { unit: 'bytes' });
    timing('launch asked');
    const launching = launchNaming(runtime.bus, sessionId, {
      session_id: sessionId,
      launch_by: Date.now() + LAUNCH_TIMEOUT_MS,
      plan,
      ...(options.workdir ? { workdir: path.resolve(options.workdir) } : {}),
      // In one process the session's directory is beside the capsule, as upstream puts it; an
      // executor of the stack keeps its sessions on its own machine.
      ...(runtime.inProcess ? { default_workdir_base: localBase } : {}),
      ...(task !== undefined ? { task } : {}),
      env: launchEnvironment(plan, env),
      ...(url ? { url } : {}),
      ...(options.systemPrompt !== undefined ? { system_prompt: options.systemPrompt } : {}),
      ...(options.resume !== undefined ? { context_id: options.resume, resume: true } : options.context !== undefined ? { context_id: options.context } : {}),
      ...(options.forgetSession ? { forget_session: true } : {}),
      ...(a2aTimeout !== undefined ? { a2a_timeout_secs: a2aTimeout } : {}),
      relay_output: options.json ? 'stderr' : true,
      outlives_launcher: !hasControllingTerminal(),
      ...(spawner ? { spawner } : {}),
      ...(floor ? { containment_floor: floor } : {}),
      ...(process.env.MURMUR_ROOST_URL?.trim() ? { roost: { url: process.env.MURMUR_ROOST_URL.trim() } } : {}),
    });
    // A signal held while the launch was under way that stopped its host before it started (a
    // terminal's Ctrl-C reaches an in-process host too): the interrupt the user asked for, which
    // was said when it came, not a failure to report.
    const launched = await launching.catch((error: unknown) => {
      if (heldSignal && error instanceof MurmurError && error.code === 'E-SES-005') return undefined;
      throw error;
    });
    if (!launched) return 130;

    timing('launched');
    for (const warning of launched.warnings ?? []) output.warn(warning);
    // Said whatever the output format (stderr): a capsule with a shell contained below sealed.
    const unenforced = launched.not_enforced_for_tools ?? [];
    if (unenforced.length > 0)
      output.err(
        [
          `warning: this executor contains the capsule's tools at ${launched.isolation}, below sealed; they are not held to:`,
          ...unenforced.map((gap) => `  - ${gap}`),
          '  hint: declare capabilities.containment: sealed (or mur run --containment sealed) to refuse a host that cannot seal',
        ].join('\n'),
      );
    // The first run pins what it resolved; later runs are held to it. Only once a session runs:
    // a run refused on the way (its door, its task, the executor) leaves no lock behind.
    if (plan.lock.status === 'absent' && lockPath && plan.lock.entries.length > 0) {
      await pinFirstRun(lockPath, plan.lock.entries).catch((error: unknown) =>
        output.err(`warning: could not write the first run's pins to ${lockPath}: ${(error as Error).message}; the next run pins them again`),
      );
    }
    // On the stack the session's workdir is on its executor: its answer is fetched, when it ends, to
    // where an in-process run would have left it, so a script finds out/result.txt in the same place.
    const fetchedResult = !runtime.inProcess && !options.workdir ? path.join(localBase, 'workdir', sessionId, 'out', 'result.txt') : undefined;
    if (options.json) {
      output.out(
        JSON.stringify({
          url: launched.url,
          pid: launched.pid,
          session_id: launched.session_id,
          name: plan.capsule.name,
          version: plan.capsule.version,
          workdir: launched.workdir,
          // The session's own door token, when its door takes one (MURMUR_DOOR_AUTH names session):
          // a door that does not would refuse it, so it is not handed out as a credential.
          ...(launched.url && door?.credentials.session_tokens ? { token: launched.token } : {}),
          // The workdir above is the executor's: where this run copies the answer once the session ends.
          ...(fetchedResult ? { executor_id: launched.executor_id, result: fetchedResult } : {}),
        }),
      );
    } else {
      if (launched.url) output.out(`murmur: url ${launched.url}`);
      // Without it no client could talk to a session whose door takes only session tokens.
      if (launched.url && door?.credentials.session_tokens && launched.token) output.out(`murmur: token ${launched.token}`);
      output.out(`session: ${launched.session_id}`);
      if (options.verbose) {
        output.out(`workdir: ${launched.workdir}${runtime.inProcess ? '' : ` (on executor ${launched.executor_id})`}`);
        output.out(`manifest: ${plan.capsule.name} v${plan.capsule.version}`);
        for (const line of agentLines(plan)) output.out(line);
        output.out(`isolation: ${launched.isolation}`);
      }
    }
    releaseHeld();

    // On the stack the session lives on its executor: a bus that goes away is said, as is its
    // return, and the run waits for it (NATS reconnects for as long as it takes).
    let interrupted = false;
    /** Whether the executor took this run's stop for a session still running (not one already ending on its own); false when it could not be asked. */
    let stopTaken: Promise<boolean> | undefined;
    let busClosed = false;
    let leave!: () => void;
    const left = new Promise<undefined>((resolve) => (leave = () => resolve(undefined)));
    // NATS keeps nothing for a subscriber that is away: an end announced while this run's bus was
    // gone is never heard, and the run waited for ever. Back, it asks the session's executor how
    // the session stands — again while that executor is not back on the bus itself — and takes
    // the end it was announced with. An executor that never answers is the watcher's to declare lost.
    let resolveHeardLate!: (event: SessionEnded) => void;
    const heardLate = new Promise<SessionEnded>((resolve) => (resolveHeardLate = resolve));
    let waiting = true;
    const askHowItStands = async (): Promise<void> => {
      for (let attempt = 0; attempt < END_ASK_ATTEMPTS && waiting; attempt += 1) {
        try {
          const reply = await runtime.bus.request(commands.sessionEnd.at(launched.executor_id), { session_id: sessionId }, { timeoutMs: 2_000 });
          if (reply.state === 'ended') resolveHeardLate(reply.ended);
          return;
        } catch {
          await new Promise((resolve) => setTimeout(resolve, END_ASK_PAUSE_MS).unref());
        }
      }
    };
    // An executor that dies while no watcher runs has its sessions' ends announced by nobody, and
    // the run waited for ever: the run judges its own executor by its heartbeats as a watcher
    // would, a little later than one, and announces the end in its place.
    const silence = runtime.inProcess
      ? undefined
      : watchExecutorSilence(
          runtime.bus,
          { ...launched, capsule_name: plan.capsule.name, capsule_version: plan.capsule.version },
          executorLostSetting(env),
          (lost) => {
            output.err(`mur: executor ${launched.executor_id} stopped answering; no watcher said so, so this run says session ${sessionId} ended with it`);
            resolveHeardLate(lost);
          },
        );
    if (silence) subscriptions.push(silence);
    if (!runtime.inProcess) {
      runtime.bus.onConnectionChange((state, reason) => {
        if (state === 'closed') {
          // The bus will never come back to this connection (it refused it on reconnecting): waiting would be for ever.
          busClosed = true;
          output.err(
            busClosedError(
              runtime,
              reason,
              `session ${sessionId} may still run on its executor: once mur can reach the bus again (check its URL and token), 'mur ps' shows it and 'mur stop ${sessionId}' stops it`,
              "the stack's bus",
            ).format(),
          );
          leave();
          return;
        }
        output.err(
          state === 'disconnected'
            ? `mur: lost the stack's bus at ${runtime.bus.description}; session ${sessionId} goes on on its executor, and mur waits for the bus to come back (Ctrl-C leaves)`
            : "mur: the stack's bus is back",
        );
        silence?.hearing(state === 'reconnected');
        if (state === 'reconnected') void askHowItStands();
      });
    }
    const onSignal = (): void => {
      if (interrupted) {
        // A second interrupt leaves at once, whatever the first one is still waiting for. In-process
        // the session ends with this process; on the stack it is left to its executor.
        output.err(
          runtime.inProcess
            ? `mur: interrupted again; ending session ${sessionId} now`
            : `mur: interrupted again; leaving session ${sessionId} as it is (mur stop ${sessionId} stops it)`,
        );
        leave();
        return;
      }
      interrupted = true;
      output.err(`mur: interrupted; stopping session ${sessionId} (again to leave at once)`);
      stopTaken = runtime.bus.request(commands.stopSession.at(sessionId), { reason: 'mur run was interrupted' }, { timeoutMs: 5_000 }).then(
        ({ stopping }) => stopping,
        (error: unknown) => {
          // Nobody could be asked, so nobody will say the session ended either: waiting would be for ever.
          output.err(
            `mur: could not ask for session ${sessionId} to stop (${error instanceof Error ? error.message : String(error)}); it may still run on its executor: mur stop ${sessionId} once the stack answers`,
          );
          leave();
          return false;
        },
      );
    };
    onStopSignal = onSignal;
    // One that came while the session was being launched.
    if (heldSignal) onSignal();
    const end = await Promise.race([ended, heardLate, left]);
    waiting = false;
    // The session is over; what is left (pinning, a fetched result) is not waited for past a signal.
    onStopSignal = () => process.exit(130);
    for (const subscription of subscriptions) subscription.unsubscribe();
    if (process.stdout.isTTY) relays.stdout.write(terminalStreams.stdout.end());
    if (process.stderr.isTTY) relays.stderr.write(terminalStreams.stderr.end());
    relays.stdout.finish();
    relays.stderr.finish();
    if (!end) return busClosed ? 1 : 130;
    timing('ended');
    // Ended by the interrupt: the executor took the stop (its answer awaited, since the session's
    // end can be read before it, both in one read from the bus), or the interrupt reached the host
    // itself (a host outside bubblewrap shares this run's process group, and a terminal's Ctrl-C
    // signals it too).
    const endedByInterrupt = interrupted && ((await stopTaken) === true || (STOP_SIGNALS as readonly string[]).includes(end.signal ?? ''));
    await pinning;

    if (fetchedResult && end.error?.code !== 'E-EXE-001') {
      const fetched = await fetchSessionFile(runtime.bus, launched, 'out/result.txt', fetchedResult, resultFetchMaxBytes).catch((error: unknown) => {
        // This machine's own refusal (a full disk, a directory it may not write) is said with its
        // code and what to do, and the answer is still on the executor for another copy.
        const refusal =
          error instanceof MurmurError
            ? error
            : new MurmurError(systemFailureCode(error), `could not write ${fetchedResult}: ${error instanceof Error ? error.message : String(error)}`, {
                hint: `${systemFailureHint(error) ?? 'name a place this user can write'}; 'mur files ${sessionId} out/result.txt --out <file>' copies it from the executor`,
              });
        output.err(
          oneLine(
            `warning: could not fetch out/result.txt from executor ${launched.executor_id}: error[${refusal.code}]: ${refusal.message}${refusal.hint ? ` (${refusal.hint})` : ''}`,
          ),
        );
        return false;
      });
      // With --json, stdout is the launch line alone; it named where the answer goes. One line,
      // whatever the project's path holds: a script reads the path from it.
      if (fetched && !options.json) output.out(`result:  ${oneLine(fetchedResult)}`);
      timing('result fetched');
    }

    // Stopped on the launcher's own signal is how a sleeping agent is meant to end: no error to report.
    if (end.error && !endedByInterrupt)
      output.err(
        new MurmurError(end.error.code as never, end.error.message, {
          ...(end.error.hint ? { hint: end.error.hint } : {}),
          ...(end.error.path ? { path: end.error.path } : {}),
        }).format(),
      );
    // A session that failed because this run stopped it did not fail: it was stopped (a trap, a
    // success, or an end already under way when the stop came is said as it was).
    if (!options.json) output.out(`status:  ${endedByInterrupt && end.exit_status === 'failed' ? 'stopped' : end.exit_status}`);
    if (interrupted) return 130;
    return end.exit_status === 'ok' ? 0 : 1;
  } finally {
    // A signal while everything is closed is held, not left to its default (143, the close cut
    // short): closing is what it asks for. Again, and mur leaves at once.
    let closingSignal: NodeJS.Signals | undefined;
    onStopSignal = (signal) => {
      if (closingSignal) process.exit(130);
      closingSignal = signal;
      output.err(`mur: ${signal}: closing what this run started (again to leave at once)`);
    };
    progress.stop();
    await runtime.close();
    timing('runtime closed');
    for (const signal of STOP_SIGNALS) process.off(signal, stopSignalListener);
  }
}

/**
 * Launches the session, waiting at most `LAUNCH_TIMEOUT_MS`. A launch not answered in time names
 * its session and asks it to stop: an executor may still hold it (a slow start, then stopped as
 * soon as its host is there), and one that takes the request later refuses it by its `launch_by`.
 */
async function launchNaming(bus: Bus, sessionId: string, request: z.input<typeof LaunchRequestSchema>): Promise<LaunchReply> {
  try {
    return await bus.request(commands.launch, request, { timeoutMs: LAUNCH_TIMEOUT_MS });
  } catch (error) {
    // Only this request's own timeout: a refusal the executor answered with is passed on as it is.
    if (!(error instanceof MurmurError) || error.code !== 'E-BUS-003' || error.path !== commands.launch.subject) throw error;
    await bus
      .request(commands.stopSession.at(sessionId), { reason: 'its launcher stopped waiting for its launch' }, { timeoutMs: 2_000 })
      .catch(() => undefined);
    throw new MurmurError('E-BUS-003', `${error.message}: session ${sessionId} was not launched in time, and was asked to stop`, {
      hint: `is an executor running and keeping up? Should ${sessionId} run after all (mur ps lists it if it has a door), 'mur stop ${sessionId}' ends it`,
    });
  }
}

/** How much later than a watcher a run judges its executor lost, so that a running watcher announces it first. */
const RUN_SILENCE_MARGIN_MS = 3_000;

/**
 * The launched session's executor, judged by its heartbeats while the bus is heard: silent past
 * `lostAfterMs` (and a margin), the session's `lost.<id>` record is taken, the end announced as a
 * watcher announces it (`sessionLostWithExecutor`) and handed to `lost`. The record makes the
 * executor end the session should it answer again; one a watcher took first leaves the
 * announcement to that watcher, whose end this run has heard or will ask for.
 */
function watchExecutorSilence(
  bus: Bus,
  launched: LaunchReply & { capsule_name: string; capsule_version: string },
  lostAfterMs: number,
  lost: (ended: SessionEnded) => void,
): { unsubscribe(): void; hearing(heard: boolean): void } {
  let lastBeat = performance.now();
  /** The interval the executor says it beats at, from its first beat heard. */
  let intervalMs = 0;
  let heard = true;
  let judged = false;
  let asking = false;
  const beats = bus.subscribe(topics.executorHeartbeat, (beat) => {
    if (beat.executor_id !== launched.executor_id) return;
    lastBeat = performance.now();
    intervalMs = beat.interval_ms;
  });
  // The bus is asked first, as the watcher asks it: the time its server took to answer is no
  // executor's silence (`busRoundTrip`).
  const judge = async (): Promise<void> => {
    const { answered, waitedMs } = await busRoundTrip(bus);
    lastBeat = Math.min(performance.now(), lastBeat + waitedMs);
    const silentFor = performance.now() - lastBeat;
    if (!answered || !heard || judged || silentFor < executorLostAfterMs(lostAfterMs, intervalMs) + RUN_SILENCE_MARGIN_MS) return;
    judged = true;
    const ended = sessionLostWithExecutor(launched, launched.executor_id, silentFor);
    void (async () => {
      const store = await bus.keyValue(WATCHER_BUCKET);
      if (await store.create(lostSessionKey(launched.session_id), `mur-run-${process.pid}`)) bus.publish(topics.sessionEnded, ended);
    })()
      .catch(() => {})
      .finally(() => lost(ended));
  };
  const timer = setInterval(() => {
    if (!heard || judged || asking) return;
    asking = true;
    void judge().finally(() => {
      asking = false;
    });
  }, 1_000);
  timer.unref();
  return {
    unsubscribe: () => {
      clearInterval(timer);
      beats.unsubscribe();
    },
    // Silence counts only while the bus is heard; back, every silence starts again.
    hearing: (isHeard) => {
      heard = isHeard;
      lastBeat = performance.now();
    },
  };
}
