import { type Server as HttpServer, type IncomingMessage, type RequestListener, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { type Context, Hono, type MiddlewareHandler } from 'hono';
import { numberSetting } from '../settings.js';

export interface HttpListener {
  readonly host: string;
  readonly port: number;
  readonly url: string;
  /** Stops listening; open connections are closed at once, or after `graceMs` if they are still open. */
  close(graceMs?: number): Promise<void>;
}

/**
 * A service's answer from memory, tried on each request before the app sees it: true when it
 * answered (the app never hears of the request), false to leave the request to the app untouched.
 * It must answer as the app would; it exists for what the app's request objects would cost.
 */
export type HttpAhead = (request: IncomingMessage, response: ServerResponse) => boolean;

/**
 * How long a client of a service's HTTP (a door, the dashboard, health and metrics) has to send
 * its whole request, headers and body (`MURMUR_HTTP_READ_TIMEOUT_MS`, 30 s); past it the request
 * is answered 408 and its connection closed. Node's own bound is 300 s, so a client that trickled
 * its requests held a connection that long, and any number of clients as many connections. Only
 * the request is bounded: a response (a stream, a blocking send) lasts as long as it needs.
 */
export const DEFAULT_HTTP_READ_TIMEOUT_MS = 30_000;

/** `MURMUR_HTTP_READ_TIMEOUT_MS`, or the default. */
export function httpReadTimeoutMs(env: Record<string, string | undefined>): number {
  return numberSetting(env, 'MURMUR_HTTP_READ_TIMEOUT_MS', DEFAULT_HTTP_READ_TIMEOUT_MS, { unit: 'milliseconds' });
}

export interface ListenOptions {
  host?: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  /** How long a client may take to send a whole request (`httpReadTimeoutMs`); unset, Node's own 300 s. */
  readTimeoutMs?: number;
}

/**
 * Serves a hono app on `host:port` (0 picks a free port) and resolves once it is listening;
 * `ahead`, when given, is offered each request first — a request that asks to be told before it
 * sends its body (`Expect: 100-continue`) before it is told to go on, so what `ahead` refuses
 * (a body declared too large) is never sent.
 */
export function listenHttp(app: Hono, options: ListenOptions = {}, ahead?: HttpAhead): Promise<HttpListener> {
  const host = options.host ?? '127.0.0.1';
  const readTimeoutMs = options.readTimeoutMs;
  // Node checks its connections against the bound on an interval (30 s by default), so a bound is
  // kept to within a quarter of itself, and at least every 5 s.
  const bounded =
    readTimeoutMs === undefined
      ? {}
      : {
          requestTimeout: readTimeoutMs,
          headersTimeout: readTimeoutMs,
          connectionsCheckingInterval: Math.max(50, Math.min(readTimeoutMs / 4, 5_000)),
        };
  const withAhead = (serverOptions: object, toApp: RequestListener): HttpServer => {
    const server = createServer(
      { ...serverOptions, ...bounded },
      ahead ? (request, response) => void (ahead(request, response) || toApp(request, response)) : toApp,
    );
    if (ahead) {
      server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
        if (ahead(request, response)) return;
        response.writeContinue();
        toApp(request, response);
      });
    }
    return server;
  };
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname: host, port: options.port ?? 0, createServer: withAhead as typeof createServer }, (info: AddressInfo) => {
      const urlHost = info.family === 'IPv6' ? `[${info.address}]` : info.address;
      resolve({
        host,
        port: info.port,
        url: `http://${urlHost}:${info.port}`,
        close: (graceMs = 0) =>
          new Promise<void>((done) => {
            const http = server as unknown as HttpServer;
            http.close(() => done());
            // Idle keep-alive connections go now; a response still being written (an SSE stream
            // sending its last event) gets `graceMs` to finish before it is cut.
            http.closeIdleConnections();
            const force = (): void => http.closeAllConnections();
            if (graceMs > 0) setTimeout(force, graceMs).unref();
            else force();
          }),
      });
    });
    server.once('error', reject);
  });
}

/**
 * `GET /health`: 200 with the service's health, for probes that speak HTTP rather than the bus;
 * 503 while the service's `bus` connection is lost.
 */
export function healthRoutes(
  health: () => object,
  bus?: { readonly connected: boolean; readonly description: string },
  /**
   * Which `Host` names `/health` and `/metrics` answer (`loopbackHostGuard`): on loopback, a web page
   * reaching them through a name of its own (DNS rebinding) read the bus's address and, from an
   * executor's metrics, every session's egress rules. Set before the routes, which it then guards.
   */
  hostGuard?: (host: string | undefined) => boolean,
): Hono {
  const app = new Hono();
  if (hostGuard) {
    const guard: MiddlewareHandler = async (context, next) => {
      const host = requestedHost(context);
      if (hostGuard(host)) return next();
      return context.json(
        {
          error: `this service answers only for localhost and the names it is given; a request for '${(host ?? '').slice(0, 80)}' is refused`,
          code: 'E-SVC-001',
        },
        421,
      );
    };
    app.use('/health', guard);
    app.use('/metrics', guard);
  }
  // A service without its bus serves nothing: a probe (docker's health check) hears so, not `ok`.
  app.get('/health', (context) =>
    bus && !bus.connected
      ? context.json({ ...health(), status: 'unavailable', reason: `its bus connection to ${bus.description} is lost` }, 503)
      : context.json(health()),
  );
  return app;
}

/**
 * The authority a request is for: an absolute-form target's (`POST http://host/…`, as a proxy
 * sends it), which RFC 9112 says wins over the Host header and which the app's URL is built from,
 * else the Host header's.
 */
export function requestedAuthority(request: IncomingMessage): string | undefined {
  const target = request.url ?? '';
  if (!/^https?:\/\//i.test(target)) return request.headers.host;
  try {
    return new URL(target).host;
  } catch {
    // No authority to be had: the target itself, which no guard takes for a name it answers
    // (an empty one a guard may take for a client that sent no Host).
    return target.slice(0, 200);
  }
}

/** `requestedAuthority` of a request an app was handed by `@hono/node-server` (its Node request), else its Host header. */
export function requestedHost(context: Context): string | undefined {
  const incoming = (context.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return incoming ? requestedAuthority(incoming) : context.req.header('host');
}
