import * as z from 'zod';
import { DelegationOutcomeSchema } from './delegation.js';
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
