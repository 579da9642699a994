import { appendFileSync, closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import path from 'node:path';
import { appendBeneath, mkdirBeneath, openAppendBeneath, readTailBeneath, readTailOfFile } from '@murmur/shared/node';
import { oneLine } from '@murmur/shared/one-line';

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
 * What a writer does with a record it cannot write: it is dropped, and this is told once per file.
 * The executor's (`RecordsOutsideSandbox.refused`) logs it; the capsule host's tells the launcher.
 */
export type RecordRefused = (file: string, error: Error) => void;

/**
 * Runs a write; a failure is said once per file and the write dropped. Any failure: a link or
 * FIFO refused (`E-SES-004`), and a disk the guest filled (`ENOSPC`) alike — in the executor these
 * writes run in its event handlers, where a throw ends every session on it; in the capsule host,
 * in its handler of the guest's messages, where a throw ended the session "without a result" and
 * said nothing of the disk.
 */
function guarded(refused: RecordRefused, file: string, state: { refused: boolean }, write: () => void): void {
  if (state.refused) return;
  try {
    write();
  } catch (error) {
    state.refused = true;
    refused(file, error instanceof Error ? error : new Error(String(error)));
  }
}

function makeDirectory(dir: string, outside: RecordsOutsideSandbox | undefined, state: { refused: boolean }, refused?: RecordRefused): void {
  if (outside) {
    if (path.resolve(dir) !== path.resolve(outside.root)) guarded(outside.refused, dir, state, () => mkdirBeneath(outside.root, dir));
  } else if (refused) guarded(refused, dir, state, () => mkdirSync(dir, { recursive: true }));
  else mkdirSync(dir, { recursive: true });
}

/**
 * One record file, appended a whole line at a time. A `held` one keeps the descriptor its first
 * line opened until `close`: a launch writes a dozen lines, and opening each beneath the workdir
 * walks every directory on the way. Whoever holds one closes it when its session ends (an executor
 * outlives thousands of sessions); a line that still comes after, and every line of a file not
 * held, is appended with a descriptor of its own, opened and closed for it.
 */
class RecordFile {
  private fd: number | undefined;
  private closed: boolean;
  /** Opens the file for appending, and appends once with a descriptor of its own: beneath the workdir's root from outside the sandbox. */
  private readonly open: () => number;
  private readonly appendOnce: (text: string) => void;

  private readonly refused: RecordRefused | undefined;

  /**
   * `state` is shared with whatever made the file's directory: a refusal there stops the writes
   * too. A write that fails is dropped and told to `refused` (outside the sandbox, `outside`'s);
   * with neither, it throws.
   */
  constructor(
    readonly file: string,
    private readonly state: { refused: boolean },
    outside: RecordsOutsideSandbox | undefined,
    held: boolean,
    refused?: RecordRefused,
  ) {
    this.refused = outside?.refused ?? refused;
    this.closed = !held;
    this.open = outside ? () => openAppendBeneath(outside.root, file) : () => openSync(file, 'a');
    this.appendOnce = outside ? (text) => appendBeneath(outside.root, file, text) : (text) => appendFileSync(file, text);
  }

  append(text: string): void {
    const write = (): void => {
      if (this.closed) this.appendOnce(text);
      else {
        this.fd ??= this.open();
        writeSync(this.fd, text);
      }
    };
    if (this.refused) guarded(this.refused, this.file, this.state, write);
    else write();
  }

  close(): void {
    this.closed = true;
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

/** A session's `trace.jsonl`, in its session directory. */
export function traceFileIn(sessionDir: string): string {
  return path.join(sessionDir, 'trace.jsonl');
}

/**
 * A session's `trace.jsonl` as a path in its workdir, as a reader asks its executor for it:
 * `trace.jsonl` at the top of a workdir of its own, `.murmur/<session>/trace.jsonl` under a
 * `--workdir`, whose top is the guest's to write (a `trace.jsonl` there is one it made).
 */
export function traceFileInWorkdir(paths: { accessible: string; sessionDir: string }): string {
  return path.relative(paths.accessible, traceFileIn(paths.sessionDir));
}

/** Records only the executor writes (its policy's decisions): a host that sends one is not believed. */
const EXECUTOR_RECORDS = new Set(['egress', 'resource_limit']);

/** Where a session's trace records go: `TraceWriter` in the executor, the channel to it in the host (`ChannelTrace`). */
export interface TraceSink {
  write(eventType: string, fields: Record<string, unknown>): void;
}

/**
 * The session's records: `trace.jsonl` (one JSON object per line, each with `event_type`,
 * `session_id` and a Unix-millisecond `timestamp`; readers ignore keys and types they do not
 * know), written by the executor alone: its own records, and the host's as they arrive over its
 * channel, each sent as it was made.
 * Appends are synchronous and whole-line, so a reader never sees half an event.
 */
export class TraceWriter implements TraceSink {
  readonly file: string;
  private readonly state = { refused: false };
  private readonly records: RecordFile;

  constructor(
    sessionDir: string,
    private readonly sessionId: string,
    /** Told of every event after it is written: the session's spans are made from the same records. */
    private readonly observer?: (event: TraceRecord) => void,
    private readonly outside?: RecordsOutsideSandbox,
  ) {
    makeDirectory(sessionDir, outside, this.state);
    this.file = traceFileIn(sessionDir);
    this.records = new RecordFile(this.file, this.state, outside, true);
  }

  write(eventType: string, fields: Record<string, unknown>): void {
    const event = { event_type: eventType, session_id: this.sessionId, timestamp: Date.now(), ...fields };
    this.records.append(`${JSON.stringify(event)}\n`);
    this.observer?.(event);
  }

  /**
   * A record the host made (`ChannelTrace`), as the line it wrote, when it is one: one JSON object
   * with an `event_type` and a `timestamp`. Returns the record, or undefined for a line that is
   * not one, which is not written: the host runs a capsule's code, and the trace is what readers
   * trust. A record only the executor writes (`egress`, `resource_limit`) and a `session_start`
   * of another session are refused; other records' `session_id` is not held to this session's,
   * since upstream's `harness_session_forgotten` names the harness's session there. The observer
   * is not told: the caller decides what the host's records make.
   */
  appendHostLine(line: string): TraceRecord | undefined {
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      return undefined;
    }
    if (record === null || typeof record !== 'object' || Array.isArray(record)) return undefined;
    const { event_type, session_id, timestamp } = record as Record<string, unknown>;
    if (typeof event_type !== 'string' || typeof timestamp !== 'number' || !Number.isFinite(timestamp) || line.includes('\n')) return undefined;
    // What only the executor decides is never the host's to say, and a session starts as itself.
    if (EXECUTOR_RECORDS.has(event_type) || (event_type === 'session_start' && session_id !== this.sessionId)) return undefined;
    this.records.append(`${line}\n`);
    return record as TraceRecord;
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
      tail = this.outside ? readTailBeneath(this.outside.root, this.file, TOTALS_TAIL_BYTES) : readTailOfFile(this.file, TOTALS_TAIL_BYTES);
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

  /** The session has ended: the trace's descriptor is let go (see `RecordFile`). */
  close(): void {
    this.records.close();
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

/** One line of `trace.jsonl`: its type, session and Unix-ms timestamp, then the event's own fields. */
export type TraceRecord = { event_type: string; session_id: string; timestamp: number } & Record<string, unknown>;

/**
 * `logs/<name>` under the session directory, appended a line at a time. `held`: its descriptor is
 * kept from the first line until `close`, which its owner must call (see `RecordFile`).
 * `refused`: inside the sandbox, where a line that cannot be written goes (see `RecordRefused`).
 * `oneLine`: for a log of the runtime's own lines (`bootstrap.log`), which quote strangers' text —
 * a provider's error, a manifest's value —: each is kept on its one line (`oneLine`), so none adds
 * a line of its choosing (or a terminal's escape) to what an operator reads as the runtime's.
 */
export class LogFile {
  readonly file: string;
  private readonly state = { refused: false };
  private readonly records: RecordFile;
  private readonly oneLine: boolean;

  constructor(sessionDir: string, name: string, outside?: RecordsOutsideSandbox, options: { held?: boolean; refused?: RecordRefused; oneLine?: boolean } = {}) {
    this.oneLine = options.oneLine ?? false;
    const dir = path.join(sessionDir, 'logs');
    makeDirectory(dir, outside, this.state, options.refused);
    this.file = path.join(dir, name);
    this.records = new RecordFile(this.file, this.state, outside, options.held ?? false, options.refused);
  }

  line(text: string): void {
    const line = text.endsWith('\n') ? text.slice(0, -1) : text;
    this.raw(`${this.oneLine ? oneLine(line) : line}\n`);
  }

  raw(text: string): void {
    this.records.append(text);
  }

  /** A held descriptor is let go; a line that still comes is appended alone (see `RecordFile`). */
  close(): void {
    this.records.close();
  }
}
