import { pino, type Logger } from 'pino';

/**
 * A logger: one JSON line per event. A service process writes to stdout (where a container's logs
 * are read); `mur` writes to stderr, so its stdout stays free for what a command promises to print
 * there (the `--json` launch line). `MURMUR_LOG_LEVEL` tunes it.
 */
export function createLogger(service: string, env: NodeJS.ProcessEnv = process.env, stream: 'stdout' | 'stderr' = 'stderr'): Logger {
  return pino(
    {
      name: service,
      level: env.MURMUR_LOG_LEVEL?.trim() || 'info',
      base: { service, pid: process.pid },
    },
    pino.destination({ fd: stream === 'stdout' ? 1 : 2, sync: true }),
  );
}
