import { MurmurError } from './errors.js';
import type { ServiceName } from './events.js';
import { FETCH_BLOCKED_PORT, FETCH_BLOCKED_PORTS } from './fetch-failure.js';

/** The port each service listens on unless `MURMUR_<SERVICE>_PORT` says otherwise (0: any free port). */
export const SERVICE_DEFAULT_PORTS: Readonly<Record<ServiceName, number>> = { roost: 7700, stager: 7710, executor: 7720, door: 7730, watcher: 7740 };

/**
 * The port `service` listens on by the settings in `env`, as another process on this machine
 * reads them: undefined when it picks a free one (0) or its setting is not a port (that service
 * refuses to start, saying so).
 */
export function servicePortIn(env: NodeJS.ProcessEnv, service: ServiceName): number | undefined {
  try {
    const port = servicePort(env, service);
    return port === 0 ? undefined : port;
  } catch {
    return undefined;
  }
}

/** The port `service` listens on by `MURMUR_<SERVICE>_PORT` in `env`, else its default (0: any free port); refused, naming the setting, when it is not a port. */
export function servicePort(env: NodeJS.ProcessEnv, service: ServiceName): number {
  const setting = `MURMUR_${service.toUpperCase()}_PORT`;
  return portFromEnv(env[setting], SERVICE_DEFAULT_PORTS[service], setting);
}

/**
 * A port from the environment or a flag (`source` names which): a whole number 0–65535, or the
 * fallback. A service listens on it for HTTP clients, so none that fetch clients refuse
 * (`FETCH_BLOCKED_PORTS`).
 */
export function portFromEnv(value: string | undefined, fallback: number, source = 'the port'): number {
  const trimmed = value?.trim();
  if (!trimmed) return fallback;
  const port = Number(trimmed);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new MurmurError('E-IO-003', `invalid ${source}: '${trimmed}' is not a port number (0-65535)`, {
      path: source,
      hint: 'give a whole number from 0 to 65535 (0 picks a free port)',
    });
  }
  if (FETCH_BLOCKED_PORTS.has(port)) {
    throw new MurmurError('E-IO-003', `invalid ${source}: ${port} is ${FETCH_BLOCKED_PORT}`, {
      path: source,
      hint: `choose another port (0 picks a free one): browsers, JavaScript clients and mur itself could not reach a service on ${port}`,
    });
  }
  return port;
}
