import { cutLongStrings } from '../event-fit.js';
import type { TraceRecord, TraceSink } from '../records.js';

/**
 * The host's side of the session's trace: each record goes to the executor as the line it is,
 * and the executor alone writes `trace.jsonl`, which the sandbox sees read-only (`recordBinds`).
 * A capsule cannot rewrite what it did, even through a host it broke into: it could only add
 * records, each checked as one whole record.
 *
 * One message per record, written to the channel at once, as the file's append was one write: a
 * request that follows a record (an egress span's parent) reaches the executor after it. A host
 * killed while the channel is backed up (the executor not reading) loses what it still held.
 */
export class ChannelTrace implements TraceSink {
  constructor(
    private readonly sessionId: string,
    private readonly send: (line: string) => void,
  ) {}

  write(eventType: string, fields: Record<string, unknown>): void {
    const record: TraceRecord = { event_type: eventType, session_id: this.sessionId, timestamp: Date.now(), ...fields };
    this.send(fittedLine(record));
  }
}

/** The longest trace line the host sends whole: inside the host's 8 MiB message however much its JSON escaping doubles it. */
export const TRACE_LINE_MAX_CHARS = 2 * 1024 * 1024;

/**
 * `record` as one line that fits `TRACE_LINE_MAX_CHARS`. Past it, its long strings are cut, each
 * saying so: every other field (a tool call's name, status and duration) stays, so readers still
 * read the record. Many strings each under the cut (a tool input of forty 250 kB strings) are cut
 * harder; and a record that still does not fit (a huge array of short strings) keeps only its short
 * top-level fields and says what was left out — a record, never a line the channel refuses.
 */
function fittedLine(record: TraceRecord): string {
  const line = JSON.stringify(record);
  if (line.length <= TRACE_LINE_MAX_CHARS) return line;
  for (const budget of [TRACE_LINE_MAX_CHARS, TRACE_LINE_MAX_CHARS / 64]) {
    const cut = JSON.stringify(cutLongStrings(record, budget, 'too long for the trace'));
    if (cut.length <= TRACE_LINE_MAX_CHARS) return cut;
  }
  const kept = Object.entries(record).filter(([, value]) => value === null || (typeof value !== 'object' && String(value).length <= 1024));
  const left = Object.keys(record).filter((key) => !kept.some(([name]) => name === key));
  return JSON.stringify({ ...Object.fromEntries(kept), trace_cut: `fields left out, too large for the trace: ${left.join(', ')}` });
}
