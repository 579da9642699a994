import {
  ERROR_CATALOGUE,
  RPC_ERRORS,
  type RpcError,
  type SessionEvent,
  type SessionReply,
  TERMINAL_TASK_STATES,
  TaskIdParamsSchema,
  type TaskView,
} from '@murmur/shared';
import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import { type SSEStreamingApi, streamSSE } from 'hono/streaming';
import { rpcError, rpcResult } from './json-rpc.js';
import { renderSendResult, renderStreamEvent, streamedArtifactId } from './rendering.js';
import { type FeedWatch, WATCH_QUEUE_LIMIT, WATCH_QUEUE_LIMIT_BYTES } from './session-link.js';
import { type Handler, type RpcRequest, historyAsked, parseParams, parseSendParams, sendCall, taskOf } from './rpc-request.js';

/**
 * The door's streaming methods: a message sent and its task followed (`message/stream`,
 * `SendStreamingMessage`), a task followed again (`tasks/resubscribe`, `SubscribeToTask`), and
 * upstream's observer stream of a whole session (`stream/watch`). Each is a watch on the session's
 * feed, opened before the session is asked what the stream starts from, so nothing emitted in
 * between is missed; a heartbeat keeps it open, and a reader that stops reading is cut.
 */
export function streamMethods(timing: StreamTiming): {
  stream: Handler;
  resubscribe: Handler;
  watchSession: Handler;
} {
  /**
   * A stream's opening: watch the feed first (so nothing emitted meanwhile is missed), then ask
   * the session what the stream starts from. The watch passes to the stream, or is closed when the
   * opening fails.
   */
  const openTaskStream = async (
    context: Context,
    request: RpcRequest,
    origin: 'new' | 'existing',
    opening: () => Promise<{ task: TaskView; replayed?: SessionReply } | { error: RpcError }>,
  ): Promise<Response> => {
    const watch = await request.link.watch();
    let opened: Awaited<ReturnType<typeof opening>>;
    try {
      opened = await opening();
    } catch (error) {
      watch.close();
      throw error;
    }
    if ('error' in opened) {
      watch.close();
      return context.json(rpcError(request.call.id, opened.error));
    }
    return streamTask(context, request, watch, opened.task, opened.replayed, origin);
  };

  const stream: Handler = async (context, request) => {
    const { call, link } = request;
    const params = parseSendParams(request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const { message, configuration } = params;
    // The task the stream opens with holds no more history than asked for, as a send's would.
    const history = historyAsked(configuration?.historyLength);
    return openTaskStream(context, request, 'new', async () => {
      const replayed = request.lastEventId === undefined ? undefined : await link.call({ method: 'replay', after_event_id: request.lastEventId });
      const sent = taskOf(await link.call({ ...sendCall(message, request), ...history }));
      return 'error' in sent ? sent : { task: sent.task, ...(replayed ? { replayed } : {}) };
    });
  };

  const resubscribe: Handler = async (context, request) => {
    const { call, link } = request;
    const params = parseParams(TaskIdParamsSchema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    return openTaskStream(context, request, 'existing', async () => {
      const replayed = await link.call({ method: 'replay', task_id: params.value.id, after_event_id: request.lastEventId ?? Number.MAX_SAFE_INTEGER });
      const found = taskOf(replayed);
      if ('error' in found) return found;
      // 1.0 says a task that has ended cannot be subscribed to; a client resuming a stream it lost
      // (Last-Event-ID) still gets what it missed, and 0.3 says nothing, so it gets the task.
      if (request.version === '1.0' && request.lastEventId === undefined && TERMINAL_TASK_STATES.has(found.task.state))
        return {
          error: {
            code: RPC_ERRORS.unsupportedOperation,
            message: `Unsupported operation: task '${found.task.id}' is ${found.task.state}, and a task that has ended cannot be subscribed to; GetTask reads it`,
          },
        };
      return { task: found.task, replayed };
    });
  };

  /**
   * One task's stream: the task as it stands, then its events (after any replayed), until its
   * final status — or until the session ends, when a last `failed` status says so.
   */
  const streamTask = (
    context: Context,
    request: RpcRequest,
    watch: FeedWatch,
    task: TaskView,
    replayed: SessionReply | undefined,
    origin: 'new' | 'existing',
  ): Response => {
    const { version, call } = request;
    // The opening (the task with its history, the replay: up to most of a megabyte) is let go
    // once written: the stream's loop lives as long as its client, and holds only the task's ids.
    let opening: { task: TaskView; replayed: SessionReply | undefined } | undefined = { task, replayed };
    const ids = { id: task.id, context_id: task.context_id };
    // A client resuming after an event it holds (Last-Event-ID) holds the streamed artifacts begun
    // by then: their next chunks append, where beginning them again replaced what it had.
    const begun = request.lastEventId === undefined ? [] : (replayed?.streams_begun ?? []);
    return followWatch(context, request, watch, timing, (sse, delivered) => {
      const sent = new Set<string>(begun.map(streamedArtifactId));
      const frame = (event: string, result: unknown, id?: number): Promise<void> =>
        delivered(sse.writeSSE({ event, data: JSON.stringify(rpcResult(call.id, result)), ...(id !== undefined ? { id: String(id) } : {}) }));
      return {
        async opening() {
          const { task: opened, replayed: missed } = opening as NonNullable<typeof opening>;
          opening = undefined;
          // Every data frame of an A2A stream is a JSON-RPC response, so events lost to the feed's
          // window are said in a comment, which a client's parser skips and a person reading it sees.
          if (missed?.first_available_id !== undefined) await delivered(sse.write(`: gap: the earliest event still kept is ${missed.first_available_id}\n\n`));
          await frame('task', renderSendResult(version, opened));
          if (missed?.events) watch.push(...missed.events.filter((event) => event.task_id === ids.id));
          // A task that had already ended when the client subscribed has nothing more to say unless
          // its last event was among those replayed. A task just sent is followed to its end, even
          // when that end (a rejection) came before the stream opened: the watch holds it.
          const ended = origin === 'existing' && TERMINAL_TASK_STATES.has(opened.state);
          return ended && !missed?.events?.some((event) => event.task_id === ids.id && event.final) ? 'done' : 'follow';
        },
        ended: (code) => frame('status', renderStreamEvent(version, endedEvent(ids, code), sent)),
        async event(next) {
          if (next.task_id !== ids.id) return 'follow';
          const rendered = renderStreamEvent(version, next, sent);
          if (rendered) await frame(next.type, rendered, next.id);
          return next.type === 'status' && next.final ? 'done' : 'follow';
        },
      };
    });
  };

  /** `stream/watch`: upstream's observer stream — every event of the session, as upstream shapes them, across tasks. */
  const watchSession: Handler = async (context, request) => {
    const { link } = request;
    const watch = await link.watch();
    let card: SessionReply;
    let replayed: SessionReply;
    try {
      card = await link.call({ method: 'card' });
      replayed = await link.call({ method: 'replay', after_event_id: request.lastEventId ?? 0 });
    } catch (error) {
      watch.close();
      throw error;
    }
    // Let go of once written, as a task stream's opening is: the loop holds nothing of it.
    let opening: { conversation: string; replayed: SessionReply } | undefined = { conversation: card.card?.conversation ?? 'stateless', replayed };
    return followWatch(context, request, watch, timing, (sse, delivered) => ({
      async opening() {
        const { conversation, replayed: missed } = opening as NonNullable<typeof opening>;
        opening = undefined;
        await delivered(sse.writeSSE({ event: 'connection-ack', data: JSON.stringify({ role: 'observer', conversation_mode: conversation }) }));
        if (missed.first_available_id !== undefined)
          await delivered(sse.writeSSE({ event: 'gap', data: JSON.stringify({ first_available_id: missed.first_available_id }) }));
        watch.push(...(missed.events ?? []));
        return 'follow';
      },
      ended: () => delivered(sse.writeSSE({ event: 'capsule-closed', data: '{}' })),
      async event(next) {
        await delivered(sse.writeSSE({ id: String(next.id), event: next.type, data: JSON.stringify(next.data) }));
        return 'follow';
      },
    }));
  };

  return { stream, resubscribe, watchSession };
}

/** How often a stream says it is alive, and how long a write may wait for its reader before the stream is cut. */
interface StreamTiming {
  heartbeatMs: number;
  stalledAfterMs: number;
}

/** What one stream writes of the feed it follows: its opening, the end of its session, each event. */
interface FeedFollower {
  /** `done` when the opening said all there is to say. */
  opening(): Promise<'done' | 'follow'>;
  /** The session ended while the stream was open (with `code`, when its end carried one). */
  ended(code: string | undefined): Promise<void>;
  event(next: SessionEvent): Promise<'done' | 'follow'>;
}

/**
 * An SSE stream that follows a watch on a session's feed: a heartbeat while it waits, the watch
 * closed when its client goes, each write given `stalledAfterMs` to be taken (`deliveredOrCut`),
 * and a cut (the door stopping, a reader fallen behind) said in an error event. The opening and
 * each event are written in calls of their own: what an async function's frame held, even in a
 * block long left, stayed in its suspended registers for as long as the loop waited, so an event
 * kept by the loop's frame was held until the next one came, and a quiet session's last (a long
 * answer) for ever.
 */
function followWatch(
  context: Context,
  request: RpcRequest,
  watch: FeedWatch,
  { heartbeatMs, stalledAfterMs }: StreamTiming,
  follower: (sse: SSEStreamingApi, delivered: (write: Promise<unknown>) => Promise<void>) => FeedFollower,
): Response {
  const stream = streamSSE(context, async (sse) => {
    const heartbeat = startHeartbeat(sse, heartbeatMs);
    sse.onAbort(() => watch.close());
    const delivered = deliveredOrCut(context, sse, stalledAfterMs);
    try {
      const writes = follower(sse, delivered);
      const writeNext = async (): Promise<'done' | 'follow'> => {
        const next = await watch.next(heartbeatMs);
        if (next === 'timeout') return 'follow';
        if (next === 'closed') return 'done';
        if (next === 'door-stopping' || next === 'fell-behind' || next === 'missed') {
          await delivered(sse.writeSSE({ event: 'error', data: JSON.stringify(rpcError(request.call.id, STREAM_CUT[next])) }));
          return 'done';
        }
        if (next === 'ended') {
          await writes.ended(watch.endCode);
          return 'done';
        }
        return writes.event(next);
      };
      if ((await writes.opening()) === 'done') return;
      while (!sse.aborted && (await writeNext()) === 'follow');
    } finally {
      clearInterval(heartbeat);
      watch.close();
    }
  });
  // The framing is Node's to choose, as for every other answer: hono's SSE helper names chunks and a
  // kept-alive connection, which an HTTP/1.0 client cannot read (chunk sizes in its stream) and
  // which held open, until the keep-alive timeout, a connection its client asked to close.
  stream.headers.delete('transfer-encoding');
  stream.headers.delete('connection');
  return stream;
}

/** Why a stream ends while its task goes on, in the error event it ends with: either way, resubscribe. */
const STREAM_CUT: Readonly<Record<'door-stopping' | 'fell-behind' | 'missed', RpcError>> = {
  'door-stopping': {
    code: RPC_ERRORS.internal,
    data: { murmur_code: 'E-DOOR-005' },
    message: 'Internal error: this door is shutting down; the task goes on — resubscribe (tasks/resubscribe or SubscribeToTask) at any door',
  },
  'fell-behind': {
    code: RPC_ERRORS.internal,
    data: { murmur_code: 'E-DOOR-005' },
    message: `Internal error: this stream's reader fell ${WATCH_QUEUE_LIMIT} events (or ${WATCH_QUEUE_LIMIT_BYTES / 1024 / 1024} MiB of them) behind, more than the door holds for one reader; the task goes on — resubscribe (tasks/resubscribe or SubscribeToTask) with Last-Event-ID to continue where it stopped`,
  },
  missed: {
    code: RPC_ERRORS.internal,
    data: { murmur_code: 'E-DOOR-005' },
    message:
      'Internal error: the bus between this door and the session was away, and what the session said meanwhile could not be had again; the task goes on — resubscribe (tasks/resubscribe or SubscribeToTask) to read where it stands',
  },
};

/**
 * What a task's last status says of a session that ended before the task did: that it ended, and
 * with which code and what that code means (a crashed executor is not a stop) — never the end's own
 * message, which names the executor's paths and logs.
 */
export function sessionEndedMessage(code: string | undefined): string {
  const title = code === undefined ? undefined : (ERROR_CATALOGUE as Record<string, { title: string } | undefined>)[code]?.title;
  return code === undefined ? 'session ended' : `session ended: ${code}${title ? ` (${title})` : ''}`;
}

/** The status a stream ends with when the session ended before its task did. */
function endedEvent(task: Pick<TaskView, 'id' | 'context_id'>, code: string | undefined): SessionEvent {
  return {
    id: 0,
    type: 'status',
    task_id: task.id,
    context_id: task.context_id,
    state: 'failed',
    final: true,
    time: new Date().toISOString(),
    data: { id: task.id, context_id: task.context_id, status: { state: 'failed', message: sessionEndedMessage(code) }, final: true },
  };
}

/**
 * A stream's writes, each given `stalledAfterMs` to be taken by its client. One still waiting by
 * then means the client stopped reading: the stream is aborted (its watch closed, so its loop ends
 * at its next step) and its connection closed, and with them all the door held for it. A reader
 * that stopped reading can be told nothing, and would otherwise keep them for as long as its
 * connection stayed open.
 */
function deliveredOrCut(context: Context, sse: SSEStreamingApi, stalledAfterMs: number): (write: Promise<unknown>) => Promise<void> {
  return async (write) => {
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), stalledAfterMs);
    });
    const went = await Promise.race([write.then(() => true), stalled]).finally(() => clearTimeout(timer));
    if (went) return;
    sse.abort();
    (context.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket.destroy();
  };
}

function startHeartbeat(sse: SSEStreamingApi, everyMs: number): NodeJS.Timeout {
  const timer = setInterval(() => {
    if (!sse.aborted && !sse.closed) void sse.write(':heartbeat\n\n').catch(() => {});
  }, everyMs);
  timer.unref();
  return timer;
}
