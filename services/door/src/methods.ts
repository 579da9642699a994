import {
  ListTasksParamsSchema,
  OptionalTaskIdParamsSchema,
  RPC_ERRORS,
  SETTLE_WITHIN_MAX_MS,
  type SessionEvent,
  TaskIdParamsSchema,
  hasSettled,
  settlesItsTask,
} from '@murmur/shared';
import { rpcError, rpcResult } from './json-rpc.js';
import { renderSendResult, renderTask, taskStateFilter } from './rendering.js';
import { SessionUnreachable, TooManyStreams } from './session-link.js';
import { type Handler, PUSH_NOT_SUPPORTED, historyAsked, parseParams, parseSendParams, sendCall, taskOf } from './rpc-request.js';
import { sessionEndedMessage, streamMethods } from './task-streams.js';

export interface MethodSettings {
  /** How long a blocking send follows its task before answering with the task as it stands (`MURMUR_DOOR_BLOCKING_WAIT_MS`). */
  blockingWaitMs: number;
  /** A stream's heartbeat (`MURMUR_SSE_HEARTBEAT_MS`), and how long one write may wait for its reader. */
  heartbeatMs: number;
  stalledAfterMs: number;
}

/**
 * The A2A methods a door serves, by name in each generation (0.3's `message/send`, 1.0's
 * `SendMessage`, …): each translates its request into calls on the session it names and renders
 * the answers in the request's generation. Push notifications and an extended card are not
 * offered, and say so in each generation's own error.
 */
export function a2aMethods(settings: MethodSettings): { v03: Record<string, Handler>; v10: Record<string, Handler> } {
  const { blockingWaitMs } = settings;
  const { stream, resubscribe, watchSession } = streamMethods(settings);

  const send: Handler = async (context, request) => {
    const { call, version, link } = request;
    const params = parseSendParams(request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const { message, configuration } = params;
    // 0.3 waits only when asked (`blocking: true`, which the SDK's client sends); 1.0 waits unless
    // told not to. A completion never waits: it is answered with its acknowledgement alone, since
    // following the task would show its poster, who may be the child's own guest, the parent's task.
    const blocking = request.completion === undefined && (version === '0.3' ? configuration?.blocking === true : configuration?.returnImmediately !== true);
    // Nor is a completion given history: its reply is the acknowledgement, whatever it asked for.
    const history = request.completion === undefined ? historyAsked(configuration?.historyLength) : {};
    if (!blocking) {
      const sent = taskOf(await link.call({ ...sendCall(message, request), ...history }));
      return context.json('error' in sent ? rpcError(call.id, sent.error) : rpcResult(call.id, renderSendResult(version, sent.task)));
    }
    // The host waits for the task to settle and answers with it: one round trip for most tasks.
    // One that outlasts the host's wait is followed on the feed until it settles, or until this
    // door's own wait (MURMUR_DOOR_BLOCKING_WAIT_MS) is over.
    const deadline = Date.now() + blockingWaitMs;
    const sent = taskOf(
      await link.call({
        ...sendCall(message, request),
        settle_within_ms: Math.max(1, Math.min(SETTLE_WITHIN_MAX_MS, blockingWaitMs)),
        ...history,
      }),
    );
    if ('error' in sent) return context.json(rpcError(call.id, sent.error));
    let task = sent.task;
    // A client that goes away stops the wait: its watch is let go now, not at the wait's end (up
    // to MURMUR_DOOR_BLOCKING_WAIT_MS later), and the session is not asked again for it.
    const gone = context.req.raw.signal;
    // A door that holds all the streams it takes answers with the task as it stands: the task was
    // sent, and its client can follow it with tasks/get.
    const watch =
      !hasSettled(task.state) && Date.now() < deadline && !gone.aborted
        ? await link.watch().catch((error: unknown) => {
            if (error instanceof TooManyStreams) return undefined;
            throw error;
          })
        : undefined;
    if (watch) {
      // Watched before asking again, so that a settling between the host's answer and now is not missed.
      const leave = (): void => watch.close();
      gone.addEventListener('abort', leave, { once: true });
      let ended = false;
      // A session that ended while its task was followed cannot be asked about it any more: its
      // client is told the task failed with it, as a stream is (`endedEvent`), not that the session never was.
      const current = async (): Promise<void> => {
        const latest = await link
          .call({ method: 'get', task_id: task.id, ...history })
          .then(taskOf)
          .catch((error: unknown) => {
            if (!(error instanceof SessionUnreachable)) throw error;
            ended = true;
            return undefined;
          });
        if (latest && 'task' in latest) task = latest.task;
      };
      try {
        if (!gone.aborted) await current();
        if (!hasSettled(task.state) && !gone.aborted && !ended) {
          let settledAs: SessionEvent | undefined;
          for (;;) {
            const next = await watch.next(Math.max(1, deadline - Date.now()));
            if (next === 'ended') ended = true;
            if (next === 'ended' || next === 'timeout' || next === 'door-stopping' || next === 'fell-behind' || next === 'missed' || next === 'closed') break;
            if (next.task_id === task.id && settlesItsTask(next)) {
              settledAs = next;
              break;
            }
          }
          if (!gone.aborted && !ended) await current();
          // Settled, and the session gone before it could be asked how: the state its event said.
          if (ended && settledAs?.state && !hasSettled(task.state)) task = { ...task, state: settledAs.state };
        }
        if (ended && !hasSettled(task.state))
          task = { ...task, state: 'failed', message: sessionEndedMessage(watch.endCode), updated_at: new Date().toISOString() };
      } finally {
        gone.removeEventListener('abort', leave);
        watch.close();
      }
    }
    return context.json(rpcResult(call.id, renderSendResult(version, task)));
  };

  const get: Handler = async (context, request) => {
    const { call, version, link } = request;
    // 0.3's `tasks/get` may leave the id out (the active or last task, upstream's rule); 1.0 names it.
    const params = version === '0.3' ? parseParams(OptionalTaskIdParamsSchema, request) : parseParams(TaskIdParamsSchema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const found = taskOf(
      await link.call({
        method: 'get',
        ...(params.value.id !== undefined ? { task_id: params.value.id } : {}),
        ...historyAsked(params.value.historyLength),
      }),
    );
    if ('error' in found) return context.json(rpcError(call.id, found.error));
    return context.json(rpcResult(call.id, renderTask(version, found.task)));
  };

  /** `ListTasks` / `tasks/list`: a page of the session's tasks, newest first, behind a cursor bound to the session. */
  const list: Handler = async (context, request) => {
    const { call, version, link } = request;
    const params = parseParams(ListTasksParamsSchema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const given = params.value;
    const invalid = (field: string, why: string): Response =>
      context.json(rpcError(call.id, { code: RPC_ERRORS.invalidParams, message: `Invalid params: ${field}: ${why}` }));
    // Proto3's default state is no filter: a 1.0 client that sets none may still send it.
    const filter = given.status === undefined ? 'all' : taskStateFilter(version, given.status);
    if (filter === null) return invalid('status', `'${String(given.status).slice(0, 64)}' is not a task state of A2A ${version}`);
    const state = filter === 'all' || filter === 'none' ? undefined : filter;
    // The session's host issued it and reads it (`page-tokens.ts`): any door in front of the session serves its pages.
    const pageToken = given.pageToken !== undefined && given.pageToken !== '' ? given.pageToken : undefined;
    const since = given.statusTimestampAfter ?? given.lastUpdatedAfter;
    const pageSize = given.pageSize ?? 50;
    if (filter === 'none') {
      // No task is ever in that state; the session is still asked for, as any listing asks it.
      const reply = await link.call({ method: 'list', page_size: 1 });
      if (reply.error) return context.json(rpcError(call.id, reply.error));
      return context.json(rpcResult(call.id, { tasks: [], nextPageToken: '', pageSize, totalSize: 0 }));
    }
    const reply = await link.call({
      method: 'list',
      page_size: pageSize,
      ...(given.contextId !== undefined ? { context_id: given.contextId } : {}),
      ...(state !== undefined ? { state } : {}),
      // Before 1970 is before every task.
      ...(since !== undefined ? { updated_after_ms: typeof since === 'number' ? since : Math.max(0, Date.parse(since)) } : {}),
      include_artifacts: given.includeArtifacts === true,
      ...(pageToken !== undefined ? { page_token: pageToken } : {}),
      ...historyAsked(given.historyLength),
    });
    if (reply.error) return context.json(rpcError(call.id, reply.error));
    const tasks = (reply.tasks ?? []).map((task) => {
      const rendered = renderTask(version, task);
      // The spec: without includeArtifacts the field is absent, not empty.
      if (given.includeArtifacts !== true) delete rendered.artifacts;
      return rendered;
    });
    return context.json(
      rpcResult(call.id, {
        tasks,
        nextPageToken: reply.next_page_token ?? '',
        pageSize,
        totalSize: reply.total_size ?? tasks.length,
      }),
    );
  };

  /** The extended card: there is none, the public card is all there is (each generation's own error for it). */
  const noExtendedCard: Handler = async (context, request) =>
    context.json(
      rpcError(
        request.call.id,
        request.version === '0.3'
          ? {
              code: RPC_ERRORS.extendedCardNotConfigured,
              message: 'Authenticated Extended Card is not configured: the agent card at .well-known/agent-card.json is the whole card',
            }
          : {
              code: RPC_ERRORS.unsupportedOperation,
              message: 'Unsupported operation: this agent has no extended card; the agent card at .well-known/agent-card.json is the whole card',
            },
      ),
    );

  /** Every push-notification configuration method: this runtime offers none (the card says `pushNotifications: false`). */
  const pushNotSupported: Handler = async (context, request) => context.json(rpcError(request.call.id, PUSH_NOT_SUPPORTED));

  const cancel: Handler = async (context, request) => {
    const { call, version, link } = request;
    const params = parseParams(TaskIdParamsSchema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const canceled = taskOf(await link.call({ method: 'cancel', task_id: params.value.id }));
    if ('error' in canceled) return context.json(rpcError(call.id, canceled.error));
    return context.json(rpcResult(call.id, renderTask(version, canceled.task)));
  };

  const METHODS_V03: Record<string, Handler> = {
    'message/send': send,
    'message/stream': stream,
    'tasks/get': get,
    'tasks/cancel': cancel,
    'tasks/resubscribe': resubscribe,
    'tasks/list': list,
    'agent/getAuthenticatedExtendedCard': noExtendedCard,
    'stream/watch': watchSession,
    'tasks/pushNotificationConfig/set': pushNotSupported,
    'tasks/pushNotificationConfig/get': pushNotSupported,
    'tasks/pushNotificationConfig/list': pushNotSupported,
    'tasks/pushNotificationConfig/delete': pushNotSupported,
  };
  const METHODS_V10: Record<string, Handler> = {
    SendMessage: send,
    SendStreamingMessage: stream,
    GetTask: get,
    CancelTask: cancel,
    SubscribeToTask: resubscribe,
    ListTasks: list,
    GetExtendedAgentCard: noExtendedCard,
    CreateTaskPushNotificationConfig: pushNotSupported,
    GetTaskPushNotificationConfig: pushNotSupported,
    ListTaskPushNotificationConfigs: pushNotSupported,
    DeleteTaskPushNotificationConfig: pushNotSupported,
  };

  return { v03: METHODS_V03, v10: METHODS_V10 };
}
