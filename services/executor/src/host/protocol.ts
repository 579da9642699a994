import * as z from 'zod';
import { UPLOAD_PIECE_CHARS } from './request-body.js';
import {
  CapabilityPolicySchema,
  CapsuleCardSchema,
  HarnessSessionIdSchema,
  LifecycleSchema,
  MurmurErrorJsonSchema,
  SessionCallSchema,
  SessionEventSchema,
  SessionReplySchema,
  TranspiledComponentFields,
} from '@murmur/shared';

/**
 * The executor ↔ capsule host channel: framed JSON on an inherited descriptor
 * (`frame-channel.ts`), the host's only way out of its sandbox (it has no network). The executor
 * validates every message, because the host runs untrusted code and must be treated as able to
 * say anything.
 */

/**
 * A component as the host loads it: the plan's transpiled component, its bundle already fetched
 * and verified into this machine's cache at `bundle_dir` by the executor.
 */
export const HostComponentSchema = TranspiledComponentFields.omit({ bundle: true, cache_hit: true }).extend({ bundle_dir: z.string() });
export type HostComponent = z.infer<typeof HostComponentSchema>;

/** A tool the host can dispatch, with the paths it sees inside the sandbox. */
export const HostToolSchema = z.object({
  name: z.string(),
  version: z.string(),
  kind: z.enum(['wasm', 'native', 'skill']),
  component: HostComponentSchema.optional(),
  /** The native binary or skill.md, inside the session's `tools/<name>/`. */
  path: z.string().optional(),
  /** The directory a WASM tool's preopen is narrowed to (its own `filesystem.scope`). */
  preopen: z.string(),
  description: z.string().optional(),
  runtime: z.enum(['wasm', 'native']),
  /** What `manage.describe` answers, read from the artifact's manifest by the executor. */
  info: z.object({
    description: z.string(),
    tags: z.array(z.string()),
    input_schema: z.string().optional(),
    output_schema: z.string().optional(),
  }),
});
export type HostTool = z.infer<typeof HostToolSchema>;

/** The driver component an agent calls each turn, and the directory it sees. */
export const DriverRefSchema = z.object({ name: z.string(), component: HostComponentSchema, preopen: z.string() });
export type DriverComponentRef = z.infer<typeof DriverRefSchema>;

/**
 * A hook as its session runs it (decided on the executor's side): its component, its contract
 * from its own manifest, the one directory it may see (none without a filesystem grant), the
 * only environment it gets (`MURMUR_OTEL_ENDPOINT`, `MURMUR_EVAL_CONFIG` and the forwarded ids),
 * and how long each of its calls may take.
 */
export const HookStartSchema = z.object({
  name: z.string(),
  version: z.string(),
  component: HostComponentSchema,
  /** Absent: every session event but on-stage. */
  binding: z.string().optional(),
  mode: z.enum(['blocking', 'async']),
  on_overflow: z.enum(['drop', 'block']),
  preopen: z.string(),
  env: z.array(z.tuple([z.string(), z.string()])),
  deadline_ms: z.number().int().positive(),
});
export type HookStart = z.infer<typeof HookStartSchema>;

/**
 * A harness CLI as its session runs it (`inference.transport: process`): its dialect, and the binary
 * found on PATH by the executor (the real file, which the sandbox makes executable). Its home is
 * the session's own; the transcript of a context it resumes is asked of the executor
 * (`harness-transcript-load`) and handed back after the run (`harness-transcript-save`).
 */
export const HarnessStartSchema = z.object({
  dialect: z.literal('claude-code'),
  /** `inference.command` as the manifest wrote it (what `harness-session.json` names as the driver). */
  command: z.string(),
  binary: z.string(),
  /** The largest transcript the executor keeps for a context: a larger one is not sent (`oversized_bytes`). */
  transcript_limit_bytes: z.number().int().positive(),
  /**
   * The launcher's values for every `capabilities.env.allow` name, credentials included: the
   * harness is the capsule's inference, and like a driver's key its credential reaches it alone
   * (never a guest, never a shell tool).
   */
  env: z.array(z.tuple([z.string(), z.string()])),
  /** `mur run --forget-session`: this context's session is dropped before its first task. */
  forget_context: z.string().optional(),
  /** How long one run may take before it is killed: upstream's 10 minutes unless the executor's operator says otherwise. */
  run_cap_ms: z.number().int().positive().default(600_000),
});
export type HarnessStart = z.infer<typeof HarnessStartSchema>;

/**
 * What an agent capsule's host needs beyond a script capsule's: the inference settings, the
 * driver, the system prompt already read and resolved by the executor (the host cannot see the
 * manifest's directory), the task loop's settings and what the agent card says.
 */
export const AgentStartSchema = z.object({
  model: z.string(),
  max_tokens: z.number().int().positive(),
  max_turns: z.number().int().positive(),
  /** The driver component (`transport: http`); a harness capsule has none. */
  driver: DriverRefSchema.optional(),
  /** `transport: process`: the harness CLI the host drives instead of a driver. */
  harness: HarnessStartSchema.optional(),
  /** The driver's environment: the guest environment plus `MURMUR_INFERENCE_*`, the key included. */
  driver_env: z.array(z.tuple([z.string(), z.string()])),
  system_prompt: z.string().nullable(),
  system_prompt_source: z.enum(['manifest', 'cli', 'none']),
  /** A skill used as the system prompt is not offered to the model as a tool. */
  system_prompt_artifact: z.string().optional(),
  lifecycle: LifecycleSchema,
  /** How long a session that may still receive its task waits for one (`MURMUR_A2A_TIMEOUT_SECS`). */
  idle_timeout_ms: z.number().int().nonnegative(),
  card: CapsuleCardSchema,
  /** `inference.max_task_reopens`: how often an on-task-end hook may send a task back (0: never). */
  max_task_reopens: z.number().int().nonnegative().default(1),
  /** `context.max_tokens`: with it, a turn whose tokens reach `threshold` of it is compacted. */
  context_max_tokens: z.number().int().positive().optional(),
  compaction: z
    .object({ threshold: z.number(), model: z.string().optional(), system_prompt: z.string().optional(), dump_summaries: z.boolean() })
    .default({ threshold: 0.98, dump_summaries: false }),
  /** The context a `task.md` task belongs to (`mur run --context`); absent, each gets a new one. */
  context_id: z.string().optional(),
  /** The capsule's hooks, in manifest order. */
  hooks: z.array(HookStartSchema).default([]),
});
export type AgentStart = z.infer<typeof AgentStartSchema>;

/**
 * The sealed sandbox, as the host needs to know it: the helper every subprocess starts through
 * (for its rlimits, to join the tools' cgroup on the descriptors named here, and to be held to
 * what a tool may execute), and the
 * sockets `murmur-confine` bound in the sandbox's network namespace, which the host hands to the
 * executor when asked (`hand-over`, before `start`; it serves none of them itself).
 */
export const SandboxStartSchema = z.object({
  helper: z.string(),
  tool_cgroup_fds: z.array(z.number().int()),
  /** What a subprocess may execute (`murmur-confine limits exec=`): never the host's node or the helper. */
  tool_executables: z.array(z.string()),
  dns: z.object({ udpFd: z.number().int(), tcpFd: z.number().int() }),
  listeners: z.array(z.number().int()),
  /** Set in `start`: the host handed them over when asked (`hand-over`), and nothing is left to hand. */
  handed_over: z.boolean().optional(),
});
export type SandboxNetworkStart = z.infer<typeof SandboxStartSchema>;

/**
 * A sealed host, asked to hand its sandbox's sockets over before it is given a session: it answers
 * on Node's IPC channel with one `listener` message per socket, then `listeners-done`, and closes
 * that channel. A pooled host is asked as soon as it is started, so a launch does not wait for it.
 */
export const HandOverMessageSchema = z.object({ type: z.literal('hand-over'), sandbox: SandboxStartSchema });

/**
 * A pooled host, told what its session will run first while its workdir is being attached: it
 * compiles the component's core modules and has its waiting worker load the component's glue,
 * so neither is on the way to the guest's first instruction; for an agent (`agent`), it loads the
 * task loop's modules as well, which a script capsule's host does not need (one that was told
 * an agent's component ahead, wrongly, has them loaded and unused). Nothing is instantiated
 * and no guest code runs before `start`; a host that is never started throws the work away with
 * itself.
 *
 * A pooled host is also told, as it starts, what the pool's last launch ran first (`HostPool`'s
 * anticipation): an executor that launches one capsule again and again then finds that work done
 * before the launch. A later `expect` naming another component (or another memory cap) replaces
 * it: the modules compiled and the glue loaded for the first are dropped before the second is
 * begun on.
 */
export const ExpectMessageSchema = z.object({
  type: z.literal('expect'),
  component: HostComponentSchema,
  memory_limit_bytes: z.number().int().positive(),
  table_elements_limit: z.number().int().positive(),
  agent: z.boolean().optional(),
});
export type ExpectMessage = z.infer<typeof ExpectMessageSchema>;

export const StartMessageSchema = z.object({
  type: z.literal('start'),
  session_id: z.string(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  /** The script capsule's own component; an agent capsule has none. */
  component: HostComponentSchema.optional(),
  agent: AgentStartSchema.optional(),
  /** The accessible workdir: the capsule's single preopen (already narrowed by `filesystem.scope`). */
  preopen: z.string(),
  accessible_workdir: z.string(),
  session_dir: z.string(),
  /** The guest's whole environment, computed by the executor from the grants. */
  guest_env: z.array(z.tuple([z.string(), z.string()])),
  /** The base a subprocess's environment is built from (already credential-scrubbed). */
  subprocess_env: z.record(z.string(), z.string()),
  policy: CapabilityPolicySchema,
  tools: z.array(HostToolSchema),
  /** Declared tool names a capsule may invoke (its allowlist). */
  allowlist: z.array(z.string()),
  trace_include_tool_output: z.boolean(),
  /** The session that spawned this one (`session_start.spawned_by`). */
  spawned_by: z.string().optional(),
  effective_grants: z.record(z.string(), z.unknown()),
  /** Present when the sandbox is sealed. */
  sandbox: SandboxStartSchema.optional(),
  /**
   * An unsealed sandbox's tools (no helper to start them through): the tools' cgroup, as
   * `cgroup.procs` descriptors the host inherited, which each subprocess joins before it runs, and
   * util-linux's `prlimit`, which sets its `capabilities.resources` rlimits (absent where there is
   * none: the bootstrap log says so).
   */
  unsealed_tools: z.object({ cgroup_fds: z.array(z.number().int().min(3)), prlimit: z.string().optional() }).optional(),
  /**
   * True when the host runs in a pid namespace of its own (bubblewrap or unshare started it), so
   * every process it sees is the session's: what outlives its subprocess is ended (`escapees.ts`).
   */
  pid_namespace: z.boolean().optional(),
});
export type StartMessage = z.infer<typeof StartMessageSchema>;

export const HostReplySchema = z.object({
  type: z.literal('reply'),
  id: z.number().int(),
  ok: z.boolean(),
  value: z.unknown().optional(),
  error: z.string().optional(),
});

export const StopMessageSchema = z.object({ type: z.literal('stop'), reason: z.string() });

/** A door's call, relayed by the executor; the host answers with `rpc-reply` and the same id. */
export const RpcMessageSchema = z.object({ type: z.literal('rpc'), id: z.number().int(), call: SessionCallSchema });

/**
 * A ceiling the executor watches for the host crossed (today: the workdir's size): every later
 * subprocess is refused with `message`, and the session ends with `code`.
 */
export const CeilingMessageSchema = z.object({ type: z.literal('ceiling'), limit: z.string(), code: z.string(), message: z.string(), hint: z.string() });
export type CeilingMessage = z.infer<typeof CeilingMessageSchema>;

export const ExecutorToHostSchema = z.discriminatedUnion('type', [
  StartMessageSchema,
  HostReplySchema,
  StopMessageSchema,
  RpcMessageSchema,
  CeilingMessageSchema,
  HandOverMessageSchema,
  ExpectMessageSchema,
]);
export type ExecutorToHost = z.infer<typeof ExecutorToHostSchema>;

/**
 * The most entries a host's request may hold in a list: a frame is bounded in bytes, and parsed
 * into objects many times its size (a 24 MiB frame of `{}` is 8 million objects): what the
 * executor keeps of a request, and writes (a conversation), is bounded in entries too.
 */
export const HOST_LIST_LIMITS = { headers: 512, messages: 10_000 } as const;

export const HttpRequestSchema = z.object({
  method: z.string(),
  url: z.string(),
  headers: z.array(z.tuple([z.string(), z.string()])).max(HOST_LIST_LIMITS.headers),
  /** A body of at most one piece, sent with its request. */
  body_base64: z.string().max(UPLOAD_PIECE_CHARS).optional(),
  /** A larger body, sent ahead in `http-upload` pieces under this id. */
  upload: z.number().int().positive().optional(),
  /** How many bytes the guest wrote, when more than `REQUEST_BODY_LIMIT_BYTES`: the body itself is not sent. */
  oversized_bytes: z.number().int().nonnegative().optional(),
  /** Whose grant the request is made under: the capsule, or a tool by name (its narrowed rules). */
  grant: z.string(),
});
export type HttpRequest = z.infer<typeof HttpRequestSchema>;

/**
 * A response's head, sent as soon as the executor has it; its body follows piece by piece, read
 * with `http-body` under `body` (the id the executor holds it by) until an end or an error.
 */
export const HttpResponseSchema = z.object({
  status: z.number().int(),
  headers: z.array(z.tuple([z.string(), z.string()])),
  body: z.number().int().positive(),
});
export type HttpResponse = z.infer<typeof HttpResponseSchema>;

/** One piece of a relayed response body: bytes as they arrived, its end, or the WASI error code that ended it. */
export const HttpBodyPieceSchema = z.union([
  z.object({ chunk_base64: z.string() }),
  z.object({ end: z.literal(true) }),
  z.object({ error: z.object({ code: z.string(), reason: z.string() }) }),
]);
export type HttpBodyPiece = z.infer<typeof HttpBodyPieceSchema>;

/** Outcome of an egress request the executor judged: a response, or the WASI error code that refused it. */
export const EgressResultSchema = z.discriminatedUnion('outcome', [
  z.object({ outcome: z.literal('response'), response: HttpResponseSchema }),
  z.object({ outcome: z.literal('denied'), code: z.string(), reason: z.string() }),
]);
export type EgressResult = z.infer<typeof EgressResultSchema>;

/** The executor's answer to `http-check`: whether the policy lets a request to that URL go at all. */
export type HttpCheckVerdict = { allowed: true } | { allowed: false; code: string; reason: string };

export const SendRequestSchema = z.object({
  peer_url: z.string(),
  message_id: z.string(),
  context_id: z.string().optional(),
  text: z.string(),
});

export const PullRequestSchema = z.object({ name: z.string(), version: z.string() });

/** The model's `delegate-task`: ask roost, launch the child with the task; the reply names the delegation to await. */
export const DelegateRequestSchema = z.object({
  capsule: z.string().min(1),
  version: z.string().min(1),
  task: z.string(),
  context_id: z.string(),
});

export const HostRequestSchema = z.discriminatedUnion('op', [
  z.object({ op: z.literal('http'), request: HttpRequestSchema }),
  /** One piece of a request body larger than `UPLOAD_PIECE_CHARS`, sent (in order) before its `http` request. */
  z.object({ op: z.literal('http-upload'), upload: z.number().int().positive(), chunk_base64: z.string().max(UPLOAD_PIECE_CHARS) }),
  /** An upload whose request could not be sent after all (its head too large to cross): the executor lets it go. */
  z.object({ op: z.literal('http-upload-release'), upload: z.number().int().positive() }),
  /** `outgoing-handler.handle`: whether the request may go at all, decided before any body is written. */
  /** Answered with an `HttpCheckVerdict`. */
  z.object({ op: z.literal('http-check'), request: z.object({ url: z.string(), grant: z.string() }) }),
  /** The next piece of an allowed response's body (`HttpResponse.body`), answered when it arrives. */
  z.object({ op: z.literal('http-body'), body: z.number().int().positive() }),
  /** The guest is done with a response body before its end: the executor lets its connection go. */
  z.object({ op: z.literal('http-body-release'), body: z.number().int().positive() }),
  /** The tools' cgroup counters, read around each subprocess to name the ceiling that ended it. */
  z.object({ op: z.literal('tool-counters') }),
  z.object({ op: z.literal('send'), request: SendRequestSchema }),
  z.object({ op: z.literal('pull'), request: PullRequestSchema }),
  z.object({ op: z.literal('delegate'), request: DelegateRequestSchema }),
  /** `session_scoped` on these: the context is kept for this session alone (its task came under the session's own token). */
  z.object({ op: z.literal('conversation-load'), context_id: z.string(), session_scoped: z.literal(true).optional() }),
  z.object({
    op: z.literal('conversation-save'),
    context_id: z.string(),
    messages: z.array(z.unknown()).max(HOST_LIST_LIMITS.messages),
    session_scoped: z.literal(true).optional(),
  }),
  /** The harness session a context has (`transport: process`), recorded, replaced or dropped by the executor. */
  z.object({ op: z.literal('harness-session-get'), context_id: z.string(), session_scoped: z.literal(true).optional() }),
  z.object({ op: z.literal('harness-session-put'), context_id: z.string(), session_id: HarnessSessionIdSchema, session_scoped: z.literal(true).optional() }),
  z.object({ op: z.literal('harness-session-forget'), context_id: z.string(), session_scoped: z.literal(true).optional() }),
  /** The transcript the executor keeps of a context's harness session, in base64; null when it keeps none. */
  z.object({ op: z.literal('harness-transcript-load'), context_id: z.string(), session_id: HarnessSessionIdSchema }),
  /** One piece of a transcript, sent (in order) before the `harness-transcript-save` that names its upload. */
  z.object({ op: z.literal('harness-transcript-upload'), upload: z.number().int().positive(), chunk_base64: z.string().max(UPLOAD_PIECE_CHARS) }),
  /**
   * What a run left of the context's session, to keep in place of what was (`{ kept }`): its
   * pieces' upload (none for an empty one), or only its size when it is larger than the executor keeps.
   */
  z.object({
    op: z.literal('harness-transcript-save'),
    context_id: z.string(),
    session_id: HarnessSessionIdSchema,
    upload: z.number().int().positive().optional(),
    oversized_bytes: z.number().int().positive().optional(),
  }),
]);
export type HostRequest = z.infer<typeof HostRequestSchema>;

export const HostToExecutorSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('ready') }),
  /** One socket of the sealed sandbox's network, passed as the message's handle. */
  z.object({ type: z.literal('listener'), fd: z.number().int(), protocol: z.enum(['tcp', 'udp']) }),
  z.object({ type: z.literal('output'), stream: z.enum(['stdout', 'stderr']), text: z.string() }),
  z.object({ type: z.literal('request'), id: z.number().int(), request: HostRequestSchema }),
  z.object({ type: z.literal('rpc-reply'), id: z.number().int(), reply: SessionReplySchema }),
  /** One event of the session's A2A feed, for the executor to publish on `session.<id>.events`. */
  z.object({ type: z.literal('event'), event: SessionEventSchema }),
  /** One `trace.jsonl` record as its line (`ChannelTrace`): the executor checks it and alone writes the file. */
  z.object({ type: z.literal('trace'), line: z.string() }),
  z.object({
    type: z.literal('result'),
    status: z.enum(['ok', 'failed', 'trapped']),
    exit_code: z.number().int(),
    error: MurmurErrorJsonSchema.optional(),
  }),
]);
export type HostToExecutor = z.infer<typeof HostToExecutorSchema>;
