import type { Log } from '@murmur/shared';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface LogEntry {
  readonly level: LogLevel;
  readonly fields: Readonly<Record<string, unknown>>;
  readonly message: string | undefined;
}

/**
 * A `Log` that keeps every entry, so a test can assert what was logged (a refused payload names
 * its subject, a failing handler is reported) instead of only that nothing crashed.
 */
export class RecordingLog implements Log {
  readonly entries: LogEntry[] = [];

  debug(fields: object, message?: string): void {
    this.record('debug', fields, message);
  }

  info(fields: object, message?: string): void {
    this.record('info', fields, message);
  }

  warn(fields: object, message?: string): void {
    this.record('warn', fields, message);
  }

  error(fields: object, message?: string): void {
    this.record('error', fields, message);
  }

  /** Entries at `warn`. */
  get warnings(): LogEntry[] {
    return this.entries.filter((entry) => entry.level === 'warn');
  }

  /** Entries at `error`. */
  get errors(): LogEntry[] {
    return this.entries.filter((entry) => entry.level === 'error');
  }

  /** Entries at `level` whose fields carry `subject`. */
  about(level: LogLevel, subject: string): LogEntry[] {
    return this.entries.filter((entry) => entry.level === level && entry.fields.subject === subject);
  }

  clear(): void {
    this.entries.length = 0;
  }

  private record(level: LogLevel, fields: object, message: string | undefined): void {
    this.entries.push({ level, fields: { ...(fields as Record<string, unknown>) }, message });
  }
}
