import type { Hono } from 'hono';
import type { Logger } from 'pino';
import { type Bus, connectBus, shownNatsUrl } from '../bus/index.js';
import { MurmurError } from '../errors.js';
import { loopbackHostGuard } from '../loopback-host.js';
import { installRuntimeMetrics } from '../metrics-sink.js';
import type { ServiceName } from '../events.js';
import type { Log } from '../log.js';
import { newId } from '../ids.js';
import { servicePort } from '../service-ports.js';
import { healthOf, serveHealth } from '../service-health.js';
import { installRuntimeTracing } from '../tracing-sink.js';
import { numberSetting } from '../settings.js';
import { RUNTIME_VERSION } from '../version.js';
import { type HttpAhead, healthRoutes, httpReadTimeoutMs, listenHttp } from './http.js';
import { createLogger } from './logger.js';
import type { OtelTracer } from './otel.js';

export interface ServiceContext {
  bus: Bus;
  log: Logger;
  env: NodeJS.ProcessEnv;
  instanceId: string;
}

export interface StartedService {
  /** Routes the service serves over HTTP beside `/health`; absent for a bus-only service. */
  http?: Hono;
  /** What the service answers before a request reaches `http` (see `HttpAhead`). */
  ahead?: HttpAhead;
  /** Told the URL the service's HTTP listener got (a door puts it in the URLs it hands out). */
  onListening?(url: string): void;
  /** Told the process is stopping, before its listener closes: end what would otherwise hold it open (a door's streams). */
  drain?(): void | Promise<void>;
  close(): Promise<void>;
}

export interface ServiceProcessOptions {
  service: ServiceName;
  start(context: ServiceContext): Promise<StartedService>;
}

/**
 * How long a service may take to stop before it exits anyway, unless `MURMUR_SERVICE_STOP_DEADLINE_MS`
 * says otherwise: below the 10 s docker gives a container between SIGTERM and SIGKILL.
 */
const DEFAULT_STOP_DEADLINE_MS = 8_000;

/**
 * The whole life of a service process, the same for all five: connect to the bus named by
 * `MURMUR_NATS_URL` (in-process when unset), start the service, serve its routes and `GET /health`
 * on `MURMUR_<SERVICE>_HOST:MURMUR_<SERVICE>_PORT`, answer `service.<name>.health` on the bus, say
 * on one line which bus and port it uses, log JSON lines on stdout, and shut down cleanly on
 * SIGTERM or SIGINT.
 */
export async function runServiceProcess(options: ServiceProcessOptions): Promise<void> {
  const env = process.env;
  const upper = options.service.toUpperCase();
  const log = createLogger(options.service, env, 'stdout');
  const instanceId = `${options.service}-${newId('request').slice(4, 16)}`;
  const startedAt = new Date();
  // A service that cannot start says why, with a code, on its log and its exit status: never a stack.
  const refuse = (error: unknown, context: Record<string, unknown>): void => {
    log.fatal(context, error instanceof MurmurError ? error.format() : String(error));
    process.exitCode = 1;
  };
  const host = env[`MURMUR_${upper}_HOST`]?.trim() || '127.0.0.1';
  let port: number;
  let stopDeadlineMs: number;
  let readTimeoutMs: number;
  try {
    port = servicePort(env, options.service);
    readTimeoutMs = httpReadTimeoutMs(env);
    stopDeadlineMs = numberSetting(env, 'MURMUR_SERVICE_STOP_DEADLINE_MS', DEFAULT_STOP_DEADLINE_MS, { unit: 'milliseconds' });
  } catch (error) {
    refuse(error, {});
    return;
  }
  // Counted from the first thing the service does: its bus connection's requests included. Loaded
  // here, not at the top: `mur` imports this module for its door and must not pay for prom-client.
  const { metricsText, prometheusMetrics } = await import('./metrics.js');
  installRuntimeMetrics(prometheusMetrics);
  const tracer = await installServiceTracer(`murmur-${options.service}`, env.MURMUR_OTEL_ENDPOINT, log);
  let bus: Bus;
  try {
    bus = await connectBus({ natsUrl: env.MURMUR_NATS_URL, name: instanceId, log });
  } catch (error) {
    refuse(error, { bus: shownNatsUrl(env.MURMUR_NATS_URL) });
    return;
  }
  let started: StartedService;
  try {
    started = await options.start({ bus, log, env, instanceId });
  } catch (error) {
    refuse(error, {});
    await bus.close();
    return;
  }
  const identity = { service: options.service, instanceId, httpPort: null as number | null, startedAt };
  const hostGuard = loopbackHostGuard(
    `http://${host.includes(':') ? `[${host}]` : host}`,
    env[`MURMUR_${upper}_PUBLIC_URL`]?.trim() || undefined,
    env[`MURMUR_${upper}_HOSTS`],
  );
  const app = healthRoutes(() => healthOf(identity, bus), bus, hostGuard);
  app.get('/metrics', async (context) => {
    const { contentType, body } = await metricsText();
    return context.body(body, 200, { 'content-type': contentType });
  });
  if (started.http) app.route('/', started.http);
  let listener: Awaited<ReturnType<typeof listenHttp>>;
  try {
    listener = await listenHttp(app, { host, port, readTimeoutMs }, started.ahead);
  } catch (error) {
    refuse(
      new MurmurError('E-IO-003', `${options.service} cannot listen on ${host}:${port}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
        hint: `choose another port with MURMUR_${upper}_PORT (0 picks a free one)`,
      }),
      { host, port },
    );
    await started.close();
    await bus.close();
    return;
  }
  identity.httpPort = listener.port;
  started.onListening?.(listener.url);
  const health = serveHealth(bus, identity);

  let stopping = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, `${options.service} stopping`);
    // Whatever a step waits for (a bus that stopped answering), the process ends by the deadline,
    // saying what it was still doing, rather than being killed without a word by whoever stops it.
    let step = 'ending its streams';
    const deadline = setTimeout(() => {
      log.error({ signal, waiting_for: step }, `${options.service} did not stop within ${stopDeadlineMs} ms (still ${step}); exiting`);
      process.exit(1);
    }, stopDeadlineMs);
    health.unsubscribe();
    await started.drain?.();
    // A response being written (a stream's last frame) gets a moment to finish before it is cut.
    step = 'closing its HTTP listener';
    await listener.close(1_000);
    step = 'closing the service';
    await started.close();
    step = 'closing its bus connection';
    await bus.close();
    step = 'sending its last spans';
    await tracer?.shutdown(2_000);
    clearTimeout(deadline);
    log.info({}, `${options.service} stopped`);
  };
  // A bus that closed the connection for good (it refused it on reconnecting: credentials revoked)
  // leaves the service nothing to serve; it stops, failed, so whatever runs it can start it again.
  bus.onConnectionChange((state, reason) => {
    if (state !== 'closed' || stopping) return;
    log.fatal({ bus: bus.description, reason }, `${options.service} lost its bus for good (${reason ?? 'no reason given'}); stopping`);
    process.exitCode = 1;
    stop('its bus closed the connection').catch((error: unknown) => {
      log.error({ err: error }, `${options.service} could not stop cleanly without its bus; exiting`);
      process.exit(1);
    });
  });
  // Handlers first, then the ready line: whoever reads the line may signal at once.
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
  log.info(
    { bus: bus.description, host, port: listener.port, url: listener.url, instance_id: instanceId },
    `${options.service} ready on ${listener.url}, bus ${bus.description}`,
  );
}

/**
 * With `MURMUR_OTEL_ENDPOINT`, the process's own spans (`service.name` `murmur-<service>`, or `mur`
 * for the services `mur run` runs in-process) go to that collector. A failing export is logged once
 * a minute at most: a collector that is down must not fill the log, nor slow anything it records.
 */
export async function installServiceTracer(serviceName: string, endpoint: string | undefined, log: Log): Promise<OtelTracer | undefined> {
  if (!endpoint?.trim()) return undefined;
  const { openOtelTracer } = await import('./otel.js');
  let lastReported = 0;
  const tracer = openOtelTracer({
    endpoint: endpoint.trim(),
    serviceName,
    serviceVersion: RUNTIME_VERSION,
    scope: serviceName,
    onExportError: (message) => {
      if (Date.now() - lastReported < 60_000) return;
      lastReported = Date.now();
      log.warn({ otel_endpoint: endpoint }, message);
    },
  });
  installRuntimeTracing(tracer);
  return tracer;
}
