/**
 * The trace records a session's spans are made of, and the fields each span reads
 * (`session-telemetry.ts`). The capsule host forwards only these, and only these fields, to the
 * executor: a `session_start` carries the whole grant set, which no span needs, and every byte
 * crosses the host's channel once per task.
 */
export const SPAN_RECORD_FIELDS: Readonly<Record<string, readonly string[]>> = {
  a2a_task_received: ['traceparent_from_caller'],
  session_start: [],
  inference: ['turn', 'input_tokens', 'output_tokens', 'decision', 'tool_name', 'origin', 'model'],
  tool_call: ['tool_name', 'input_bytes', 'output_bytes', 'duration_ms', 'status'],
  shell: ['command', 'exit_code', 'duration_ms'],
  compaction: ['tokens_before', 'tokens_after'],
  session_end: ['exit_status'],
};

/** `record` cut to what its span reads, or undefined when no span is made of it. */
export function spanRecordOf<R extends { event_type: string; session_id: string; timestamp: number }>(record: R & Record<string, unknown>): R | undefined {
  const fields = SPAN_RECORD_FIELDS[record.event_type];
  if (!fields) return undefined;
  const kept: Record<string, unknown> = { event_type: record.event_type, session_id: record.session_id, timestamp: record.timestamp };
  for (const field of fields) if (record[field] !== undefined) kept[field] = record[field];
  return kept as R;
}
