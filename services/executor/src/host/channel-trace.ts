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
    let line = JSON.stringify(record);
    // Past what one message carries, its long strings are cut, each saying so: every other field
    // (a tool call's name, status and duration) stays, so readers still read the record.
    if (line.length > TRACE_LINE_MAX_CHARS) line = JSON.stringify(cutLongStrings(record, TRACE_LINE_MAX_CHARS, 'too long for the trace'));
    // Whatever is left too long (a record of many long fields) is refused by the channel, said on stderr.
    this.send(line);
  }
}

/** The longest trace line the host sends whole: inside the host's 8 MiB message however much its JSON escaping doubles it. */
export const TRACE_LINE_MAX_CHARS = 2 * 1024 * 1024;
