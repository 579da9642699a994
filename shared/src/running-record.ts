import * as z from 'zod';

/**
 * One running session's door and the process that holds it: `running/<session_id>.json` under
 * `MURMUR_HOME`. A record is a hint, never a truth (a SIGKILLed capsule writes no farewell), so
 * readers verify it in three layers before believing it. Every field is required and exactly nine
 * are written: a record missing one names no process that could be checked, and is pruned. A
 * field this runtime does not know is passed over, as upstream's reader does: a newer runtime's
 * record still names a process this one can check, and pruning it would hide a live session from
 * `mur ps` (and from `mur stop`) on a machine with two versions of `mur`.
 */
export const RunningRecordSchema = z.object({
  session_id: z.string().min(1),
  /** `host:port` the A2A door answers on. */
  url: z.string().min(1),
  pid: z.number().int().positive(),
  /** Field 22 of `/proc/<pid>/stat`: distinguishes this process from a later holder of the pid. */
  process_start: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  workdir: z.string(),
  /** True when the launching process had no controlling terminal. */
  outlives_launcher: z.boolean(),
  /** RFC 3339, UTC. */
  started_at: z.string(),
});
export type RunningRecord = z.infer<typeof RunningRecordSchema>;

export const LivenessSchema = z.enum(['live', 'unreachable', 'gone']);
export type Liveness = z.infer<typeof LivenessSchema>;
