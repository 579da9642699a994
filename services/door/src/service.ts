import {
  type A2aVersion,
  COMPLETION_SESSION_HEADER,
  DELEGATION_ID_HEADER,
  FORGET_SESSION_HEADER,
  asksToForget,
  type Log,
  MurmurError,
  QUEUE_GROUPS,
  RPC_ERRORS,
  type RpcError,
  notASessionId,
  SessionIdSchema,
  type DoorCredentials,
  type HostGuard,
  loopbackHostGuard,
  a2aVersionOf,
  commands,
  doorPublicUrl,
  newId,
  runtimeTracing,
  sessionUrl,
  topics,
  numberSetting,
  LONGEST_TIMER_MS,
} from '@murmur/shared';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { networkInterfaces } from 'node:os';
import { type Bus, PayloadTooLarge } from '@murmur/shared/bus';
import { type Context, Hono } from 'hono';
import type { HttpAhead } from '@murmur/shared/service';
import { BodyCutShort, keptBody, limitBody } from './body-limit.js';
import { CARD_CACHE_CONTROL, CardShelf, type RenderedCard, holdsCard } from './card-shelf.js';
import { refuseForeignHost } from './host-guard.js';
import { isJsonMediaType, readJsonRpc, rpcError } from './json-rpc.js';
import { COMPLETION_METHODS, WWW_AUTHENTICATE, doorAuth } from './door-auth.js';
import { renderAgentCard } from './rendering.js';
import { FeedHub, SessionLink, SessionUnreachable, TooManyStreams } from './session-link.js';
import { SessionTokens } from './session-tokens.js';
import { a2aMethods } from './methods.js';

/**
 * The door: the A2A edge of every session. It holds no task state: each request is translated
 * into a call on `session.<id>.rpc`, answered by the capsule host that owns the session, and each
 * stream is a watch on `session.<id>.events`, numbered by that host. So any number of doors serve
 * any session, and a door that answers a session's card proves the session is alive.
 *
 * Under a door's base URL a session lives at `/sessions/<id>/`: its agent card at
 * `.well-known/agent-card.json` below that, its JSON-RPC endpoint at that URL itself.
 *
 * This module is the door's HTTP side: who may ask (credentials, before a byte of the body is
 * read), the body's bounds, the JSON-RPC envelope and its version, the cards. What each A2A method
 * does is in `methods.ts` and `task-streams.ts`.
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
  /** What the door asks of its clients (`MURMUR_DOOR_AUTH`), as `door.locate` tells it. */
  readonly credentials: DoorCredentials;
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
  /**
   * How long a stream's write may wait for its client to read (`deliveredOrCut`): four heartbeats,
   * at most what a timer holds — past it node fires the timer at once, and every write not taken
   * within a millisecond cut its stream.
   */
  const stalledAfterMs = Math.min(heartbeatMs * 4, LONGEST_TIMER_MS);
  const blockingWaitMs = numberSetting(env, 'MURMUR_DOOR_BLOCKING_WAIT_MS', DEFAULT_BLOCKING_WAIT_MS, { unit: 'milliseconds' });
  const publicUrl = env.MURMUR_DOOR_PUBLIC_URL?.trim() || undefined;
  let baseUrl = publicUrl;
  /** Set with the address the door listens on (`setBaseUrl`): only a door on loopback has one. */
  let hostGuard: HostGuard | undefined;

  const auth = doorAuth(env);
  const credentials = { required: auth.required, session_tokens: auth.sessionTokens };
  const locate = bus.serve(
    commands.locateDoor,
    () => {
      if (!baseUrl) throw new MurmurError('E-DOOR-002', `door ${doorId} is not listening yet`);
      return { base_url: baseUrl, door_id: doorId, credentials };
    },
    { queue: QUEUE_GROUPS.door },
  );

  const feeds = new FeedHub(bus, maxStreams, maxStreamsPerSession);
  /** The A2A methods of both generations (`methods.ts`, the streaming ones in `task-streams.ts`): what `serveRpc` dispatches to. */
  const methods = a2aMethods({ blockingWaitMs, heartbeatMs, stalledAfterMs });
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

  /** The session a path names, or a 404 before anything reaches the bus: only a real session id becomes a subject. */
  const sessionOf = (context: Context): SessionLink | Response => {
    const id = context.req.param('session') ?? '';
    if (!SessionIdSchema.safeParse(id).success) {
      return context.json({ error: { code: 'E-DOOR-001', message: notASessionId(id) } }, 404);
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
    data: { murmur_code: 'E-DOOR-002' },
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
  const unauthorizedAnswer = (authorization: string | undefined): { body: Record<string, unknown>; headers: Record<string, string> } => {
    const presented = /^bearer\s/i.test(authorization ?? '');
    return {
      body: rpcError(null, {
        code: RPC_ERRORS.invalidRequest,
        message: presented
          ? "Unauthorized: the credentials sent are not good at this door (it takes 'Authorization: Bearer <token>'); its agent card declares the scheme"
          : "Unauthorized: this door requires a bearer token ('Authorization: Bearer <token>'); its agent card declares the scheme",
        data: { murmur_code: 'E-DOOR-003' },
      }),
      headers: { 'www-authenticate': presented ? `${WWW_AUTHENTICATE}, error="invalid_token"` : WWW_AUTHENTICATE },
    };
  };
  const unauthorized = (context: Context): Response => {
    const { body, headers } = unauthorizedAnswer(context.req.header('authorization'));
    return context.json(body, 401, headers);
  };
  /**
   * A client that asks before it sends its body (`Expect: 100-continue`) with no credential the door
   * takes is refused then, not told to go on and send what it is refused for. Judged from the
   * headers as `admit` judges them; what is not refused here is judged by `admit` again.
   */
  const refuseUnauthorizedAhead = (request: IncomingMessage, response: ServerResponse): boolean => {
    if (request.method !== 'POST' || !/100-continue/i.test(request.headers.expect ?? '')) return false;
    const header = (name: string): string | undefined => {
      const value = request.headers[name.toLowerCase()];
      return Array.isArray(value) ? value.join(', ') : value;
    };
    const judged = auth.judge({
      authorization: header('authorization'),
      delegationId: header(DELEGATION_ID_HEADER),
      completionSession: header(COMPLETION_SESSION_HEADER),
    });
    if (judged.verdict !== 'refused') return false;
    const { body, headers } = unauthorizedAnswer(header('authorization'));
    response.writeHead(401, { 'content-type': 'application/json', connection: 'close', ...headers }).end(JSON.stringify(body));
    return true;
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
          message: `Invalid Request: ${notASessionId(context.req.param('session') ?? '')}`,
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
    const unreadable = unreadableBody(context);
    if (unreadable) return unreadable;
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
    const table = version === '0.3' ? methods.v03 : methods.v10;
    const handler = Object.hasOwn(table, call.method) ? table[call.method] : undefined;
    if (!handler) return context.json(rpcError(call.id, methodNotFound(call.method, version, version === '0.3' ? methods.v10 : methods.v03)));
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
  // A route, not `notFound`, and the last: the door's routes are mounted in the process's app beside
  // /health (`service-process.ts`), whose own not-found answer is a bare text 404 with no code.
  app.all('*', (context) =>
    context.json(
      {
        error: {
          code: 'E-DOOR-002',
          message: `a door answers POST /sessions/<id> (JSON-RPC) and GET of its agent cards (/sessions/<id>/.well-known/agent-card.json); it has no ${context.req.method} ${context.req.path.slice(0, 200)}${context.req.method === 'OPTIONS' ? ' (it answers no CORS preflight: a web page is not among its clients)' : ''}`,
        },
      },
      404,
    ),
  );

  return {
    http: app,
    ahead: (request, response) =>
      refuseForeignHost(hostGuard, request, response) ||
      refuseUnauthorizedAhead(request, response) ||
      refuseDeclaredTooLarge(request, response) ||
      cards.answer(request, response),
    doorId,
    credentials,
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

/**
 * A request whose body the door would not read as what it is: not JSON by its media type (415;
 * compared, not searched, since a page sends `text/plain;charset=application/json` anywhere without
 * a CORS preflight), a transfer coding other than chunked, which Node's parser leaves on the body
 * (RFC 9112: 501), or a content coding (RFC 9110: 415, naming the one the door reads). Each was read
 * as text, and a gzip body answered as one that is not UTF-8.
 */
function unreadableBody(context: Context): Response | undefined {
  const refuse = (status: 415 | 501, message: string, headers?: Record<string, string>): Response =>
    context.json(
      rpcError(null, { code: RPC_ERRORS.invalidRequest, message: `Invalid Request: ${message}`, data: { murmur_code: 'E-DOOR-002' } }),
      status,
      headers,
    );
  const contentType = context.req.header('content-type') ?? '';
  if (!isJsonMediaType(contentType)) return refuse(415, `content-type must be application/json (got '${contentType.slice(0, 80)}')`);
  const transferCodings = (context.req.header('transfer-encoding') ?? '')
    .toLowerCase()
    .split(',')
    .map((coding) => coding.trim())
    .filter((coding) => coding !== '' && coding !== 'chunked');
  if (transferCodings.length > 0)
    return refuse(
      501,
      `transfer-encoding '${transferCodings.join(', ').slice(0, 80)}' is not read here; send the body as it is, chunked or with a content-length`,
    );
  const contentEncoding = (context.req.header('content-encoding') ?? '').trim().toLowerCase();
  if (contentEncoding !== '' && contentEncoding !== 'identity')
    return refuse(415, `content-encoding '${contentEncoding.slice(0, 80)}' is not read here; send the body as it is, without a content-encoding`, {
      'accept-encoding': 'identity',
    });
  return undefined;
}

/** `otherGeneration`: the methods of the generation the request did not ask for, to say when it named one of them. */
function methodNotFound(method: string, version: A2aVersion, otherGeneration: Record<string, unknown>): RpcError {
  const other = version === '0.3' ? '1.0' : '0.3';
  const hint = Object.hasOwn(otherGeneration, method) ? ` ('${method}' is an A2A ${other} method: send it with A2A-Version: ${other}, or with no version)` : '';
  return { code: RPC_ERRORS.methodNotFound, message: `Method not found: '${method.slice(0, 128)}'${hint}` };
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
