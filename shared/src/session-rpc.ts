import * as z from 'zod';

/**
 * What a door and a capsule host say to each other over the bus: `session.<id>.rpc` (door → host,
 * request/reply) and `session.<id>.events` (host → every door, the SSE feed).
 *
 * This is neutral of the A2A generation a client speaks. The host owns every task and every
 * event id; a door only translates between this and the JSON-RPC a client sent (`message/send`
 * or `SendMessage`), which is why any number of doors can serve one session and none keeps state.
 */

/** The A2A task states the host moves a task through (`canceled` only for a task that never ran). */
export const TaskStateSchema = z.enum(['submitted', 'working', 'input-required', 'completed', 'failed', 'rejected', 'canceled']);
export type TaskState = z.infer<typeof TaskStateSchema>;

export const TERMINAL_TASK_STATES: ReadonlySet<TaskState> = new Set(['completed', 'failed', 'rejected', 'canceled']);

/** One line of a task's conversation as the host kept it. */
export const TaskMessageSchema = z.object({
  role: z.enum(['user', 'agent']),
  message_id: z.string(),
  text: z.string(),
});
export type TaskMessage = z.infer<typeof TaskMessageSchema>;

export const TaskViewSchema = z.object({
  id: z.string(),
  context_id: z.string(),
  state: TaskStateSchema,
  /** The status message: `inference turn 2`, the input prompt, `input-timeout`, an error. */
  message: z.string().optional(),
  /** While `input-required`: what the capsule asked. */
  prompt: z.string().optional(),
  /** Once `completed`: the final text (what `out/result.txt` holds). */
  response: z.string().optional(),
  /** Tool results and hook artifacts, as the stream carried them; `seq` numbers each within its task (its A2A artifactId). */
  artifacts: z.array(z.object({ name: z.string(), text: z.string(), seq: z.number().int().nonnegative().optional() })),
  history: z.array(TaskMessageSchema),
  updated_at: z.string(),
});
export type TaskView = z.infer<typeof TaskViewSchema>;

/**
 * One event of a session's feed, numbered by the host: ids increase by one per event, for the
 * whole session, so `Last-Event-ID` means the same thing at every door. `data` is upstream's SSE
 * payload for the event type, which `stream/watch` serves as is.
 */
export const SessionEventSchema = z.object({
  id: z.number().int().nonnegative(),
  type: z.enum(['status', 'artifact', 'text', 'thinking', 'error']),
  task_id: z.string().nullable(),
  context_id: z.string().nullable(),
  /** For a `status` event: the task's state after it, and whether it is the task's last event. */
  state: TaskStateSchema.optional(),
  final: z.boolean().default(false),
  /** When the host emitted it (ISO 8601): every door renders the same event the same way. */
  time: z.string(),
  data: z.record(z.string(), z.unknown()),
});
export type SessionEvent = z.infer<typeof SessionEventSchema>;

/**
 * Whether a task in `state` has settled for a blocking send: it ended, or it waits for its
 * client's input. The door and the host both decide when a blocking send is answered by this.
 */
export function hasSettled(state: TaskState): boolean {
  return TERMINAL_TASK_STATES.has(state) || state === 'input-required';
}

/** Whether `event` is the status that settles its task (its final one, or input-required). */
export function settlesItsTask(event: SessionEvent): boolean {
  return event.type === 'status' && event.task_id !== null && (event.final || event.state === 'input-required');
}
export type SessionEventInput = z.input<typeof SessionEventSchema>;

/** What a capsule is, as the host describes it; a door adds where it can be reached. */
export const CapsuleCardSchema = z.object({
  name: z.string(),
  description: z.string(),
  version: z.string(),
  session_id: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  /** The model-visible tools, which become the card's skills. */
  tools: z.array(z.object({ name: z.string(), description: z.string() })),
  shell: z.boolean(),
  network: z.boolean(),
  task_acceptance: z.enum(['none', 'single', 'queue']),
  conversation: z.enum(['stateless', 'threaded']),
});
export type CapsuleCard = z.infer<typeof CapsuleCardSchema>;

/** A JSON-RPC error decided by the host (task not found, not cancelable, method not accepted). */
export const RpcErrorSchema = z.object({
  code: z.number().int(),
  message: z.string(),
  data: z.unknown().optional(),
});
export type RpcError = z.infer<typeof RpcErrorSchema>;

/** The longest a `send` may ask its host to wait for the task to settle (below the executor's 10 s wait for any answer). */
export const SETTLE_WITHIN_MAX_MS = 8_000;

export const SessionCallSchema = z.discriminatedUnion('method', [
  z.object({ method: z.literal('card') }),
  z.object({
    method: z.literal('send'),
    message_id: z.string().min(1).max(256),
    context_id: z.string().max(256).optional(),
    /** The `taskId` the client named: only an input-required task may be continued. */
    task_id: z.string().max(256).optional(),
    text: z.string(),
    traceparent: z.string().max(512).optional(),
    /** A delegated child's completion (`x-murmur-delegation-id`): it enters the task awaiting it, or is refused. */
    delegation_id: z.string().max(256).optional(),
    /** The session the completion is addressed to (`x-murmur-completion-session`). */
    completion_session: z.string().max(256).optional(),
    /** `x-murmur-forget-session`: this task's context starts its harness conversation anew. */
    forget_session: z.boolean().optional(),
    /**
     * The request was admitted by the session's own token, which is good for this session alone:
     * so is the conversation its context names. It is kept apart from the capsule's shared ones
     * (which any session of the capsule may continue), so a holder of one session's token cannot
     * load another session's conversation by naming its context.
     */
    context_scope: z.literal('session').optional(),
    /**
     * A blocking send: the host answers once the task settles (a final state, or input-required)
     * or after this long, whichever is first — with the task as it then stands, its history cut to
     * `history_length` — so a door's blocking send is one round trip instead of send, watch, get.
     * Below the executor's own wait for a host's answer (10 s); a host that predates it answers at once.
     */
    settle_within_ms: z.number().int().positive().max(SETTLE_WITHIN_MAX_MS).optional(),
    history_length: z.number().int().nonnegative().optional(),
  }),
  z.object({ method: z.literal('get'), task_id: z.string().max(256).optional(), history_length: z.number().int().nonnegative().optional() }),
  z.object({ method: z.literal('cancel'), task_id: z.string().max(256) }),
  /**
   * A page of the session's tasks, most recently updated first (then by id): those after where
   * `page_token` (the previous page's, as this session's host issued it) says it ended, filtered by
   * context, state and update time.
   */
  z.object({
    method: z.literal('list'),
    context_id: z.string().max(256).optional(),
    state: TaskStateSchema.optional(),
    updated_after_ms: z.number().nonnegative().optional(),
    page_size: z.number().int().min(1).max(100),
    page_token: z.string().max(1024).optional(),
    history_length: z.number().int().nonnegative().optional(),
    /** `includeArtifacts`: without it a page's tasks carry none, which the reply would only carry to be dropped. */
    include_artifacts: z.boolean().optional(),
  }),
  /**
   * The events a stream begins with: those after `after_event_id` still in the replay buffer
   * (none when absent), for one task or — with no `task_id` — the whole session (`stream/watch`).
   */
  z.object({ method: z.literal('replay'), task_id: z.string().max(256).optional(), after_event_id: z.number().int().nonnegative().optional() }),
  /**
   * Whether the token whose SHA-256 (hex) is `session_token_sha256` is this session's own (the one
   * its launch returned). Answered by the executor that holds the session, never by the capsule
   * host, which never sees a token. The digest, not the token, crosses the bus: whoever reads the
   * bus (`mur events 'session.>'`) must not be handed every token a client presents.
   */
  z.object({ method: z.literal('authorize'), session_token_sha256: z.string().regex(/^[0-9a-f]{64}$/) }),
]);
export type SessionCall = z.infer<typeof SessionCallSchema>;

export const SessionReplySchema = z.object({
  error: RpcErrorSchema.optional(),
  task: TaskViewSchema.optional(),
  card: CapsuleCardSchema.optional(),
  events: z.array(SessionEventSchema).optional(),
  /** Set when events the caller asked for were already evicted: the oldest id still held. */
  first_available_id: z.number().int().nonnegative().optional(),
  /** `replay` of one task after an event: its streamed artifacts begun by then, which a resumed stream appends to. */
  streams_begun: z.array(z.enum(['text', 'thinking'])).optional(),
  /** The id the next event will get: a stream forwards live events from here on. */
  next_event_id: z.number().int().nonnegative().optional(),
  /** `list`: the page, how many tasks match in all, and the token of the next page (none: the last). */
  tasks: z.array(TaskViewSchema).optional(),
  total_size: z.number().int().nonnegative().optional(),
  next_page_token: z.string().optional(),
});
export type SessionReply = z.infer<typeof SessionReplySchema>;

/** JSON-RPC error codes the runtime answers with (A2A's own plus JSON-RPC 2.0's). */
export const RPC_ERRORS = {
  parse: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  taskNotFound: -32001,
  taskNotCancelable: -32002,
  pushNotificationNotSupported: -32003,
  unsupportedOperation: -32004,
  contentTypeNotSupported: -32005,
  /** 0.3's name for it: the authenticated extended card is not configured. */
  extendedCardNotConfigured: -32007,
  versionNotSupported: -32009,
} as const;

/**
 * A context id names a directory (`contexts/<id>/history.json` in threaded mode), so one chosen by
 * a client must be a plain path segment: no separators, no `.` or `..`, nothing a shell or a
 * filesystem would read specially.
 */
export function isSafeContextId(id: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id) && !id.includes('..');
}

/** `isSafeContextId`'s rule in words, for whoever refuses or warns of an id that breaks it. */
export const SAFE_CONTEXT_ID_RULE = "letters, digits, '.', '_', '-'; at most 128";
