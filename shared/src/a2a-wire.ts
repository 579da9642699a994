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
  if (value === '0.3' || value === '0.3.0') return '0.3';
  if (value === '1.0' || value === '1' || value === '1.0.0') return '1.0';
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

/** A part as either generation writes it; only text is read (`kind: "text"` in 0.3, a bare `text` in 1.0). */
const PartSchema = z.looseObject({ kind: z.string().optional(), text: z.string().optional() });

const MessageSchema = z.looseObject({
  messageId: identifier,
  contextId: identifier.optional(),
  taskId: identifier.optional(),
  role: z.string().optional(),
  parts: z.array(PartSchema).max(1024),
});
export type A2aMessage = z.infer<typeof MessageSchema>;

/** `message/send`, `message/stream` (0.3): the message under `message`, or — as upstream accepts — the params themselves. */
export const SendParamsV03Schema = z.preprocess(
  (params) =>
    params !== null && typeof params === 'object' && !('message' in params) && ('messageId' in params || 'parts' in params) ? { message: params } : params,
  z.looseObject({
    message: MessageSchema,
    configuration: z.looseObject({ blocking: z.boolean().optional(), historyLength: z.number().int().nonnegative().optional() }).optional(),
  }),
);

/** `SendMessage`, `SendStreamingMessage` (1.0): blocking unless `returnImmediately`. */
export const SendParamsV10Schema = z.looseObject({
  message: MessageSchema,
  configuration: z.looseObject({ returnImmediately: z.boolean().optional(), historyLength: z.number().int().nonnegative().optional() }).optional(),
});

/** The most messages of a task's history a client may ask for: what the host keeps. */
export const HISTORY_LENGTH_MAX = 100;
const historyLength = z.number().int().nonnegative().max(HISTORY_LENGTH_MAX);

/**
 * `ListTasks` (1.0) / `tasks/list` (0.3): filters, a page of 1–100 (50 when not said), the cursor a
 * previous page gave. `status` is checked against the generation's own state names by the door.
 * The status-time filter is the proto's `statusTimestampAfter`; `lastUpdatedAfter` (the drafts')
 * is taken as the same.
 */
export const ListTasksParamsSchema = z.looseObject({
  contextId: identifier.optional(),
  status: z.string().min(1).max(64).optional(),
  pageSize: z.number().int().min(1).max(100).optional(),
  pageToken: z.string().max(1024).optional(),
  historyLength: historyLength.optional(),
  statusTimestampAfter: z.iso.datetime({ offset: true }).optional(),
  lastUpdatedAfter: z.iso.datetime({ offset: true }).optional(),
  includeArtifacts: z.boolean().optional(),
});

/** `tasks/get`, `GetTask` and friends: the task id; 0.3 lets `tasks/get` leave it out (the active or last task). */
export const TaskIdParamsSchema = z.looseObject({ id: identifier, historyLength: historyLength.optional() });
export const OptionalTaskIdParamsSchema = z.looseObject({ id: identifier.optional(), historyLength: historyLength.optional() });

/** The text a message carries: its text parts, joined by newlines (upstream's rule). */
export function messageText(message: A2aMessage): string {
  return message.parts
    .map((part) => part.text)
    .filter((text): text is string => typeof text === 'string')
    .join('\n');
}
