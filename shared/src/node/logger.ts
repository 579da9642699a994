import { pino, type Logger } from 'pino';

/**
 * A service's logger: one JSON line per event on stderr, so stdout stays free for what a command
 * promises to print there (the `--json` launch line). `MURMUR_LOG_LEVEL` tunes it.
 */
export function createLogger(service: string, env: NodeJS.ProcessEnv = process.env): Logger {
  return pino(
    {
      name: service,
      level: env.MURMUR_LOG_LEVEL?.trim() || 'info',
      base: { service, pid: process.pid },
    },
    pino.destination({ fd: 2, sync: true }),
  );
}
