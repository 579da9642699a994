import * as z from 'zod';
import { DelegationOutcomeSchema } from './delegation.js';
import { TaskStateSchema } from './session-rpc.js';
import { MurmurErrorJsonSchema } from './wire.js';

/**
 * What the services tell each other and any monitor. Every event names the session and the
 * process that holds it (pid plus its start token, so a reader can tell it from a later holder of
 * the same pid), and which executor owns it, so layers 1–2 of running-record verification can be
 * asked of the right machine.
 */

const processIdentity = {
  executor_id: z.string(),
  pid: z.number().int().positive(),
  /** Field 22 of `/proc/<pid>/stat`; empty when it could not be read. */
  process_start: z.string(),
};

export const SessionStartedSchema = z.object({
  session_id: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  ...processIdentity,
  workdir: z.string(),
  /** The door URL, once the session has one. */
  url: z.string().nullable(),
  started_at: z.string(),
  spawned_by: z.string().optional(),
  /** The delegation the session runs under, when its spawner handed it one. */
  delegation_id: z.string().optional(),
  /** Where the session's `trace.jsonl` lies, relative to its workdir (what `executor.<id>.files` reads it by). */
  trace_file: z.string().optional(),
  /** Whether the session survives the window that launched it (the launcher had no controlling terminal). */
  outlives_launcher: z.boolean().default(false),
});
export type SessionStarted = z.infer<typeof SessionStartedSchema>;

export const ExitStatusSchema = z.enum(['ok', 'failed', 'trapped']);
export type ExitStatus = z.infer<typeof ExitStatusSchema>;

export const SessionEndedSchema = z.object({
  session_id: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  ...processIdentity,
  exit_status: ExitStatusSchema,
  /** The process exit code, or null when it was ended by a signal. */
  exit_code: z.number().int().nullable(),
  signal: z.string().nullable(),
  error: MurmurErrorJsonSchema.optional(),
  duration_ms: z.number().nonnegative(),
  ended_at: z.string(),
  /** When the session's process exited (`ended_at` is when the end was announced, after any completion was reported). */
  exited_at: z.string().optional(),
  /** The session's last stderr lines (its own, and the runtime's about it): what a crash report quotes. */
  stderr_tail: z.array(z.string()).default([]),
  /** Whether the session's own runtime recorded (and posted) its delegation's completion. */
  completion_reported: z.boolean().default(false),
});
export type SessionEnded = z.infer<typeof SessionEndedSchema>;

/**
 * The end of a session whose executor fell silent (no heartbeat for `silentForMs`), announced for
 * it by whoever judged it lost — a watcher, or the session's own `mur run` when no watcher did —
 * after taking the session's `lost.<id>` record, so that it is announced once and the executor,
 * should it answer again, ends the session rather than run it on unseen.
 */
export function sessionLostWithExecutor(
  session: { session_id: string; capsule_name: string; capsule_version: string; pid: number; process_start: string; started_at: string },
  executorId: string,
  silentForMs: number,
): SessionEnded {
  const line = `executor ${executorId} stopped answering (no heartbeat for ${(silentForMs / 1000).toFixed(1)}s); the session ended with it`;
  return {
    session_id: session.session_id,
    capsule_name: session.capsule_name,
    capsule_version: session.capsule_version,
    executor_id: executorId,
    pid: session.pid,
    process_start: session.process_start,
    exit_status: 'failed',
    exit_code: null,
    signal: null,
    error: {
      code: 'E-EXE-001',
      message: `the session was lost with its executor: ${line}`,
      hint: 'launch it again: new launches go to the executors still alive',
    },
    duration_ms: Math.max(0, Date.now() - Date.parse(session.started_at)),
    ended_at: new Date().toISOString(),
    stderr_tail: [line],
    completion_reported: false,
  };
}

/**
 * `executor.<id>.ended`: how a session of that executor stands, for a launcher that may have
 * missed its `session.ended` (published while the launcher's bus was away, and NATS keeps no
 * message for a subscriber that is not connected). An ended session is answered with the very
 * announcement it was given, for as long as the executor remembers it.
 */
export const SessionEndRequestSchema = z.object({ session_id: z.string() });
export const SessionEndReplySchema = z.discriminatedUnion('state', [
  z.object({ state: z.literal('running') }),
  z.object({ state: z.literal('ended'), ended: SessionEndedSchema }),
  /** Not a session of this executor's, or one it no longer remembers. */
  z.object({ state: z.literal('unknown') }),
]);
export type SessionEndReply = z.infer<typeof SessionEndReplySchema>;

/**
 * `session.activity`: a session's task moved (a new task, a state, an inference turn), told by the
 * executor relaying the host's feed. Ids, a state and a count only — never the task's text, a
 * prompt or the model's output, which stay on the session's own feed for whoever may read it.
 */
export const SessionActivitySchema = z.object({
  session_id: z.string(),
  executor_id: z.string(),
  task_id: z.string(),
  state: TaskStateSchema,
  /** The task's latest inference turn (1-based), null before its first. */
  turn: z.number().int().positive().nullable(),
  at: z.string(),
});
export type SessionActivity = z.infer<typeof SessionActivitySchema>;

/**
 * `egress.decision`: one request that tried to leave a sandbox, as the executor judged it. The
 * target is a scheme and authority (`https://api.example.com:8443`) or `host:port` — never a path
 * or a query, which may carry a key — and `rule` the `network.allow` entry that admitted it.
 */
export const EgressDecisionSchema = z.object({
  session_id: z.string(),
  executor_id: z.string(),
  kind: z.enum(['http', 'a2a', 'tcp', 'dns']),
  /** Whose grant was judged: `capsule`, `tool:<name>`, `hook:<name>`, or `sandbox` (a sealed sandbox's own socket). */
  grant: z.string(),
  target: z.string(),
  decision: z.enum(['allowed', 'denied', 'failed']),
  rule: z.string().nullable(),
  /** For a refusal: the WASI error code the guest was given. */
  code: z.string().optional(),
  at: z.string(),
});
export type EgressDecision = z.infer<typeof EgressDecisionSchema>;

export const SessionStagedSchema = z.object({
  capsule_name: z.string(),
  capsule_version: z.string(),
  stager_id: z.string(),
  artifacts: z.number().int().nonnegative(),
  components: z.number().int().nonnegative(),
  cache_hits: z.number().int().nonnegative(),
  duration_ms: z.number().nonnegative(),
});
export type SessionStaged = z.infer<typeof SessionStagedSchema>;

export const StageFailedSchema = z.object({
  stager_id: z.string(),
  source: z.string(),
  error: MurmurErrorJsonSchema,
});
export type StageFailed = z.infer<typeof StageFailedSchema>;

export const DelegationCompletedSchema = z.object({
  parent_session_id: z.string(),
  outcome: DelegationOutcomeSchema,
});
export type DelegationCompleted = z.infer<typeof DelegationCompletedSchema>;

export const SERVICE_NAMES = ['roost', 'stager', 'executor', 'door', 'watcher'] as const;
export const ServiceNameSchema = z.enum(SERVICE_NAMES);
export type ServiceName = z.infer<typeof ServiceNameSchema>;

export const HealthRequestSchema = z.object({});
export const HealthReplySchema = z.object({
  service: ServiceNameSchema,
  instance_id: z.string(),
  status: z.literal('ok'),
  bus: z.string(),
  /** The HTTP port the service listens on, or null for a bus-only service. */
  http_port: z.number().int().nullable(),
  pid: z.number().int().positive(),
  started_at: z.string(),
  uptime_ms: z.number().nonnegative(),
});
export type HealthReply = z.infer<typeof HealthReplySchema>;
