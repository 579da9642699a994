import * as z from 'zod';
import { EgressDecisionSchema, ExitStatusSchema } from './events.js';
import { TaskStateSchema } from './session-rpc.js';

/**
 * What the watcher's operator dashboard serves (`/dashboard/api/…` and its SSE stream). Every
 * field is an id, a name, a state, a count or a time: the dashboard is built from bus events that
 * carry nothing else, and a trace is projected field by field, so no key, environment value, task
 * text or model output can reach the page even by accident.
 */

/**
 * Where a session stands: running, one of its exit statuses, lost with its executor, or `ended`
 * when its executor stopped listing it but its end was never heard (so how it ended is unknown).
 */
export const DashboardSessionStateSchema = z.union([z.literal('running'), ExitStatusSchema, z.literal('lost'), z.literal('ended')]);
export type DashboardSessionState = z.infer<typeof DashboardSessionStateSchema>;

export const DashboardSessionSchema = z.object({
  session_id: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  executor_id: z.string(),
  state: DashboardSessionStateSchema,
  /** Whether the session is an agent with a door URL (it takes tasks), not a script run once. */
  agent: z.boolean(),
  started_at: z.string(),
  ended_at: z.string().nullable(),
  /** The code of the error it ended with, if any (`E-RUN-001`, `E-EXE-001`). */
  error_code: z.string().nullable(),
  /** Its current (or last) task, as `session.activity` told it. */
  task: z.object({ task_id: z.string(), state: TaskStateSchema, turn: z.number().int().positive().nullable(), at: z.string() }).nullable(),
  /**
   * The session that spawned it. Never the delegation it runs under: a delegation's id is the
   * credential its completion is posted with (`services/door/src/door-auth.ts`), and the page is
   * anyone's who reaches the dashboard.
   */
  parent_session_id: z.string().nullable(),
  /** How it ended as a delegated child, once `delegation.completed` said so. */
  completion: z.object({ status: z.string(), reported_by: z.string(), delivered: z.boolean() }).nullable(),
});
export type DashboardSession = z.infer<typeof DashboardSessionSchema>;

export const DashboardSnapshotSchema = z.object({
  watcher_id: z.string(),
  generated_at: z.string(),
  sessions: z.array(DashboardSessionSchema),
  /** The most recent egress decisions, oldest first. */
  egress: z.array(EgressDecisionSchema),
});
export type DashboardSnapshot = z.infer<typeof DashboardSnapshotSchema>;

/** One line of a session's trace as the timeline draws it. */
export const TimelineEntrySchema = z.object({
  /** Unix milliseconds, as the trace wrote it. */
  at: z.number(),
  /** The trace's `event_type`. */
  type: z.string(),
  turn: z.number().int().nullable(),
  duration_ms: z.number().nonnegative().nullable(),
  /** A short title (`inference turn 2`, `tool web-fetch`, `egress http https://api.example.com`). */
  label: z.string(),
  /** Counts, names and states only (`412 in / 36 out tokens · tool_use read-file`). */
  detail: z.string(),
  outcome: z.enum(['ok', 'error', 'denied']).nullable(),
});
export type TimelineEntry = z.infer<typeof TimelineEntrySchema>;

export const DashboardTimelineSchema = z.object({
  session_id: z.string(),
  entries: z.array(TimelineEntrySchema),
  /** Whether the trace was longer than the dashboard reads (its first part is shown). */
  truncated: z.boolean(),
});
export type DashboardTimeline = z.infer<typeof DashboardTimelineSchema>;
