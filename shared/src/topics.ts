import { defineCommand, defineEvent } from './bus/topic.js';
import {
  DelegationCompletedSchema,
  EgressDecisionSchema,
  HealthReplySchema,
  HealthRequestSchema,
  SessionActivitySchema,
  SessionEndReplySchema,
  SessionEndRequestSchema,
  SessionEndedSchema,
  SessionStagedSchema,
  SessionStartedSchema,
  StageFailedSchema,
} from './events.js';
import {
  ExecutorHeartbeatSchema,
  ExplainScopeReplySchema,
  ExplainScopeRequestSchema,
  LaunchReplySchema,
  LaunchRequestSchema,
  ProcessProbeReplySchema,
  ProcessProbeRequestSchema,
  SessionFilesReplySchema,
  SessionFilesRequestSchema,
  SessionListReplySchema,
  SessionListRequestSchema,
  SessionOutputSchema,
  StopReplySchema,
  StopRequestSchema,
} from './launch.js';
import { CompletionRecordReplySchema, CompletionRecordRequestSchema, SessionPinnedSchema } from './launch-records.js';
import { DelegationControlReplySchema, DelegationControlRequestSchema, DelegationLaunchReplySchema, DelegationLaunchRequestSchema } from './delegation.js';
import { SessionCallSchema, SessionEventSchema, SessionReplySchema } from './session-rpc.js';
import { DoorLocateReplySchema, DoorLocateRequestSchema } from './door.js';
import { StageArtifactRequestSchema, StageProgressSchema, StageRequestSchema, StagedArtifactSchema, StagedPlanSchema } from './plan.js';

/**
 * Every subject of the bus and the contract of what travels on it. A service can only publish,
 * subscribe, request or serve through one of these, so no payload reaches the wire unchecked.
 */
export const topics = {
  sessionStarted: defineEvent('session.started', SessionStartedSchema),
  sessionEnded: defineEvent('session.ended', SessionEndedSchema),
  sessionStaged: defineEvent('session.staged', SessionStagedSchema),
  stageFailed: defineEvent('stage.failed', StageFailedSchema),
  /** `stage.<token>.progress`: a staging's progress, and that its stager is still at it, for the requester that named the token. */
  stageProgress: defineEvent('stage.*.progress', StageProgressSchema),
  delegationCompleted: defineEvent('delegation.completed', DelegationCompletedSchema),
  /** A session's task moved: its id, state and inference turn (what the dashboard shows as current). */
  sessionActivity: defineEvent('session.activity', SessionActivitySchema),
  /** Every egress decision an executor makes, allowed or not, with the rule that decided it. */
  egressDecision: defineEvent('egress.decision', EgressDecisionSchema),
  /** `session.<id>.output`: a capsule's stdout and stderr, when the launcher asked for them. */
  sessionOutput: defineEvent('session.*.output', SessionOutputSchema),
  /** `session.<id>.events`: a session's A2A feed (status, artifacts, text), numbered by its host, for every door. */
  sessionEvents: defineEvent('session.*.events', SessionEventSchema),
  /** `session.<id>.pinned`: an artifact a running session pulled, for its launcher to pin in its `murmur.lock`. */
  sessionPinned: defineEvent('session.*.pinned', SessionPinnedSchema),
  /** Every executor, every second: alive, and the sessions it holds (what the watcher judges losses by). */
  executorHeartbeat: defineEvent('executor.heartbeat', ExecutorHeartbeatSchema),
} as const;

/** Queue groups: members of one group share the work, so capacity scales by adding processes. */
export const QUEUE_GROUPS = {
  stager: 'stager',
  executor: 'executor',
  door: 'door',
  watcher: 'watcher',
} as const;

export const commands = {
  /** Staging, answered by any stager in the `stager` queue group. */
  stage: defineCommand('stage', StageRequestSchema, StagedPlanSchema, { answeredBy: QUEUE_GROUPS.stager }),
  /** One artifact resolved, verified and transpiled, for a running session's `manage.pull()`. */
  stageArtifact: defineCommand('stage.artifact', StageArtifactRequestSchema, StagedArtifactSchema, { answeredBy: QUEUE_GROUPS.stager }),
  /** Launching a staged capsule, answered by any executor in the `executor` queue group. */
  launch: defineCommand('launch', LaunchRequestSchema, LaunchReplySchema, { answeredBy: QUEUE_GROUPS.executor }),
  /** `mur run --explain-scope`: the containment and grants an executor would give, answered by any executor (queue group `executor`). */
  explainScope: defineCommand('executor.explain', ExplainScopeRequestSchema, ExplainScopeReplySchema, { answeredBy: QUEUE_GROUPS.executor }),
  /** `executor.<id>.launch`: launching on one executor — a delegated child, on its parent's. */
  launchOn: defineCommand('executor.*.launch', LaunchRequestSchema, LaunchReplySchema),
  /** `executor.<id>.files`: a session's workdir, read through the executor that holds it (`mur files`). */
  sessionFiles: defineCommand('executor.*.files', SessionFilesRequestSchema, SessionFilesReplySchema),
  /** `executor.<id>.completion`: a delegation outcome a watcher decided, recorded in the child's workdir where it lives. */
  recordCompletion: defineCommand('executor.*.completion', CompletionRecordRequestSchema, CompletionRecordReplySchema),
  /** `executor.<id>.ended`: whether a session of that executor still runs, or how it ended. */
  sessionEnd: defineCommand('executor.*.ended', SessionEndRequestSchema, SessionEndReplySchema),
  /** `session.<id>.stop`: answered by the executor that owns the session. */
  stopSession: defineCommand('session.*.stop', StopRequestSchema, StopReplySchema),
  /** `session.<id>.rpc`: a door's A2A call, answered by the capsule host that owns the session (through its executor). */
  sessionRpc: defineCommand('session.*.rpc', SessionCallSchema, SessionReplySchema),
  /** Where a door can be reached: any door in the `door` queue group answers. */
  locateDoor: defineCommand('door.locate', DoorLocateRequestSchema, DoorLocateReplySchema, { answeredBy: QUEUE_GROUPS.door }),
  /** `executor.<id>.process`: layers 1–2 of a running record, read where the pid lives. */
  probeProcess: defineCommand('executor.*.process', ProcessProbeRequestSchema, ProcessProbeReplySchema),
  /** The watcher's running records, verified: what `mur ps` shows on the stack. */
  listSessions: defineCommand('watcher.sessions', SessionListRequestSchema, SessionListReplySchema, { answeredBy: QUEUE_GROUPS.watcher }),
  /** Launching a delegated child: any watcher in the `watcher` queue group launches it, and then watches it. */
  launchDelegation: defineCommand('delegation.launch', DelegationLaunchRequestSchema, DelegationLaunchReplySchema, { answeredBy: QUEUE_GROUPS.watcher }),
  /** `delegation.<id>.control`: answered by the watcher watching that delegation. */
  controlDelegation: defineCommand('delegation.*.control', DelegationControlRequestSchema, DelegationControlReplySchema),
  /** `service.<name>.health`: fill in the service name with `.at(name)`. */
  health: defineCommand('service.*.health', HealthRequestSchema, HealthReplySchema),
} as const;

/** Every event topic, for monitors that label what they tail. */
export const ALL_EVENT_TOPICS = Object.values(topics);
