import { constants, existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '../errors.js';
import { kindOf } from './small-text-file.js';
import { systemFailureCode, systemFailureHint } from './system-failure.js';
import { type TraceEvent, TraceEventSchema, isKnownTraceEventType } from '../trace-events.js';

/**
 * Reading a session's `trace.jsonl` without trusting it to be whole.
 *
 * A trace is read while it is written (a live session), after its writer was killed (a cut-off
 * last line), and by a reader older than the runtime that wrote it. So a line that is not a JSON
 * object, or is an event this reader knows with a field it needs missing or mistyped, is skipped
 * and reported by line number — never a failure of the whole read — and a line whose
 * `event_type` this reader does not know is passed over silently, as upstream §8 asks of readers.
 */

export interface SkippedLine {
  /** 1-based, as an editor counts. */
  line: number;
  reason: string;
}

export interface TraceRead {
  /** The events this reader knows, in file order. */
  events: TraceEvent[];
  /** The lines that could not be read as an event. */
  skipped: SkippedLine[];
}

/** A line that is a JSON object with an `event_type`, whatever its type: what every reader starts from. */
export interface TraceRecordLine {
  line: number;
  record: Record<string, unknown> & { event_type: string };
}

/**
 * The trace's lines as records, with those that are not one skipped and said why: not JSON (or
 * cut off, for a last line without its newline), not an object, no `event_type`.
 */
export function traceRecordLines(text: string, options: { most?: number } = {}): { records: TraceRecordLine[]; skipped: SkippedLine[] } {
  const records: TraceRecordLine[] = [];
  const skipped: SkippedLine[] = [];
  const lines = text.split('\n');
  const most = options.most ?? Number.POSITIVE_INFINITY;
  for (const [index, raw] of lines.entries()) {
    // One record past `most` says there are more; none after it is parsed.
    if (records.length > most) break;
    const line = raw.trim();
    if (line === '') continue;
    const skip = (reason: string): void => void skipped.push({ line: index + 1, reason });
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      skip(index === lines.length - 1 ? 'cut off (no newline at its end)' : 'not JSON');
      continue;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      skip('not a JSON object');
      continue;
    }
    if (typeof (value as { event_type?: unknown }).event_type !== 'string') {
      skip('no event_type');
      continue;
    }
    records.push({ line: index + 1, record: value as TraceRecordLine['record'] });
  }
  return { records, skipped };
}

export function parseTraceText(text: string): TraceRead {
  const events: TraceEvent[] = [];
  const { records, skipped } = traceRecordLines(text);
  for (const { line, record } of records) {
    const type = record.event_type;
    if (!isKnownTraceEventType(type)) continue;
    const parsed = TraceEventSchema.safeParse(record);
    if (parsed.success) events.push(parsed.data);
    else
      skipped.push({
        line,
        reason: `${type}: ${parsed.error.issues.map((issue) => `${issue.path.join('.') || 'event'} ${issue.message.toLowerCase()}`).join('; ')}`,
      });
  }
  skipped.sort((a, b) => a.line - b.line);
  return { events, skipped };
}

/** The most of a record file (`trace.jsonl`, `eval.jsonl`) `mur` reads: a long agent session's trace is a few MB. */
export const RECORD_FILE_MAX_BYTES = 256 * 1024 * 1024;

/**
 * A regular file read whole, as what it is: opened through no link at its end and without waiting
 * (a FIFO in its place would hold the reader until a writer came), judged by its descriptor, and
 * not read past `maxBytes`. What was found instead is said, for each caller to word: records in a
 * workdir its guest writes (`readRecordFile`), and those an executor keeps in its home.
 */
export type RegularFileRead =
  | { found: 'content'; content: Buffer }
  | { found: 'missing'; error: NodeJS.ErrnoException }
  | { found: 'link' }
  | { found: 'not-regular'; kind: string }
  | { found: 'oversized'; size: number }
  | { found: 'unreadable'; error: NodeJS.ErrnoException };

export async function readRegularFile(file: string, maxBytes: number): Promise<RegularFileRead> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const failure = error as NodeJS.ErrnoException;
    if (failure.code === 'ELOOP') return { found: 'link' };
    return failure.code === 'ENOENT' ? { found: 'missing', error: failure } : { found: 'unreadable', error: failure };
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) return { found: 'not-regular', kind: stat.isDirectory() ? 'a directory' : kindOf(stat) };
    if (stat.size > maxBytes) return { found: 'oversized', size: stat.size };
    const bytes = Buffer.alloc(stat.size);
    // Read until the size it had, or its end: a read may return less than asked (a network mount).
    let filled = 0;
    while (filled < stat.size) {
      const { bytesRead } = await handle.read(bytes, filled, stat.size - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return { found: 'content', content: bytes.subarray(0, filled) };
  } catch (error) {
    return { found: 'unreadable', error: error as NodeJS.ErrnoException };
  } finally {
    await handle.close();
  }
}

/**
 * A record file in a session's workdir, read whole (`readRegularFile`) — a workdir is its guest's
 * to write, so the name may be a link planted there (to a secret, to `/dev/zero`) or a FIFO: one
 * that is not a regular file, or is over `maxBytes`, is refused (`E-IO-003`) and never read. A
 * missing file is thrown as it was (`ENOENT`), for the caller to say what its absence means.
 */
export async function readRecordFile(file: string, maxBytes = RECORD_FILE_MAX_BYTES): Promise<string> {
  const read = await readRegularFile(file, maxBytes);
  switch (read.found) {
    case 'content':
      return read.content.toString('utf8');
    case 'missing':
    case 'unreadable':
      throw read.error;
    case 'link':
      throw new MurmurError('E-IO-003', `refused to read ${file}: it is a symbolic link, not the record file`, { path: file });
    case 'not-regular':
      throw new MurmurError('E-IO-003', `refused to read ${file}: it is not a regular file`, { path: file });
    case 'oversized':
      throw new MurmurError('E-IO-003', `refused to read ${file}: it is ${read.size} bytes, over the ${maxBytes} a record file may be`, { path: file });
  }
}

/**
 * What to do about a session directory without its trace: one holding only `out/` is where `mur
 * run` against a stack fetched the answer to, the records staying on the executor that ran it.
 */
function missingTraceHint(file: string): string {
  const dir = path.dirname(file);
  const session = path.basename(dir);
  if (session.startsWith('ses_') && existsSync(path.join(dir, 'out')))
    return `session ${session} ran on a stack's executor, which keeps its records: fetch the trace with 'mur files ${session} trace.jsonl --out <file>' (while the stack knows the session), then name that file`;
  return 'name a session whose workdir holds its trace.jsonl (@1 is the newest), or the path of a trace.jsonl';
}

/** The file read whole (`readRecordFile`); a missing file is `E-IO-001`, any other failure to read it `E-IO-003`. */
export async function readTraceFile(file: string): Promise<TraceRead> {
  let text: string;
  try {
    text = await readRecordFile(file);
  } catch (error) {
    if (error instanceof MurmurError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new MurmurError('E-IO-001', `trace file not found: ${file}`, { path: file, hint: missingTraceHint(file) });
    throw new MurmurError(systemFailureCode(error), `failed to read ${file}: ${(error as Error).message}`, {
      path: file,
      cause: error,
      hint: systemFailureHint(error),
    });
  }
  return parseTraceText(text);
}
