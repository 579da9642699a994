import path from 'node:path';
import { type DashboardTimeline, MurmurError, SESSION_LOCATIONS_BUCKET, SessionLocationSchema, type TimelineEntry } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { askExecutor, refuseRemovedWorkdir, sessionFileChunks, traceRecordLines } from '@murmur/shared/node';
import type { TraceLocation } from './board.js';

/**
 * A session's trace as a timeline: `trace.jsonl` read through the executor that holds the session
 * (`executor.<id>.files`, as `mur files` reads it), and each line projected onto a few known
 * fields. The projection is an allow-list, not a filter: a field is shown only if it is named here,
 * and only as a count, a name, a state or a duration — a tool call's `input` and `output`, a shell
 * command's arguments, a prompt, a path or a URL's path and query never appear, whatever a trace
 * (which the guest's own workdir holds, and a guest could rewrite) contains.
 */

/** The most of a trace the dashboard reads; a longer one is shown from its start, marked truncated. */
const TRACE_LIMIT_BYTES = 4 * 1024 * 1024;
/**
 * The most entries a timeline holds (a page shows a few hundred at most); a trace of more is
 * marked truncated, and no line past the one after the last is parsed. 4 MiB of the shortest
 * lines made 220 000 entries, 20 MB of JSON and two seconds of the watcher's only thread, for
 * every request of a page that asks again on each change.
 */
export const TIMELINE_ENTRIES = 2_000;

/** Where the session's trace is: from the board, else from the executor's record in `murmur-sessions`. */
export async function locateTrace(bus: Bus, sessionId: string, known: TraceLocation | undefined): Promise<TraceLocation> {
  if (known) return known;
  const raw = await (await bus.keyValue(SESSION_LOCATIONS_BUCKET)).get(`session.${sessionId}`);
  const parsed = raw === undefined ? undefined : SessionLocationSchema.safeParse(JSON.parse(raw));
  if (!parsed?.success) throw new MurmurError('E-SES-001', `no session '${sessionId}' is known to this watcher or on the bus`, { path: sessionId });
  refuseRemovedWorkdir(parsed.data);
  // Never guessed: under a `--workdir` the workdir's own `trace.jsonl` is one its guest wrote.
  if (parsed.data.trace_file === undefined)
    throw new MurmurError('E-SES-001', `the record of where session '${sessionId}' lives does not say where its trace is`, {
      path: sessionId,
      hint: 'its executor is older than this watcher; mur files lists the session’s workdir',
    });
  return { executorId: parsed.data.executor_id, traceFile: parsed.data.trace_file };
}

export async function readTimeline(bus: Bus, sessionId: string, location: TraceLocation): Promise<DashboardTimeline> {
  const holder = { executor_id: location.executorId, session_id: sessionId };
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    const first = await askExecutor(bus, holder, { path: location.traceFile });
    if (first.type !== 'file') throw new MurmurError('E-IO-003', `the trace of session ${sessionId} is not a file`, { path: location.traceFile });
    size = first.size;
    for await (const chunk of sessionFileChunks(bus, holder, location.traceFile, { first, limitBytes: TRACE_LIMIT_BYTES })) chunks.push(chunk);
  } catch (error) {
    // A session that has written no trace yet has an empty timeline, not an error.
    if (error instanceof MurmurError && error.code === 'E-IO-001') return { session_id: sessionId, entries: [], truncated: false };
    throw error;
  }
  const text = Buffer.concat(chunks).subarray(0, TRACE_LIMIT_BYTES).toString('utf8');
  // A slice may end inside a line: the reader skips what is not a whole record.
  const records = traceRecordLines(text, { most: TIMELINE_ENTRIES }).records;
  const entries = records.slice(0, TIMELINE_ENTRIES).map(({ record }) => timelineEntry(record));
  return { session_id: sessionId, entries, truncated: size > TRACE_LIMIT_BYTES || records.length > TIMELINE_ENTRIES };
}

const number = (value: unknown): number | null => (typeof value === 'number' && Number.isFinite(value) ? value : null);
/** A name as the trace gives it, cut to a length a line can show (a name, never a sentence). */
const name = (value: unknown): string | null => (typeof value === 'string' && value !== '' ? value.slice(0, 80) : null);
const bytes = (value: unknown): string => `${number(value) ?? 0} B`;
const joined = (...parts: Array<string | null | false>): string => parts.filter((part): part is string => typeof part === 'string' && part !== '').join(' · ');

/** A URL's scheme and authority, or a `host:port`: never its path or query. */
function authority(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  try {
    // A `host:port` (a sealed sandbox's connection) would parse as a URL of scheme `host`.
    if (!value.includes('://')) throw new Error('not a URL');
    const url = new URL(value);
    return `${url.protocol}//${url.host}`;
  } catch {
    return value.split(/[/?#\s]/, 1)[0]?.slice(0, 120) || null;
  }
}

/** One trace line, projected: the fields each event type is known to have, and nothing else. */
export function timelineEntry(event: Record<string, unknown>): TimelineEntry {
  const type = name(event.event_type) ?? 'unknown';
  const base = { at: number(event.timestamp) ?? 0, type, turn: number(event.turn), duration_ms: number(event.duration_ms) };
  const entry = (label: string, detail: string, outcome: TimelineEntry['outcome'] = null): TimelineEntry => ({ ...base, label, detail, outcome });
  switch (type) {
    case 'session_start':
      return entry(
        'session start',
        joined(
          name(event.model) && `model ${name(event.model)}`,
          number(event.max_turns) !== null && `max ${number(event.max_turns)} turns`,
          Array.isArray(event.tools_declared) && event.tools_declared.length > 0 && `tools ${event.tools_declared.map(name).filter(Boolean).join(', ')}`,
          name(event.containment_achieved) && `containment ${name(event.containment_achieved)}`,
        ),
      );
    case 'task_start':
      return entry(
        `task ${name(event.task_id) ?? ''}`.trim(),
        joined(name(event.source), number(event.message_parts_bytes) !== null && bytes(event.message_parts_bytes)),
      );
    case 'inference':
      // The trace counts turns from 0; the task's status (`inference turn N`) from 1, as the page does.
      return entry(
        `inference turn ${(number(event.turn) ?? -1) + 1 || '?'}`,
        joined(
          `${number(event.input_tokens) ?? 0} in / ${number(event.output_tokens) ?? 0} out tokens`,
          name(event.decision),
          name(event.tool_name) && `tool ${name(event.tool_name)}`,
          name(event.origin),
        ),
        event.decision === 'error' ? 'error' : 'ok',
      );
    case 'tool_call':
    case 'skill_call': {
      const status = name(event.status);
      return entry(
        `${type === 'tool_call' ? 'tool' : 'skill'} ${name(event.tool_name) ?? name(event.skill_name) ?? '?'}`,
        joined(number(event.input_bytes) !== null && `input ${bytes(event.input_bytes)}`, `output ${bytes(event.output_bytes)}`, status),
        status === null ? null : status === 'ok' || status === 'success' ? 'ok' : 'error',
      );
    }
    case 'shell': {
      const exitCode = number(event.exit_code);
      const binary = name(event.binary);
      return entry(
        `shell ${binary ? path.basename(binary) : '?'}`,
        joined(
          exitCode !== null && `exit ${exitCode}`,
          `stdout ${bytes(event.stdout_bytes)}`,
          `stderr ${bytes(event.stderr_bytes)}`,
          name(event.resource_limit),
        ),
        exitCode === 0 ? 'ok' : 'error',
      );
    }
    case 'egress': {
      const decision = name(event.decision);
      return entry(
        joined(`egress ${name(event.kind) ?? ''}`.trim(), authority(event.target)),
        joined(
          decision,
          name(event.grant) && `grant ${name(event.grant)}`,
          name(event.code),
          number(event.status) !== null && `status ${number(event.status)}`,
        ),
        decision === 'allowed' ? 'ok' : decision === 'denied' ? 'denied' : decision === null ? null : 'error',
      );
    }
    case 'a2a_send':
      return entry(joined('a2a send', authority(event.peer_url)), joined(name(event.task_id)));
    // Never the delegation's id, which is its completion's credential: the child names it.
    case 'delegation_started':
      return entry(`delegation ${name(event.capsule) ?? ''}`.trim(), joined(name(event.child_session_id) && `child ${name(event.child_session_id)}`));
    case 'delegation_completed':
      return entry('delegation completed', joined(name(event.child_session_id) && `child ${name(event.child_session_id)}`, name(event.origin)), 'ok');
    case 'task_end': {
      const status = name(event.exit_status);
      return entry(
        `task end ${status ?? ''}`.trim(),
        joined(
          `${number(event.turns) ?? 0} turns`,
          `${number(event.tool_calls) ?? 0} tool calls`,
          `${number(event.input_tokens) ?? 0} in / ${number(event.output_tokens) ?? 0} out tokens`,
        ),
        status === 'ok' || status === 'completed' ? 'ok' : 'error',
      );
    }
    case 'session_end': {
      const status = name(event.exit_status);
      const error = event.error as { code?: unknown } | undefined;
      return entry(
        `session end ${status ?? ''}`.trim(),
        joined(`${number(event.total_turns) ?? 0} turns`, `${number(event.total_tool_calls) ?? 0} tool calls`, name(error?.code)),
        status === 'ok' ? 'ok' : 'error',
      );
    }
    case 'compaction':
      return entry('compaction', joined(`${number(event.tokens_before) ?? 0} → ${number(event.tokens_after) ?? 0} tokens`));
    case 'resource_limit':
      return entry(`resource limit ${name(event.limit) ?? ''}`.trim(), '', 'error');
    default:
      return entry(type.replaceAll('_', ' '), '');
  }
}
