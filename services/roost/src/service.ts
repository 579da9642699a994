import path from 'node:path';
import type { Bus } from '@murmur/shared/bus';
import { type Log, loopbackHostGuard, topics } from '@murmur/shared';
import { ArtifactStore } from '@murmur/shared/artifacts';
import { configuredTokenRefusal, globalStoreDir, keepStoreSwept } from '@murmur/shared/node';
import { requestedHost } from '@murmur/shared/service';
import { Hono } from 'hono';
import { registryRoutes } from './registry-routes.js';
import { sessionRoutes } from './session-routes.js';
import { RoostState } from './state.js';

export { registryRoutes, type RegistryRoutesOptions } from './registry-routes.js';
export { sessionRoutes, type SessionRoutesOptions } from './session-routes.js';
export { type FitOptions, type Misfit, findMisfit, scopeComponents } from './fit.js';

export interface RoostServiceOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /** The store roost serves; `MURMUR_ROOST_REGISTRY_PATH`, else the global store. */
  registryPath?: string;
  /**
   * Capsules anyone may spawn without a session credential (no parent, so no fit check);
   * `MURMUR_ROOST_SPAWN_ALLOW` (comma-separated) when not given.
   */
  spawnAllow?: readonly string[];
  /** The clock approvals and registrations are stamped with (milliseconds since the epoch). */
  now?: () => number;
  /**
   * The address roost's listener is bound to, for its host guard; `MURMUR_ROOST_HOST`, else
   * 127.0.0.1 (where a roost service process listens when not told otherwise).
   */
  listenHost?: string;
}

export interface RoostService {
  readonly http: Hono;
  readonly registryPath: string;
  /** The capsules roost lets anyone spawn without a credential. */
  readonly spawnAllow: readonly string[];
  close(): Promise<void>;
}

/** `a, b,,c` → `['a', 'b', 'c']`. */
export function parseSpawnAllowList(value: string | undefined): string[] {
  return [
    ...new Set(
      (value ?? '')
        .split(',')
        .map((entry) => entry.trim())
        .filter((entry) => entry !== ''),
    ),
  ];
}

/**
 * `MURMUR_ROOST_TOKEN`, the bearer publishing needs (none: anyone who reaches roost may publish).
 * A short one (or one no client sends alike) is refused at start, naming the setting, as a door's is: a token guessable over the
 * network would let anyone replace what every executor of the stack runs.
 */
function publishTokenOf(env: NodeJS.ProcessEnv): string | undefined {
  const token = env.MURMUR_ROOST_TOKEN?.trim() || undefined;
  const refusal =
    token === undefined
      ? undefined
      : configuredTokenRefusal(token, { setting: 'MURMUR_ROOST_TOKEN', what: 'publishing', hint: 'use a long random value, e.g. `openssl rand -hex 32`' });
  if (refusal) throw refusal;
  return token;
}

/**
 * roost: the registry over HTTP for a stack whose services do not share a disk, and delegation's
 * referee: sessions register and get a credential, a session asks `POST /spawn` for an approval
 * to spawn a child that fits inside it, and the child registers with that approval. Sessions and
 * approvals live in the bus key-value bucket `murmur-roost`: over NATS (JetStream) a roost that
 * restarts loses none of them.
 */
export function startRoostService(options: RoostServiceOptions): RoostService {
  const env = options.env ?? process.env;
  const registryPath = path.resolve(options.registryPath ?? (env.MURMUR_ROOST_REGISTRY_PATH?.trim() || globalStoreDir(env)));
  // Named without its path: where roost keeps its files is roost's own, not its publishers'.
  const store = new ArtifactStore(registryPath, 'global', { shownAs: 'the store roost serves' });
  // A roost killed mid-publish leaves its temporary files in the registry: swept a day later.
  const stopSweeping = keepStoreSwept(registryPath, options.log);
  const spawnAllow = options.spawnAllow
    ? [...new Set(options.spawnAllow.map((name) => name.trim()).filter((name) => name !== ''))]
    : parseSpawnAllowList(env.MURMUR_ROOST_SPAWN_ALLOW);
  const state = new RoostState(options.bus, options.log);
  // Opened now so a bus without key-value support is reported at start; requests retry the open.
  state
    .open()
    .catch((error: unknown) =>
      options.log.warn(
        { err: error, bus: options.bus.description },
        "roost's key-value bucket is not available yet; session and spawn requests will fail until it is",
      ),
    );
  const http = new Hono();
  // Nothing calls roost from a web page: `mur` and the services send no `Origin`, and every
  // browser sends one with any request that is not a GET. Without this, any page the operator
  // opened could publish to a roost started without a token — a text/plain POST needs no CORS
  // preflight, and roost answers for whatever name its host is reached by.
  http.use('*', async (context, next) => {
    const { method } = context.req;
    const origin = context.req.header('origin');
    if (method === 'GET' || method === 'HEAD' || origin === undefined) return next();
    return context.json({ error: `roost takes no ${method} from a web page (this one came from ${origin.slice(0, 80)})`, code: 'E-ROOST-001' }, 403);
  });
  // A roost on loopback (or published there: MURMUR_ROOST_PUBLIC_URL) answers only for loopback
  // names and MURMUR_ROOST_HOSTS: otherwise a page of any site that points a name it owns at
  // 127.0.0.1 reads the registry's index and archives as its own (DNS rebinding).
  const listenHost = options.listenHost ?? (env.MURMUR_ROOST_HOST?.trim() || '127.0.0.1');
  const hostGuard = loopbackHostGuard(
    `http://${listenHost.includes(':') ? `[${listenHost}]` : listenHost}`,
    env.MURMUR_ROOST_PUBLIC_URL?.trim() || undefined,
    env.MURMUR_ROOST_HOSTS,
  );
  if (hostGuard)
    http.use('*', async (context, next) => {
      const host = requestedHost(context);
      if (hostGuard(host)) return next();
      return context.json(
        {
          error: `roost answers only for localhost and the names in MURMUR_ROOST_HOSTS; a request for '${(host ?? '').slice(0, 80)}' is refused (a web page reaching it through a name of its own: DNS rebinding)`,
          code: 'E-ROOST-002',
          hint: 'reach roost as localhost or 127.0.0.1; a roost meant to be reached by another name is given it in MURMUR_ROOST_HOSTS',
        },
        421,
      );
    });
  const token = publishTokenOf(env);
  http.route('/', registryRoutes({ store, publishToken: token, log: options.log }));
  http.route('/', sessionRoutes({ state, store, spawnAllow, registrationToken: token, now: options.now ?? Date.now, log: options.log }));
  // A route, not `notFound`: roost's routes are mounted in the process's app beside /health
  // (`service-process.ts`, `mur roost`), which keeps its own not-found answer, a bare text 404.
  http.all('*', (context) => context.json({ error: `roost has no ${context.req.method} ${context.req.path.slice(0, 200)}`, code: 'E-ROOST-002' }, 404));
  // A session's runtime deregisters it when it ends; one whose executor died cannot, and its record
  // and credential would stay for ever. Every end the bus carries (the watcher announces those of a
  // lost executor's sessions) forgets the session here too: a second deregistration is nothing.
  const ends = options.bus.subscribe(topics.sessionEnded, (ended) => {
    state
      .forgetSession(ended.session_id)
      .then((forgot) => {
        // Most often the runtime's own deregistration is still on its way: not worth more than a debug line.
        if (forgot) options.log.debug({ session_id: ended.session_id }, 'an ended session forgotten');
      })
      .catch((error: unknown) => options.log.warn({ session_id: ended.session_id, err: error }, 'could not forget an ended session'));
  });
  return {
    http,
    registryPath,
    spawnAllow,
    close: async () => {
      stopSweeping();
      ends.unsubscribe();
    },
  };
}
