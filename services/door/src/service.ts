import {
  type A2aVersion,
  type A2aMessage,
  COMPLETION_SESSION_HEADER,
  DELEGATION_ID_HEADER,
  FORGET_SESSION_HEADER,
  asksToForget,
  type Log,
  MurmurError,
  ListTasksParamsSchema,
  OptionalTaskIdParamsSchema,
  QUEUE_GROUPS,
  RPC_ERRORS,
  type RpcError,
  SendParamsV03Schema,
  SETTLE_WITHIN_MAX_MS,
  SendParamsV10Schema,
  SessionIdSchema,
  type SessionCall,
  type SessionEvent,
  type SessionReply,
  TERMINAL_TASK_STATES,
  TaskIdParamsSchema,
  type HostGuard,
  loopbackHostGuard,
  type TaskView,
  a2aVersionOf,
  commands,
  doorPublicUrl,
  fromProtoJson,
  hasSettled,
  settlesItsTask,
  messageText,
  unreadablePart,
  newId,
  runtimeTracing,
  sessionUrl,
  topics,
  numberSetting,
} from '@murmur/shared';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { networkInterfaces } from 'node:os';
import { type Bus, PayloadTooLarge } from '@murmur/shared/bus';
import { type Context, Hono } from 'hono';
import { type SSEStreamingApi, streamSSE } from 'hono/streaming';
import type * as z from 'zod';
import type { HttpAhead } from '@murmur/shared/service';
import { BodyCutShort, keptBody, limitBody } from './body-limit.js';
import { CARD_CACHE_CONTROL, CardShelf, type RenderedCard, holdsCard } from './card-shelf.js';
import { refuseForeignHost } from './host-guard.js';
import { type JsonRpcCall, describeInvalidParams, isJsonMediaType, readJsonRpc, rpcError, rpcResult } from './json-rpc.js';
import { COMPLETION_METHODS, WWW_AUTHENTICATE, doorAuth } from './door-auth.js';
import { renderAgentCard, renderSendResult, renderStreamEvent, renderTask, taskStateFilter } from './rendering.js';
import { FeedHub, type FeedWatch, SessionLink, SessionUnreachable, TooManyStreams, WATCH_QUEUE_LIMIT, WATCH_QUEUE_LIMIT_BYTES } from './session-link.js';
import { SessionTokens } from './session-tokens.js';

/**
 * The door: the A2A edge of every session. It holds no task state: each request is translated
 * into a call on `session.<id>.rpc`, answered by the capsule host that owns the session, and each
 * stream is a watch on `session.<id>.events`, numbered by that host. So any number of doors serve
 * any session, and a door that answers a session's card proves the session is alive.
 *
 * Under a door's base URL a session lives at `/sessions/<id>/`: its agent card at
 * `.well-known/agent-card.json` below that, its JSON-RPC endpoint at that URL itself.
 */

export interface DoorOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /**
   * The one session this door will ever serve (`mur run`'s own door): its card is served at the
   * origin's root as well (`/.well-known/agent-card.json`, RFC 8615), where clients look first.
   */
  soleSession?: string;
}

export interface DoorService {
  readonly http: Hono;
  /**
   * What the door answers before a request reaches `http` (a kept card, from memory); false when
   * the request is left for `http`. Give it to `listenHttp` beside `http`.
   */
  readonly ahead: HttpAhead;
  readonly doorId: string;
  /**
   * Where this door is reached, from the address it listens on (a loopback one named `localhost`),
   * unless `MURMUR_DOOR_PUBLIC_URL` already says; the URL it puts in cards and tells `door.locate`
   * askers. Returns that URL.
   */
  setBaseUrl(url: string): string;
  /** The door is stopping: each open stream ends with an error telling its client to resubscribe at any door. */
  drain(): void;
  close(): Promise<void>;
}

/** The largest JSON-RPC body a door reads (`MURMUR_DOOR_MAX_BODY_BYTES`): a message is text, not a file transfer. */
const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
/**
 * The streams a door holds open at once (`MURMUR_DOOR_MAX_STREAMS`): an idle one costs ~30 KiB and
 * a reader's unread queue up to `WATCH_QUEUE_LIMIT_BYTES`, and a client could open any number.
 */
const DEFAULT_MAX_STREAMS = 1_024;
const DEFAULT_HEARTBEAT_MS = 15_000;
/** How long a blocking `message/send` waits for its task to settle before answering with the task as it stands. */
const DEFAULT_BLOCKING_WAIT_MS = 10 * 60_000;
/** How many rendered cards a door keeps (one per live session and URL it was asked at); the oldest go first. */
const CARDS_KEPT = 10_000;

type Handler = (context: Context, request: RpcRequest) => Promise<Response>;

interface RpcRequest {
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

export function startDoorService(options: DoorOptions): DoorService {
  const { bus, log } = options;
  const env = options.env ?? process.env;
  const doorId = `door-${newId('request').slice(4, 16)}`;
  const maxBodyBytes = numberSetting(env, 'MURMUR_DOOR_MAX_BODY_BYTES', DEFAULT_MAX_BODY_BYTES, { unit: 'bytes' });
  /** The streams (and blocking sends that follow a task) a door holds open at once, over all its sessions. */
  const maxStreams = numberSetting(env, 'MURMUR_DOOR_MAX_STREAMS', DEFAULT_MAX_STREAMS, { unit: 'streams' });
  /** What one session may hold of them: a quarter unless said otherwise, all of them at a door that serves one session (`mur run`'s). */
  const maxStreamsPerSession = Math.min(
    maxStreams,
    numberSetting(env, 'MURMUR_DOOR_MAX_STREAMS_PER_SESSION', options.soleSession ? maxStreams : Math.max(1, Math.ceil(maxStreams / 4)), {
      unit: 'streams',
    }),
  );
  const heartbeatMs = numberSetting(env, 'MURMUR_SSE_HEARTBEAT_MS', DEFAULT_HEARTBEAT_MS, { unit: 'milliseconds' });
  /** How long a stream's write may wait for its client to read (`deliveredOrCut`): four heartbeats. */
  const stalledAfterMs = heartbeatMs * 4;
  const blockingWaitMs = numberSetting(env, 'MURMUR_DOOR_BLOCKING_WAIT_MS', DEFAULT_BLOCKING_WAIT_MS, { unit: 'milliseconds' });
  const publicUrl = env.MURMUR_DOOR_PUBLIC_URL?.trim() || undefined;
  let baseUrl = publicUrl;
  /** Set with the address the door listens on (`setBaseUrl`): only a door on loopback has one. */
  let hostGuard: HostGuard | undefined;

  const locate = bus.serve(
    commands.locateDoor,
    () => {
      if (!baseUrl) throw new MurmurError('E-DOOR-002', `door ${doorId} is not listening yet`);
      return { base_url: baseUrl, door_id: doorId };
    },
    { queue: QUEUE_GROUPS.door },
  );

  const auth = doorAuth(env);
  const feeds = new FeedHub(bus, maxStreams, maxStreamsPerSession);
  const urlOf = (context: Context, sessionId: string): string => `${sessionUrl(baseUrl ?? new URL(context.req.url).origin, sessionId)}/`;

  const app = new Hono();
  // What escapes a route (a client gone in the middle of its body, above all) is said once in the
  // door's log and answered, never printed with its stack by the HTTP server.
  app.onError((error, context) => {
    if (error instanceof BodyCutShort) {
      log.warn({ path: context.req.path.slice(0, 200), reason: error.message }, 'a request body ended before it was complete');
      return context.json({ error: { code: 'E-DOOR-002', message: 'the request could not be read to its end' } }, 400);
    }
    log.error({ path: context.req.path.slice(0, 200), err: error }, 'door request failed');
    return context.json(rpcError(null, { code: RPC_ERRORS.internal, message: `Internal error: ${error.message.slice(0, 512)}` }), 500);
  });

  app.notFound((context) =>
    context.json(
      {
        error: {
          code: 'E-DOOR-002',
          message: `a door serves /sessions/<id>/ and its agent cards; it has no ${context.req.method} ${context.req.path.slice(0, 200)}`,
        },
      },
      404,
    ),
  );

  /** The session a path names, or a 404 before anything reaches the bus: only a real session id becomes a subject. */
  const sessionOf = (context: Context): SessionLink | Response => {
    const id = context.req.param('session') ?? '';
    if (!SessionIdSchema.safeParse(id).success) {
      return context.json({ error: { code: 'E-DOOR-001', message: `'${id.slice(0, 80)}' is not a session id (ses_ followed by 32 hex digits)` } }, 404);
    }
    return new SessionLink(bus, feeds, id);
  };

  /**
   * The cards hosts wrote, rendered as served (see `CardShelf`): a host writes its card once, so a
   * door keeps it until it hears the session end. `Cache-Control: no-cache` (what a liveness check
   * sends) asks the host itself, since only the host answering proves the session lives.
   */
  const cards = new CardShelf(CARDS_KEPT, options.soleSession);
  if (baseUrl) cards.setBaseUrl(baseUrl);
  const sessionTokens = new SessionTokens();
  const forgetCards = bus.subscribe(topics.sessionEnded, (ended) => {
    cards.forget(ended.session_id);
    sessionTokens.forget(ended.session_id);
  });

  const serveCard = async (context: Context, link: SessionLink): Promise<Response> => {
    const url = urlOf(context, link.sessionId);
    const fresh = /no-cache/i.test(context.req.header('cache-control') ?? '');
    const served = (card: RenderedCard): Response => {
      const headers = { etag: card.etag, 'cache-control': CARD_CACHE_CONTROL };
      return holdsCard(context.req.header('if-none-match'), card.etag)
        ? context.body(null, 304, headers)
        : context.body(card.text, 200, { 'content-type': 'application/json', ...headers });
    };
    const kept = fresh ? undefined : cards.get(link.sessionId, url);
    if (kept !== undefined) return served(kept);
    try {
      const reply = await link.call({ method: 'card' });
      if (!reply.card) return context.json({ error: { code: 'E-DOOR-001', message: reply.error?.message ?? 'the session gave no card' } }, 404);
      return served(cards.keep(link.sessionId, url, JSON.stringify({ ...renderAgentCard(reply.card, url), ...auth.cardFields })));
    } catch (error) {
      if (error instanceof SessionUnreachable) return context.json({ error: { code: 'E-DOOR-001', message: error.message } }, error.status);
      throw error;
    }
  };

  app.get('/sessions/:session/*', async (context) => {
    const link = sessionOf(context);
    if (link instanceof Response) return link;
    const rest = context.req.path.slice(`/sessions/${link.sessionId}`.length).replace(/^\/+/, '');
    if (rest !== '.well-known/agent-card.json')
      return context.json(
        { error: { code: 'E-DOOR-002', message: `nothing is served at '${context.req.path}'; the agent card is at .well-known/agent-card.json` } },
        404,
      );
    return serveCard(context, link);
  });
  if (options.soleSession) {
    const sole = options.soleSession;
    app.get('/.well-known/agent-card.json', (context) => serveCard(context, new SessionLink(bus, feeds, sole)));
  }

  const tooLarge = rpcError(null, {
    code: RPC_ERRORS.invalidRequest,
    message: `Invalid Request: the body is larger than ${maxBodyBytes} bytes (MURMUR_DOOR_MAX_BODY_BYTES)`,
  });
  const limit = limitBody(maxBodyBytes, (context) => context.json(tooLarge, 413));
  /** A request that waits to be told to send its body (`Expect: 100-continue`) and declares one over the limit: refused before it sends it. */
  const refuseDeclaredTooLarge = (request: IncomingMessage, response: ServerResponse): boolean => {
    if (request.method !== 'POST' || !/100-continue/i.test(request.headers.expect ?? '')) return false;
    const declared = Number(request.headers['content-length']);
    if (!(Number.isFinite(declared) && declared > maxBodyBytes)) return false;
    response.writeHead(413, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify(tooLarge));
    return true;
  };

  // RFC 6750: a request that presented credentials is told they were not good (`invalid_token`);
  // one that presented none is only told the scheme. Neither says anything of the session.
  const unauthorized = (context: Context): Response => {
    const presented = /^bearer\s/i.test(context.req.header('authorization') ?? '');
    return context.json(
      rpcError(null, {
        code: RPC_ERRORS.invalidRequest,
        message: presented
          ? "Unauthorized: the credentials sent are not good at this door (it takes 'Authorization: Bearer <token>'); its agent card declares the scheme"
          : "Unauthorized: this door requires a bearer token ('Authorization: Bearer <token>'); its agent card declares the scheme",
        data: { murmur_code: 'E-DOOR-003' },
      }),
      401,
      { 'www-authenticate': presented ? `${WWW_AUTHENTICATE}, error="invalid_token"` : WWW_AUTHENTICATE },
    );
  };

  /** What `admit` decided of a request, for `serveRpc` once its body has been read. */
  const admitted = new WeakMap<Request, { judged: ReturnType<typeof auth.judge>; link: SessionLink }>();

  /**
   * Who may ask, decided from the headers and the URL before a byte of the body is read: a client
   * without a credential is refused at once, never made to wait while it sends a megabyte, nor
   * told 413 where it is owed 401.
   */
  const admit = async (context: Context, next: () => Promise<void>): Promise<Response | undefined> => {
    // Before anything else, the session id included: a refusal tells nothing about the session.
    const judged = auth.judge({
      authorization: context.req.header('authorization'),
      delegationId: context.req.header(DELEGATION_ID_HEADER),
      completionSession: context.req.header(COMPLETION_SESSION_HEADER),
    });
    if (judged.verdict === 'refused') return unauthorized(context);
    const link = sessionOf(context);
    if (link instanceof Response) {
      // A completion's headers are anyone's to write: they learn no more than no credential does.
      if (judged.verdict === 'session-token' || judged.verdict === 'completion') return unauthorized(context);
      return context.json(
        rpcError(null, {
          code: RPC_ERRORS.invalidRequest,
          message: `Invalid Request: '${(context.req.param('session') ?? '').slice(0, 80)}' is not a session id (ses_ followed by 32 hex digits)`,
          data: { murmur_code: 'E-DOOR-001' },
        }),
        404,
      );
    }
    // A session's own token is proven by its executor before the request is read, so a wrong one
    // is refused alike whatever the request was.
    if (judged.verdict === 'session-token' && !(await sessionTokens.admits(link, judged.token))) return unauthorized(context);
    admitted.set(context.req.raw, { judged, link });
    await next();
    return undefined;
  };

  const serveRpc = async (context: Context): Promise<Response> => {
    const admission = admitted.get(context.req.raw);
    if (!admission) return unauthorized(context);
    const { judged, link } = admission;
    const contentType = context.req.header('content-type') ?? '';
    if (!isJsonMediaType(contentType)) {
      return context.json(
        rpcError(null, {
          code: RPC_ERRORS.invalidRequest,
          message: `Invalid Request: content-type must be application/json (got '${contentType.slice(0, 80)}')`,
        }),
        415,
      );
    }
    const text = await keptBody(context);
    const read: ReturnType<typeof readJsonRpc> =
      text === undefined
        ? { ok: false, response: rpcError(null, { code: RPC_ERRORS.parse, message: 'Parse error: the body is not UTF-8 text' }) }
        : readJsonRpc(text);
    if (!read.ok) return judged.verdict === 'completion' ? unauthorized(context) : context.json(read.response);
    const call = read.call;
    // A completion's headers are anyone's to write: they admit the one request a completion is.
    if (judged.verdict === 'completion' && !COMPLETION_METHODS.has(call.method)) return unauthorized(context);
    const askedVersion = serviceParameter(context, 'a2a-version');
    const version = a2aVersionOf(askedVersion, call.method);
    if (!version) {
      return context.json(
        rpcError(call.id, {
          code: RPC_ERRORS.versionNotSupported,
          message: `Unsupported A2A version '${(askedVersion ?? '').slice(0, 32)}': this door speaks 0.3 and 1.0 (A2A-Version as a header or a query parameter; without one, the method's own generation)`,
        }),
      );
    }
    // Own names only: `constructor` or `toString` is no method of either generation.
    const table = version === '0.3' ? METHODS_V03 : METHODS_V10;
    const handler = Object.hasOwn(table, call.method) ? table[call.method] : undefined;
    if (!handler) return context.json(rpcError(call.id, methodNotFound(call.method, version, version === '0.3' ? METHODS_V10 : METHODS_V03)));
    const lastEventHeader = context.req.header('last-event-id');
    const lastEventId = lastEventHeader !== undefined && /^\d{1,15}$/.test(lastEventHeader.trim()) ? Number(lastEventHeader.trim()) : undefined;
    // The door is a hop of the caller's trace: the session continues the door's span, or the
    // caller's own traceparent when this door records nothing.
    const callerTraceparent = context.req.header('traceparent')?.slice(0, 512);
    const span = runtimeTracing().span('door.request', {
      kind: 'server',
      parent: callerTraceparent,
      attributes: { 'rpc.system': 'jsonrpc', 'rpc.method': call.method.slice(0, 64), 'a2a.version': version, 'murmur.session_id': link.sessionId },
    });
    const traceparent = span.traceparent ?? callerTraceparent;
    const delegationId = context.req.header(DELEGATION_ID_HEADER)?.slice(0, 256);
    const completion = delegationId
      ? { delegation_id: delegationId, completion_session: (context.req.header(COMPLETION_SESSION_HEADER) ?? '').slice(0, 256) }
      : undefined;
    try {
      const forgetSession = asksToForget(context.req.header(FORGET_SESSION_HEADER));
      const sessionToken = judged.verdict === 'session-token';
      return await handler(context, { link, version, call, lastEventId, traceparent, completion, forgetSession, sessionToken });
    } catch (error) {
      span.fail(error instanceof Error ? error.message : String(error));
      // No session here is the request's mistake (its URL), not the door's; one that does not answer in time is the door's.
      if (error instanceof SessionUnreachable)
        return context.json(
          rpcError(call.id, {
            code: error.status === 404 ? RPC_ERRORS.invalidRequest : RPC_ERRORS.internal,
            message: error.message,
            data: { murmur_code: 'E-DOOR-001' },
          }),
          error.status,
        );
      // The door's own bound, not the session's failure: the client may come back, or go elsewhere.
      if (error instanceof TooManyStreams)
        return context.json(
          rpcError(call.id, { code: RPC_ERRORS.internal, message: `Internal error: ${error.message}`, data: { murmur_code: 'E-DOOR-004' } }),
          503,
        );
      // A request the bus cannot carry to its session is the request's size, not the door's failure.
      // (Only the request's own size: a reply the session could not fit is the door's side, -32603.)
      if (error instanceof PayloadTooLarge)
        return context.json(
          rpcError(call.id, {
            code: RPC_ERRORS.invalidParams,
            message: `Invalid params: the request is larger than one message to a session may be (${error.limit} bytes); send less at once`,
          }),
        );
      log.error({ err: error, session_id: link.sessionId, method: call.method }, 'door request failed');
      return context.json(
        rpcError(call.id, { code: RPC_ERRORS.internal, message: `Internal error: ${error instanceof Error ? error.message : String(error)}` }),
      );
    } finally {
      span.end();
    }
  };
  app.post('/sessions/:session', admit, limit, serveRpc);
  app.post('/sessions/:session/', admit, limit, serveRpc);

  // ── methods ───────────────────────────────────────────────────────────────

  const parseParams = <T>(schema: z.ZodType<T>, request: RpcRequest): { ok: true; value: T } | { ok: false; error: RpcError } => {
    const parsed = schema.safeParse(request.version === '1.0' ? fromProtoJson(request.call.params) : request.call.params);
    return parsed.success
      ? { ok: true, value: parsed.data }
      : { ok: false, error: { code: RPC_ERRORS.invalidParams, message: describeInvalidParams(parsed.error.issues) } };
  };

  /** A reply's error, or its task: what every task-returning method starts from. */
  const taskOf = (reply: SessionReply): { task: TaskView } | { error: RpcError } => {
    if (reply.error) return { error: reply.error };
    if (!reply.task) return { error: { code: RPC_ERRORS.internal, message: 'Internal error: the session answered without a task' } };
    return { task: reply.task };
  };

  const send: Handler = async (context, request) => {
    const { call, version, link } = request;
    const params = version === '0.3' ? parseParams(SendParamsV03Schema, request) : parseParams(SendParamsV10Schema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const { message, configuration } = params.value as {
      message: A2aMessage;
      configuration?: { blocking?: boolean; returnImmediately?: boolean; historyLength?: number };
    };
    const notText = refuseNonText(message);
    if (notText) return context.json(rpcError(call.id, notText));
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
            if (next === 'ended' || next === 'timeout' || next === 'door-stopping' || next === 'fell-behind' || next === 'closed') break;
            if (next.task_id === task.id && settlesItsTask(next)) {
              settledAs = next;
              break;
            }
          }
          if (!gone.aborted && !ended) await current();
          // Settled, and the session gone before it could be asked how: the state its event said.
          if (ended && settledAs?.state && !hasSettled(task.state)) task = { ...task, state: settledAs.state };
        }
        if (ended && !hasSettled(task.state)) task = { ...task, state: 'failed', message: 'session ended', updated_at: new Date().toISOString() };
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
    let after: { updated_at_ms: number; id: string } | undefined;
    if (given.pageToken !== undefined && given.pageToken !== '') {
      after = readPageToken(given.pageToken, link.sessionId);
      if (!after) return invalid('pageToken', "not a page token this session's ListTasks gave");
    }
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
      ...(since !== undefined ? { updated_after_ms: Math.max(0, Date.parse(since)) } : {}),
      include_artifacts: given.includeArtifacts === true,
      ...(after ? { after } : {}),
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
        nextPageToken: reply.next_after ? pageToken(link.sessionId, reply.next_after) : '',
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
  const pushNotSupported: Handler = async (context, request) =>
    context.json(
      rpcError(request.call.id, {
        code: RPC_ERRORS.pushNotificationNotSupported,
        message: 'Push Notification is not supported: this agent does not offer push notifications (capabilities.pushNotifications is false)',
      }),
    );

  const cancel: Handler = async (context, request) => {
    const { call, version, link } = request;
    const params = parseParams(TaskIdParamsSchema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const canceled = taskOf(await link.call({ method: 'cancel', task_id: params.value.id }));
    if ('error' in canceled) return context.json(rpcError(call.id, canceled.error));
    return context.json(rpcResult(call.id, renderTask(version, canceled.task)));
  };

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
    const { call, version, link } = request;
    const params = version === '0.3' ? parseParams(SendParamsV03Schema, request) : parseParams(SendParamsV10Schema, request);
    if (!params.ok) return context.json(rpcError(call.id, params.error));
    const { message, configuration } = params.value as { message: A2aMessage; configuration?: { historyLength?: number } };
    const notText = refuseNonText(message);
    if (notText) return context.json(rpcError(call.id, notText));
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
    return streamSSE(context, async (sse) => {
      const heartbeat = startHeartbeat(sse, heartbeatMs);
      sse.onAbort(() => watch.close());
      const delivered = deliveredOrCut(context, sse, stalledAfterMs);
      try {
        const sent = new Set<string>();
        const frame = (event: string, result: unknown, id?: number): Promise<void> =>
          delivered(sse.writeSSE({ event, data: JSON.stringify(rpcResult(call.id, result)), ...(id !== undefined ? { id: String(id) } : {}) }));
        // Written by a function of its own: what an async function's frame held, even in a block
        // long left, stayed in its suspended registers for as long as the loop below waited.
        const writeOpening = async (): Promise<'done' | 'follow'> => {
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
        };
        if ((await writeOpening()) === 'done') return;
        // One event at a time, each in a call of its own: an event kept by the loop's frame was
        // held until the next one came, and a quiet session's last (a long answer) for ever.
        const writeNext = async (): Promise<'done' | 'follow'> => {
          const next = await watch.next(heartbeatMs);
          if (next === 'timeout') return 'follow';
          if (next === 'closed') return 'done';
          if (next === 'door-stopping' || next === 'fell-behind') {
            await delivered(sse.writeSSE({ event: 'error', data: JSON.stringify(rpcError(call.id, STREAM_CUT[next])) }));
            return 'done';
          }
          if (next === 'ended') {
            await frame('status', renderStreamEvent(version, endedEvent(ids), sent));
            return 'done';
          }
          if (next.task_id !== ids.id) return 'follow';
          const rendered = renderStreamEvent(version, next, sent);
          if (rendered) await frame(next.type, rendered, next.id);
          return next.type === 'status' && next.final ? 'done' : 'follow';
        };
        while (!sse.aborted && (await writeNext()) === 'follow');
      } finally {
        clearInterval(heartbeat);
        watch.close();
      }
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
    return streamSSE(context, async (sse) => {
      const heartbeat = startHeartbeat(sse, heartbeatMs);
      sse.onAbort(() => watch.close());
      const delivered = deliveredOrCut(context, sse, stalledAfterMs);
      try {
        // In a function of its own, as a task stream's opening is: nothing of it stays in the loop's frame.
        const writeOpening = async (): Promise<void> => {
          const { conversation, replayed: missed } = opening as NonNullable<typeof opening>;
          opening = undefined;
          await delivered(sse.writeSSE({ event: 'connection-ack', data: JSON.stringify({ role: 'observer', conversation_mode: conversation }) }));
          if (missed.first_available_id !== undefined)
            await delivered(sse.writeSSE({ event: 'gap', data: JSON.stringify({ first_available_id: missed.first_available_id }) }));
          watch.push(...(missed.events ?? []));
        };
        await writeOpening();
        // One event at a time in a call of its own, as a task stream's: the loop keeps none of them.
        const writeNext = async (): Promise<'done' | 'follow'> => {
          const next = await watch.next(heartbeatMs);
          if (next === 'timeout') return 'follow';
          if (next === 'closed') return 'done';
          if (next === 'door-stopping' || next === 'fell-behind') {
            await delivered(sse.writeSSE({ event: 'error', data: JSON.stringify(rpcError(request.call.id, STREAM_CUT[next])) }));
            return 'done';
          }
          if (next === 'ended') {
            await delivered(sse.writeSSE({ event: 'capsule-closed', data: '{}' }));
            return 'done';
          }
          await delivered(sse.writeSSE({ id: String(next.id), event: next.type, data: JSON.stringify(next.data) }));
          return 'follow';
        };
        while (!sse.aborted && (await writeNext()) === 'follow');
      } finally {
        clearInterval(heartbeat);
        watch.close();
      }
    });
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

  return {
    http: app,
    ahead: (request, response) =>
      refuseForeignHost(hostGuard, request, response) || refuseDeclaredTooLarge(request, response) || cards.answer(request, response),
    doorId,
    setBaseUrl(url: string) {
      hostGuard = loopbackHostGuard(url, publicUrl, env.MURMUR_DOOR_HOSTS);
      baseUrl ??= doorPublicUrl(url, machineAddress);
      cards.setBaseUrl(baseUrl);
      return baseUrl;
    },
    drain() {
      feeds.shutdown();
    },
    async close() {
      locate.unsubscribe();
      forgetCards.unsubscribe();
      feeds.close();
    },
  };
}

/** `otherGeneration`: the methods of the generation the request did not ask for, to say when it named one of them. */
function methodNotFound(method: string, version: A2aVersion, otherGeneration: Record<string, unknown>): RpcError {
  const other = version === '0.3' ? '1.0' : '0.3';
  const hint = Object.hasOwn(otherGeneration, method) ? ` ('${method}' is an A2A ${other} method: send it with A2A-Version: ${other}, or with no version)` : '';
  return { code: RPC_ERRORS.methodNotFound, message: `Method not found: '${method.slice(0, 128)}'${hint}` };
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

/** This machine's first address on a network (IPv4 before IPv6), what a door on every interface is reached by. */
function machineAddress(): string | undefined {
  const external = Object.values(networkInterfaces())
    .flat()
    .filter((entry) => entry !== undefined && !entry.internal && !(entry.family === 'IPv6' && entry.scopeid !== 0));
  return (external.find((entry) => entry?.family === 'IPv4') ?? external[0])?.address;
}

/**
 * A service parameter (A2A's `A2A-Version`, …) as a header, or as the request parameter the spec
 * also allows; its name is case-insensitive either way. A header sent empty is as good as absent,
 * so it does not hide the parameter.
 */
function serviceParameter(context: Context, name: string): string | undefined {
  const header = context.req.header(name);
  if (header !== undefined && header.trim() !== '') return header;
  // Most requests carry no query: the URL is parsed only for one that does.
  if (!context.req.url.includes('?')) return undefined;
  for (const [key, value] of new URL(context.req.url).searchParams) if (key.toLowerCase() === name && value.trim() !== '') return value;
  return undefined;
}

/** A request's `historyLength` as the session call's field: absent when the client asked for no limit. */
function historyAsked(historyLength: number | undefined): { history_length?: number } {
  return historyLength !== undefined ? { history_length: historyLength } : {};
}

/** A client's message as the host's `send` call: its text parts joined, its ids as given. */
function sendCall(
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

/** Why a stream ends while its task goes on, in the error event it ends with: either way, resubscribe. */
const STREAM_CUT: Readonly<Record<'door-stopping' | 'fell-behind', RpcError>> = {
  'door-stopping': {
    code: RPC_ERRORS.internal,
    message: 'Internal error: this door is shutting down; the task goes on — resubscribe (tasks/resubscribe or SubscribeToTask) at any door',
  },
  'fell-behind': {
    code: RPC_ERRORS.internal,
    message: `Internal error: this stream's reader fell ${WATCH_QUEUE_LIMIT} events (or ${WATCH_QUEUE_LIMIT_BYTES / 1024 / 1024} MiB of them) behind, more than the door holds for one reader; the task goes on — resubscribe (tasks/resubscribe or SubscribeToTask) with Last-Event-ID to continue where it stopped`,
  },
};

/** The status a stream ends with when the session ended before its task did. */
function endedEvent(task: Pick<TaskView, 'id' | 'context_id'>): SessionEvent {
  return {
    id: 0,
    type: 'status',
    task_id: task.id,
    context_id: task.context_id,
    state: 'failed',
    final: true,
    time: new Date().toISOString(),
    data: { id: task.id, context_id: task.context_id, status: { state: 'failed', message: 'session ended' }, final: true },
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

/**
 * A `ListTasks` cursor: the session and the last task of the page, so that a token can only ever
 * continue the listing of the session that gave it. It names nothing a client could not list.
 */
function pageToken(sessionId: string, after: { updated_at_ms: number; id: string }): string {
  return Buffer.from(JSON.stringify({ s: sessionId, u: after.updated_at_ms, i: after.id })).toString('base64url');
}

function readPageToken(token: string, sessionId: string): { updated_at_ms: number; id: string } | undefined {
  try {
    const decoded = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { s?: unknown; u?: unknown; i?: unknown };
    if (decoded.s !== sessionId || !Number.isSafeInteger(decoded.u) || (decoded.u as number) < 0 || typeof decoded.i !== 'string' || decoded.i.length > 256)
      return undefined;
    return { updated_at_ms: decoded.u as number, id: decoded.i };
  } catch {
    return undefined;
  }
}
