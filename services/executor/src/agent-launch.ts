import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import {
  type CapsuleCard,
  type LaunchRequest,
  MurmurError,
  type StagedPlan,
  evalConfigForHooks,
  guestEnvironment,
  harnessEnvironment,
  resolveManifestSecrets,
  shownUrl,
} from '@murmur/shared';
import { locateHarness, mkdirBeneath } from '@murmur/shared/node';
import type { AgentStart, HookStart, HostComponent, HostTool } from './host/protocol.js';

/**
 * What an agent capsule's host is given, decided on the executor's side: the driver and where it
 * talks (`inference.endpoint`/`api_key`, or the driver artifact's `gateway` — the seeds' form),
 * the secrets resolved from the launcher's values at the last moment, the system prompt from
 * wherever the manifest says (a file's text was read at staging; a skill's `skill.md` is in the
 * session's `tools/`), and the card.
 *
 * The inference key goes to the driver alone. Upstream hands `MURMUR_INFERENCE_API_KEY` to every
 * WASM tool too; a tool has no use for the model's credential, so here it never sees it.
 */

export interface AgentLaunchInput {
  plan: StagedPlan;
  /** The launcher's values (`${VAR}` references resolve against them). */
  env: Record<string, string>;
  sessionId: string;
  url: string;
  sessionDir: string;
  accessible: string;
  tools: HostTool[];
  /** The driver's component, its bundle already on this machine (undefined when the plan has no such driver). */
  driverComponent: (name: string) => HostComponent | undefined;
  /** A hook's component, likewise. */
  hookComponent: (name: string) => HostComponent | undefined;
  /** `mur eval run`: the dataset case the session runs, for its hooks. */
  evalCase?: LaunchRequest['eval_case'];
  /** `mur run --system-prompt`: replaces every manifest source; empty clears the prompt. */
  systemPromptOverride?: string | undefined;
  idleTimeoutMs: number;
  /** `mur run --forget-session`: the context whose harness session its first task drops. */
  forgetContext?: string | undefined;
  /** The runtime's `MURMUR_*` identity values, applied last. */
  runtimeEnv: Record<string, string>;
  /** The cap on one harness run (`transport: process`; the executor's `MURMUR_HARNESS_RUN_CAP_SECS`). */
  harnessRunCapMs: number;
  /** The largest harness transcript kept for a context (the executor's `MURMUR_HARNESS_TRANSCRIPT_MAX_BYTES`). */
  harnessTranscriptMaxBytes: number;
}

export interface AgentLaunch {
  agent: AgentStart;
  /** What the capsule's tools (and through them subprocesses) see: the grants, `MURMUR_INFERENCE_*` without the key, identity. */
  guestEnv: Record<string, string>;
}

function readPrompt(file: string, what: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    throw new MurmurError(
      'E-RUN-009',
      `cannot read the system prompt ${what} at ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      {
        hint: 'check the path in murmur.yaml (relative to the manifest directory), or pass --system-prompt',
        path: 'inference.system_prompt_file',
      },
    );
  }
}

function systemPrompt(plan: StagedPlan, tools: HostTool[], override: string | undefined): { text: string | null; source: 'manifest' | 'cli' | 'none' } {
  if (override !== undefined) {
    const trimmed = override.trim();
    // An empty override still is the operator's choice: no prompt, attributed to the command line.
    return { text: trimmed === '' ? null : trimmed, source: 'cli' };
  }
  const inference = plan.capsule.manifest.inference;
  if (inference?.system_prompt !== undefined) return { text: inference.system_prompt.trim(), source: 'manifest' };
  if (inference?.system_prompt_file !== undefined) {
    const file = plan.capsule.system_prompt_file;
    if (!file)
      throw new MurmurError('E-RUN-009', `the plan carries no text for inference.system_prompt_file '${inference.system_prompt_file}'`, {
        path: 'inference.system_prompt_file',
        hint: 'stage the capsule again',
      });
    return { text: file.text, source: 'manifest' };
  }
  if (inference?.system_prompt_artifact !== undefined) {
    const skill = tools.find((tool) => tool.name === inference.system_prompt_artifact && tool.kind === 'skill');
    if (!skill?.path)
      throw new MurmurError('E-RUN-009', `the system prompt artifact '${inference.system_prompt_artifact}' has no skill.md to read`, {
        path: 'inference.system_prompt_artifact',
        hint: 'name a skill artifact (runtime: skill) declared in artifacts:, whose skill.md is the prompt',
      });
    return { text: readPrompt(skill.path, `of artifact '${inference.system_prompt_artifact}'`), source: 'manifest' };
  }
  return { text: null, source: 'none' };
}

/** A hook's call may take `limits.deadline_seconds` when the manifest writes it, else 30 s (upstream's hook default, not the capsule's 600). */
const HOOK_DEFAULT_DEADLINE_MS = 30_000;

/**
 * The hooks as the host runs them. A hook gets no host environment: only the observability
 * endpoint, the eval configuration (defaults applied, unknown scorers left out), the case an
 * eval run launches (its own launch field, never the launcher's environment) and the formation
 * id. It sees no directory unless its entry grants `capabilities.filesystem.scope` (then that
 * one, under the accessible workdir, created if missing).
 */
function hookStarts(input: AgentLaunchInput, manifest: ReturnType<typeof resolveManifestSecrets>): HookStart[] {
  const { plan } = input;
  const observability = manifest.observability;
  const env: Array<[string, string]> = [];
  if (observability?.otel_endpoint) env.push(['MURMUR_OTEL_ENDPOINT', observability.otel_endpoint]);
  if (input.env.MURMUR_FORMATION_ID) env.push(['MURMUR_FORMATION_ID', input.env.MURMUR_FORMATION_ID]);
  if (observability?.eval) env.push(['MURMUR_EVAL_CONFIG', JSON.stringify(evalConfigForHooks(observability.eval))]);
  if (input.evalCase) {
    env.push(['MURMUR_CASE_ID', input.evalCase.case_id]);
    if (input.evalCase.dataset_id) env.push(['MURMUR_DATASET_ID', input.evalCase.dataset_id]);
  }
  const deadlineMs = plan.policy.deadline_declared ? plan.policy.limits.deadline_seconds * 1000 : HOOK_DEFAULT_DEADLINE_MS;
  const hooks: HookStart[] = [];
  for (const artifact of plan.artifacts) {
    if (artifact.role !== 'hook' || !artifact.hook) continue;
    const component = input.hookComponent(artifact.name);
    if (!component) {
      throw new MurmurError('E-RUN-008', `hook '${artifact.name}@${artifact.version}' has no component on this executor`, {
        hint: 'stage the capsule again',
        path: 'artifacts',
      });
    }
    const scope = artifact.capabilities?.filesystem?.scope;
    let preopen = '';
    if (scope !== undefined) {
      preopen = path.join(input.accessible, scope);
      if (!existsSync(preopen)) mkdirBeneath(input.accessible, preopen);
    }
    hooks.push({
      name: artifact.name,
      version: artifact.version,
      component,
      ...(artifact.hook.binding !== undefined ? { binding: artifact.hook.binding } : {}),
      mode: artifact.hook.execution_mode,
      on_overflow: artifact.hook.on_overflow,
      preopen,
      env,
      deadline_ms: deadlineMs,
    });
  }
  return hooks;
}

/** `inference.compaction` with upstream's default threshold; a prompt file's text was read at staging. */
function compactionSettings(plan: StagedPlan, compaction: NonNullable<StagedPlan['capsule']['manifest']['inference']>['compaction']): AgentStart['compaction'] {
  const prompt = compaction?.system_prompt ?? plan.capsule.compaction_prompt_file?.text;
  return {
    threshold: compaction?.threshold ?? 0.98,
    ...(compaction?.model !== undefined ? { model: compaction.model } : {}),
    ...(prompt !== undefined ? { system_prompt: prompt } : {}),
    dump_summaries: compaction?.dump_summaries ?? false,
  };
}

/** Which inference the session runs: a driver component, or a harness CLI (`transport: process`). */
type InferenceSide =
  | {
      kind: 'driver';
      driver: NonNullable<AgentStart['driver']>;
      env: Record<string, string>;
      /** What the driver alone is given over `env`: the endpoint whole (a `?key=` may be its credential). */
      driverEnv: Record<string, string>;
      apiKey: string | undefined;
    }
  | { kind: 'harness'; harness: NonNullable<AgentStart['harness']>; env: Record<string, string> };

function driverSide(input: AgentLaunchInput, manifest: ReturnType<typeof resolveManifestSecrets>): InferenceSide {
  const { plan } = input;
  const inference = manifest.inference as NonNullable<typeof manifest.inference>;
  const driverName = inference.driver?.artifact;
  if (!driverName) throw new MurmurError('E-RUN-005', 'inference.driver.artifact is not configured', { path: 'inference.driver.artifact' });
  const driver = plan.artifacts.find((artifact) => artifact.name === driverName);
  const driverComponent = driver?.role === 'driver' ? input.driverComponent(driverName) : undefined;
  if (driver?.role !== 'driver' || !driverComponent) {
    throw new MurmurError('E-RUN-006', `inference driver '${driverName}' is not installed as a driver (declare it in artifacts: with runtime: driver)`, {
      hint: `add '- name: ${driverName}' with 'runtime: driver' to artifacts:, and install it`,
      path: 'inference.driver.artifact',
    });
  }
  const gateway = manifest.artifacts.find((artifact) => artifact.name === driverName)?.gateway;
  const endpoint = inference.endpoint ?? gateway?.endpoint ?? '';
  return {
    kind: 'driver',
    driver: { name: driverName, component: driverComponent, preopen: input.accessible },
    apiKey: inference.api_key ?? gateway?.api_key,
    driverEnv: { MURMUR_INFERENCE_ENDPOINT: endpoint },
    env: {
      MURMUR_INFERENCE_TRANSPORT: inference.transport,
      // Every guest and tool is told where the model is, as upstream's; only the driver, which
      // holds the key, is told how to sign in to it (`driverEnv`): a Google-style `?key=` is one.
      MURMUR_INFERENCE_ENDPOINT: withoutCredentials(endpoint),
      MURMUR_INFERENCE_MODEL: inference.model ?? '',
      MURMUR_INFERENCE_DRIVER: driverName,
      ...(inference.driver?.config ? { MURMUR_INFERENCE_DRIVER_CONFIG: JSON.stringify(inference.driver.config) } : {}),
    },
  };
}

/** `url` as written, or without its user, password, query and fragment when it has any. */
function withoutCredentials(url: string): string {
  try {
    const parsed = new URL(url);
    return parsed.username || parsed.password || parsed.search || parsed.hash ? shownUrl(url) : url;
  } catch {
    return url;
  }
}

/**
 * The harness a `transport: process` capsule runs: found on the launcher's PATH (then this
 * executor's), so a launch whose harness is missing is refused here with `E-RUN-006` even when
 * the launcher could not check.
 */
function harnessSide(input: AgentLaunchInput, manifest: ReturnType<typeof resolveManifestSecrets>): InferenceSide {
  const inference = manifest.inference as NonNullable<typeof manifest.inference>;
  const command = inference.command as string;
  const located = locateHarness(command, [input.env.PATH, process.env.PATH].filter((entry) => entry !== undefined).join(':'));
  return {
    kind: 'harness',
    harness: {
      dialect: located.dialect,
      command,
      binary: located.binary,
      transcript_limit_bytes: input.harnessTranscriptMaxBytes,
      // Credential-shaped names included (a harness is given its model's key); the runtime's own and
      // what shell.strip_env strips never.
      env: Object.entries(harnessEnvironment(input.plan.policy, input.env)),
      ...(input.forgetContext !== undefined ? { forget_context: input.forgetContext } : {}),
      run_cap_ms: input.harnessRunCapMs,
    },
    env: { MURMUR_INFERENCE_TRANSPORT: 'process', MURMUR_INFERENCE_ENDPOINT: '', MURMUR_INFERENCE_MODEL: inference.model ?? '', MURMUR_INFERENCE_DRIVER: '' },
  };
}

export function prepareAgentLaunch(input: AgentLaunchInput): AgentLaunch {
  const { plan } = input;
  const manifest = resolveManifestSecrets(plan.capsule.manifest, input.env);
  const inference = manifest.inference;
  if (!inference) throw new MurmurError('E-RUN-005', `${plan.capsule.name} has no inference: block`);
  const side = inference.transport === 'process' ? harnessSide(input, manifest) : driverSide(input, manifest);
  const prompt = systemPrompt(plan, input.tools, input.systemPromptOverride);
  const policy = plan.policy;
  // `--system-prompt` releases a bound prompt skill: it is an ordinary callable skill again.
  const promptSkill = input.systemPromptOverride === undefined ? inference.system_prompt_artifact : undefined;
  const card: CapsuleCard = {
    name: plan.capsule.name,
    description: manifest.description ?? `Murmur capsule ${plan.capsule.name}`,
    version: plan.capsule.version,
    session_id: input.sessionId,
    capsule_name: plan.capsule.name,
    capsule_version: plan.capsule.version,
    tools: input.tools.filter((tool) => tool.name !== promptSkill).map((tool) => ({ name: tool.name, description: tool.info.description.trim() || tool.name })),
    shell: policy.shell_allow.length > 0,
    network: policy.network_allow.length > 0,
    task_acceptance: plan.lifecycle.task_acceptance,
    conversation: plan.lifecycle.conversation,
  };
  const guestEnv = guestEnvironment(policy, input.env, { ...side.env, ...input.runtimeEnv });
  const apiKey = side.kind === 'driver' ? side.apiKey : undefined;
  return {
    guestEnv,
    agent: {
      model: inference.model ?? '',
      max_tokens: inference.max_tokens ?? 8192,
      max_turns: inference.max_turns,
      ...(side.kind === 'driver' ? { driver: side.driver } : { harness: side.harness }),
      driver_env:
        side.kind === 'driver'
          ? [...Object.entries({ ...guestEnv, ...side.driverEnv }), ...(apiKey !== undefined ? [['MURMUR_INFERENCE_API_KEY', apiKey] as [string, string]] : [])]
          : [],
      system_prompt: prompt.text,
      system_prompt_source: prompt.source,
      ...(promptSkill !== undefined ? { system_prompt_artifact: promptSkill } : {}),
      lifecycle: plan.lifecycle,
      idle_timeout_ms: input.idleTimeoutMs,
      card,
      max_task_reopens: inference.max_task_reopens,
      ...(manifest.context?.max_tokens !== undefined ? { context_max_tokens: manifest.context.max_tokens } : {}),
      compaction: compactionSettings(plan, inference.compaction),
      hooks: hookStarts(input, manifest),
    },
  };
}
