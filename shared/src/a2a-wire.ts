import * as z from 'zod';

/**
 * What A2A clients send, in both generations a door accepts. A request's generation is its
 * `A2A-Version` service parameter — the header, or the `A2A-Version` query parameter the spec also
 * allows — and, when it gives none, its method's own name: the generations' names never collide
 * (slash-named 0.3 methods with `kind` fields and lower-case states; PascalCase 1.0 methods with
 * `ROLE_USER` and `TASK_STATE_*`), and clients do send 1.0 names bare.
 *
 * Only what the runtime reads is checked; unknown keys are allowed, because both generations grow
 * optional fields and a client sending one should not be refused for it.
 */

export const A2A_VERSIONS = ['0.3', '1.0'] as const;
export type A2aVersion = (typeof A2A_VERSIONS)[number];

/**
 * The generation a request speaks: its `A2A-Version` (header or query parameter) when it gives
 * one — undefined when that is a version this runtime does not speak — else its method's.
 */
export function a2aVersionOf(given: string | undefined, method?: string): A2aVersion | undefined {
  const value = given?.trim();
  if (value === undefined || value === '') return method !== undefined && /^[A-Z]/.test(method) ? '1.0' : '0.3';
  // Major.Minor is what is negotiated; a patch number never is (the spec's rule).
  const [major, minor = '0'] = value.split('.');
  if (!/^\d+(\.\d+){0,2}$/.test(value)) return undefined;
  if (Number(major) === 0 && Number(minor) === 3) return '0.3';
  if (Number(major) === 1 && Number(minor) === 0) return '1.0';
  return undefined;
}

export const JsonRpcIdSchema = z.union([z.string().max(256), z.number(), z.null()]);
export type JsonRpcId = z.infer<typeof JsonRpcIdSchema>;

export const JsonRpcRequestSchema = z.object({
  jsonrpc: z.literal('2.0'),
  id: JsonRpcIdSchema.optional(),
  method: z.string().min(1).max(128),
  params: z.unknown().optional(),
});
export type JsonRpcRequest = z.infer<typeof JsonRpcRequestSchema>;

const identifier = z.string().min(1).max(256);

/** Fields whose values are `google.protobuf.Struct`s, a client's own JSON: their keys are never renamed. */
const STRUCT_FIELDS = new Set(['metadata', 'data']);
/**
 * The proto's plain `string` fields among the params read whose empty value is the field unset
 * (proto3 has no presence for them; a writer that emits defaults writes `""`). A required one
 * (`messageId`, a task's `id`) is not among them: empty, it is refused.
 */
const EMPTY_IS_UNSET = new Set(['contextId', 'taskId', 'tenant']);
/** The proto's int32 fields among the params read: ProtoJSON writes a number or a string of one. */
const INT32_FIELDS = new Set(['pageSize', 'historyLength']);

/** How deep `fromProtoJson` renames: A2A's messages nest a few levels, parts and their fields below. */
const PROTO_FIELD_DEPTH = 32;

/**
 * 1.0's params as ProtoJSON gives them, read as the door's schemas name them. ProtoJSON parsers
 * accept a field's proto name (`context_id`) as well as its JSON name (`contextId`), and an int32
 * as a string of digits (`"pageSize": "1"`); read only by the JSON names, those requests would
 * lose their filters and settings without a word. A field given under both names keeps its JSON
 * name's value. A field given as `null`, or a plain string given empty (`EMPTY_IS_UNSET`), is read
 * as not given, as ProtoJSON parsers read them: writers that emit default values send them so. The
 * keys and values of a Struct (`metadata`, a part's `data`) are the client's and kept.
 */
export function fromProtoJson(value: unknown, depth = 0): unknown {
  // No field the door reads is this deep; below it a request's values are kept as they came, and
  // a body of 200 000 nested arrays is not a way to exhaust the stack.
  if (depth > PROTO_FIELD_DEPTH) return value;
  if (Array.isArray(value)) return value.map((item) => fromProtoJson(item, depth + 1));
  if (value === null || typeof value !== 'object') return value;
  const renamed: Record<string, unknown> = {};
  const entries = Object.entries(value as Record<string, unknown>);
  for (const [key, field] of entries) {
    const name = key.includes('_') ? key.replace(/_([a-z0-9])/g, (_match, next: string) => next.toUpperCase()) : key;
    if (name !== key && Object.hasOwn(value, name)) continue;
    if (field === null || (field === '' && EMPTY_IS_UNSET.has(name))) continue;
    const read = STRUCT_FIELDS.has(name) ? field : fromProtoJson(field, depth + 1);
    renamed[name] = INT32_FIELDS.has(name) && typeof read === 'string' && /^-?\d{1,10}$/.test(read) ? Number(read) : read;
  }
  return renamed;
}

/** A part as either generation writes it; only text is read (`kind: "text"` in 0.3, a bare `text` in 1.0). */
const PartSchema = z.looseObject({ kind: z.string().optional(), text: z.string().optional() });

const MessageSchema = z.looseObject({
  messageId: identifier,
  contextId: identifier.optional(),
  taskId: identifier.optional(),
  /**
   * Who wrote the message, as either generation spells it (0.3's `user`, ProtoJSON's `ROLE_USER`
   * or the enum's number). A client writes as the user: a message it sends as the agent's
   * (`agent`, `ROLE_AGENT`, 2) would stand in the task's history as words the agent never said,
   * so it is refused, as is anything else, as the spec asks a server to validate what it is
   * given; **decided:** a message with no role (or the proto's default, which writers that emit
   * defaults send for it) is still read as the user's, as clients before the proto's REQUIRED sent it.
   */
  role: z
    .union([z.enum(['user', 'ROLE_USER', 'ROLE_UNSPECIFIED']), z.literal(0), z.literal(1)], {
      error: (issue) =>
        issue.input === 'agent' || issue.input === 'ROLE_AGENT' || issue.input === 2
          ? `a client's message is the user's (role 'user', ROLE_USER); ${JSON.stringify(issue.input)} is the agent's own role`
          : "a client's message is the user's: role 'user' (0.3) or ROLE_USER (1.0)",
    })
    .optional(),
  parts: z.array(PartSchema).min(1, 'a message holds at least one part').max(1024),
});
export type A2aMessage = z.infer<typeof MessageSchema>;

/** The most messages of a task's history an answer holds: what the host keeps. */
export const HISTORY_LENGTH_MAX = 100;
/**
 * `historyLength`: the proto's `int32`. More than the host keeps is answered with what it keeps
 * (the spec lets a server apply a lower limit); past what the field can hold it is refused.
 */
const historyLength = z
  .number()
  .nonnegative()
  // Before .int(): a length past 2^53 is refused first as past the int32 it is, not as past a JavaScript integer.
  .max(2 ** 31 - 1)
  .int()
  .transform((length) => Math.min(length, HISTORY_LENGTH_MAX));

/** `message/send`, `message/stream` (0.3): the message under `message`, or — as upstream accepts — the params themselves. */
export const SendParamsV03Schema = z.preprocess(
  (params) =>
    params !== null && typeof params === 'object' && !('message' in params) && ('messageId' in params || 'parts' in params) ? { message: params } : params,
  z.looseObject({
    message: MessageSchema,
    configuration: z.looseObject({ blocking: z.boolean().optional(), historyLength: historyLength.optional() }).optional(),
  }),
);

/** `SendMessage`, `SendStreamingMessage` (1.0): blocking unless `returnImmediately`. */
export const SendParamsV10Schema = z.looseObject({
  message: MessageSchema,
  configuration: z.looseObject({ returnImmediately: z.boolean().optional(), historyLength: historyLength.optional() }).optional(),
});

/** The latest time a JavaScript date holds, in milliseconds since the epoch. */
const MAX_DATE_MS = 8.64e15;

/**
 * `ListTasks` (1.0) / `tasks/list` (0.3): filters, a page of 1–100 (50 when not said), the cursor a
 * previous page gave. `status` is checked against the generation's own state names by the door.
 * The status-time filter is the proto's `statusTimestampAfter`; `lastUpdatedAfter` (the drafts')
 * is taken as the same.
 */
export const ListTasksParamsSchema = z.looseObject({
  contextId: identifier.optional(),
  /** A state's name, or in 1.0 the proto enum's number (ProtoJSON allows both). */
  status: z.union([z.string().min(1).max(64), z.number().int().min(0).max(64)]).optional(),
  pageSize: z.number().min(1).max(100).int().optional(),
  pageToken: z.string().max(1024).optional(),
  historyLength: historyLength.optional(),
  statusTimestampAfter: z.iso.datetime({ offset: true }).optional(),
  /** The drafts' field was milliseconds since the epoch (`int64`, a string in ProtoJSON); a time as the proto's is taken too. */
  lastUpdatedAfter: z
    .union([
      z.iso.datetime({ offset: true }),
      z.number().int().nonnegative().max(MAX_DATE_MS),
      z
        .string()
        .regex(/^\d{1,16}$/)
        .transform(Number)
        .pipe(z.number().max(MAX_DATE_MS)),
    ])
    .optional(),
  includeArtifacts: z.boolean().optional(),
});

/** `tasks/get`, `GetTask` and friends: the task id; 0.3 lets `tasks/get` leave it out (the active or last task). */
export const TaskIdParamsSchema = z.looseObject({ id: identifier, historyLength: historyLength.optional() });
export const OptionalTaskIdParamsSchema = z.looseObject({ id: identifier.optional(), historyLength: historyLength.optional() });

/** What a part can carry besides text: 1.0's `oneof content` (`url`, `raw`, `data`), 0.3's `file` and `data`. */
const PAYLOAD_KEYS = ['file', 'url', 'raw', 'data'] as const;

/**
 * The first part of a message the runtime cannot pass to its agent, described for the refusal, or
 * undefined when every part is text. `unsupported` is a file, a URL, raw bytes or data: the runtime
 * passes text to its agents and says so on its card (`defaultInputModes: text/plain`), and
 * dropping the other parts would hand an agent a different message than the one sent. `invalid`
 * is a part that is no part: one with no content, a text part without its text, or text beside a
 * payload (a part holds one kind of content, 1.0's `oneof`), whose payload would be dropped.
 */
export function unreadablePart(message: A2aMessage): { kind: 'unsupported' | 'invalid'; what: string } | undefined {
  for (const [index, part] of message.parts.entries()) {
    const at = `message.parts[${index}]`;
    const kind = typeof part.kind === 'string' ? part.kind : undefined;
    // A payload written as null (a serializer that keeps unset fields) is no payload.
    const payload = PAYLOAD_KEYS.find((key) => (part as Record<string, unknown>)[key] != null);
    const hasText = typeof part.text === 'string';
    if (kind !== undefined && kind !== 'text') return { kind: 'unsupported', what: `${at} is a ${kind} part` };
    if (hasText && payload !== undefined) return { kind: 'invalid', what: `${at} holds text and a ${payload}; a part holds one kind of content` };
    if (hasText) continue;
    if (kind === 'text') return { kind: 'invalid', what: `${at} is a text part without its text` };
    if (payload !== undefined) return { kind: 'unsupported', what: `${at} is a ${payload} part` };
    return { kind: 'invalid', what: `${at} has no content (text, url, raw, data or file)` };
  }
  return undefined;
}

/** The text a message carries: its text parts, joined by newlines (upstream's rule). */
export function messageText(message: A2aMessage): string {
  return message.parts
    .map((part) => part.text)
    .filter((text): text is string => typeof text === 'string')
    .join('\n');
}
