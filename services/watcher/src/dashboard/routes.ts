import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ErrorCode, type Log, MurmurError, SessionIdSchema, hostHeaderName, isLoopbackName } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { requestedHost } from '@murmur/shared/service';
import { Hono, type MiddlewareHandler } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { streamSSE } from 'hono/streaming';
import { DASHBOARD_COOKIE, type DashboardAccess, presentedToken } from './access.js';
import type { BoardChange, DashboardBoard } from './board.js';
import { locateTrace, readTimeline } from './timeline.js';

/**
 * The dashboard over HTTP, all under `/dashboard`: the page and its two static files, the
 * snapshot (`/dashboard/api/snapshot`), one SSE stream (`/dashboard/api/events`: a `snapshot`
 * event on connect, then `session` and `egress` events as the bus delivers them, a comment every
 * `heartbeatMs`, and `bye` when the watcher stops) and a session's timeline
 * (`/dashboard/api/sessions/<id>/timeline`). Every one of them is behind the same token check: a
 * request without it gets 401 and a refusal, never a byte of the page or the data.
 */

/** The page ships as files beside the package (`static/dashboard/`): no build step, no framework. */
const STATIC_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'static', 'dashboard');
const STATIC_FILES = {
  'index.html': 'text/html; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8',
} as const;

/** What a browser may do with what the dashboard sends: nothing from elsewhere, no framing. */
const PAGE_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
};

export interface DashboardRoutesOptions {
  bus: Bus;
  log: Log;
  board: DashboardBoard;
  access: DashboardAccess;
  heartbeatMs?: number;
}

export interface DashboardRoutes {
  app: Hono;
  /** Ends every open stream with `bye`, so browsers are told the watcher stopped rather than cut off. */
  drain(): Promise<void>;
}

function refusal(code: ErrorCode, message: string, status: ContentfulStatusCode, subject: string): Response {
  const error = new MurmurError(code, message, { path: subject });
  return new Response(JSON.stringify({ error: error.toJSON() }), { status, headers: { 'content-type': 'application/json', ...PAGE_HEADERS } });
}

/** Dashboard pages open at once (each its own event stream). */
const MAX_STREAMS = 32;
/** Changes a stream holds for a client that is not reading them, before it is ended. */
const MAX_QUEUED_CHANGES = 1_000;

/** The one answer to a request without the token: the same for every path, echoing nothing of what was asked. */
function refuseUnauthorised(): Response {
  return refusal('E-DASH-002', 'the dashboard refused the request: it carries no token, or not MURMUR_DASHBOARD_TOKEN', 401, 'MURMUR_DASHBOARD_TOKEN');
}

export function dashboardRoutes(options: DashboardRoutesOptions): DashboardRoutes {
  const { bus, log, board, access } = options;
  const heartbeatMs = options.heartbeatMs ?? 15_000;
  /** How to end each open stream. */
  const streams = new Set<() => void>();
  const files = new Map(Object.entries(STATIC_FILES).map(([file, type]) => [file, { body: readFileSync(path.join(STATIC_DIR, file)), type }]));
  const app = new Hono();

  // A dashboard without a token is on loopback, where a web page reaches it through a name of its
  // own pointed at 127.0.0.1 (DNS rebinding) and reads it as that site's: only a request for a
  // loopback name is answered. A request with no `Host` comes from no browser.
  const loopbackOnly: MiddlewareHandler = async (context, next) => {
    const host = requestedHost(context);
    if (access.required || host === undefined || host === '') return next();
    const name = hostHeaderName(host);
    if (name !== undefined && isLoopbackName(name)) return next();
    return refusal(
      'E-DASH-003',
      `the dashboard serves loopback without a token, and answers only for localhost; a request for '${host.slice(0, 80)}' is refused (a web page reaching it through a name of its own: DNS rebinding)`,
      421,
      host.slice(0, 80),
    );
  };
  app.use('/dashboard', loopbackOnly);
  app.use('/dashboard/*', loopbackOnly);

  // The API is the page's own: a page of another origin (a site, or another name of loopback) is
  // refused by what its browser says of the request (`Sec-Fetch-Site`), before a stream is counted.
  // Without this, a page with no token needed filled the dashboard's streams from forty names of
  // localhost, and the operator's own page met 503. A client that is no browser says nothing, and is let on.
  app.use('/dashboard/api/*', async (context, next) => {
    const site = context.req.header('sec-fetch-site');
    if (site === undefined || site === 'same-origin' || site === 'none') return next();
    return refusal(
      'E-DASH-003',
      `the dashboard's API answers its own page only; a ${site} request (from ${(context.req.header('origin') ?? 'another page').slice(0, 80)}) is refused`,
      403,
      context.req.path,
    );
  });

  // `?token=` on the page is traded for a cookie, and the URL loses it (it would stay in history).
  const tradeToken: MiddlewareHandler = async (context, next) => {
    const offered = context.req.query('token');
    if (offered === undefined || !access.required) return next();
    if (!access.admits(offered)) return refuseUnauthorised();
    return new Response(null, {
      status: 303,
      headers: {
        location: '/dashboard',
        'set-cookie': `${DASHBOARD_COOKIE}=${encodeURIComponent(offered)}; Path=/dashboard; HttpOnly; SameSite=Strict`,
        ...PAGE_HEADERS,
      },
    });
  };
  app.get('/dashboard', tradeToken);
  app.get('/dashboard/', tradeToken);

  const requireToken: MiddlewareHandler = async (context, next) => {
    if (!access.admits(presentedToken({ authorization: context.req.header('authorization'), cookie: context.req.header('cookie') })))
      return refuseUnauthorised();
    await next();
  };
  app.use('/dashboard', requireToken);
  app.use('/dashboard/*', requireToken);

  const serveFile = (file: string) => () => {
    const found = files.get(file) as { body: Buffer; type: string };
    return new Response(new Uint8Array(found.body), { headers: { 'content-type': found.type, ...PAGE_HEADERS } });
  };
  app.get('/dashboard', serveFile('index.html'));
  app.get('/dashboard/', serveFile('index.html'));
  app.get('/dashboard/dashboard.js', serveFile('dashboard.js'));
  app.get('/dashboard/dashboard.css', serveFile('dashboard.css'));

  app.get('/dashboard/api/snapshot', (context) => context.json(board.snapshot(), 200, PAGE_HEADERS));

  app.get('/dashboard/api/sessions/:id/timeline', async (context) => {
    const id = context.req.param('id');
    const valid = SessionIdSchema.safeParse(id);
    if (!valid.success) return refusal('E-SES-001', `'${id.slice(0, 80)}' is not a session id: ${valid.error.issues[0]?.message ?? 'malformed'}`, 400, id);
    try {
      const location = await locateTrace(bus, id, board.traceOf(id));
      return context.json(await readTimeline(bus, id, location), 200, PAGE_HEADERS);
    } catch (error) {
      if (error instanceof MurmurError) {
        const status: ContentfulStatusCode = error.code === 'E-SES-001' ? 404 : error.code === 'E-SES-003' ? 504 : 502;
        return refusal(error.code, error.message, status, id);
      }
      log.error({ session_id: id, err: error }, 'could not read a session trace for the dashboard');
      return refusal('E-IO-003', `the trace of session ${id} could not be read`, 502, id);
    }
  });

  app.get('/dashboard/api/events', (context) => {
    if (streams.size >= MAX_STREAMS)
      return refusal('E-DASH-004', `the dashboard has ${streams.size} streams open, the most it serves at once`, 503, '/dashboard/api/events');
    for (const [name, value] of Object.entries(PAGE_HEADERS)) context.header(name, value);
    return streamSSE(context, async (sse) => {
      let wake: (() => void) | undefined;
      const queue: BoardChange[] = [];
      let ended = false;
      const end = (): void => {
        ended = true;
        wake?.();
      };
      streams.add(end);
      // Listening before the snapshot is taken: a change between the two is sent twice, never lost.
      const stop = board.listen((change) => {
        // A client that stopped reading holds its changes here: past the bound it is let go (the
        // page reconnects and starts from a snapshot) rather than held at the watcher's memory.
        if (queue.length >= MAX_QUEUED_CHANGES) {
          queue.length = 0;
          stop();
          end();
          sse.abort();
          return;
        }
        queue.push(change);
        wake?.();
      });
      sse.onAbort(end);
      const heartbeat = setInterval(() => void sse.write(': heartbeat\n\n').catch(end), heartbeatMs);
      try {
        await sse.writeSSE({ event: 'snapshot', data: JSON.stringify(board.snapshot()) });
        while (!ended && !sse.aborted) {
          const change = queue.shift();
          if (change === undefined) {
            await new Promise<void>((resolve) => (wake = resolve));
            wake = undefined;
            continue;
          }
          await sse.writeSSE({ event: change.kind, data: JSON.stringify(change.kind === 'session' ? change.session : change.decision) });
        }
        if (!sse.aborted) await sse.writeSSE({ event: 'bye', data: JSON.stringify({ reason: 'the watcher is stopping' }) });
      } finally {
        clearInterval(heartbeat);
        stop();
        streams.delete(end);
      }
    });
  });

  return {
    app,
    async drain() {
      for (const end of [...streams]) end();
      // Each stream writes its `bye` as it winds down; a moment is enough.
      const deadline = Date.now() + 500;
      while (streams.size > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    },
  };
}
