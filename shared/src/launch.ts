import * as z from 'zod';
import { SessionIdSchema } from './ids.js';
import { StagedPlanSchema } from './plan.js';
import { DelegationLineageSchema, SpawnerHandleSchema } from './delegation.js';
import { ContainmentSchema } from './manifest/capsule.js';
import { CapabilityPolicySchema } from './policy.js';
import { LivenessSchema, RunningRecordSchema } from './running-record.js';
import { MurmurWarningSchema } from './wire.js';
import { numberSetting } from './settings.js';

/**
 * Launching a staged capsule: what a client (`mur run`) asks of an executor, and what it is told.
 *
 * The session id is minted by the client, so it can subscribe to the session's events before the
 * session exists and miss none of them.
 */
export const LaunchRequestSchema = z.object({
  session_id: SessionIdSchema,
  plan: StagedPlanSchema,
  /**
   * When its launcher stops waiting (ms since the epoch): an executor that takes the request later
   * (it was stopped, starved, behind a slow bus) refuses it, so no session starts that nobody
   * launched any more, and nobody was told the id of.
   */
  launch_by: z.number().int().positive().optional(),
  /**
   * `--workdir`: the accessible workdir, a directory on the executor's machine that must exist.
   * Only a launcher that shares the executor's disk (`mur run` in-process) can name one.
   * Absent → `<default_workdir_base>/workdir/<session>`.
   */
  workdir: z.string().optional(),
  /**
   * Where a session without `--workdir` gets its directory, on the executor's machine: `mur run`
   * in-process gives the manifest's directory; absent, the executor's own (`$MURMUR_HOME`).
   */
  default_workdir_base: z.string().optional(),
  /**
   * A delegated child: its workdir is `children/<name>` in the records of its parent, a session of
   * the executor that takes this launch (children run on their parent's executor).
   */
  child_of: z.object({ session_id: z.string().min(1), name: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/) }).optional(),
  /** A delegated child's place in its delegation tree, which bounds how deep and how wide it grows; absent: a root. */
  delegation_lineage: DelegationLineageSchema.optional(),
  /** `mur run --context <id>` / `--resume <id>`: the context the `task.md` task belongs to (a threaded capsule continues its conversation). */
  context_id: z.string().min(1).optional(),
  /** `--resume`: the context must already have a recorded conversation, or the launch is refused. */
  resume: z.boolean().default(false),
  /**
   * `mur run --forget-session`: on \`transport: process\`, the context's harness session is dropped
   * before its first task, which then starts a new conversation. Only a person asks for this.
   */
  forget_session: z.boolean().default(false),
  /** The text of `--task` (a file's content or the text given), written to `task.md`. */
  task: z.string().optional(),
  /**
   * The launching side's values for the names the capsule may see (`env.allow`) and the `${VAR}`
   * references its manifest makes. Nothing else of the client's environment travels.
   */
  env: z.record(z.string(), z.string()).default({}),
  /**
   * `mur eval run`: the dataset case this session runs, handed to its hooks alone as
   * `MURMUR_CASE_ID` (and `MURMUR_DATASET_ID`, the manifest's `observability.eval.dataset_id`).
   * A field of its own rather than launcher environment: no capsule's `env.allow` can reach it.
   */
  eval_case: z.object({ case_id: z.string().min(1), dataset_id: z.string().min(1).optional() }).optional(),
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
  /**
   * Relay the capsule's output as `session.<id>.output` events: `true` both streams, `'stderr'` its
   * stderr alone (a `mur run --json`, whose stdout is its launch line, still shows the capsule's
   * complaints and the runtime's notices), `false` neither.
   */
  relay_output: z.union([z.boolean(), z.literal('stderr')]).default(false),
  /**
   * The launcher's containment floor beyond the manifest's (workspace config, `--containment`):
   * the session's declared class is the strongest of the two.
   */
  containment_floor: ContainmentSchema.optional(),
  /** The W3C traceparent the launch continues (a delegating parent's session); absent starts a trace. */
  traceparent: z.string().max(512).optional(),
});
export type LaunchRequest = z.input<typeof LaunchRequestSchema>;

/**
 * `mur run --explain-scope`: what an executor would give a capsule with this policy and floor —
 * the containment (declared, achieved, floor met, mechanism) and the effective grants — without
 * starting anything.
 */
export const ExplainScopeRequestSchema = z.object({
  policy: CapabilityPolicySchema,
  containment_floor: ContainmentSchema.optional(),
});
/** The trace's `effective_grants` object, exactly. */
export const ExplainScopeReplySchema = z.object({
  executor_id: z.string(),
  effective_grants: z.record(z.string(), z.unknown()),
});

/**
 * A session's files, read through the executor that holds its workdir (`mur files`): the listing
 * of a directory, or a slice of a file. Paths are relative to the session's workdir and never leave it.
 */
export const SessionFilesRequestSchema = z.object({
  session_id: SessionIdSchema,
  path: z.string().max(4096).default(''),
  /** For a file: where the slice starts, and at most how many bytes (the reply must fit in a message). */
  offset: z.number().int().nonnegative().default(0),
  /** For a directory: the entries after this name (a page's `next`). */
  after: z.string().min(1).max(255).optional(),
  length: z
    .number()
    .int()
    .positive()
    .max(512 * 1024)
    .default(512 * 1024),
});
export const SessionFileEntrySchema = z.object({
  /**
   * One name in the directory, never a path: `mur files --out` writes each entry under the name
   * given, and a reply is only as trustworthy as whoever answered on the bus.
   */
  name: z
    .string()
    .min(1)
    .max(255)
    .refine((name) => name !== '.' && name !== '..' && !/[/\0]/.test(name), {
      message: "a directory entry is one name: not '.', '..', or anything with '/' or NUL",
    }),
  type: z.enum(['file', 'directory', 'other']),
  size: z.number().int().nonnegative(),
  modified_at: z.string(),
});
export const SessionFilesReplySchema = z.discriminatedUnion('type', [
  /**
   * A directory's entries in name order, a page at a time (a reply must fit in a message): `next`,
   * when there are more, is the last name given, to ask for the rest `after`. A name, not a count:
   * a guest adding or removing names between pages shifts counts, never the order of names.
   */
  z.object({ type: z.literal('directory'), path: z.string(), entries: z.array(SessionFileEntrySchema), next: z.string().min(1).max(255).optional() }),
  /** `data` is base64; `size` the file's whole size, so a reader knows when it has it all. */
  z.object({ type: z.literal('file'), path: z.string(), size: z.number().int().nonnegative(), offset: z.number().int().nonnegative(), data: z.string() }),
]);
export type SessionFilesReply = z.infer<typeof SessionFilesReplySchema>;
export type SessionFileEntry = z.infer<typeof SessionFileEntrySchema>;

/**
 * Where each session lives, kept in the bus's key-value store (`murmur-sessions`, key
 * `session.<id>`) by the executor that launched it: how `mur files` finds the executor to ask,
 * after the session has ended too.
 */
export const SessionLocationSchema = z.object({
  session_id: z.string(),
  executor_id: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  started_at: z.string(),
  ended_at: z.string().optional(),
  /** Its `trace.jsonl` as a path in its workdir (`.murmur/<session>/trace.jsonl` under a `--workdir`). */
  trace_file: z.string().optional(),
  /** When its workdir was removed, past the retention its operator gave (`MURMUR_SESSION_RETENTION_HOURS`), and by which executor (one sharing its workdir base may). */
  workdir_removed_at: z.string().optional(),
  workdir_removed_by: z.string().optional(),
});
export type SessionLocation = z.infer<typeof SessionLocationSchema>;

export const SESSION_LOCATIONS_BUCKET = 'murmur-sessions';

/**
 * The watchers' own bucket: `lost.<session id>` is written (by the first watcher to get there)
 * before a session is announced ended with its lost executor, so it is announced once, and so
 * that executor, answering again, knows which of its sessions the stack has given up on.
 */
export const WATCHER_BUCKET = 'murmur-watcher';
export const lostSessionKey = (sessionId: string): string => `lost.${sessionId}`;

/**
 * An executor's heartbeat: that it is alive, and the sessions it holds. The watcher declares an
 * executor lost after a few missed beats and ends its sessions on its behalf.
 */
export const ExecutorHeartbeatSchema = z.object({
  executor_id: z.string(),
  sent_at: z.string(),
  interval_ms: z.number().int().positive(),
  sessions: z.array(
    z.object({
      session_id: z.string(),
      capsule_name: z.string(),
      capsule_version: z.string(),
      pid: z.number().int().positive(),
      process_start: z.string(),
      started_at: z.string(),
      /** Whether it is an agent (it has a door): what a watcher that never saw it start shows it as. */
      agent: z.boolean().optional(),
    }),
  ),
});
export type ExecutorHeartbeat = z.infer<typeof ExecutorHeartbeatSchema>;

/** How many of an executor's own heartbeats may go unheard before it is judged lost, whatever the judge's bound. */
const HEARTBEATS_MISSED = 3;

/**
 * The silence after which an executor is lost: the judge's bound (`MURMUR_EXECUTOR_LOST_MS`), or
 * three of the intervals the executor says it keeps, whichever is longer. An executor set to beat
 * every 8 s, judged on the default 5 s, was declared lost while alive, and its sessions killed.
 */
export function executorLostAfterMs(lostAfterMs: number, intervalMs: number): number {
  return Math.max(lostAfterMs, HEARTBEATS_MISSED * intervalMs);
}

/** The judge's bound on an executor's silence (`MURMUR_EXECUTOR_LOST_MS`, 5 s), as the watcher, `mur run` and a workdir retention read it. */
export function executorLostSetting(env: Readonly<Record<string, string | undefined>>): number {
  return numberSetting(env, 'MURMUR_EXECUTOR_LOST_MS', 5_000, { unit: 'milliseconds' });
}

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
  /**
   * For a capsule that can start subprocesses on a host below `sealed`: what the sandbox does not
   * hold its tools to (`unenforcedForTools`), which a launcher says. Absent or empty otherwise.
   */
  not_enforced_for_tools: z.array(z.string()).optional(),
  /** What the executor's machine says of the capsule at launch (`W-SEC-012`), which a launcher says on stderr. */
  warnings: z.array(MurmurWarningSchema).optional(),
  /**
   * The session's own bearer token: a door that takes session tokens (`MURMUR_DOOR_AUTH=session`)
   * admits a request to this session, and to no other, that carries it. Only the launcher gets it;
   * the session's records never hold it.
   */
  token: z.string(),
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
      /** The executor that runs (or ran) the session, when the watcher knows it. */
      executor_id: z.string().optional(),
    }),
  ),
});
export type SessionListReply = z.infer<typeof SessionListReplySchema>;
