import {
  type A2aMessage,
  type A2aVersion,
  RPC_ERRORS,
  type RpcError,
  SendParamsV03Schema,
  SendParamsV10Schema,
  type SessionCall,
  type SessionReply,
  type TaskView,
  fromProtoJson,
  messageText,
  unreadablePart,
} from '@murmur/shared';
import type { Context } from 'hono';
import type * as z from 'zod';
import { type JsonRpcCall, describeInvalidParams } from './json-rpc.js';
import type { SessionLink } from './session-link.js';

/** An A2A method: one admitted request answered with a response (a JSON-RPC reply, or a stream). */
export type Handler = (context: Context, request: RpcRequest) => Promise<Response>;

/**
 * One JSON-RPC request the door admitted, as every A2A method receives it: the session it names,
 * the generation it speaks, and what its headers said.
 */
export interface RpcRequest {
  link: SessionLink;
  version: A2aVersion;
  call: JsonRpcCall;
  lastEventId: number | undefined;
  traceparent: string | undefined;
  /** A completion's headers: which delegation it reports, and the session it is addressed to. */
  completion: { delegation_id: string; completion_session: string } | undefined;
  /** `x-murmur-forget-session`: the task's context starts its harness conversation anew. */
  forgetSession: boolean;
  /** Admitted by the session's own token: the contexts it names are the session's alone (`context_scope`). */
  sessionToken: boolean;
}

/** A method's params, as its generation writes them (1.0's ProtoJSON read first), or its `-32602` naming the field. */
export function parseParams<T>(schema: z.ZodType<T>, request: RpcRequest): { ok: true; value: T } | { ok: false; error: RpcError } {
  const parsed = schema.safeParse(request.version === '1.0' ? fromProtoJson(request.call.params) : request.call.params);
  return parsed.success
    ? { ok: true, value: parsed.data }
    : { ok: false, error: { code: RPC_ERRORS.invalidParams, message: describeInvalidParams(parsed.error.issues) } };
}

/** A reply's error, or its task: what every task-returning method starts from. */
export function taskOf(reply: SessionReply): { task: TaskView } | { error: RpcError } {
  if (reply.error) return { error: reply.error };
  if (!reply.task) return { error: { code: RPC_ERRORS.internal, message: 'Internal error: the session answered without a task' } };
  return { task: reply.task };
}

/** What a send asks of its handling, in either generation (each reads its own fields). */
export interface SendConfiguration {
  blocking?: boolean;
  returnImmediately?: boolean;
  historyLength?: number;
}

/** The spec's refusal of every push-notification feature: this runtime offers none (the card says `pushNotifications: false`). */
export const PUSH_NOT_SUPPORTED: RpcError = {
  code: RPC_ERRORS.pushNotificationNotSupported,
  message: 'Push Notification is not supported: this agent does not offer push notifications (capabilities.pushNotifications is false)',
};

/**
 * Where a send's configuration asks for a push notification: 0.3's `pushNotificationConfig`,
 * 1.0's `taskPushNotificationConfig` (its drafts' `pushNotificationConfig`).
 */
const PUSH_CONFIG_FIELDS = ['pushNotificationConfig', 'taskPushNotificationConfig'] as const;

/**
 * A send's params (`message/send`, `message/stream`, `SendMessage`, `SendStreamingMessage`) as
 * its generation writes them, its message refused unless every part is text the agent can be given.
 * A send that asks to be told of the task's end by a push is refused as the push methods are,
 * rather than accepted: its client would wait for a call that never comes.
 */
export function parseSendParams(
  request: RpcRequest,
): { ok: true; message: A2aMessage; configuration: SendConfiguration | undefined } | { ok: false; error: RpcError } {
  const params = request.version === '0.3' ? parseParams(SendParamsV03Schema, request) : parseParams(SendParamsV10Schema, request);
  if (!params.ok) return params;
  const { message, configuration } = params.value as { message: A2aMessage; configuration?: SendConfiguration & Record<string, unknown> };
  if (configuration && PUSH_CONFIG_FIELDS.some((field) => configuration[field] !== undefined)) return { ok: false, error: PUSH_NOT_SUPPORTED };
  const notText = refuseNonText(message);
  return notText ? { ok: false, error: notText } : { ok: true, message, configuration };
}

/**
 * A message with a part the agent cannot be given, named: one that is not text is the spec's
 * "content type not supported", one that is no part at all (`unreadablePart`) invalid params.
 */
function refuseNonText(message: A2aMessage): RpcError | undefined {
  const part = unreadablePart(message);
  if (part === undefined) return undefined;
  return part.kind === 'unsupported'
    ? {
        code: RPC_ERRORS.contentTypeNotSupported,
        message: `Content type not supported: ${part.what}; this agent takes text parts only (defaultInputModes: text/plain)`,
      }
    : { code: RPC_ERRORS.invalidParams, message: `Invalid params: ${part.what}` };
}

/** A request's `historyLength` as the session call's field: absent when the client asked for no limit. */
export function historyAsked(historyLength: number | undefined): { history_length?: number } {
  return historyLength !== undefined ? { history_length: historyLength } : {};
}

/** A client's message as the host's `send` call: its text parts joined, its ids as given. */
export function sendCall(
  message: A2aMessage,
  { traceparent, completion, forgetSession, sessionToken }: Pick<RpcRequest, 'traceparent' | 'completion' | 'forgetSession' | 'sessionToken'>,
): Extract<SessionCall, { method: 'send' }> {
  return {
    method: 'send',
    message_id: message.messageId,
    text: messageText(message),
    ...(message.contextId !== undefined ? { context_id: message.contextId } : {}),
    ...(message.taskId !== undefined ? { task_id: message.taskId } : {}),
    ...(traceparent ? { traceparent } : {}),
    ...(completion ?? {}),
    ...(forgetSession ? { forget_session: true } : {}),
    ...(sessionToken ? { context_scope: 'session' as const } : {}),
  };
}
