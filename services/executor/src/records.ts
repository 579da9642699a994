import { appendFileSync, closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import path from 'node:path';

/**
 * The session's records: `trace.jsonl` (one JSON object per line, each with `event_type`,
 * `session_id` and a Unix-millisecond `timestamp`; readers ignore keys and types they do not
 * know) and the plain-text logs under `logs/`. Appends are synchronous and whole-line, so a
 * reader never sees half an event, and a host that is killed mid-session leaves every event it
 * wrote intact.
 */
export class TraceWriter {
  readonly file: string;
  /** Opened once for appending: each event is one write on it, whole, as with appendFileSync. */
  private fd: number | undefined;
  private closed = false;

  constructor(
    sessionDir: string,
    private readonly sessionId: string,
    /** Told of every event after it is written: the session's spans are made from the same records. */
    private readonly observer?: (event: TraceRecord) => void,
  ) {
    mkdirSync(sessionDir, { recursive: true });
    this.file = path.join(sessionDir, 'trace.jsonl');
  }

  write(eventType: string, fields: Record<string, unknown>): void {
    const event = { event_type: eventType, session_id: this.sessionId, timestamp: Date.now(), ...fields };
    const line = `${JSON.stringify(event)}\n`;
    if (this.closed) appendFileSync(this.file, line);
    else {
      this.fd ??= openSync(this.file, 'a');
      writeSync(this.fd, line);
    }
    this.observer?.(event);
  }

  /**
   * The session has ended: its descriptor is closed now rather than never. An executor outlives
   * thousands of sessions, and each that had an egress decision kept one open for the executor's
   * life (and its trace file's space, were the workdir deleted). A record that still comes after
   * (a late egress decision) is appended with a descriptor of its own, opened and closed for it.
   */
  close(): void {
    this.closed = true;
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

/** One line of `trace.jsonl`: its type, session and Unix-ms timestamp, then the event's own fields. */
export type TraceRecord = { event_type: string; session_id: string; timestamp: number } & Record<string, unknown>;

/** `logs/<name>` under the session directory, appended a line at a time. */
export class LogFile {
  readonly file: string;

  constructor(sessionDir: string, name: string) {
    const dir = path.join(sessionDir, 'logs');
    mkdirSync(dir, { recursive: true });
    this.file = path.join(dir, name);
  }

  line(text: string): void {
    appendFileSync(this.file, text.endsWith('\n') ? text : `${text}\n`);
  }

  raw(text: string): void {
    appendFileSync(this.file, text);
  }
}
