import { MurmurError, type TraceEvent, type TraceEventOf } from '@murmur/shared';

/**
 * One session's trace reduced to what `mur trace show|diff|report` print, as upstream reduces it.
 *
 * The totals are the last `session_end`'s (a task loop writes one per attempt, each cumulative),
 * and everything else is counted up to it too, so that the two agree: a session still working on a
 * task has written records past it (`eventsAfterEnd`), which counted against its totals made a
 * tool success rate of 200%. The identity is the last `session_start`'s. A trace without either is not a session this can
 * summarise (`E-TRC-001`: a session still running, or one that failed before it started).
 */

export interface CallRecord {
  turn: number;
  name: string;
  input: unknown;
  status: string;
  durationMs: number;
}

/** A read of a resource already read, with no call in between that may have changed it. */
export interface RedundantCall {
  turn: number;
  toolName: string;
  resource: string;
  priorTurn: number;
}

export interface TaskSummary {
  taskId: string;
  exitStatus: string;
  durationMs: number;
  turns: number;
  inputTokens: number;
  outputTokens: number;
  reopenCount: number;
}

export interface TraceSummary {
  sessionId: string;
  capsuleName: string;
  capsuleVersion: string;
  model: string | null;
  maxTurns: number | null;
  exitStatus: string;
  durationMs: number;
  totalTurns: number;
  inputTokens: number;
  outputTokens: number;
  toolCalls: number;
  toolOk: number;
  toolError: number;
  toolRecords: CallRecord[];
  toolLatenciesMs: number[];
  skillRecords: CallRecord[];
  redundant: RedundantCall[];
  /** `[turn, decision]` per inference, in file order. */
  inferences: Array<[number, string]>;
  shellCalls: number;
  shellExitCodes: Map<number, number>;
  shellLatenciesMs: number[];
  compaction: { turn: number; tokensBefore: number; tokensAfter: number } | undefined;
  reopens: Array<{ reopenNumber: number; hookName: string; reason: string }>;
  tasks: TaskSummary[];
  /** Events written after the last `session_end`, not counted: the session is still running, or its trace was cut short. */
  eventsAfterEnd: number;
}

export const mean = (values: number[]): number | undefined => (values.length === 0 ? undefined : values.reduce((sum, value) => sum + value, 0) / values.length);

export const toolSuccessRate = (summary: TraceSummary): number | undefined =>
  summary.toolCalls === 0 ? undefined : (100 * summary.toolOk) / summary.toolCalls;

export const perTurn = (total: number, summary: TraceSummary): number | undefined => (summary.totalTurns === 0 ? undefined : total / summary.totalTurns);

/** Where a tool's input conventionally names the resource it addresses, for tools that declare none. */
const PATH_FIELDS = ['path', 'file', 'file_path', 'filepath', 'filename'];

/** The tool's declared `resource_id`, else a path field of its input (top level, key in any case). */
function resourceOf(call: TraceEventOf<'tool_call'>): string | undefined {
  if (call.resource_id) return call.resource_id;
  const input = call.input;
  if (input === null || typeof input !== 'object' || Array.isArray(input)) return undefined;
  const entries = Object.entries(input as Record<string, unknown>);
  for (const field of PATH_FIELDS) {
    const found = entries.find(([key, value]) => key.toLowerCase() === field && typeof value === 'string');
    if (found) return found[1] as string;
  }
  return undefined;
}

export function summariseTrace(file: string, events: TraceEvent[]): TraceSummary {
  if (events.length === 0) throw noTraceEvents(file);
  let start: TraceEventOf<'session_start'> | undefined;
  let end: TraceEventOf<'session_end'> | undefined;
  const toolRecords: CallRecord[] = [];
  const skillRecords: CallRecord[] = [];
  const redundant: RedundantCall[] = [];
  // resource → the turn of its latest read; a call that changes it (or does not say) forgets it.
  const lastRead = new Map<string, number>();
  const inferences: Array<[number, string]> = [];
  const shellExitCodes = new Map<number, number>();
  const shellLatenciesMs: number[] = [];
  let compaction: TraceSummary['compaction'];
  const reopens: TraceSummary['reopens'] = [];
  const openTasks = new Set<string>();
  const tasks: TaskSummary[] = [];

  // The attempt a `session_end` closes ends with its `task_end`, written just after it.
  let countedUpTo = events.findLastIndex((event) => event.event_type === 'session_end') + 1;
  if (countedUpTo === 0) countedUpTo = events.length;
  while (events[countedUpTo]?.event_type === 'task_end') countedUpTo += 1;
  const counted = events.slice(0, countedUpTo);
  for (const event of counted) {
    switch (event.event_type) {
      case 'session_start':
        start = event;
        break;
      case 'session_end':
        end = event;
        break;
      case 'inference':
        inferences.push([event.turn, event.decision]);
        break;
      case 'tool_call': {
        const resource = resourceOf(event);
        if (resource !== undefined) {
          const prior = lastRead.get(resource);
          if (event.state_effect === 'read') {
            if (prior !== undefined) redundant.push({ turn: event.turn, toolName: event.tool_name, resource, priorTurn: prior });
            lastRead.set(resource, event.turn);
          } else lastRead.delete(resource);
        }
        toolRecords.push({ turn: event.turn, name: event.tool_name, input: event.input, status: event.status, durationMs: event.duration_ms });
        break;
      }
      case 'skill_call':
        skillRecords.push({ turn: event.turn, name: event.skill_name, input: undefined, status: event.status, durationMs: event.duration_ms });
        break;
      case 'shell':
        shellLatenciesMs.push(event.duration_ms);
        shellExitCodes.set(event.exit_code, (shellExitCodes.get(event.exit_code) ?? 0) + 1);
        break;
      case 'compaction':
        compaction = { turn: event.turn, tokensBefore: event.tokens_before, tokensAfter: event.tokens_after };
        break;
      case 'task_start':
        openTasks.add(event.task_id);
        break;
      case 'task_end':
        // A task's summary needs its start: an end without one is a trace cut at its head.
        if (openTasks.delete(event.task_id))
          tasks.push({
            taskId: event.task_id,
            exitStatus: event.exit_status,
            durationMs: event.duration_ms,
            turns: event.turns,
            inputTokens: event.input_tokens,
            outputTokens: event.output_tokens,
            reopenCount: event.reopen_count,
          });
        break;
      case 'task_reopened':
        reopens.push({ reopenNumber: event.reopen_number, hookName: event.hook_name, reason: event.reason });
        break;
    }
  }
  if (!start) throw noSessionStart(file);
  if (!end)
    throw new MurmurError('E-TRC-001', `${file}: no session_end event found`, {
      path: file,
      hint: "the session is still running, or its mur was killed before the trace could be closed ('mur ps' says which); 'mur trace steps' reads it as it is",
    });
  const toolOk = toolRecords.filter((record) => record.status === 'ok').length;
  return {
    sessionId: start.session_id,
    capsuleName: start.capsule_name,
    capsuleVersion: start.capsule_version,
    model: start.model ?? null,
    maxTurns: start.max_turns ?? null,
    exitStatus: end.exit_status,
    durationMs: end.duration_ms,
    totalTurns: end.total_turns,
    inputTokens: end.total_input_tokens,
    outputTokens: end.total_output_tokens,
    toolCalls: end.total_tool_calls,
    toolOk,
    toolError: toolRecords.length - toolOk,
    toolRecords,
    toolLatenciesMs: toolRecords.map((record) => record.durationMs),
    skillRecords,
    redundant,
    inferences,
    shellCalls: end.total_shell_calls,
    shellExitCodes,
    shellLatenciesMs,
    compaction,
    reopens,
    tasks,
    eventsAfterEnd: events.length - counted.length,
  };
}

/** A trace without its `session_start`: nothing in it says which session, or what run, it was. */
export function noSessionStart(file: string): MurmurError {
  return new MurmurError('E-TRC-001', `${file}: no session_start event found`, {
    path: file,
    hint: 'an agent writes its session_start when a task begins: this session ran no task (or its trace was cut short)',
  });
}

/** A trace with no event in it: empty, or nothing in it a trace event (each unreadable line was warned of). */
export function noTraceEvents(file: string): MurmurError {
  return new MurmurError('E-TRC-001', `${file}: holds no trace event (incomplete or zero-event session)`, {
    path: file,
    hint: "a session's trace is trace.jsonl in its session directory, written as it runs; mur trace show @1 reads the newest session's",
  });
}
