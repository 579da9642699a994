/**
 * The logging surface shared code needs. pino's logger satisfies it; so does a test's recorder.
 * Kept this small so `@murmur/shared`'s contracts do not drag a logger into every consumer.
 */
export interface Log {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

export const silentLog: Log = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};
