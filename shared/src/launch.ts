import * as z from 'zod';
import { SessionIdSchema } from './ids.js';
import { StagedPlanSchema } from './plan.js';
import { SpawnerHandleSchema } from './delegation.js';
import { LivenessSchema, RunningRecordSchema } from './running-record.js';

/**
 * Launching a staged capsule: what a client (`mur run`) asks of an executor, and what it is told.
 *
 * The session id is minted by the client, so it can subscribe to the session's events before the
 * session exists and miss none of them.
 */
export const LaunchRequestSchema = z.object({
  session_id: SessionIdSchema,
  plan: StagedPlanSchema,
  /** `--workdir`: the accessible workdir, which must exist; absent → `<default_workdir_base>/workdir/<session>`. */
  workdir: z.string().optional(),
  /** Where a session without `--workdir` gets its directory: the manifest's directory, or the client's cwd. */
  default_workdir_base: z.string(),
  /** The text of `--task` (a file's content or the text given), written to `task.md`. */
  task: z.string().optional(),
  /**
   * The launching side's values for the names the capsule may see (`env.allow`) and the `${VAR}`
   * references its manifest makes. Nothing else of the client's environment travels.
   */
  env: z.record(z.string(), z.string()).default({}),
  /** The session's door URL, decided by the launcher before launch (absent for a script capsule): `MURMUR_CAPSULE_URL`. */
  url: z.string().optional(),
  /** `mur run --system-prompt`: replaces every prompt source of the manifest (trimmed; empty clears it). */
  system_prompt: z.string().optional(),
  /** How long an agent waits for its first task before it runs with an empty one (`MURMUR_A2A_TIMEOUT_SECS`, default 30). */
  a2a_timeout_secs: z.number().nonnegative().optional(),
  /** For a delegated child: its spawner, injected as `MURMUR_SPAWNER` in the runtime-owned tail of its environment. */
  spawner: SpawnerHandleSchema.optional(),
  /** roost, for a session that may spawn or was spawned: registered with at launch (a child under its approval). */
  roost: z.object({ url: z.string().min(1), approval: z.string().optional() }).optional(),
  /** The launcher had no controlling terminal, so the session outlives its window (running records). */
  outlives_launcher: z.boolean().default(false),
  /** Relay the capsule's stdout/stderr as `session.<id>.output` events. */
  relay_output: z.boolean().default(false),
});
export type LaunchRequest = z.input<typeof LaunchRequestSchema>;

export const LaunchReplySchema = z.object({
  session_id: z.string(),
  executor_id: z.string(),
  pid: z.number().int().positive(),
  process_start: z.string(),
  /** The accessible workdir: what the capsule sees as its preopened directory. */
  workdir: z.string(),
  /** Where the runtime keeps the session's records (trace, logs, tools). */
  session_dir: z.string(),
  url: z.string().nullable(),
  started_at: z.string(),
  /** Whether the capsule host runs in kernel namespaces, and how. */
  isolation: z.string(),
});
export type LaunchReply = z.infer<typeof LaunchReplySchema>;

export const SessionOutputSchema = z.object({
  session_id: z.string(),
  stream: z.enum(['stdout', 'stderr']),
  text: z.string(),
});
export type SessionOutput = z.infer<typeof SessionOutputSchema>;

export const StopRequestSchema = z.object({ reason: z.string().default('stopped by request') });
export const StopReplySchema = z.object({ stopping: z.boolean() });

/** Layers 1 and 2 of a running record's verification, asked of the executor that owns the pid. */
export const ProcessProbeRequestSchema = z.object({ pid: z.number().int(), process_start: z.string() });
export const ProcessProbeReplySchema = z.discriminatedUnion('state', [
  z.object({ state: z.literal('alive') }),
  z.object({ state: z.literal('unverified'), reason: z.string() }),
  z.object({ state: z.literal('gone'), reason: z.string() }),
]);

/** `mur ps` over the bus: the watcher's records, each verified. */
export const SessionListRequestSchema = z.object({});
export const SessionListReplySchema = z.object({
  sessions: z.array(
    RunningRecordSchema.extend({
      liveness: LivenessSchema,
      reason: z.string().optional(),
    }),
  ),
});
export type SessionListReply = z.infer<typeof SessionListReplySchema>;
