import { defineCommand, defineEvent } from './bus/topic.js';
import { DelegationCompletedSchema, HealthReplySchema, HealthRequestSchema, SessionEndedSchema, SessionStagedSchema, SessionStartedSchema, StageFailedSchema } from './events.js';
import { LaunchReplySchema, LaunchRequestSchema, SessionOutputSchema, StopReplySchema, StopRequestSchema } from './launch.js';
import { StageArtifactRequestSchema, StageRequestSchema, StagedArtifactSchema, StagedPlanSchema } from './plan.js';

/**
 * Every subject of the bus and the contract of what travels on it. A service can only publish,
 * subscribe, request or serve through one of these, so no payload reaches the wire unchecked.
 */
export const topics = {
  sessionStarted: defineEvent('session.started', SessionStartedSchema),
  sessionEnded: defineEvent('session.ended', SessionEndedSchema),
  sessionStaged: defineEvent('session.staged', SessionStagedSchema),
  stageFailed: defineEvent('stage.failed', StageFailedSchema),
  delegationCompleted: defineEvent('delegation.completed', DelegationCompletedSchema),
  /** `session.<id>.output`: a capsule's stdout and stderr, when the launcher asked for them. */
  sessionOutput: defineEvent('session.*.output', SessionOutputSchema),
} as const;

export const commands = {
  /** Staging, answered by any stager in the `stager` queue group. */
  stage: defineCommand('stage', StageRequestSchema, StagedPlanSchema),
  /** One artifact resolved, verified and transpiled, for a running session's `manage.pull()`. */
  stageArtifact: defineCommand('stage.artifact', StageArtifactRequestSchema, StagedArtifactSchema),
  /** Launching a staged capsule, answered by any executor in the `executor` queue group. */
  launch: defineCommand('launch', LaunchRequestSchema, LaunchReplySchema),
  /** `session.<id>.stop`: answered by the executor that owns the session. */
  stopSession: defineCommand('session.*.stop', StopRequestSchema, StopReplySchema),
  /** `service.<name>.health`: fill in the service name with `.at(name)`. */
  health: defineCommand('service.*.health', HealthRequestSchema, HealthReplySchema),
} as const;

/** Queue groups: members of one group share the work, so capacity scales by adding processes. */
export const QUEUE_GROUPS = {
  stager: 'stager',
  executor: 'executor',
} as const;

/** Every event topic, for monitors that label what they tail. */
export const ALL_EVENT_TOPICS = Object.values(topics);
