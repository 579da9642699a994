import { type Bus, connectBus } from '@murmur/shared/bus';
import { type DoorCredentials, FETCH_BLOCKED_PORT, FETCH_BLOCKED_PORTS, type Log, MurmurError, commands, silentLog } from '@murmur/shared';
import { LEFTOVER_SWEEP_EVERY_MS, cacheDir, sweepCacheLeftoversIfDue } from '@murmur/shared/node';
import type { HttpListener } from '@murmur/shared/service';

/**
 * Where `mur`'s work happens. With `MURMUR_NATS_URL` set, `mur` is a client: it asks the running
 * services over NATS. Without it, `mur` starts the services it needs inside its own process on the
 * in-process bus (the embedded default), and asks them the same way, so both paths run the same
 * code through the same contracts.
 */
export interface Runtime {
  bus: Bus;
  inProcess: boolean;
  /**
   * A door for the sessions this runtime launches — its base URL and what it asks of clients: in
   * process, a door started here on `bind:port` (0 for any free port), which serves
   * `soleSession`'s card at its origin root too when that is the one session it will serve; over
   * NATS, whichever door answers `door.locate`.
   */
  door(bind: string, port: number, soleSession?: string): Promise<LocatedDoor>;
  close(): Promise<void>;
}

export interface LocatedDoor {
  base: string;
  credentials: DoorCredentials;
}

export interface RuntimeOptions {
  env?: NodeJS.ProcessEnv;
  verbose?: boolean;
  /** Start an executor too (for `mur run`); staging alone does not need one. */
  executor?: boolean;
  /**
   * The in-process executor starts one capsule host in its sandbox for sessions whose workdirs are
   * made under this base, as soon as the executor is up and before anything else of the runtime:
   * the host's start is most of a run's wait, and the rest of the run (the other services, the
   * manifest, the scope, the staging) happens while it starts. Its sandbox makes nothing on disk,
   * so a run refused before its launch leaves nothing of it behind.
   */
  warmHostBase?: string | undefined;
}

/** How long an in-process runtime that is closing waits for its delegated children's endings to be recorded. */
const DELEGATIONS_END_WITHIN_MS = 10_000;

export async function openRuntime(options: RuntimeOptions = {}): Promise<Runtime> {
  const env = options.env ?? process.env;
  // The services' logs stay quiet inside `mur` unless asked for (MURMUR_LOG_LEVEL, or -v on stage).
  const log: Log = options.verbose || env.MURMUR_LOG_LEVEL ? (await import('@murmur/shared/service')).createLogger('mur', env) : silentLog;
  const natsUrl = env.MURMUR_NATS_URL?.trim();
  const bus = await connectBus({ natsUrl, name: 'mur', log });
  if (natsUrl) {
    return {
      bus,
      inProcess: false,
      async door() {
        const located = await bus.request(commands.locateDoor, {}, { timeoutMs: 5_000 }).catch((error: unknown) => {
          throw error instanceof MurmurError && error.code === 'E-BUS-004'
            ? new MurmurError('E-DOOR-001', `no door answers on ${bus.description}, so an agent capsule would be unreachable`, {
                hint: 'start the door service (node services/door/dist/index.js), or unset MURMUR_NATS_URL to run everything in-process',
              })
            : error;
        });
        return { base: located.base_url, credentials: located.credentials ?? { required: false, session_tokens: false } };
      },
      close: () => bus.close(),
    };
  }
  // Loaded only when asked for: the SDK is not part of a plain `mur run`'s start-up.
  const tracer = env.MURMUR_OTEL_ENDPOINT?.trim()
    ? await (await import('@murmur/shared/service')).installServiceTracer('mur', env.MURMUR_OTEL_ENDPOINT, log)
    : undefined;
  // The services are loaded here, not at the top: a client of a stack never runs them, and its
  // startup snapshot (cli/src/snapshot-client.ts) does not hold their code.
  const [{ startStagerService }, { startExecutorService }, { startWatcherService }] = await Promise.all([
    import('@murmur/stager'),
    import('@murmur/executor'),
    import('@murmur/watcher'),
  ]);
  // The executor first: its warm host starts with it.
  const executor = options.executor
    ? startExecutorService({ bus, log, env, ...(options.warmHostBase ? { pool: { base: options.warmHostBase, size: 1, refill: false } } : {}) })
    : undefined;
  const stager = startStagerService({ bus, log, env });
  // A run cut short (a second Ctrl-C) can leave a transpile or a fetch half-made: swept once a day.
  void sweepCacheLeftoversIfDue(cacheDir(env), 24 * LEFTOVER_SWEEP_EVERY_MS, log);
  // The sessions this process runs are on the machine's map while they run.
  const watcher = options.executor ? startWatcherService({ bus, log, env }) : undefined;
  let door: { service: { close(): Promise<void> }; listener: HttpListener; located: LocatedDoor } | undefined;
  return {
    bus,
    inProcess: true,
    async door(bind, port, soleSession) {
      if (!door) {
        // Refused before the door is started: it would bind, and no browser, JavaScript A2A client
        // or child's completion (`mur`'s own fetch) could reach it.
        if (FETCH_BLOCKED_PORTS.has(port))
          throw new MurmurError('E-RUN-010', `network.internal_port ${port} is ${FETCH_BLOCKED_PORT}, so the session's door cannot use it`, {
            path: 'network.internal_port',
            hint: 'set network.internal_port to another port (0 or unset picks a free one)',
          });
        const { startDoorService } = await import('@murmur/door');
        const { httpReadTimeoutMs, listenHttp } = await import('@murmur/shared/service');
        const readTimeoutMs = httpReadTimeoutMs(env);
        const service = startDoorService({ bus, log, env, ...(soleSession ? { soleSession } : {}) });
        const listener = await listenHttp(service.http, { host: bind, port, readTimeoutMs }, service.ahead).catch((error: NodeJS.ErrnoException) => {
          void service.close();
          // The manifest's own port taken is upstream's E-RUN-010; any other failure to listen is the address's.
          if (error.code === 'EADDRINUSE' && port !== 0)
            throw new MurmurError('E-RUN-010', `network.internal_port ${port} is already in use on ${bind}, so the session's door cannot bind it`, {
              path: 'network.internal_port',
              hint: 'stop what holds the port, or set network.internal_port to another port (0 or unset picks a free one)',
            });
          throw new MurmurError('E-IO-003', `cannot bind the session's door on ${bind}:${port}: ${error.code ?? error.message}`, {
            hint: 'choose another --bind address, or another network.internal_port (0 picks a free port)',
          });
        });
        door = { service, listener, located: { base: service.setBaseUrl(listener.url), credentials: service.credentials } };
      }
      return door.located;
    },
    async close() {
      // Streams that are ending (the final status of a task whose session just ended) get to finish.
      await door?.listener.close(2_000);
      await door?.service.close();
      // Children end as their parents' doing, recorded by the executor that holds them, before it
      // closes: closed first, it ended them as "shutting down" and recorded nothing of them.
      await watcher?.endDelegations(DELEGATIONS_END_WITHIN_MS);
      await executor?.close();
      await watcher?.close();
      await stager.close();
      await bus.close();
      await tracer?.shutdown(2_000);
    },
  };
}

/** What `mur` says when its bus closed the connection for good (it refused it on reconnecting): nothing will come back to wait for. */
export function busClosedError(runtime: Pick<Runtime, 'bus'>, reason: string | undefined, hint: string, named = 'the bus'): MurmurError {
  return new MurmurError('E-BUS-005', `${named} at ${runtime.bus.description} closed mur's connection for good (${reason ?? 'no reason given'})`, { hint });
}
