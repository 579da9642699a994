import type { ChildProcess } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import path from 'node:path';
import {
  type MurmurWarning,
  type Containment,
  type ExecutorHeartbeat,
  type ExitStatus,
  type LaunchReply,
  type LaunchRequestSchema,
  type Log,
  LONGEST_TIMER_MS,
  MurmurError,
  isErrorCode,
  type SessionCall,
  type SessionEnded,
  type SessionEvent,
  type SessionReply,
  type WireError,
  type DelegationOutcome,
  type SpawnerHandle,
  type LockedArtifact,
  SPAWNER_ENV,
  spawnerHandleToEnv,
  commands,
  guestEnvironment,
  isGivenToCapsules,
  isRuntimeOwned,
  shownUrl,
  unenforcedForTools,
  RPC_ERRORS,
  RUNTIME_VERSION,
  runtimeMetrics,
  resolveManifestSecrets,
  stagedRuntimeFloorRefusal,
  TaskIdSchema,
  topics,
  traced,
  otelTracesUrl,
  SAFE_CONTEXT_ID_RULE,
  isSafeContextId,
} from '@murmur/shared';
import type { Bus, Subscription } from '@murmur/shared/bus';
import { oneLine } from '@murmur/shared/one-line';
import {
  type BlobCache,
  childResultPath,
  mkdirBeneath,
  newSessionToken,
  packageFile,
  processStartToken,
  recordTerminated,
  reportCompletion,
  tokenMatcher,
  writeFileBeneath,
} from '@murmur/shared/node';
import type { z } from 'zod';
import type { LocalBundles } from './bundles.js';
import { throttleDevice } from './block-device.js';
import { type CgroupProbe, SessionCgroup, type SessionCeilings, type ToolCeilings } from './cgroup.js';
import { type HostPool, type PooledHost, poolRefusal } from './host-pool.js';
import type { NetworkPlan } from './network-plan.js';
import { toolchainHelperGaps, toolchainHelperWarning } from './toolchain-helpers.js';
import type { ConfineProbe } from './confinement.js';
import { rememberBounded } from './bounded-map.js';
import type { DelegationTrees } from './delegation-trees.js';
import { type ContainmentAssessment, assessContainment, containmentRefusal, effectiveGrants, hostContainment, strongestFloor } from './containment.js';
import { EgressPolicy } from './egress.js';
import { EgressRecords } from './egress-records.js';
import { HostEgress, isEgressRequest } from './host-egress.js';
import type { OwnEndpoints } from './own-endpoints.js';
import { canSpawnSubprocesses, sandboxFailureHint, subprocessRefusals } from './host-probe.js';
import { HostLink, messageType } from './host-link.js';
import { hostSandbox, sandboxTmp, spawnSandboxedHost } from './host-sandbox.js';
import type { ExecutorSettings } from './settings.js';
import { SandboxNetwork, closeHandle } from './sandbox-network.js';
import { type WorkdirBreach, WorkdirGuard, type WorkdirUsage, workdirBreach } from './workdir-guard.js';
import { prepareAgentLaunch } from './agent-launch.js';
import {
  type AgentStart,
  type HostComponent,
  type HostRequest,
  type HostToExecutor,
  HostToExecutorSchema,
  type HostTool,
  type StartMessage,
} from './host/protocol.js';
import { ConversationRecords } from './conversations.js';
import { HarnessSessions } from './harness-sessions.js';
import { murmurMd } from './murmur-md.js';
import { LogFile, type RecordsOutsideSandbox, TraceWriter, traceFileInWorkdir } from './records.js';
import { fitEventForBus } from './event-fit.js';
import { SessionContexts, isContextRequest, wholeRecordRequest } from './session-contexts.js';
import { SessionDelegations } from './session-delegations.js';
import { SessionTelemetry } from './session-telemetry.js';
import type { NamespaceProbe } from './sandbox.js';
import { type SessionPaths, childrenDirIn, materialiseWorkdir, recordBinds } from './workdir.js';
import { assertRuntimeGrantsContained } from './runtime-grants.js';

/**
 * One session, from the executor's side: the workdir it materialises, the sandboxed capsule host
 * it starts, the requests it judges for that host, and the account it gives of how the session
 * ended — including when the host could not give one itself.
 */

/**
 * util-linux's `prlimit`, which starts an unsealed sandbox's tools with their rlimits (the sealed
 * helper sets them itself): looked for where Debian and others put it, the same path inside a
 * sandbox (whose `/usr` is the machine's) as here.
 */
const PRLIMIT_CANDIDATES = ['/usr/bin/prlimit', '/bin/prlimit'];

export interface ExecutorEnvironment {
  executorId: string;
  bus: Bus;
  log: Log;
  namespaces: NamespaceProbe;
  /** Whether sandboxes can be sealed here (network namespace, Landlock, seccomp), and why not. */
  confine: ConfineProbe;
  cgroups: CgroupProbe;
  /** The operator's collector (`MURMUR_OTEL_ENDPOINT`): sessions whose capsule names none export their spans there. */
  otelEndpoint?: string | undefined;
  /** The bus this executor is on, which no capsule is connected to whatever its rules say (`own-endpoints.ts`). */
  /** The bus's endpoints no capsule may reach (resolved again while a name of it does not resolve). */
  ownEndpoints: () => Promise<OwnEndpoints>;
  /** roost, when the executor knows one (`MURMUR_ROOST_URL`); a launch may name its own. */
  roostUrl?: string | undefined;
  /** roost's token (`MURMUR_ROOST_TOKEN`): what registering a session without an approval needs of a roost that has one. */
  roostToken?: string | undefined;
  /** This machine's blobs and bundles: what the plan names by content, fetched and verified here. */
  blobs: BlobCache;
  bundles: LocalBundles;
  /** Where a session gets its directory when its launcher names none (`<base>/workdir/<session>`). */
  workdirBase: string;
  /** This executor's `$MURMUR_HOME`: where threaded conversations are kept (`conversations/`). */
  murmurHome: string;
  /** What a launcher's workdir may neither lie in nor hold: the home, the cache, the sessions' own directories. */
  executorState: readonly string[];
  /** The executor's numbers from its environment (`settings.ts`), read at its start. */
  settings: ExecutorSettings;
  /** This machine's own values of the subprocess baseline (`SUBPROCESS_BASELINE`): what a tool here starts from. */
  hostBaseline: Readonly<Record<string, string>>;
  /** Warm capsule hosts (`MURMUR_EXECUTOR_POOL`), for the launches that can take one. */
  pool?: HostPool | undefined;
  /** The capsule host's entry when it is not the runtime's own (`HOST_ENTRY`): a test's host that misbehaves. */
  hostEntry?: string | undefined;
  /**
   * The node an unsealed host runs (a sealed one's is its helper's): the execute-only copy
   * (`executeOnlyNode`), so its tools, the same user beside it, cannot read its memory; this
   * process's own node where the copy could not be made (`hostNodeNote` says why).
   */
  hostNode?: string | undefined;
  hostNodeNote?: string | undefined;
  /** A session this executor runs, for a child to be placed under its `children/`. */
  session(id: string): Session | undefined;
  /** How many delegated sessions each delegation tree has here (`MURMUR_DELEGATION_MAX_TREE`). */
  delegationTrees: DelegationTrees;
  /** Handles a host's request to pull an artifact at runtime. */
  pull?(session: Session, name: string, version: string): Promise<{ ok: true; value: { tool: HostTool } } | { ok: false; error: string }>;
}

type LaunchRequest = z.output<typeof LaunchRequestSchema>;

/**
 * The host as bundled when the build made the bundle (it starts several times faster), else its
 * modules; by its real path, which is where a sandbox binds it (`runtimeCode`), not by a
 * workspace's link in node_modules.
 */
export const HOST_ENTRY = ((): string => {
  const bundled = packageFile('@murmur/executor', 'dist/bundle/host.cjs', import.meta.url, '../dist/bundle/host.cjs');
  const entry = existsSync(bundled) ? bundled : packageFile('@murmur/executor', 'dist/host/boot.js', import.meta.url, '../dist/host/boot.js');
  return existsSync(entry) ? realpathSync(entry) : entry;
})();
/** Where this runtime's code and its dependencies live: bound read-only into every sandbox. */
export const CODE_ROOT = findCodeRoot(path.dirname(HOST_ENTRY));
/** The repository's caches and history, hidden in every sandbox. */
export const SANDBOX_HIDDEN = [path.join(CODE_ROOT, '.cache'), path.join(CODE_ROOT, '.git')];
/**
 * The capsule host's own environment: nothing of the executor's (what a guest sees arrives in
 * `start`). Read when a host starts, never when this module loads: `mur` is evaluated into a V8
 * startup snapshot at build time, and a value read then would be the build's.
 */
export function hostProcessEnv(): NodeJS.ProcessEnv {
  return { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8', ...(process.env.MURMUR_TIMING ? { MURMUR_TIMING: '1' } : {}) };
}
/**
 * What a session ended by a stop (`mur stop`, a signal to its host, its launcher interrupted)
 * tells whoever reads its end: `E-SES-005`, never a trap's `E-RUN-001` (upstream's code for what
 * the capsule's own code did), so a script or `mur trace report` can tell the two apart.
 */
const STOPPED = 'E-SES-005';
const STOPPED_HINT =
  "nothing in the capsule failed: it was stopped; its records stay in its workdir on the executor that ran it (unless that executor's container was removed with it), and running it again starts a new session";
const READY_TIMEOUT_MS = 30_000;
/** A pooled host taken while it was still starting: how long it may take to be ready, before a fresh one is started instead. */
const POOLED_READY_TIMEOUT_MS = 10_000;
/** How long a session's last spans may take to leave after its end, before they are given up. */
const TELEMETRY_DRAIN_MS = 1_500;
/** A door call the host does not answer in this long is answered for it (the host answers from memory, at once). */
const RPC_TIMEOUT_MS = 10_000;
const STDERR_TAIL_LINES = 20;
/** How long after a host's exit its channel may take to give up what it still holds. */
const LAST_FRAMES_WAIT_MS = 2_000;
/** The session's group bounds the host too: what it may use beyond the tools' and the guests' memory. */
const HOST_MEMORY_BUDGET_BYTES = 1024 * 1024 * 1024;
/** …and the host's own threads and workers beyond the tools' tasks. */
const HOST_TASKS_BUDGET = 256;
/**
 * The host's requests that may wait long on something outside the session — an A2A peer, roost
 * and a child's launch, a stager's download — and how many of one session's the executor works on
 * at once (`http` has its own bound, the response bodies it may hold). A host is a stranger: without
 * a bound, one that sends thousands holds that many of the executor's sockets, or has the stager
 * download that many artifacts, for every session on the machine.
 */
const SLOW_HOST_OPS: ReadonlySet<string> = new Set(['send', 'delegate', 'pull']);
const SLOW_HOST_REQUESTS_IN_FLIGHT = 16;
/**
 * How many of a session's requests of its records (`wholeRecordRequest`) the executor holds at
 * once, the one answered among them: they are answered one at a time, each holding a whole record.
 */
const RECORD_REQUESTS_HELD = 8;

function findCodeRoot(from: string): string {
  let dir = from;
  for (;;) {
    if (existsSync(path.join(dir, 'node_modules', '@bytecodealliance', 'preview2-shim'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return path.resolve(from, '..', '..', '..');
    dir = parent;
  }
}

export interface SessionEnd {
  status: ExitStatus;
  exitCode: number | null;
  signal: string | null;
  error?: WireError | undefined;
}

/**
 * What an executor keeps of a session that ended here, for as long as it keeps any
 * (`ENDED_SESSIONS_KEPT`): where its workdir is (`mur files`), how to record a delegated child's
 * completion in it, and its spans' drain. Not the session itself, which holds its host's process
 * handle and pipes, its sandbox's network and its buffers: ~40 KB each, of which an executor kept
 * ten thousand.
 */
export interface EndedSession {
  readonly id: string;
  /** What its `session.ended` said, when it was announced. */
  readonly announcement: SessionEnded | undefined;
  readonly paths: SessionPaths;
  readonly telemetryDrained: Promise<void>;
  recordCompletion(outcome: DelegationOutcome, post: boolean): Promise<DelegationOutcome>;
}

/** Where a delegated child's completion is recorded, and whom it is posted to. */
interface CompletionPlace {
  id: string;
  spawner: SpawnerHandle | undefined;
  paths: SessionPaths | undefined;
  bootstrap: LogFile | undefined;
  bus: Bus;
}

/** Records a delegated child's completion in its workdir, and posts it to its spawner when `post`. */
async function recordChildCompletion(place: CompletionPlace, outcome: DelegationOutcome, post: boolean): Promise<DelegationOutcome> {
  const { spawner, paths } = place;
  if (!spawner || !paths) throw new MurmurError('E-DLG-003', `session ${place.id} was not launched as a delegated child, so it has no completion to record`);
  const resultPath = childResultPath(paths.accessible, paths.sessionDir);
  const located: DelegationOutcome = { ...outcome, workdir: paths.accessible, ...(resultPath ? { result_path: resultPath } : {}) };
  if (!post) return recordTerminated(located, paths.accessible);
  return reportCompletion(spawner, located, paths.accessible, (line) => place.bootstrap?.line(line), { bus: place.bus });
}

export class Session {
  readonly id: string;
  paths!: SessionPaths;
  private child: ChildProcess | undefined;
  /** The host's channel (`host-link.ts`): set with `child`. */
  private link: HostLink | undefined;
  /** The warm host this session took, until its workdir is attached (`host-pool.ts`). */
  private pooled: { host: PooledHost; attaching: Promise<void> } | undefined;
  /** What the launch found of the pool, for the bootstrap log: written when the host is started. */
  private poolNote: string | undefined;
  /** Whether the host sent a trace line that is not a record (`refuseTraceLine`): said once. */
  private traceLineRefused = false;
  /** The directory the launcher chose for the workdir, if it chose one. */
  private launcherWorkdir: string | undefined;
  private cgroup: SessionCgroup | undefined;
  /** A sealed sandbox's network, served here. */
  private network: SandboxNetwork | undefined;
  private workdirGuard: WorkdirGuard | undefined;
  private egress!: EgressPolicy;
  /** Every decision about a way out of the sandbox: the trace, the metrics, the spans, the bus. */
  private readonly egressRecords: EgressRecords;
  /** The host's requests to leave, judged by `egress`, made here and recorded. */
  private readonly hostEgress: HostEgress;
  private trace!: TraceWriter;
  private telemetry: SessionTelemetry | undefined;
  /** The session's spans exported (or given up on) after its end: what a stopping executor waits for. */
  telemetryDrained: Promise<void> = Promise.resolve();
  private bootstrap!: LogFile;
  /** What this machine says of the capsule at launch (`W-SEC-012`): in the launch's reply and the bootstrap log. */
  private launchWarnings: MurmurWarning[] = [];
  /** The host's stdout and stderr, from its start until its pipes close (or the session's end). */
  private hostLog: LogFile | undefined;
  /** Where the executor's own records go: beneath the workdir's root, never through a link the guest made. */
  private recordsOutside!: RecordsOutsideSandbox;
  /** What the host keeps of its contexts beyond the session: conversations, harness sessions. */
  private readonly contexts: SessionContexts;
  private result: (HostToExecutor & { type: 'result' }) | undefined;
  /** Its `session.ended`, once announced: answered again to a launcher that missed it (`executor.<id>.ended`). */
  private announcement: SessionEnded | undefined;
  private hardLimit: NodeJS.Timeout | undefined;
  private killedFor: WireError | undefined;
  /**
   * The executor's own verdict stands over whatever result the host sent: a host that broke its
   * channel, outran the hard limit or ignored a ceiling may have said `ok` first.
   */
  private resultOverruled = false;
  /** Armed when the workdir crossed its ceiling: the session is killed if it has not ended by then. */
  private ceilingKill: NodeJS.Timeout | undefined;
  private startedAt = Date.now();
  private processStart = '';
  /** A stop asked for before the host was there: it is stopped as soon as it is (`watchHost`). */
  private stopAsked: string | undefined;
  private tools: HostTool[] = [];
  /** Every component the host may load, on this machine: their bundles are bound into the sandbox. */
  private components: HostComponent[] = [];
  /** Artifacts this session pulled at run time, pinned from then on. */
  readonly pulledPins: LockedArtifact[] = [];
  /** The last pull in flight of each name: the one a new pull of that name waits for (`pullForSession`). */
  readonly pullTurns = new Map<string, Promise<void>>();
  /** While the launch waits for its host to start: ends that wait, refusing the launch with `reason`. */
  private endHandshake: ((reason: WireError) => void) | undefined;
  /** Whether `session.started` was sent: the heartbeat lists the session from then on (`identity`). */
  private startAnnounced = false;
  private rpcSubscription: Subscription | undefined;
  private readonly pendingRpc = new Map<number, (reply: SessionReply) => void>();
  private nextRpcId = 1;
  private onHostEvent: (event: SessionEvent) => void = () => {};
  /** When each task still running was first heard of, for its latency. */
  private readonly taskSeen = new Map<string, number>();
  /** Each running task's latest inference turn, for `session.activity`. */
  private readonly taskTurns = new Map<string, number>();
  /** The session's last stderr lines: the capsule's, the host's, and the runtime's about it. */
  private readonly stderrTail: string[] = [];
  /** The session's roost registration and the children it delegates to, ended with it. */
  readonly delegations: SessionDelegations;
  /**
   * The session's own door token: given to the launcher alone, in the launch reply, and checked
   * here when a door asks (`authorize`). The host and the records never see it.
   */
  private readonly token = newSessionToken();
  private readonly tokenCheck = tokenMatcher([this.token]);
  readonly ended: Promise<SessionEnd>;
  private resolveEnded!: (end: SessionEnd) => void;

  constructor(
    private readonly environment: ExecutorEnvironment,
    readonly request: LaunchRequest,
  ) {
    this.id = request.session_id;
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
    this.delegations = new SessionDelegations({
      id: this.id,
      request,
      environment,
      floor: () => this.floor,
      traceparent: () => this.telemetry?.traceparent,
      // A warning of the session's delegations (roost would not register it) is its launcher's to see.
      warn: (line) => this.tellLauncher(line),
      note: (line) => this.bootstrap.line(line),
      callHost: (call) => this.callHost(call),
    });
    this.egressRecords = new EgressRecords({
      sessionId: this.id,
      executorId: environment.executorId,
      bus: environment.bus,
      log: environment.log,
      trace: () => this.trace,
      telemetry: () => this.telemetry,
    });
    this.hostEgress = new HostEgress({ policy: () => this.egress, records: this.egressRecords, traceparent: () => this.telemetry?.traceparent });
    this.contexts = new SessionContexts(this.id, environment.settings.harnessTranscriptMaxBytes);
  }

  get plan() {
    return this.request.plan;
  }

  /** Whether the capsule can start native subprocesses, which only a real sandbox may allow. */
  private canSpawn(): boolean {
    return canSpawnSubprocesses({
      shellAllow: this.plan.policy.shell_allow,
      artifacts: this.plan.artifacts,
      harness: this.plan.capsule.manifest.inference?.transport === 'process',
    });
  }

  /** The session's containment: the strongest floor it was given, against what this host achieves. */
  get containment(): ContainmentAssessment {
    const { namespaces, confine } = this.environment;
    return assessContainment(hostContainment(namespaces, confine), this.plan.policy, this.floor);
  }

  /**
   * The floor the session must run at: the manifest's and the launcher's (`--containment`, workspace
   * config; for a delegated child, its parent's own floor, which the parent's runtime puts in the
   * delegation's launch — a floor the user set on the command line binds the children too).
   */
  get floor(): Containment {
    return strongestFloor(this.plan.policy.containment, this.request.containment_floor);
  }

  /** Refusals decided before anything is written: what this host cannot do for this capsule. */
  private checkHost(): void {
    const [refusal] = subprocessRefusals(this.canSpawn(), this.environment);
    if (refusal) throw refusal;
    const containment = this.containment;
    if (!containment.floorMet) throw containmentRefusal(containment);
    // A staged runtime is bound into the composed root, which only a declared sealed floor builds.
    const stagedBelowSealed = stagedRuntimeFloorRefusal(this.plan.policy, containment.declared);
    if (stagedBelowSealed) throw stagedBelowSealed;
    for (const grant of this.plan.policy.staged_runtime) {
      if (!existsSync(grant.source_path)) {
        throw new MurmurError(
          'E-RUN-014',
          `the sealed containment class was achievable at launch but its composed root could not be built for this session: capabilities.shell.staged_runtime names ${grant.source_path} for '${grant.binary}', which does not exist on this host`,
          {
            hint: 'install the pinned runtime tree at that path on the executor, or remove the staged_runtime grant',
            path: 'capabilities.shell.staged_runtime',
          },
        );
      }
    }
    const parentWorkdir = this.request.child_of ? this.environment.session(this.request.child_of.session_id)?.paths?.accessible : undefined;
    assertRuntimeGrantsContained(
      this.plan.policy,
      [
        ...this.environment.executorState,
        path.join(this.request.default_workdir_base ?? this.environment.workdirBase, 'workdir'),
        ...[this.request.workdir, parentWorkdir].filter((dir): dir is string => dir !== undefined),
      ],
      // Without the seal's seccomp filter nothing refuses a unix socket that was not granted.
      {
        socketsMade: this.plan.policy.unix_sockets || containment.tier !== 'mountns+pivot_root+landlock+seccomp',
        roots: this.environment.settings.runtimeGrantRoots,
      },
    );
  }

  /**
   * The directory the session is given: a delegated child's under its parent's `children/` (the
   * parent is a session of this executor: that is why children run where their parents do), else
   * the launcher's `--workdir`, else a fresh one under the base.
   */
  private async chosenWorkdir(): Promise<string | undefined> {
    const childOf = this.request.child_of;
    if (!childOf) return this.request.workdir;
    const parent = this.environment.session(childOf.session_id);
    if (!parent?.paths) {
      throw new MurmurError(
        'E-DLG-003',
        `the parent session ${childOf.session_id} does not run on executor ${this.environment.executorId}, so its child cannot be placed under its children/`,
        {
          hint: "a delegated child is launched on its parent's executor (executor.<id>.launch)",
        },
      );
    }
    // Made beneath the parent's workdir root: its guest sees children/ read-only, and an earlier
    // guest of a reused workdir may have put a link there.
    const dir = path.join(childrenDirIn(parent.paths.sessionDir), childOf.name);
    mkdirBeneath(parent.paths.accessible, dir);
    return dir;
  }

  /** Launches the session inside an `executor.launch` span, which a session without a caller continues. */
  launch(): Promise<LaunchReply> {
    const plan = this.plan;
    return traced(
      'executor.launch',
      {
        parent: this.request.traceparent,
        attributes: {
          'murmur.session_id': this.id,
          'murmur.capsule': `${plan.capsule.name}@${plan.capsule.version}`,
          'murmur.executor_id': this.environment.executorId,
        },
      },
      (span) => this.launchWithin(span.traceparent ?? this.request.traceparent),
    );
  }

  private async launchWithin(launchTraceparent: string | undefined): Promise<LaunchReply> {
    this.checkHost();
    const plan = this.plan;
    // A script capsule answers no tasks, so it has no conversation to continue: a context given to
    // it would be dropped without a word, and one to resume would "resume" nothing.
    if (plan.capsule.kind !== 'agent' && this.request.context_id !== undefined)
      throw new MurmurError(
        'E-CTX-001',
        `${plan.capsule.name} is a script capsule, which answers no tasks and records no conversation: context '${this.request.context_id}' has nothing to ${this.request.resume ? 'resume' : 'continue'}`,
        { hint: '--context and --resume are for agent capsules (a manifest with an inference: block); run this one without them' },
      );
    for (const warning of plan.warnings) this.stderrLine(`warning[${warning.code}]: ${warning.message}`);
    await this.delegations.register();
    const { blobs, bundles } = this.environment;
    const label = `${plan.capsule.name}@${plan.capsule.version}`;
    const capsuleComponent = plan.capsule.component ? await bundles.local(plan.capsule.component, label) : undefined;
    this.launcherWorkdir = await this.chosenWorkdir();
    const { paths, tools } = await materialiseWorkdir(
      plan,
      {
        sessionId: this.id,
        workdir: this.launcherWorkdir,
        defaultBase: this.request.default_workdir_base ?? this.environment.workdirBase,
        task: this.request.task,
        madeInGuestTree: this.request.child_of !== undefined,
        // What the launcher chose, a workdir or a base of its own, is kept apart from the executor's state;
        // a child's directory, which the executor made under its parent's, is not the launcher's choice.
        ...(this.request.child_of === undefined &&
        (this.request.workdir !== undefined ||
          (this.request.default_workdir_base !== undefined && path.resolve(this.request.default_workdir_base) !== this.environment.workdirBase))
          ? { executorState: this.environment.executorState }
          : {}),
      },
      { blobs, bundles },
    );
    const drivers = new Map<string, HostComponent>();
    const hooks = new Map<string, HostComponent>();
    for (const artifact of plan.artifacts) {
      if ((artifact.role === 'driver' || artifact.role === 'hook') && artifact.component) {
        const component = await bundles.local(artifact.component, `${artifact.name}@${artifact.version}`);
        (artifact.role === 'driver' ? drivers : hooks).set(artifact.name, component);
      }
    }
    this.components = [capsuleComponent, ...drivers.values(), ...hooks.values(), ...tools.map((tool) => tool.component)].filter(
      (component): component is HostComponent => component !== undefined,
    );
    this.paths = paths;
    this.tools = tools;
    // Where the host's /tmp is bound, warm or fresh.
    mkdirBeneath(paths.accessible, sandboxTmp(paths.accessible));
    this.takePooledHost();
    this.recordsOutside = recordsOutside(paths.accessible, this.environment.log, this.id);
    this.trace = new TraceWriter(paths.sessionDir, this.id, (record) => this.telemetry?.observe(record), this.recordsOutside);
    this.bootstrap = new LogFile(paths.sessionDir, 'bootstrap.log', this.recordsOutside, { held: true, oneLine: true });
    this.egress = new EgressPolicy(plan, { own: await this.environment.ownEndpoints() });
    const capsuleCollector = resolveManifestSecrets(plan.capsule.manifest, this.request.env).observability?.otel_endpoint;
    this.telemetry = await SessionTelemetry.open({
      capsule: plan.capsule,
      endpoint: capsuleCollector,
      endpointRefusal: (url) => {
        const verdict = this.egress.judgeHttp(url, 'capsule');
        return verdict.allowed ? undefined : verdict;
      },
      // Looked up for the port the traces go to: the endpoint as written may name none (`collector:4318` has no scheme).
      capsuleLookup: this.egress.lookupToUrl(capsuleCollector === undefined ? undefined : otelTracesUrl(capsuleCollector)),
      operatorEndpoint: this.environment.otelEndpoint,
      sessionDir: paths.sessionDir,
      recordsOutside: this.recordsOutside,
      launchTraceparent,
    });
    this.bootstrap.line(
      `[bootstrap] session ${this.id}: ${plan.capsule.name}@${plan.capsule.version} (${plan.capsule.kind} capsule) on executor ${this.environment.executorId}`,
    );
    this.bootstrap.line(`[bootstrap] accessible workdir ${paths.accessible}; preopen ${paths.preopen}; session dir ${paths.sessionDir}`);
    const containment = this.containment;
    const { confine, cgroups } = this.environment;
    this.bootstrap.line(
      `[bootstrap] containment: ${containment.achieved} (${containment.tier}), declared ${containment.declared}${confine.reason ? `; not sealed: ${confine.reason}` : ''}; cgroup: ${cgroups.support?.version ?? `none (${cgroups.reason})`}`,
    );
    if (this.canSpawn())
      for (const gap of unenforcedForTools(containment.tier, plan.policy)) this.bootstrap.line(`[containment] warning: the tools are not held to ${gap}`);
    // Asked of this machine's compilers, where the tools will run: the stager's may differ.
    this.launchWarnings = toolchainHelperGaps(plan.policy, containment.declared).map((gap) => ({ code: 'W-SEC-012', message: toolchainHelperWarning(gap) }));
    for (const warning of this.launchWarnings) this.bootstrap.line(`[containment] warning[${warning.code}]: ${warning.message}`);
    this.bootstrap.line(
      `[bootstrap] network allow: ${this.egress.describe('capsule')}; env allow: ${plan.policy.env_allow.join(', ') || 'nothing'}; shell allow: ${plan.policy.shell_allow.join(', ') || 'nothing'}`,
    );
    for (const warning of plan.warnings) this.bootstrap.line(`[staging] warning[${warning.code}]: ${warning.message}`);
    const runtimeOwned = [...new Set([...plan.policy.env_allow, ...plan.policy.shell_baseline_env].filter(isRuntimeOwned))];
    if (runtimeOwned.length > 0)
      this.bootstrap.line(
        `[capability-policy] ${runtimeOwned.join(', ')}: the runtime's own setting${runtimeOwned.length > 1 ? 's' : ''}, never given to a capsule (env.allow and shell.baseline_env pass none of MURMUR_* and OTEL_EXPORTER_OTLP_*)`,
      );

    const url = plan.capsule.kind === 'agent' ? (this.request.url ?? '') : '';
    // The runtime-owned tail: applied after everything the grants let through, so a capsule that
    // allowlists one of these names still gets the runtime's value — and a spawner handle reaches
    // a child only when its launch carries one, never from the launcher's own environment.
    const runtimeEnv: Record<string, string> = {
      MURMUR_CAPSULE_NAME: plan.capsule.name,
      MURMUR_CAPSULE_VERSION: plan.capsule.version,
      MURMUR_SESSION_ID: this.id,
      MURMUR_CAPSULE_URL: url,
      // Where roost is, not how to sign in to it: a user, password or query in the URL is the executor's.
      ...(this.delegations.roostUrl ? { MURMUR_ROOST_URL: shownUrl(this.delegations.roostUrl) } : {}),
      ...(this.request.spawner ? { [SPAWNER_ENV]: spawnerHandleToEnv(this.request.spawner) } : {}),
    };
    const launcherEnv = Object.fromEntries(Object.entries(this.request.env).filter(([name]) => name !== SPAWNER_ENV));
    let guestEnv = guestEnvironment(plan.policy, launcherEnv, runtimeEnv);
    let agent: AgentStart | undefined;
    if (plan.capsule.kind === 'agent') {
      const process = plan.capsule.manifest.inference?.transport === 'process';
      const records = ConversationRecords.of(this.environment.murmurHome, plan.capsule.name, plan.capsule.manifest.context?.record, (line) => {
        this.tellLauncher(line);
        this.bootstrap.line(line);
      });
      // On transport: process the harness holds the conversation; the runtime keeps only its session id.
      const command = plan.capsule.manifest.inference?.command ?? '';
      this.contexts.open({
        conversations: plan.lifecycle.conversation === 'threaded' && !process ? records : undefined,
        harnessSessions: process
          ? new HarnessSessions(records, { harness: 'claude-code', driver: command }, this.environment.settings.harnessTranscriptMaxBytes)
          : undefined,
      });
      const contextId = this.request.context_id;
      if (contextId !== undefined && this.request.resume) {
        if (!(await this.contexts.recorded(contextId)))
          throw new MurmurError('E-CTX-001', `no conversation is recorded for context '${contextId}' of ${plan.capsule.name}, so there is nothing to resume`, {
            hint: !isSafeContextId(contextId)
              ? `'${contextId.slice(0, 64)}' is not a plain name (${SAFE_CONTEXT_ID_RULE}), so nothing is ever recorded for it: name the context with one`
              : process
                ? `start it with 'mur run --context ${contextId}' (the harness session of each answered task is recorded)`
                : plan.lifecycle.conversation === 'threaded'
                  ? `start it with 'mur run --context ${contextId}' (a threaded capsule records its conversation after each answered task)`
                  : 'only a capsule with lifecycle.conversation: threaded keeps its conversations',
            path: process ? 'context.record' : 'lifecycle.conversation',
          });
        // Resumed, it would start afresh without a word: what was asked for is the conversation recorded.
        const unresumable = await this.contexts.unresumable(contextId);
        if (unresumable)
          throw new MurmurError(
            'E-CTX-001',
            `the conversation recorded for context '${contextId}' of ${plan.capsule.name} cannot be resumed: ${unresumable.reason}`,
            {
              hint: `move ${unresumable.file} aside to start the context afresh, or run with another --context`,
              path: unresumable.file,
            },
          );
      }
      // A flag that would do nothing here is said, not dropped: each names a conversation to keep or forget.
      if (contextId !== undefined && !process && plan.lifecycle.conversation !== 'threaded')
        this.tellLauncher(
          `warning: context '${contextId.slice(0, 64)}' names a conversation, and ${plan.capsule.name} keeps none (lifecycle.conversation is not threaded): each task starts afresh`,
        );
      if (this.request.forget_session && !process)
        this.tellLauncher(
          `warning: --forget-session forgets a harness's session (inference.transport: process); ${plan.capsule.name} calls its model itself, and its conversation of context '${(contextId ?? '').slice(0, 64)}' is kept`,
        );
      const launch = prepareAgentLaunch({
        plan,
        env: launcherEnv,
        sessionId: this.id,
        url,
        sessionDir: paths.sessionDir,
        accessible: paths.accessible,
        tools,
        driverComponent: (name) => drivers.get(name),
        hookComponent: (name) => hooks.get(name),
        systemPromptOverride: this.request.system_prompt,
        ...(this.request.eval_case ? { evalCase: this.request.eval_case } : {}),
        idleTimeoutMs: (this.request.a2a_timeout_secs ?? 30) * 1000,
        ...(this.request.forget_session && contextId !== undefined ? { forgetContext: contextId } : {}),
        runtimeEnv,
        harnessRunCapMs: this.environment.settings.harnessRunCapMs,
        harnessTranscriptMaxBytes: this.environment.settings.harnessTranscriptMaxBytes,
      });
      agent = { ...launch.agent, ...(contextId !== undefined ? { context_id: contextId } : {}) };
      guestEnv = launch.guestEnv;
      writeFileBeneath(
        paths.accessible,
        path.join(paths.sessionDir, 'MURMUR.md'),
        murmurMd(plan, {
          sessionId: this.id,
          url,
          runtimeVersion: RUNTIME_VERSION,
          promptSkill: launch.agent.system_prompt_artifact,
          toolsDir: path.join(paths.sessionDir, 'tools'),
        }),
      );
    }
    // Only what a subprocess's environment is made from (`subprocessEnvironment`): the host runs
    // inside the sandbox, so whatever else of the launcher's environment it were given (a secret
    // under a name no credential pattern matches) would be the capsule's to read.
    // The baseline (`PATH`, `HOME`, …) is this machine's, where the tools run; what the manifest's
    // `shell.baseline_env` names comes from the launcher, as its other values do.
    const declared = new Set<string>(plan.policy.shell_baseline_env);
    const subprocessBase = Object.fromEntries(
      [...Object.entries(this.environment.hostBaseline), ...Object.entries(launcherEnv).filter(([name]) => declared.has(name))].filter(([name]) =>
        isGivenToCapsules(name, plan.policy.shell_strip_env),
      ),
    );
    const start: StartMessage = {
      type: 'start',
      session_id: this.id,
      capsule_name: plan.capsule.name,
      capsule_version: plan.capsule.version,
      ...(capsuleComponent ? { component: capsuleComponent } : {}),
      ...(agent ? { agent } : {}),
      preopen: paths.preopen,
      accessible_workdir: paths.accessible,
      session_dir: paths.sessionDir,
      guest_env: Object.entries(guestEnv),
      subprocess_env: subprocessBase,
      policy: plan.policy,
      tools,
      // The system prompt's skill, while it is bound as the prompt, is not a tool (SPEC §1.6, removed
      // from callable tools): hidden from the model, and refused to a call that names it anyway.
      allowlist: plan.artifacts
        .filter((artifact) => artifact.role === 'tool' || artifact.role === 'skill')
        .map((artifact) => artifact.name)
        .filter((name) => name !== agent?.system_prompt_artifact),
      trace_include_tool_output: plan.capsule.manifest.trace?.include_tool_output === true || plan.capsule.manifest.trace?.capture === 'content',
      ...(this.request.spawner ? { spawned_by: this.request.spawner.session_id } : {}),
      effective_grants: {},
      // bubblewrap and unshare each start the host in a pid namespace of its own (`host-sandbox.ts`).
      ...(this.environment.namespaces.tool !== undefined ? { pid_namespace: true } : {}),
    };
    start.effective_grants = effectiveGrants(this.containment, plan.policy);
    this.spawnHost(start);
    await this.handshake(start);
    const reply: LaunchReply = {
      session_id: this.id,
      executor_id: this.environment.executorId,
      pid: this.child?.pid as number,
      process_start: this.processStart,
      workdir: paths.accessible,
      session_dir: paths.sessionDir,
      url: url || null,
      started_at: new Date(this.startedAt).toISOString(),
      isolation: this.containment.tier,
      ...(this.canSpawn() ? { not_enforced_for_tools: unenforcedForTools(this.containment.tier, plan.policy) } : {}),
      ...(this.launchWarnings.length > 0 ? { warnings: this.launchWarnings } : {}),
      token: this.token,
    };
    // Listed in the heartbeat from here on: a watcher that heard it start and then a heartbeat
    // without it takes it to have ended (`executors.ts`, the dashboard's board).
    this.startAnnounced = true;
    this.environment.bus.publish(topics.sessionStarted, {
      session_id: this.id,
      capsule_name: plan.capsule.name,
      capsule_version: plan.capsule.version,
      executor_id: this.environment.executorId,
      pid: reply.pid,
      process_start: reply.process_start,
      workdir: paths.accessible,
      url: reply.url,
      started_at: reply.started_at,
      outlives_launcher: this.request.outlives_launcher,
      ...(this.request.spawner ? { spawned_by: this.request.spawner.session_id, delegation_id: this.request.spawner.delegation_id } : {}),
      trace_file: traceFileInWorkdir(paths),
    });
    // The door may be asked for the session the moment the launch is answered: the subscription
    // must be on the server first, or the first call finds nobody answering.
    if (agent) await this.relayDoorCalls();
    // A script capsule runs once, so its whole life is bounded; an agent's guest calls each have
    // their deadline, and a sleeping agent lives until it is stopped.
    if (plan.capsule.kind === 'script') this.armHardLimit();
    return reply;
  }

  private armHardLimit(): void {
    const plan = this.plan;
    const graceMs = this.environment.settings.hardLimitGraceMs;
    this.hardLimit = setTimeout(
      () => {
        this.kill(
          {
            code: 'E-RUN-001',
            message: `capsule session exceeded its hard limit (${plan.policy.limits.deadline_seconds}s deadline + ${graceMs / 1000}s) and was killed as a whole`,
            hint: 'the capsule host did not stop at its deadline; its whole process group was killed',
            path: 'capabilities.limits.deadline_seconds',
          },
          { overrule: true },
        );
      },
      // Both parts fit a timer; their sum may not, and past it node fires at once.
      Math.min(plan.policy.limits.deadline_seconds * 1000 + graceMs, LONGEST_TIMER_MS),
    );
    this.hardLimit.unref();
  }

  /**
   * The session's door calls: `session.<id>.rpc` relayed to the host and answered with its
   * reply; the host's feed published on `session.<id>.events`. Only this executor holds the
   * session, so the subscription is not a queue group.
   */
  private async relayDoorCalls(): Promise<void> {
    const bus = this.environment.bus;
    const events = topics.sessionEvents.at(this.id);
    this.onHostEvent = (event) => {
      this.countTask(event);
      this.announceActivity(event);
      // The event's size is the guest's to decide; a refusal by the bus must stay this session's.
      try {
        bus.publish(events, fitEventForBus(event));
      } catch (error) {
        this.environment.log.warn({ session_id: this.id, err: error, event_id: event.id }, 'a feed event could not be published; streaming clients miss it');
      }
    };
    this.rpcSubscription = bus.serve(commands.sessionRpc.at(this.id), (call) => this.callHost(call));
    await bus.flush();
  }

  /**
   * A task's first event starts its clock; its final one counts it, by state, with its latency —
   * on the executor's clock, as the events arrive: an event's `time` is the host's to write, and a
   * time that does not parse (NaN) or one a century off would land in a metric every session shares.
   */
  private countTask(event: SessionEvent): void {
    if (event.type !== 'status' || event.task_id === null) return;
    const now = Date.now();
    const first = this.taskSeen.get(event.task_id);
    if (first === undefined) rememberBounded(this.taskSeen, event.task_id, now);
    if (!event.final) return;
    this.taskSeen.delete(event.task_id);
    runtimeMetrics().taskEnded(event.state ?? 'unknown', (now - (first ?? now)) / 1000);
  }

  /**
   * A status event told again as `session.activity`: the task, its state and its inference turn,
   * and nothing of what the feed says besides — the feed carries the task's words, this only counts.
   * The host's progress message names the turn (`inference turn N`, agent-loop and harness-loop).
   */
  private announceActivity(event: SessionEvent): void {
    if (event.type !== 'status' || event.task_id === null || event.state === undefined) return;
    // The host names the task: only an id of the runtime's own shape is passed on (a host's
    // 600 KB "id" went to every dashboard), stamped with the executor's clock, not the host's.
    if (!TaskIdSchema.safeParse(event.task_id).success) return;
    const message = (event.data.status as { message?: unknown } | undefined)?.message;
    const turn = typeof message === 'string' ? /^inference turn (\d+)$/.exec(message)?.[1] : undefined;
    if (turn !== undefined) rememberBounded(this.taskTurns, event.task_id, Number(turn));
    try {
      this.environment.bus.publish(topics.sessionActivity, {
        session_id: this.id,
        executor_id: this.environment.executorId,
        task_id: event.task_id,
        state: event.state,
        turn: this.taskTurns.get(event.task_id) ?? null,
        at: new Date().toISOString(),
      });
    } catch (error) {
      // What only a dashboard reads never stands between the host's feed and its doors.
      this.environment.log.warn({ session_id: this.id, err: error }, 'could not announce a task’s activity');
    }
    if (event.final) this.taskTurns.delete(event.task_id);
  }

  private callHost(call: SessionCall): Promise<SessionReply> {
    if (call.method === 'authorize') return Promise.resolve(this.authorize(call.session_token_sha256));
    if (!this.link?.open) return Promise.resolve({ error: { code: -32603, message: 'Internal error: the session is ending' } });
    if (call.method === 'send') this.contexts.messageRelayed();
    const id = this.nextRpcId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pendingRpc.delete(id);
        resolve({ error: { code: -32603, message: `Internal error: the capsule host did not answer within ${RPC_TIMEOUT_MS / 1000}s` } });
      }, RPC_TIMEOUT_MS);
      this.pendingRpc.set(id, (reply) => {
        clearTimeout(timer);
        resolve(reply);
      });
      this.tellHost({ type: 'rpc', id, call }, () => {
        this.pendingRpc.delete(id);
        clearTimeout(timer);
        resolve({ error: { code: -32603, message: 'Internal error: the session is ending' } });
      });
    });
  }

  /**
   * A message to the capsule host. One that cannot be delivered (the host is exiting, its pipe
   * already broken) is dropped — the host's exit is handled where it exits — and `undelivered` is
   * told; it never becomes an error event, which would take the executor down with the session.
   */
  private tellHost(message: object, undelivered?: () => void): void {
    const link = this.link;
    if (!link?.open) {
      undelivered?.();
      return;
    }
    link.send(message, undelivered);
  }

  /** A door asking whether a bearer token is this session's own: an empty reply says it is. */
  private authorize(presentedDigest: string): SessionReply {
    if (this.tokenCheck.admitsDigest(presentedDigest)) return {};
    return { error: { code: RPC_ERRORS.invalidRequest, message: 'Unauthorized: not this session’s token', data: { murmur_code: 'E-DOOR-003' } } };
  }

  /** The session's ceilings: the whole session's (tools, guests and the host's own) and the tools'. */
  private ceilings(): { session: SessionCeilings; tools: ToolCeilings } {
    const { resources, limits } = this.plan.policy;
    return {
      session: {
        memoryBytes: resources.cgroup_memory_bytes + limits.memory_bytes + HOST_MEMORY_BUDGET_BYTES,
        pidsMax: resources.cgroup_pids_max + HOST_TASKS_BUDGET,
      },
      tools: { memoryBytes: resources.cgroup_memory_bytes, pidsMax: resources.cgroup_pids_max, cpuPercent: resources.cgroup_cpu_percent },
    };
  }

  /**
   * Takes a warm host from the pool, when this session can have one, as soon as its workdir and
   * components are known: the helper mounts the workdir in, and the host loads what the guest runs
   * first, while the launch still prepares the rest (telemetry, MURMUR.md, the start message). A
   * launch that fails after this throws the host away (`kill`); it never goes back to the pool.
   * Whatever it found is said in the bootstrap log when the host is started (`spawnHost`).
   */
  private takePooledHost(): void {
    const pool = this.environment.pool;
    if (!pool) return;
    const plan = this.plan;
    const refusal = poolRefusal(pool.environment, {
      canSpawn: this.canSpawn(),
      harness: plan.capsule.kind === 'agent' && plan.capsule.manifest.inference?.transport === 'process',
      policy: plan.policy,
      chosenWorkdir: this.launcherWorkdir !== undefined,
      base: this.request.default_workdir_base ?? this.environment.workdirBase,
      accessible: this.paths.accessible,
      components: this.components,
    });
    const host = refusal === undefined ? pool.take() : undefined;
    if (!host) {
      this.poolNote = `[sandbox] a fresh host: ${refusal ?? 'no warm host was ready in the pool'}`;
      return;
    }
    try {
      // The group is the session's from here: its name and its ceilings, before the host runs anything.
      host.cgroup?.rename(`murmur-${this.id}`);
      const { session, tools } = this.ceilings();
      host.cgroup?.limit(session, tools);
      this.cgroup = host.cgroup;
      // The capsule's own component, or an agent's driver: what the guest's first instruction waits for.
      const first = this.components[0];
      const expectation = first
        ? {
            component: first,
            memoryLimitBytes: plan.policy.limits.memory_bytes,
            tableElementsLimit: plan.policy.limits.table_elements,
            agent: plan.capsule.kind === 'agent',
          }
        : undefined;
      const ahead = expectation ? host.expect(expectation) : false;
      if (expectation) pool.anticipate(expectation);
      const attaching = host.attach(this.paths.accessible, recordBinds(this.paths));
      // Awaited only when the host is adopted; a launch refused before that must not leave it unheard.
      attaching.catch(() => {});
      this.pooled = { host, attaching };
      this.poolNote = '[sandbox] a warm host from the executor’s pool (sealed before this session; its workdir mounted in now)';
      // The executor's own log, not the session's: the guest reads its bootstrap log, and
      // whether its host was told of it ahead says what the last launch here ran.
      if (ahead) this.environment.log.info({ session_id: this.id }, 'the warm host was told this capsule’s component ahead: the pool’s last launch ran it');
    } catch (error) {
      this.environment.log.warn({ session_id: this.id, err: error }, 'a pooled capsule host could not take the session; starting a fresh one');
      this.poolNote = `[sandbox] a fresh host: the warm one could not take the session (${error instanceof Error ? error.message : String(error)})`;
      this.letPooledHostGo(host);
    }
  }

  /** Throws away a pooled host this session took and will not run on; its group carries the session's name. */
  private letPooledHostGo(host: PooledHost): void {
    void host.discard();
    if (this.cgroup === host.cgroup) this.cgroup = undefined;
    this.pooled = undefined;
  }

  /** Starts the capsule host: the warm one taken from the pool (adopted in `handshake`), else a fresh one. */
  private spawnHost(start: StartMessage): void {
    if (this.poolNote) this.bootstrap.line(this.poolNote);
    if (this.pooled) return;
    this.spawnFreshHost(start);
  }

  /** Starts a fresh capsule host in its sandbox: its cgroups first, so nothing it forks escapes them. */
  private spawnFreshHost(start: StartMessage): void {
    const { cgroups } = this.environment;
    if (cgroups.support) {
      const { session, tools } = this.ceilings();
      this.cgroup = SessionCgroup.create(cgroups.support, `murmur-${this.id}`, session, tools);
      if (this.canSpawn()) this.throttleToolsIo(this.cgroup);
    }
    try {
      this.spawnInSandbox(start);
    } catch (error) {
      // Refused before a host ran (a path the sandbox cannot name, a spawn that failed): its
      // groups go with the launch, which no host's exit will clean up after.
      void this.cgroup?.discard();
      this.cgroup = undefined;
      throw error;
    }
  }

  /** `cgroup_io_bytes_per_sec` on the workdir's disk, best-effort: what does not hold is said in the session's log. */
  private throttleToolsIo(cgroup: SessionCgroup): void {
    const bytesPerSec = this.plan.policy.resources.cgroup_io_bytes_per_sec;
    const disk = throttleDevice(this.paths.accessible);
    const unapplied = 'device' in disk ? cgroup.throttleToolsIo(disk.device, bytesPerSec) : disk.unresolved;
    if (unapplied !== undefined)
      this.bootstrap.line(`[sandbox] note: cgroup_io_bytes_per_sec not applied (${unapplied}); the tools' memory, pids and CPU ceilings still hold`);
  }

  private spawnInSandbox(start: StartMessage): void {
    const plan = this.plan;
    if (this.environment.hostNodeNote && this.canSpawn()) this.bootstrap.line(`[sandbox] warning: ${this.environment.hostNodeNote}`);
    const { namespaces, confine } = this.environment;
    const sandbox = hostSandbox({
      namespaces,
      confine: confine.support,
      policy: plan.policy,
      workdir: this.paths.accessible,
      records: recordBinds(this.paths),
      codeRoot: CODE_ROOT,
      hidden: SANDBOX_HIDDEN,
      components: this.components,
      tools: this.tools,
      hostEntry: this.environment.hostEntry ?? HOST_ENTRY,
      ...(this.environment.hostNode ? { node: this.environment.hostNode } : {}),
      cgroup: this.cgroup,
      subprocessPath: start.subprocess_env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
      ...(start.agent?.harness ? { harness: { binary: start.agent.harness.binary } } : {}),
    });
    if (sandbox.start) start.sandbox = sandbox.start;
    if (sandbox.unsealedToolCgroupFds && this.canSpawn()) {
      const prlimit = PRLIMIT_CANDIDATES.find((candidate) => existsSync(candidate));
      start.unsealed_tools = { cgroup_fds: sandbox.unsealedToolCgroupFds, ...(prlimit ? { prlimit } : {}) };
      if (!prlimit)
        this.bootstrap.line(
          "[sandbox] warning: no prlimit (util-linux) here: the tools' rlimits (cpu_seconds, max_file_size_bytes, memory_bytes, max_open_files) are not set below sealed; their cgroup still holds them",
        );
    }
    if (sandbox.network) this.serveNetwork(sandbox.network);
    this.watchHost(new HostLink(spawnSandboxedHost(sandbox, { cgroup: this.cgroup, cwd: this.paths.accessible, env: hostProcessEnv() })), []);
  }

  /**
   * A trace line from the host that is not a record: not written, and said once in the executor's
   * log (a host sends none unless the capsule broke into it).
   */
  private refuseTraceLine(line: string): void {
    if (this.traceLineRefused) return;
    this.traceLineRefused = true;
    this.environment.log.warn(
      { session_id: this.id, line: line.slice(0, 200) },
      'the capsule host sent a trace line that is not a trace record; it and any more like it are not written to trace.jsonl',
    );
  }

  /** The sealed sandbox's DNS and listeners, answered and judged here. */
  private serveNetwork(plan: NetworkPlan): void {
    this.network = new SandboxNetwork({
      plan,
      judge: (host, port) => this.egress.judgeTcp(host, port),
      record: (record) => this.egressRecords.network(record),
      lookupTo: (port) => this.egress.lookupTo(port),
    });
    for (const skipped of plan.skipped) this.bootstrap.line(`[capability-policy] network allow entry gets no listener in the sealed sandbox: ${skipped}`);
  }

  /** The session's side of its host: its output in `host.log`, its messages, its exit. */
  private watchHost(link: HostLink, earlier: Buffer[]): void {
    const child = link.child;
    this.child = child;
    this.link = link;
    const hostLog = new LogFile(this.paths.sessionDir, 'host.log', this.recordsOutside, { held: true });
    this.hostLog = hostLog;
    for (const chunk of earlier) hostLog.raw(chunk.toString());
    child.stdout?.on('data', (chunk: Buffer) => hostLog.raw(chunk.toString()));
    // Its output has all been read once its pipes close.
    child.once('close', () => hostLog.close());
    child.stderr?.on('data', (chunk: Buffer) => {
      hostLog.raw(chunk.toString());
      for (const line of chunk.toString().split('\n')) if (line.trim() !== '') this.stderrLine(line);
    });
    link.on('message', (raw: unknown, handle: unknown) => this.onMessage(raw, handle));
    link.on('violation', (why) => {
      this.environment.log.error({ session_id: this.id, why }, 'a capsule host broke its channel; ending it');
      this.kill(
        {
          code: 'E-RUN-001',
          message: `the capsule host broke its channel to the executor (${why}), so the session was ended; a host runs only the runtime's code and the capsule's WebAssembly, so the capsule may have broken out of WebAssembly`,
          hint: 'do not run this capsule again until its code is understood; keep the session directory for whoever looks into it',
        },
        { overrule: true },
      );
    });
    // The session ends on what the host said last, its result among it, not on the first news of
    // its exit, which can come while the last frames are still unread.
    child.once('exit', (code, signal) => {
      const exitedAt = Date.now();
      void link.everythingRead(LAST_FRAMES_WAIT_MS).then(() => this.onExit(code, signal, exitedAt));
    });
    // Every error, not the first: a second one unheard would be thrown, and end the executor.
    child.on('error', (error: NodeJS.ErrnoException) => {
      const what = error.syscall?.startsWith('spawn') ? 'the capsule host could not be started' : 'the capsule host’s channel failed';
      this.environment.log.error({ session_id: this.id, err: error }, what);
    });
    this.guardWorkdir();
    if (this.stopAsked !== undefined) {
      const reason = this.stopAsked;
      this.stopAsked = undefined;
      setImmediate(() => this.stop(reason));
    }
  }

  /**
   * A pooled host, once its helper has mounted the workdir in: the session's from here, given its
   * start at once (it said `ready` long ago). A host that cannot be attached is thrown away and a
   * fresh one started in its place, so the pool can only make a launch faster, never fail it.
   */
  private async adoptPooledHost(pooled: { host: PooledHost; attaching: Promise<void> }, start: StartMessage): Promise<boolean> {
    this.pooled = undefined;
    let timer: NodeJS.Timeout | undefined;
    try {
      // A host taken while still starting gets a while to finish, not forever: one that hangs
      // (stopped, starved) is thrown away and a fresh host started, under its own timeout.
      const overdue = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`it was not ready within ${POOLED_READY_TIMEOUT_MS / 1000}s`)), POOLED_READY_TIMEOUT_MS);
      });
      await Promise.race([Promise.all([pooled.attaching, pooled.host.ready]), overdue]);
    } catch (error) {
      this.environment.log.warn({ session_id: this.id, err: error }, 'a pooled capsule host could not be attached; starting a fresh one');
      this.bootstrap.line(`[sandbox] the warm host could not be attached (${error instanceof Error ? error.message : String(error)}); a fresh host instead`);
      // Its group carries this session's name by now: gone before the fresh host's is made.
      await pooled.host.discard();
      this.cgroup = undefined;
      this.spawnFreshHost(start);
      return false;
    } finally {
      clearTimeout(timer);
    }
    pooled.host.handOver();
    start.sandbox = pooled.host.start;
    this.serveNetwork(pooled.host.network);
    for (const socket of pooled.host.sockets) this.network?.attach(socket.fd, socket.protocol, socket.handle);
    this.watchHost(pooled.host.link, pooled.host.earlyOutput);
    this.processStart = (pooled.host.child.pid ? processStartToken(pooled.host.child.pid) : undefined) ?? '';
    this.tellHost(start);
    return true;
  }

  /**
   * The workdir against its ceilings, walked every 10 s for every session: a guest fills a disk
   * through WASI as well as through a subprocess, with bytes (`workdir_max_bytes`) or with entries
   * (the executor's `MURMUR_WORKDIR_MAX_ENTRIES`, which guards the inodes every session's
   * workdir shares), and counted as over when the walk meets what it cannot measure. The first
   * time one is over, the host is told: it refuses every later
   * subprocess naming the ceiling, and the session ends with `E-RUN-013` (at its next turn, or
   * when its guest returns). One that has not ended a grace later (`MURMUR_HARD_LIMIT_GRACE_MS`)
   * is killed for it: a guest that writes on and never returns, or a host that ignores the news,
   * is not left to fill the disk.
   */
  private guardWorkdir(): void {
    const ceilings = this.workdirCeilings;
    this.workdirGuard = new WorkdirGuard(
      this.paths.accessible,
      ceilings,
      (breach, observed) => {
        const { limit, ceiling } = this.recordWorkdirBreach(breach, observed);
        this.tellHost({ type: 'ceiling', limit, ...ceiling });
        this.ceilingKill = setTimeout(() => this.kill(ceiling, { overrule: true }), this.environment.settings.hardLimitGraceMs);
        this.ceilingKill.unref();
      },
      this.environment.settings.workdirCheckMs,
      childrenDirIn(this.paths.sessionDir),
      // The session's processes, for the files they deleted and still hold: its cgroup's (none without cgroups).
      () => this.cgroup?.pids() ?? [],
    );
  }

  /** The workdir's ceilings: the manifest's bytes, the executor's entries. */
  private get workdirCeilings(): { bytes: number; entries: number } {
    return { bytes: this.plan.policy.resources.workdir_max_bytes, entries: this.environment.settings.workdirMaxEntries };
  }

  /** A workdir past its ceiling, recorded where the session's reader looks: its bootstrap log, stderr and trace. */
  private recordWorkdirBreach(breach: WorkdirBreach, observed: WorkdirUsage): { limit: string; ceiling: WireError } {
    const ceilings = this.workdirCeilings;
    const { limit, message, hint } = workdirBreach(breach, observed, ceilings);
    const ceiling = { code: 'E-RUN-013', message, hint };
    this.bootstrap.line(`[resources] ${ceiling.message}`);
    this.stderrLine(`[capsule-runtime] ${ceiling.message}`);
    this.trace.write('resource_limit', {
      limit,
      ...(breach === 'entries'
        ? { observed_entries: observed.entries, max_entries: ceilings.entries }
        : { observed_bytes: observed.bytes, max_bytes: ceilings.bytes }),
      ...(breach === 'bytes' && observed.delegatedBytes ? { observed_delegated_bytes: observed.delegatedBytes } : {}),
      ...(breach === 'bytes' && observed.unlinkedBytes ? { observed_unlinked_bytes: observed.unlinkedBytes } : {}),
      ...(observed.hidden ? { unmeasured_path: observed.hidden.path, unmeasured_because: observed.hidden.code } : {}),
    });
    return { limit, ceiling };
  }

  private async handshake(start: StartMessage): Promise<void> {
    if (this.pooled && (await this.adoptPooledHost(this.pooled, start))) return;
    return new Promise((resolve, reject) => {
      const child = this.child as ChildProcess;
      const link = this.link as HostLink;
      const timer = setTimeout(
        () => reject(new MurmurError('E-RUN-001', `the capsule host did not start within ${READY_TIMEOUT_MS / 1000}s; see ${this.hostLogs()}`)),
        READY_TIMEOUT_MS,
      );
      // A sealed host hands its sandbox's sockets over first, and is sent its start only once the
      // channel they came over is closed (`host-link.ts` says why).
      const sandbox = start.sandbox && !start.sandbox.handed_over ? start.sandbox : undefined;
      /** The wait is over, whichever way: nothing else of it may fire. */
      let exitedAwhile: NodeJS.Timeout | undefined;
      const settled = (): void => {
        clearTimeout(timer);
        clearTimeout(exitedAwhile);
        link.off('startable', started);
        child.off('close', onEarlyExit);
        child.off('exit', onExit);
        this.endHandshake = undefined;
      };
      const started = (): void => {
        settled();
        this.processStart = (child.pid ? processStartToken(child.pid) : undefined) ?? '';
        if (sandbox) {
          sandbox.handed_over = true;
          this.tellHost(start);
        }
        resolve();
      };
      const onEarlyExit = (code: number | null, signal: string | null): void => {
        settled();
        // What the executor ended it for (it broke its channel), or the failure it reported itself
        // (its sandbox's sockets could not be handed over), says more than its exit.
        const reported = this.killedFor ?? this.result?.error;
        if (reported) {
          reject(new MurmurError(isErrorCode(reported.code) ? reported.code : 'E-RUN-001', reported.message, { hint: reported.hint }));
          return;
        }
        // The helper says what it could not do, and exits 125 before anything of the session ran.
        const confineFailure = code === 125 ? this.stderrTail.find((line) => line.startsWith('murmur-confine: ')) : undefined;
        if (confineFailure) {
          this.environment.confine.forget?.();
          reject(
            new MurmurError(
              'E-RUN-014',
              `the sealed containment class was achievable at launch but its sandbox could not be built for this session: ${confineFailure.slice('murmur-confine: '.length)}`,
              {
                hint: "the host passed the sealed probe when the executor started and then failed to seal this session — check that nothing changed the host since (kernel, AppArmor, the container's security options); the executor probes again when it restarts",
              },
            ),
          );
          return;
        }
        // bubblewrap could not make the sandbox (user namespaces turned off since the executor's
        // probe, a kernel's namespace limit reached): said in its words, and the probe's kept
        // answer dropped, where every later run failed alike on an answer never asked again.
        const bwrapLines = code !== 0 && signal === null ? this.stderrTail.filter((line) => line.startsWith('bwrap:')) : [];
        if (bwrapLines.length > 0) {
          this.environment.confine.forget?.();
          const sandboxFailure = bwrapLines.find((line) => line.slice('bwrap:'.length).trim() !== '') ?? `bwrap: it exited ${code} without saying why`;
          reject(
            new MurmurError('E-CAP-005', `the session's sandbox could not be made: ${sandboxFailure}`, {
              hint: `${sandboxFailureHint(sandboxFailure)}; the containment this host achieves is probed again at the next start ('mur doctor' says what it finds)`,
            }),
          );
          return;
        }
        // Ended by a stop signal: an interrupt that reached it, as a terminal's Ctrl-C reaches a
        // host in its launcher's process group. Nothing of the capsule failed, so it is said so.
        if (signal === 'SIGINT' || signal === 'SIGTERM' || signal === 'SIGHUP')
          reject(new MurmurError('E-SES-005', `the capsule host was stopped by ${signal} before it started; nothing of the session ran`));
        else reject(new MurmurError('E-RUN-001', `the capsule host exited before it started (${signal ?? `exit ${code}`}); see ${this.hostLogs()}`));
      };
      // Stopped or killed before it started: the launch is refused with that reason at once, not
      // once its sandbox's last process has let go of its pipes (under load that was the whole
      // 30 s), and its channel is closed, so a host still starting reads the end of it and exits.
      this.endHandshake = (reason) => {
        settled();
        link.close();
        reject(new MurmurError(isErrorCode(reason.code) ? reason.code : 'E-RUN-001', reason.message, { hint: reason.hint }));
      };
      link.once('startable', started);
      // 'close', not 'exit': by then its stderr is read, and the helper's reason with it. But not
      // for ever: a process of its sandbox that outlives it holds its pipes open (a terminal's
      // Ctrl-C that reached the host as it started kept the launch waiting its whole 30 s).
      const onExit = (code: number | null, signal: string | null): void => {
        exitedAwhile = setTimeout(() => onEarlyExit(code, signal), LAST_FRAMES_WAIT_MS);
      };
      child.once('close', onEarlyExit);
      child.once('exit', onExit);
      // Sent at once, not after `ready`: the host reads it as soon as it listens, so its start-up
      // and the executor's wait overlap instead of adding up (a sealed host's start waits for
      // its hand-over, asked for at once).
      if (sandbox) link.askHandOver(sandbox);
      else this.tellHost(start);
    });
  }

  /** A message from the host, handled; a failure to handle it is logged, never thrown into the channel's reader. */
  private onMessage(raw: unknown, handle?: unknown): void {
    try {
      this.handleMessage(raw, handle);
    } catch (error) {
      this.environment.log.error({ session_id: this.id, err: error }, 'could not handle a message from a capsule host');
    }
  }

  private handleMessage(raw: unknown, handle?: unknown): void {
    const parsed = HostToExecutorSchema.safeParse(raw);
    // A descriptor comes with a listener only: any other one the host sends is closed, not held
    // for as long as the executor runs.
    if (handle !== undefined && (!parsed.success || parsed.data.type !== 'listener')) closeHandle(handle);
    if (!parsed.success) {
      this.environment.log.warn({ session_id: this.id }, 'refused a malformed message from a capsule host');
      // In the session's own record too: a result refused here is a session that ends without one.
      this.bootstrap.line(
        `[host] refused a malformed '${messageType(raw)}' message from the capsule host: ${parsed.error.issues
          .slice(0, 3)
          .map((issue) => `${issue.path.join('.') || '(message)'}: ${issue.message}`)
          .join('; ')}`,
      );
      // A request refused is still answered: the guest call that waits on it fails instead of hanging.
      const request = raw as { type?: unknown; id?: unknown };
      if (request.type === 'request' && Number.isSafeInteger(request.id)) {
        this.tellHost({
          type: 'reply',
          id: request.id as number,
          ok: false,
          error: `the executor refused a malformed request: ${parsed.error.issues[0]?.message ?? 'invalid'}`,
        });
      }
      return;
    }
    const message = parsed.data;
    switch (message.type) {
      case 'ready':
        return;
      case 'listener':
        if (this.network) this.network.attach(message.fd, message.protocol, handle);
        else closeHandle(handle);
        return;
      case 'output':
        if (message.stream === 'stderr') for (const line of message.text.split('\n')) if (line.trim() !== '') this.stderrLine(line);
        if (this.relays(message.stream)) {
          for (let offset = 0; offset < message.text.length; offset += 64 * 1024) {
            this.environment.bus.publish(topics.sessionOutput.at(this.id), {
              session_id: this.id,
              stream: message.stream,
              text: message.text.slice(offset, offset + 64 * 1024),
            });
          }
        }
        return;
      case 'request':
        // Nothing of a request may end the executor, which every session shares: what escapes its
        // answer (it should be nothing) ends this session instead.
        this.answer(message.id, message.request).catch((error: unknown) => {
          this.environment.log.error(
            { session_id: this.id, op: message.request.op, err: error },
            'answering a capsule host request failed; ending the session',
          );
          this.kill(
            {
              code: 'E-RUN-001',
              message: `the executor failed to answer the capsule host's ${message.request.op} request, so the session was ended: ${String(error).slice(0, 200)}`,
            },
            { overrule: true },
          );
        });
        return;
      case 'result':
        this.result = message.error ? { ...message, error: boundedHostError(message.error) } : message;
        return;
      case 'event':
        this.onHostEvent(message.event);
        return;
      case 'trace': {
        const record = this.trace.appendHostLine(message.line);
        if (record) this.telemetry?.observeHost(record);
        else this.refuseTraceLine(message.line);
        return;
      }
      case 'rpc-reply': {
        const waiting = this.pendingRpc.get(message.id);
        this.pendingRpc.delete(message.id);
        waiting?.(message.reply);
        return;
      }
    }
  }

  /** The host's requests of `SLOW_HOST_OPS` being answered now. */
  private slowRequests = 0;

  /** The host's record requests waiting for, or taking, their turn; and the turn they take. */
  private recordRequests = 0;
  private recordTurn: Promise<void> = Promise.resolve();

  private async answer(id: number, request: HostRequest): Promise<void> {
    if (wholeRecordRequest(request)) return this.answerInTurn(id, request);
    if (!SLOW_HOST_OPS.has(request.op)) return this.answerNow(id, request);
    if (this.slowRequests >= SLOW_HOST_REQUESTS_IN_FLIGHT) {
      // Answered as each of these ops answers a refusal (a value that failed), so the guest's call,
      // or the model's tool call, fails with it rather than the whole task.
      this.tellHost({
        type: 'reply',
        id,
        ok: true,
        value: {
          ok: false,
          error: `refused this ${request.op}: the executor is already working on ${SLOW_HOST_REQUESTS_IN_FLIGHT} of this session's requests to send, delegate or pull, the most it takes at once; try again once one has been answered`,
        },
      });
      return;
    }
    this.slowRequests += 1;
    try {
      await this.answerNow(id, request);
    } finally {
      this.slowRequests -= 1;
    }
  }

  /** A record request, answered after the session's record requests before it (`wholeRecordRequest`). */
  private async answerInTurn(id: number, request: HostRequest): Promise<void> {
    if (this.recordRequests >= RECORD_REQUESTS_HELD) {
      this.tellHost({
        type: 'reply',
        id,
        ok: false,
        error: `refused this ${request.op}: the executor holds ${RECORD_REQUESTS_HELD} of this session's requests of its records already, the most it takes at once; send the next once one has been answered`,
      });
      return;
    }
    this.recordRequests += 1;
    const answered = this.recordTurn.then(() => this.answerNow(id, request));
    this.recordTurn = answered.catch(() => undefined);
    try {
      await answered;
    } finally {
      this.recordRequests -= 1;
    }
  }

  private async answerNow(id: number, request: HostRequest): Promise<void> {
    let reply: { type: 'reply'; id: number; ok: boolean; value?: unknown; error?: string };
    try {
      let value: unknown;
      if (isEgressRequest(request)) value = await this.hostEgress.answer(request);
      else if (request.op === 'tool-counters') value = this.cgroup?.toolCounters() ?? { oom_kills: 0, pids_refusals: 0 };
      else if (request.op === 'delegate') value = await this.delegations.delegate(request.request);
      else if (isContextRequest(request)) value = await this.contexts.answer(request);
      else
        value = this.environment.pull
          ? await this.environment.pull(this, request.request.name, request.request.version)
          : { ok: false, error: 'this executor cannot pull artifacts' };
      reply = { type: 'reply', id, ok: true, value };
    } catch (error) {
      reply = { type: 'reply', id, ok: false, error: error instanceof Error ? error.message : String(error) };
    }
    try {
      this.tellHost(reply);
    } catch (error) {
      // An answer that cannot be framed — larger than a frame, or nested past what JSON.stringify
      // can walk (a record the host wrote, read back) — fails the call that asked for it.
      this.tellHost({
        type: 'reply',
        id,
        ok: false,
        error: `the executor could not send its answer to this ${request.op}: ${error instanceof Error ? error.message : String(error)}`.slice(0, 400),
      });
    }
  }

  /**
   * Lets go of the records' held descriptors: at the session's end, and when no end will (a
   * launch that failed, an end that could not be announced). A line written after (the end of a
   * host that did start) is appended on its own.
   */
  releaseRecords(): void {
    this.bootstrap?.close();
    this.hostLog?.close();
    this.trace?.close();
  }

  /**
   * Ends the session at once: every process in its cgroup, or the host alone without one. With
   * `overrule`, the reason is the session's end whatever result the host sent before.
   */
  kill(reason: WireError, options: { overrule?: boolean } = {}): void {
    if (options.overrule && !this.resultOverruled) {
      this.resultOverruled = true;
      this.killedFor = reason;
    } else {
      this.killedFor ??= reason;
    }
    // A warm host taken by a launch that failed before the host was adopted: nobody else has it.
    if (this.pooled) this.letPooledHostGo(this.pooled.host);
    if (this.cgroup) this.cgroup.killAll();
    this.child?.kill('SIGKILL');
    this.endHandshake?.(this.killedFor ?? reason);
  }

  /** Whether a host was started for this session: then its exit, heard, is what ends it (`ended`). */
  get hostStarted(): boolean {
    return this.child !== undefined;
  }

  /** Asks the host to stop, then kills what is left after a grace period. */
  stop(reason: string): boolean {
    if (!this.child) {
      // Asked while it is still launching (its launcher gave up waiting): stopped as soon as its
      // host is there, rather than left to run with nobody attached.
      this.stopAsked = reason;
      return true;
    }
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return false;
    const stopped: WireError = { code: STOPPED, message: `the session was stopped: ${reason}`, hint: STOPPED_HINT };
    this.killedFor ??= stopped;
    // Its host has not started the session yet: there is nothing to stop gracefully.
    if (this.endHandshake) {
      this.kill(stopped);
      return true;
    }
    this.tellHost({ type: 'stop', reason });
    this.child.kill('SIGTERM');
    setTimeout(() => this.kill(stopped), 2_000).unref();
    return true;
  }

  /** `exitedAt`: when the exit was heard, in ms since the epoch (the end is taken once the host's last frames are read). */
  private onExit(code: number | null, signal: string | null, exitedAt: number): void {
    this.finish(code, signal, exitedAt).catch((error: unknown) => {
      // The end could not be announced (the bus closed under a stopping service): say so, and
      // still let whoever awaits this session's end go on.
      this.environment.log.error({ session_id: this.id, err: error }, 'could not announce the end of a session');
      this.releaseRecords();
      this.resolveEnded({
        status: 'failed',
        exitCode: code,
        signal,
        error: { code: 'E-BUS-005', message: error instanceof Error ? error.message : String(error) },
      });
    });
  }

  private async finish(code: number | null, signal: string | null, exitedAtMs: number): Promise<void> {
    const exitedAt = new Date(exitedAtMs).toISOString();
    if (this.hardLimit) clearTimeout(this.hardLimit);
    if (this.ceilingKill) clearTimeout(this.ceilingKill);
    const guard = this.workdirGuard;
    guard?.stop();
    // Measured once more now that nothing writes there: what grew past the ceiling between checks
    // (all of a session shorter than one) ends the session as a breach found by a check would have.
    const breachAtEnd = guard && !this.killedFor ? await guard.lastLook().catch(() => undefined) : undefined;
    this.network?.close();
    this.hostEgress.releaseAll();
    this.contexts.clear();
    this.rpcSubscription?.unsubscribe();
    for (const waiting of this.pendingRpc.values()) waiting({ error: { code: -32603, message: 'Internal error: the session ended' } });
    this.pendingRpc.clear();
    let end: SessionEnd;
    const result = this.resultOverruled ? undefined : this.result;
    if (breachAtEnd) {
      const { ceiling } = this.recordWorkdirBreach(breachAtEnd.breach, breachAtEnd.observed);
      end = { status: 'failed', exitCode: result?.exit_code ?? code, signal, error: ceiling };
      // The last session_end is the session's: this one says how it ended, with the totals the host last wrote.
      this.trace.write('session_end', {
        ...this.trace.lastTotals(),
        duration_ms: Math.max(0, exitedAtMs - this.startedAt),
        exit_status: 'failed',
        error: ceiling,
      });
    } else if (result) {
      end = { status: result.status, exitCode: result.exit_code, signal: null, error: result.error };
    } else {
      const oom = this.cgroup?.oomKilled() ?? false;
      const error: WireError =
        this.killedFor ??
        (oom
          ? {
              code: 'E-RUN-001',
              message: `capsule execution exceeded its configured resource limits: the session's cgroup ran out of memory (capabilities.resources.cgroup_memory_bytes = ${this.plan.policy.resources.cgroup_memory_bytes}) and the kernel killed it`,
              hint: 'raise capabilities.resources.cgroup_memory_bytes, or find what is allocating',
              path: 'capabilities.resources.cgroup_memory_bytes',
            }
          : signal === 'SIGTERM'
            ? // Not this executor's doing (what it kills for is `killedFor`): someone asked the session to stop, as `mur stop` does.
              {
                code: STOPPED,
                message: 'the session was stopped: its capsule host was sent SIGTERM from outside the executor (as mur stop does)',
                hint: STOPPED_HINT,
              }
            : {
                code: 'E-RUN-001',
                message: `the capsule host ended without a result (${signal ? `signal: ${signal}` : `exit status ${code}`}); see ${this.hostLogs()}`,
              });
      end = { status: 'failed', exitCode: code, signal, error };
      if (!this.killedFor)
        this.bootstrap.line(
          this.withoutResult(signal === 'SIGTERM' && !oom ? 'was stopped from outside (SIGTERM) without a result' : 'ended without a result'),
        );
      // The host could not close its own trace: the executor does, so every session_start has an
      // end, with the totals of the last end the host wrote (an agent's, after each task).
      this.trace.write('session_end', {
        ...this.trace.lastTotals(),
        // Never below 0: the wall clock may have stepped back meanwhile, and a negative duration is refused on the bus.
        duration_ms: Math.max(0, exitedAtMs - this.startedAt),
        exit_status: 'failed',
        error,
      });
    }
    this.trace?.close();
    // Whatever the host (or a process it left behind) still sends has no session to reach.
    this.link?.close();
    // Set once the launch got as far as its policy; a launch refused before it has none.
    (this.egress as EgressPolicy | undefined)?.close();
    await this.cgroup?.discard();
    this.bootstrap.line(`[bootstrap] session ended: ${end.status}${end.error ? ` (${end.error.code}: ${end.error.message})` : ''}`);
    this.releaseRecords();
    // Exported in the background: a collector that is slow or away never delays the end's announcement.
    if (this.telemetry) this.telemetryDrained = this.telemetry.close(TELEMETRY_DRAIN_MS);
    // A delegated child whose session ended on its own terms reports for itself, before the end is
    // announced: the watcher reads that announcement as "report for it, unless it reported".
    const completionReported = await this.reportOwnCompletion(end);
    void this.delegations.deregister();
    void this.delegations.endAll();
    const plan = this.plan;
    this.announcement = {
      session_id: this.id,
      capsule_name: plan.capsule.name,
      capsule_version: plan.capsule.version,
      executor_id: this.environment.executorId,
      pid: this.child?.pid ?? 1,
      process_start: this.processStart,
      exit_status: end.status,
      exit_code: end.exitCode,
      signal: end.signal,
      ...(end.error ? { error: end.error } : {}),
      duration_ms: Math.max(0, exitedAtMs - this.startedAt),
      ended_at: new Date().toISOString(),
      exited_at: exitedAt,
      stderr_tail: [...this.stderrTail],
      completion_reported: completionReported,
    };
    this.environment.bus.publish(topics.sessionEnded, this.announcement);
    this.resolveEnded(end);
  }

  /** Where to read what a host said: its `host.log` when it wrote one (it is made at its first line), and the session's `bootstrap.log`. */
  private hostLogs(): string {
    const logs = path.join(this.paths.sessionDir, 'logs');
    const hostLog = path.join(logs, 'host.log');
    return existsSync(hostLog) ? `${hostLog} and bootstrap.log beside it` : path.join(logs, 'bootstrap.log');
  }

  /**
   * What the session heard of a host that ended without a result, for whoever reads the session's
   * record: how much it read, what came last, and whether the channel had closed, so a host that
   * never sent its result can be told from one whose result was not read.
   */
  private withoutResult(what: string): string {
    const heard = this.link?.heard ?? { frames: 0, lastTypes: [], closed: true };
    return `[host] ${what}: ${heard.frames} message${heard.frames === 1 ? '' : 's'} read from it${heard.lastTypes.length ? ` (the last: ${heard.lastTypes.join(', ')})` : ''}; its channel ${heard.closed ? 'had closed' : `was still open ${LAST_FRAMES_WAIT_MS / 1000} s after its exit`}`;
  }

  /** A line the executor itself has for the person who launched the session: on their stderr, as the capsule's own. */
  private tellLauncher(text: string): void {
    // It may quote strangers' text (a roost's refusal, a record's failure): one line, the runtime's.
    const line = oneLine(text);
    this.stderrLine(line);
    if (this.relays('stderr')) this.environment.bus.publish(topics.sessionOutput.at(this.id), { session_id: this.id, stream: 'stderr', text: `${line}\n` });
  }

  private relays(stream: 'stdout' | 'stderr'): boolean {
    const relayed = this.request.relay_output;
    return relayed === true || relayed === stream;
  }

  private stderrLine(line: string): void {
    this.stderrTail.push(line.length > 2_000 ? `${line.slice(0, 2_000)} […]` : line);
    if (this.stderrTail.length > STDERR_TAIL_LINES) this.stderrTail.shift();
  }

  /** A delegated child that ended on its own terms (the host gave a result) records and posts its completion. */
  private async reportOwnCompletion(end: SessionEnd): Promise<boolean> {
    const spawner = this.request.spawner;
    if (!spawner || !this.result || this.resultOverruled) return false;
    const resultPath = childResultPath(this.paths.accessible, this.paths.sessionDir);
    const outcome: DelegationOutcome = {
      delegation_id: spawner.delegation_id,
      capsule_name: this.plan.capsule.name,
      capsule_version: this.plan.capsule.version,
      session_id: this.id,
      status: end.status === 'ok' ? 'ok' : 'error',
      ...(resultPath ? { result_path: resultPath } : {}),
      workdir: this.paths.accessible,
      duration_ms: Math.max(0, Date.now() - this.startedAt),
      ...(end.status === 'ok' ? {} : { detail: end.error ? `${end.error.code}: ${end.error.message}` : `exit status ${end.exitCode}` }),
      reported_by: 'child',
      delivered: false,
    };
    const reported = await reportCompletion(
      spawner,
      outcome,
      this.paths.accessible,
      (line) => {
        this.stderrLine(line);
        this.bootstrap.line(line);
      },
      { bus: this.environment.bus },
    );
    this.environment.bus.publish(topics.delegationCompleted, { parent_session_id: spawner.session_id, outcome: reported });
    return true;
  }

  /**
   * A delegation outcome the launcher's watcher decided (the child crashed, ran past its deadline,
   * or was ended by its parent), recorded in this child's workdir — which only this machine holds
   * — and, when `post`, delivered to the parent and recorded again with what the delivery did.
   */
  recordCompletion(outcome: DelegationOutcome, post: boolean): Promise<DelegationOutcome> {
    return recordChildCompletion(this.completionPlace(), outcome, post);
  }

  /**
   * What the executor keeps of this session once it has ended (`EndedSession`): its paths, its
   * completion's recording and its spans' drain, and nothing that holds its host.
   */
  remains(): EndedSession {
    const place = this.completionPlace();
    return {
      id: this.id,
      announcement: this.announcement,
      paths: this.paths,
      telemetryDrained: this.telemetryDrained,
      recordCompletion: (outcome, post) => recordChildCompletion(place, outcome, post),
    };
  }

  private completionPlace(): CompletionPlace {
    return { id: this.id, spawner: this.request.spawner, paths: this.paths, bootstrap: this.bootstrap, bus: this.environment.bus };
  }

  /** Who holds the session, once its host has started: what an executor's heartbeat lists. */
  identity(): ExecutorHeartbeat['sessions'][number] | undefined {
    const pid = this.child?.pid;
    if (!pid || !this.startAnnounced) return undefined;
    return {
      session_id: this.id,
      capsule_name: this.plan.capsule.name,
      capsule_version: this.plan.capsule.version,
      pid,
      process_start: this.processStart,
      started_at: new Date(this.startedAt).toISOString(),
      agent: this.plan.capsule.kind === 'agent',
    };
  }

  /** Where this session's artifact files come from on this machine. */
  get artifactFiles(): { blobs: BlobCache; bundles: LocalBundles } {
    return { blobs: this.environment.blobs, bundles: this.environment.bundles };
  }

  /** The tools the host was given (for pulls that add one). */
  get installedTools(): HostTool[] {
    return this.tools;
  }
}

/**
 * Where a session's own records are written from outside its sandbox. Made here, not in a method:
 * V8 gives every closure of a function one shared context, so a callback made beside one that
 * reads `this` would hold the session itself — and the records' writers outlive it (a late egress
 * decision, the spans' drain), where an ended session must be let go (`test/ended-sessions.test.ts`).
 */
function recordsOutside(root: string, log: Log, sessionId: string): RecordsOutsideSandbox {
  return {
    root,
    refused: (file, error) =>
      log.warn(
        { session_id: sessionId, file, err: error },
        'a record could not be written (a link or a FIFO the sandbox put in its place, or a full disk) and is dropped',
      ),
  };
}

/** The longest of each text of a host's error that the executor passes on. */
const HOST_ERROR_BOUNDS = { code: 64, message: 8_192, hint: 2_048, path: 1_024 } as const;

/**
 * A host's error as the executor passes it on (`session.ended`, a child's completion, the trace):
 * each text cut to a bound. The host is the capsule's to break, and an error of megabytes made
 * the announcement of the session's end too large for the bus, so it was never announced.
 */
function boundedHostError(error: WireError): WireError {
  const cut = (text: string, bound: number): string => (text.length > bound ? `${text.slice(0, bound)}… (cut from ${text.length} characters)` : text);
  return {
    code: cut(error.code, HOST_ERROR_BOUNDS.code),
    message: cut(error.message, HOST_ERROR_BOUNDS.message),
    ...(error.hint !== undefined ? { hint: cut(error.hint, HOST_ERROR_BOUNDS.hint) } : {}),
    ...(error.path !== undefined ? { path: cut(error.path, HOST_ERROR_BOUNDS.path) } : {}),
  };
}
