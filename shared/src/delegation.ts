import * as z from 'zod';
import { MurmurError } from './errors.js';
import { artifactNameProblem, artifactVersionProblem } from './manifest/artifact-name.js';
import { ContainmentSchema } from './manifest/capsule.js';
import { DelegationIdSchema } from './ids.js';

/**
 * How a delegated child knows its spawner, and what it leaves behind when it ends.
 *
 * A child learns who delegated to it from one injected variable, `MURMUR_SPAWNER`, applied in the
 * runtime-owned tail of its environment, never from anything it inherited. The handle names the
 * parent session, the conversation and the delegation; only a handle with a `url` also says where
 * to post the outcome. The outcome names the delegation and where the result is, and never carries
 * the child's output: a parent that wants it reads the file deliberately.
 */

export const SPAWNER_ENV = 'MURMUR_SPAWNER';
export const DELEGATION_ID_HEADER = 'x-murmur-delegation-id';
export const COMPLETION_SESSION_HEADER = 'x-murmur-completion-session';
export const COMPLETION_FILE = 'completion.json';
/** Ceiling on `detail`, the one field built from something a child wrote. */
export const MAX_DETAIL_BYTES = 2_000;

/** Exactly these keys: `context_id`, `delegation_id`, `session_id`, and `url` when a completion is wanted. */
export const SpawnerHandleSchema = z.strictObject({
  session_id: z.string().min(1),
  context_id: z.string().min(1),
  delegation_id: z.string().min(1),
  url: z.string().min(1).optional(),
});
export type SpawnerHandle = z.infer<typeof SpawnerHandleSchema>;

/** The compact JSON injected as `MURMUR_SPAWNER`, keys in a fixed order. */
export function spawnerHandleToEnv(handle: SpawnerHandle): string {
  const ordered: SpawnerHandle = {
    context_id: handle.context_id,
    delegation_id: handle.delegation_id,
    session_id: handle.session_id,
  };
  if (handle.url !== undefined) ordered.url = handle.url;
  return JSON.stringify(ordered);
}

function unreadable(reason: string): MurmurError {
  return new MurmurError(
    'E-DLG-001',
    `${SPAWNER_ENV} is set but unreadable: ${reason}; this capsule cannot record which session spawned it or tell its spawner that it finished`,
    { path: SPAWNER_ENV, hint: `unset ${SPAWNER_ENV}, or launch the capsule through its parent's delegation` },
  );
}

/** Parses one `MURMUR_SPAWNER` value. Refuses anything that is not a whole handle. */
export function parseSpawnerHandle(value: string): SpawnerHandle {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (error) {
    throw unreadable(`it is not JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw unreadable('it is not a JSON object');
  for (const key of ['session_id', 'context_id', 'delegation_id'] as const) {
    const field = (parsed as Record<string, unknown>)[key];
    if (typeof field !== 'string' || field === '') throw unreadable(`it carries no '${key}'`);
  }
  const result = SpawnerHandleSchema.safeParse(parsed);
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = issue && issue.path.length > 0 ? `'${issue.path.join('.')}' ` : '';
    throw unreadable(`${where}${issue?.message ?? 'it is not a spawner handle'}`.trim());
  }
  return result.data;
}

/**
 * This process's own handle: `undefined` for a capsule nobody delegated (absent or blank), an
 * error for a value that is set and unreadable. Running anyway would produce work whose
 * provenance and outcome reach nobody.
 */
export function spawnerHandleFromEnv(env: NodeJS.ProcessEnv): SpawnerHandle | undefined {
  const raw = env[SPAWNER_ENV];
  if (raw === undefined || raw.trim() === '') return undefined;
  return parseSpawnerHandle(raw.trim());
}

export const DelegationStatusSchema = z.enum(['ok', 'error', 'crashed', 'terminated']);
export type DelegationStatus = z.infer<typeof DelegationStatusSchema>;

export const ReporterSchema = z.enum(['child', 'launcher']);
export type Reporter = z.infer<typeof ReporterSchema>;

/** The shape of `completion.json` and of the `delegation.completed` event's outcome. */
export const DelegationOutcomeSchema = z.object({
  delegation_id: z.string().min(1),
  capsule_name: z.string(),
  capsule_version: z.string(),
  session_id: z.string(),
  status: DelegationStatusSchema,
  result_path: z.string().optional(),
  workdir: z.string(),
  duration_ms: z.number().int().nonnegative(),
  detail: z.string().optional(),
  reported_by: ReporterSchema,
  delivered: z.boolean(),
  delivery_error: z.string().optional(),
});
export type DelegationOutcome = z.infer<typeof DelegationOutcomeSchema>;

/**
 * `detail` on one line (a completion message is one field per line, so a second line would be
 * free text for the parent's model), cut to `MAX_DETAIL_BYTES` of UTF-8 on a character boundary,
 * the cut marked.
 */
export function boundDetail(text: string): string {
  const detail = text.replace(/\s*[\r\n]+\s*/g, ' ');
  const bytes = Buffer.from(detail, 'utf8');
  if (bytes.length <= MAX_DETAIL_BYTES) return detail;
  let end = MAX_DETAIL_BYTES;
  // A UTF-8 continuation byte is 10xxxxxx: back up to the start of the character it belongs to.
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end -= 1;
  return `${bytes.subarray(0, end).toString('utf8')} […]`;
}

/** The text the parent's agent reads: the delegation, the outcome and where the result is. Never the result. */
export function completionMessageText(outcome: DelegationOutcome): string {
  const lines = [
    'Delegated capsule finished.',
    `delegation_id: ${outcome.delegation_id}`,
    `capsule: ${outcome.capsule_name}@${outcome.capsule_version}`,
    `session_id: ${outcome.session_id}`,
    `status: ${outcome.status}`,
    `duration_ms: ${outcome.duration_ms}`,
    `workdir: ${outcome.workdir}`,
    outcome.result_path === undefined ? 'result: none (the child wrote no result file)' : `result: ${outcome.result_path} (in that workdir)`,
  ];
  if (outcome.detail !== undefined) lines.push(`detail: ${boundDetail(outcome.detail)}`);
  return `${lines.join('\n')}\n\nThe child's own output is in that file and is not reproduced here.`;
}

/** The words every completion message ends with (`completionMessageText`). */
const COMPLETION_TAIL = "\n\nThe child's own output is in that file and is not reproduced here.";

/** The child a delegation launched, as its parent was told when the launch was answered. */
export interface LaunchedChild {
  sessionId: string;
  /** Its workdir (`DelegationLaunchReply.workdir`), which its completion names. */
  workdir: string;
}

/**
 * Where a child's runtime can say its answer is (`childResultPath`): `out/result.txt` in its
 * workdir, or in its session's directory under a workdir of the launcher's choosing.
 */
function resultPathsOf(child: LaunchedChild): string[] {
  const base = child.workdir.replace(/\/+$/, '');
  return [`${base}/out/result.txt`, `${base}/.murmur/${child.sessionId}/out/result.txt`];
}

/**
 * Whether `text` is a completion message exactly as `completionMessageText` writes one for
 * `delegationId`. A parent's host admits nothing else as a completion: the delegation id is in
 * the child's own environment (`MURMUR_SPAWNER`), so a child's guest can post a "completion"
 * itself, and what it posts must be no more than what its runtime could have said — a status, a
 * duration, a capsule's name and version as an artifact has them, and the bounded detail, each on
 * one line: never free text for the parent's model. Given `child`, it must be about the child the
 * delegation launched: its session, its workdir and a result where its runtime puts one. Without
 * that, a guest's "workdir" line carried ~1 MB of instructions to the parent's model.
 */
export function isCompletionMessage(text: string, delegationId: string, child?: LaunchedChild): boolean {
  if (!text.endsWith(COMPLETION_TAIL)) return false;
  const lines = text.slice(0, -COMPLETION_TAIL.length).split('\n');
  const field = (at: number, name: string): string | undefined => {
    const line = lines[at];
    return line?.startsWith(`${name}: `) ? line.slice(name.length + 2) : undefined;
  };
  const capsule = /^(.+)@([^@]+)$/.exec(field(2, 'capsule') ?? '');
  const status = DelegationStatusSchema.safeParse(field(4, 'status'));
  const duration = field(5, 'duration_ms');
  const workdir = field(6, 'workdir');
  const result = /^(?:none \(the child wrote no result file\)|(.+) \(in that workdir\))$/.exec(field(7, 'result') ?? '');
  const detailLines = lines.slice(8);
  const detail = detailLines.length === 0 ? undefined : detailLines.join('\n');
  if (lines[0] !== 'Delegated capsule finished.' || field(1, 'delegation_id') !== delegationId) return false;
  // The child the delegation launched, when the parent knows it: no other session's name, workdir or file is taken.
  if (child !== undefined) {
    if (field(3, 'session_id') !== child.sessionId || workdir !== child.workdir) return false;
    if (result?.[1] !== undefined && !resultPathsOf(child).includes(result[1])) return false;
  }
  if (!capsule || !status.success || duration === undefined || !/^\d{1,15}$/.test(duration) || workdir === undefined || !result) return false;
  if (artifactNameProblem(capsule[1] as string) !== undefined || artifactVersionProblem(capsule[2] as string) !== undefined) return false;
  if (detail !== undefined && (!detail.startsWith('detail: ') || boundDetail(detail.slice('detail: '.length)) !== detail.slice('detail: '.length)))
    return false;
  const outcome: DelegationOutcome = {
    delegation_id: delegationId,
    capsule_name: capsule[1] as string,
    capsule_version: capsule[2] as string,
    session_id: field(3, 'session_id') ?? '',
    status: status.data,
    workdir,
    duration_ms: Number(duration),
    ...(result[1] !== undefined ? { result_path: result[1] } : {}),
    ...(detail !== undefined ? { detail: detail.slice('detail: '.length) } : {}),
    reported_by: 'child',
    delivered: false,
  };
  // Written back, it must be the same text: nothing was carried in a field's shape.
  return completionMessageText(outcome) === text;
}

/**
 * Where a delegated session sits in its delegation tree: the session at the root (one a person or
 * a client launched, not delegated) and how many delegations below it (1: the root's own child).
 * The parent's runtime sets it; a guest never names it.
 */
export const DelegationLineageSchema = z.object({
  root_session_id: z.string().min(1).max(256),
  depth: z.number().int().min(1).max(10_000),
});
export type DelegationLineage = z.infer<typeof DelegationLineageSchema>;

/**
 * Launching a delegated child: what a parent's runtime (or a test acting as one) asks the watcher,
 * which launches the child through the stack, watches it, and reports for it when it cannot.
 */
export const DelegationLaunchRequestSchema = z.object({
  /** roost's approval for this child (`POST /spawn`), consumed when the child registers. */
  approval: z.string().min(1),
  /** The delegation's id, when the parent's runtime minted it (to hold the delegation before the child exists); else the watcher mints one. */
  delegation_id: DelegationIdSchema.optional(),
  roost_url: z.string().min(1),
  capsule_name: z.string().min(1),
  capsule_version: z.string().min(1),
  /** The parent: who spawned the child, the conversation, where a completion goes (none: not wanted). */
  parent: z.object({
    session_id: z.string().min(1),
    context_id: z.string().min(1),
    url: z.string().min(1).optional(),
    /**
     * The executor the parent runs on, where the child is launched (its workdir is
     * `children/<delegation_id>` in the parent's records). Absent: the watcher's own knowledge of
     * where the parent runs; a parent no executor holds gets its child wherever one is free.
     */
    executor_id: z.string().min(1).optional(),
  }),
  /** Values for the names the child may read (`env.allow`), from the launcher. Never `MURMUR_SPAWNER`'s: the runtime sets that. */
  env: z.record(z.string(), z.string()).default({}),
  /** The child's task, written to its `task.md`. */
  task: z.string().optional(),
  /** How long the child may run before its watcher ends it and reports it `terminated`. */
  completion_deadline_secs: z.number().positive().optional(),
  /** Whether the child is launched with a spawner handle at all (false: an undelegated launch). */
  delegated: z.boolean().default(true),
  /** The parent session's traceparent: the child's launch and session continue its trace. */
  traceparent: z.string().max(512).optional(),
  /**
   * The floor the parent runs at (its manifest's, the launcher's `--containment`, its own parent's):
   * the child runs at no weaker one. roost's fit check sees only declared floors, not one given on a
   * command line, so the parent's runtime carries it here, with the launch rather than looked up later.
   */
  containment_floor: ContainmentSchema.optional(),
  /** The child's place in its delegation tree. Absent: the parent is taken for a root, and the child is one delegation deep. */
  lineage: DelegationLineageSchema.optional(),
});
export type DelegationLaunchRequest = z.input<typeof DelegationLaunchRequestSchema>;

export const DelegationLaunchReplySchema = z.object({
  /** Absent for an undelegated launch. */
  delegation_id: z.string().optional(),
  session_id: z.string(),
  url: z.string().nullable(),
  pid: z.number().int(),
  process_start: z.string(),
  executor_id: z.string(),
  /** The child's workdir (`<parent records>/children/<id>`), where `completion.json` is written. */
  workdir: z.string(),
  /** The child's records directory (its session directory). */
  records_dir: z.string(),
  /** The handle injected as `MURMUR_SPAWNER`, as the child received it. */
  spawner: z.string().optional(),
  /** The child session's own door token (the launch's): for whoever launched it, never for a capsule. */
  token: z.string(),
});
export type DelegationLaunchReply = z.infer<typeof DelegationLaunchReplySchema>;

/** Asking the watcher that launched a delegation about it, or to end it (`shutdown`). */
export const DelegationControlRequestSchema = z.object({ action: z.enum(['status', 'shutdown']) });
export const DelegationControlReplySchema = z.object({
  exited: z.boolean(),
  /** The watcher has recorded (and, if due, posted) the delegation's outcome. */
  watcher_finished: z.boolean(),
  /** The last stderr lines of the child's session. */
  stderr_tail: z.array(z.string()),
  outcome: DelegationOutcomeSchema.optional(),
});
export type DelegationControlReply = z.infer<typeof DelegationControlReplySchema>;

/** JSON-RPC code for a completion no task of the session awaits (or addressed to another session). */
export const COMPLETION_NOT_AWAITED = -31002;

/** The header a session presents its roost credential in (`POST /spawn`, deregistration). */
export const SPAWN_CREDENTIAL_HEADER = 'x-murmur-spawn-credential';
/** The header a child presents its spawn approval in when it registers with roost. */
export const SPAWN_APPROVAL_HEADER = 'x-murmur-spawn-approval';
