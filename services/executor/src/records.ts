import { appendFileSync, closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import path from 'node:path';
import { TAIL_READ, appendBeneath, mkdirBeneath, openAppendBeneath, readTailBeneath, readTailOf } from '@murmur/shared/node';

/**
 * Where records are written from. Inside the sandbox (the capsule host) a path is a path: a link
 * the guest made points inside its own view. The executor writes the same records from outside
 * it, into the workdir the guest can write, so it walks from the workdir's root without following
 * anything (`appendBeneath`), and a record the guest made unwritable — a link, a FIFO in its place —
 * is dropped and said once (`refused`), never followed and never a crash of the executor.
 */
export interface RecordsOutsideSandbox {
  /** The workdir's bind root, which the guest cannot replace. */
  root: string;
  refused(file: string, error: Error): void;
}

/**
 * Runs a write beneath the root; a failure is said once per file and the write dropped. Any
 * failure: a link or FIFO refused (`E-SES-004`), and a disk the guest filled (`ENOSPC`) alike —
 * these writes run in the executor's event handlers, where a throw ends every session on it.
 */
function guarded(outside: RecordsOutsideSandbox, file: string, state: { refused: boolean }, write: () => void): void {
  if (state.refused) return;
  try {
    write();
  } catch (error) {
    state.refused = true;
    outside.refused(file, error instanceof Error ? error : new Error(String(error)));
  }
}

function makeDirectory(dir: string, outside: RecordsOutsideSandbox | undefined, state: { refused: boolean }): void {
  if (!outside) mkdirSync(dir, { recursive: true });
  else if (path.resolve(dir) !== path.resolve(outside.root)) guarded(outside, dir, state, () => mkdirBeneath(outside.root, dir));
}

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

  private readonly state = { refused: false };

  constructor(
    sessionDir: string,
    private readonly sessionId: string,
    /** Told of every event after it is written: the session's spans are made from the same records. */
    private readonly observer?: (event: TraceRecord) => void,
    private readonly outside?: RecordsOutsideSandbox,
  ) {
    makeDirectory(sessionDir, outside, this.state);
    this.file = path.join(sessionDir, 'trace.jsonl');
  }

  write(eventType: string, fields: Record<string, unknown>): void {
    const event = { event_type: eventType, session_id: this.sessionId, timestamp: Date.now(), ...fields };
    const line = `${JSON.stringify(event)}\n`;
    const outside = this.outside;
    if (!outside) {
      if (this.closed) appendFileSync(this.file, line);
      else {
        this.fd ??= openSync(this.file, 'a');
        writeSync(this.fd, line);
      }
    } else
      guarded(outside, this.file, this.state, () => {
        if (this.closed) appendBeneath(outside.root, this.file, line);
        else {
          this.fd ??= openAppendBeneath(outside.root, this.file);
          writeSync(this.fd, line);
        }
      });
    this.observer?.(event);
  }

  /**
   * The totals of the last `session_end` the trace holds (an agent's host writes one after each
   * task, the whole session's so far), or zeros when there is none: what the executor's own
   * `session_end` carries for a host that could not close its trace (stopped, crashed, killed),
   * so that the last one, which readers take as the session's, does not drop what it did. Only
   * the file's tail is read, beneath the workdir's root when there is one, and only
   * non-negative whole numbers are taken from it: the file is in the guest's workdir.
   */
  lastTotals(): SessionTotals {
    const totals: SessionTotals = { total_turns: 0, total_input_tokens: 0, total_output_tokens: 0, total_tool_calls: 0, total_shell_calls: 0 };
    let tail: string | undefined;
    try {
      tail = this.outside ? readTailBeneath(this.outside.root, this.file, TOTALS_TAIL_BYTES) : readTail(this.file, TOTALS_TAIL_BYTES);
    } catch {
      // Read in the executor's handlers, where a throw would end every session: zeros instead.
      return totals;
    }
    const lines = (tail ?? '').split('\n');
    for (let index = lines.length - 1; index >= 0; index -= 1) {
      const line = lines[index] as string;
      if (!line.includes('"session_end"')) continue;
      let event: Record<string, unknown>;
      try {
        event = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if (event === null || typeof event !== 'object' || event.event_type !== 'session_end') continue;
      for (const key of Object.keys(totals) as Array<keyof SessionTotals>) {
        const value = event[key];
        if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) totals[key] = value;
      }
      break;
    }
    return totals;
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

/** How much of the file `lastTotals` reads: far more than a few task ends, never the whole of a long trace. */
const TOTALS_TAIL_BYTES = 256 * 1024;

/** A `session_end`'s totals. */
export interface SessionTotals {
  total_turns: number;
  total_input_tokens: number;
  total_output_tokens: number;
  total_tool_calls: number;
  total_shell_calls: number;
}

/** `readTailBeneath` for a trace with no sandbox around it: the same refusals, by path. */
function readTail(file: string, maxBytes: number): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, TAIL_READ);
  } catch {
    return undefined;
  }
  return readTailOf(fd, maxBytes);
}

/** One line of `trace.jsonl`: its type, session and Unix-ms timestamp, then the event's own fields. */
export type TraceRecord = { event_type: string; session_id: string; timestamp: number } & Record<string, unknown>;

/** `logs/<name>` under the session directory, appended a line at a time. */
export class LogFile {
  readonly file: string;
  private readonly state = { refused: false };

  constructor(
    sessionDir: string,
    name: string,
    private readonly outside?: RecordsOutsideSandbox,
  ) {
    const dir = path.join(sessionDir, 'logs');
    makeDirectory(dir, outside, this.state);
    this.file = path.join(dir, name);
  }

  line(text: string): void {
    this.raw(text.endsWith('\n') ? text : `${text}\n`);
  }

  raw(text: string): void {
    const outside = this.outside;
    if (!outside) appendFileSync(this.file, text);
    else guarded(outside, this.file, this.state, () => appendBeneath(outside.root, this.file, text));
  }
}
