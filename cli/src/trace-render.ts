import type { TraceEvent } from '@murmur/shared';
import { type CallRecord, type TaskSummary, type TraceSummary, mean, perTurn, toolSuccessRate } from './trace-summary.js';

/**
 * The text of `mur trace show|steps|diff|report`, line for line as upstream prints it, so what a
 * user or a script reads off upstream's `mur trace` reads the same here. Numbers are formatted as
 * Rust's `format!` does (ties to even, thousands with commas, `as u64` truncation), and tool
 * inputs are printed as `serde_json` prints a value: compact, object keys in sorted order.
 */

const DASH = '—';

/** `value` with `digits` decimals, a tie going to the even digit as Rust's formatter does. */
export function fixed(value: number, digits: number): string {
  const magnitude = Math.abs(value);
  const scaled = magnitude * 10 ** digits;
  const floor = Math.floor(scaled);
  const text = scaled - floor === 0.5 && floor % 2 === 0 ? (floor / 10 ** digits).toFixed(digits) : magnitude.toFixed(digits);
  return value < 0 ? `-${text}` : text;
}

/** Rust's `f64 as u64`: truncated toward zero, negatives and NaN to 0. */
const whole = (value: number): number => (Number.isFinite(value) && value > 0 ? Math.trunc(value) : 0);

export const thousands = (value: number): string => String(whole(value)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');

export const duration = (ms: number): string => (whole(ms) < 1000 ? `${whole(ms)}ms` : `${fixed(whole(ms) / 1000, 1)}s`);

const optionalWhole = (value: number | undefined): string => (value === undefined ? DASH : fixed(value, 0));
const optionalDuration = (value: number | undefined): string => (value === undefined ? DASH : duration(value));
const plural = (count: number, word: string): string => `${count} ${word}${count === 1 ? '' : 's'}`;
/** Left-aligned in `width` characters (code points, as Rust counts them); longer text is kept whole. */
const pad = (text: string | number, width: number): string => {
  const value = String(text);
  return value + ' '.repeat(Math.max(0, width - Array.from(value).length));
};
const heading = (title: string, width = 49): string => `── ${title} ${'─'.repeat(Math.max(0, width - title.length - 4))}`;
const icon = (status: string): string => (status === 'ok' ? '✓' : '✗');

/**
 * A JSON value as `serde_json::to_string` writes one: compact, object keys sorted — its first
 * `budget` UTF-16 units at least, not much more. A trace's input is a guest's to nest: written
 * whole, 4 000 nested arrays overflowed the stack, and only a line's worth is ever shown; with a
 * budget the walk goes no deeper than the text it can still show.
 */
export function sortedJson(value: unknown, budget = Number.POSITIVE_INFINITY): string {
  const parts: string[] = [];
  let length = 0;
  const write = (text: string): void => {
    parts.push(text);
    length += text.length;
  };
  const visit = (item: unknown): void => {
    if (length > budget) return;
    if (Array.isArray(item)) {
      write('[');
      // Each loop stops once the budget is spent: a flat array of millions is not walked to the end.
      for (let index = 0; index < item.length && length <= budget; index += 1) {
        if (index > 0) write(',');
        visit(item[index]);
      }
      write(']');
    } else if (item !== null && typeof item === 'object') {
      write('{');
      const entries = Object.entries(item as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      for (let index = 0; index < entries.length && length <= budget; index += 1) {
        const [key, element] = entries[index] as [string, unknown];
        write(`${index > 0 ? ',' : ''}${JSON.stringify(key)}:`);
        visit(element);
      }
      write('}');
    } else {
      write(JSON.stringify(item) ?? 'null');
    }
  };
  visit(value);
  return parts.join('');
}

/** The first `limit` code points of `text`, and `…` when there were more. */
function truncated(text: string, limit: number): string {
  const points = Array.from(text);
  return points.length > limit ? `${points.slice(0, limit).join('')}…` : text;
}

/** Two spaces and the input's JSON (at most 120 characters), to append to a tool call. */
// 2 × 120 + 2 units hold at least 121 code points, which is what `truncated` needs to know it cut.
const inlineInput = (input: unknown): string => (input === undefined ? '' : `  ${truncated(sortedJson(input, 242), 120)}`);

/**
 * The first string anywhere in the input (keys in sorted order), quoted, at most 60 characters.
 * Walked with a stack of its own, not by recursion: however deep a guest nests its input.
 */
function inputSummary(input: unknown): string {
  const waiting: unknown[] = [input];
  while (waiting.length > 0) {
    const value = waiting.pop();
    if (typeof value === 'string') return `"${truncated(value, 60)}"`;
    if (Array.isArray(value)) for (let index = value.length - 1; index >= 0; index -= 1) waiting.push(value[index]);
    else if (value !== null && typeof value === 'object') {
      const record = value as Record<string, unknown>;
      const keys = Object.keys(record).sort();
      for (let index = keys.length - 1; index >= 0; index -= 1) waiting.push(record[keys[index] as string]);
    }
  }
  return '';
}

function exitCodes(codes: Map<number, number>): string {
  const parts: string[] = [];
  const ok = codes.get(0) ?? 0;
  if (ok > 0) parts.push(`${ok} ok`);
  for (const [code, count] of [...codes].filter(([code]) => code !== 0).sort(([a], [b]) => a - b)) parts.push(`${count} failed (exit ${code})`);
  return parts.join(', ');
}

function byTurn(records: CallRecord[]): Map<number, CallRecord[]> {
  const turns = new Map<number, CallRecord[]>();
  for (const record of records) {
    const turn = turns.get(record.turn);
    if (turn) turn.push(record);
    else turns.set(record.turn, [record]);
  }
  return new Map([...turns].sort(([a], [b]) => a - b));
}

function callCounts(records: CallRecord[], total: number): string[] {
  const ok = records.filter((record) => record.status === 'ok').length;
  return [
    `count:      ${total}  (${ok} ok, ${total - ok} error)  success ${fixed(total === 0 ? 0 : (100 * ok) / total, 1)}%`,
    `latency:    avg ${optionalDuration(mean(records.map((record) => record.durationMs)))}`,
  ];
}

export function renderShow(summary: TraceSummary): string[] {
  const lines = [
    heading('Session'),
    `session:    ${summary.sessionId}`,
    `capsule:    ${summary.capsuleName} v${summary.capsuleVersion}`,
    `model:      ${summary.model ?? DASH}`,
    `status:     ${summary.exitStatus}${summary.eventsAfterEnd > 0 ? ` (as of its last session_end: ${summary.eventsAfterEnd} later ${summary.eventsAfterEnd === 1 ? 'event is' : 'events are'} not counted; the session is still running, or its trace was cut short)` : ''}`,
    `duration:   ${duration(summary.durationMs)}`,
    '',
    heading('Turns'),
    `count:      ${summary.totalTurns}  (max: ${summary.maxTurns ?? DASH})`,
    '',
    heading('Tokens'),
    `input:      ${thousands(summary.inputTokens)}  (avg ${optionalWhole(perTurn(summary.inputTokens, summary))}/turn)`,
    `output:     ${thousands(summary.outputTokens)}  (avg ${optionalWhole(perTurn(summary.outputTokens, summary))}/turn)`,
    `total:      ${thousands(summary.inputTokens + summary.outputTokens)}`,
    '',
    heading('Tool calls'),
  ];
  if (summary.toolCalls === 0) lines.push('count:      0');
  else {
    lines.push(
      `count:      ${summary.toolCalls}  (${summary.toolOk} ok, ${summary.toolError} error)  success ${fixed(toolSuccessRate(summary) ?? 0, 1)}%`,
      `latency:    avg ${optionalDuration(mean(summary.toolLatenciesMs))}`,
    );
    const tools = byTurn(summary.toolRecords);
    const decisions = new Map(summary.inferences);
    for (const turn of [...new Set([...tools.keys(), ...decisions.keys()])].sort((a, b) => a - b)) {
      const records = tools.get(turn);
      if (records)
        lines.push(
          `  turn ${turn}  ${records.map((record) => `${record.name} ${duration(record.durationMs)} ${icon(record.status)}${inlineInput(record.input)}`).join('  ')}`,
        );
      else lines.push(`  turn ${turn}  ${decisions.get(turn)}`);
    }
  }
  lines.push('', heading('Redundant calls'), `count:      ${summary.redundant.length}`);
  for (const call of summary.redundant) lines.push(`  turn ${call.turn}  ${call.toolName}  ${call.resource}  (re-reads turn ${call.priorTurn})`);
  lines.push('', heading('Skill calls'));
  if (summary.skillRecords.length === 0) lines.push('count:      0');
  else {
    lines.push(...callCounts(summary.skillRecords, summary.skillRecords.length));
    for (const [turn, records] of byTurn(summary.skillRecords))
      lines.push(`  turn ${turn}  ${records.map((record) => `${record.name} ${duration(record.durationMs)} ${icon(record.status)}`).join('  ')}`);
  }
  lines.push('', heading('Shell calls'));
  if (summary.shellCalls === 0) lines.push('count:      0');
  else
    lines.push(
      `count:      ${summary.shellCalls}`,
      `exit codes: ${exitCodes(summary.shellExitCodes)}`,
      `latency:    avg ${optionalDuration(mean(summary.shellLatenciesMs))}`,
    );
  lines.push('', heading('Compaction'));
  const compaction = summary.compaction;
  lines.push(
    compaction
      ? `fired:      yes  at turn ${compaction.turn}  (${thousands(compaction.tokensBefore)} → ${thousands(compaction.tokensAfter)} tokens)`
      : 'fired:      no',
  );
  if (summary.reopens.length > 0) {
    lines.push('', heading('Reopens'));
    for (const reopen of summary.reopens)
      lines.push(`reopen ${reopen.reopenNumber}  by ${reopen.hookName}  “${Array.from(reopen.reason).slice(0, 80).join('')}”`);
  }
  if (summary.tasks.length > 1) {
    lines.push(heading('Tasks', 48));
    for (const [index, task] of summary.tasks.entries()) {
      const reopens = task.reopenCount > 0 ? `  reopens: ${task.reopenCount}` : '';
      lines.push(
        `task ${index + 1}  ${shortId(task.taskId)}  turns: ${task.turns}  in: ${thousands(task.inputTokens)}  out: ${thousands(task.outputTokens)}  ${task.exitStatus}  ${duration(task.durationMs)}${reopens}`,
      );
    }
  }
  return lines;
}

export function renderSteps(events: TraceEvent[], verbose: boolean): string[] {
  let sessionId = '';
  // A turn's duration and input are its first call's: the call that follows its inference in the
  // trace. Matched by the turn's number alone, a later task's turn 0 showed the first task's.
  const rows: Array<{ turn: number; decision: string; tool: string; durationMs?: number; input?: string }> = [];
  for (const event of events) {
    if (event.event_type === 'session_start') sessionId = event.session_id;
    else if (event.event_type === 'inference') rows.push({ turn: event.turn, decision: event.decision, tool: event.tool_name ?? DASH });
    else if (event.event_type === 'tool_call' || event.event_type === 'skill_call') {
      const row = rows.at(-1);
      if (row === undefined || row.turn !== event.turn || row.durationMs !== undefined) continue;
      row.durationMs = event.duration_ms;
      if (verbose && event.event_type === 'tool_call' && event.input !== undefined) {
        const summary = inputSummary(event.input);
        if (summary !== '') row.input = summary;
      }
    }
  }
  // A loop, not a spread: a trace of 200 000 turns is more arguments than a call takes. Two
  // spaces past the widest name, so that it never runs into the duration.
  const toolWidth = rows.reduce((widest, row) => Math.max(widest, Array.from(row.tool).length + 2), 12);
  const lines = [`Session ${sessionId}  (${plural(rows.length, 'turn')})`, ''];
  for (const { turn, decision, tool, durationMs, input } of rows) {
    const spent = durationMs !== undefined ? duration(durationMs) : DASH;
    lines.push(
      verbose && input
        ? `  ${pad(turn, 3)}${pad(decision, 13)}${pad(tool, toolWidth)}${pad(spent, 5)}   ${input}`
        : `  ${pad(turn, 3)}${pad(decision, 13)}${pad(tool, toolWidth)}${spent}`,
    );
  }
  lines.push('');
  return lines;
}

/** `=` when equal, else the signed change and which run it favours. */
function delta(a: number, b: number, lowerIsBetter: boolean, format: (magnitude: number) => string): string {
  const change = b - a;
  if (change === 0) return '=';
  const better = lowerIsBetter === change < 0 ? ' (B better)' : ' (A better)';
  return `${change < 0 ? '-' : '+'}${format(Math.abs(change))}${better}`;
}
const countDelta = (a: number, b: number): string => delta(a, b, true, String);
const durationDelta = (a: number, b: number): string => delta(whole(a), whole(b), true, duration);
const averageDelta = (a: number, b: number, lowerIsBetter: boolean): string =>
  Math.abs(b - a) < 0.05 ? '=' : delta(a, b, lowerIsBetter, (magnitude) => fixed(magnitude, 1));

export function renderDiff(a: TraceSummary, b: TraceSummary): string[] {
  const row = (label: string, first: string | number, second: string | number, change: string): string =>
    `${pad(label, 22)} ${pad(first, 16)} ${pad(second, 16)} ${change}`;
  const both = <T>(x: T | undefined, y: T | undefined, then: (x: T, y: T) => string): string => (x !== undefined && y !== undefined ? then(x, y) : DASH);
  const rate = (summary: TraceSummary): string => {
    const value = toolSuccessRate(summary);
    return value === undefined ? DASH : `${fixed(value, 1)}%`;
  };
  const inputA = perTurn(a.inputTokens, a) ?? 0;
  const inputB = perTurn(b.inputTokens, b) ?? 0;
  const outputA = perTurn(a.outputTokens, a) ?? 0;
  const outputB = perTurn(b.outputTokens, b) ?? 0;
  const toolLatency = [mean(a.toolLatenciesMs), mean(b.toolLatenciesMs)] as const;
  const shellLatency = [mean(a.shellLatenciesMs), mean(b.shellLatenciesMs)] as const;
  const compaction = (summary: TraceSummary): string => (summary.compaction ? `turn ${summary.compaction.turn}` : 'none');
  return [
    `${pad('Metric', 22)} ${pad('Run A', 16)} ${pad('Run B', 16)} Delta`,
    `${'─'.repeat(22)} ${'─'.repeat(16)} ${'─'.repeat(16)} ${'─'.repeat(26)}`,
    row('turns', a.totalTurns, b.totalTurns, countDelta(a.totalTurns, b.totalTurns)),
    row('duration', duration(a.durationMs), duration(b.durationMs), durationDelta(a.durationMs, b.durationMs)),
    row('input tokens', thousands(a.inputTokens), thousands(b.inputTokens), countDelta(a.inputTokens, b.inputTokens)),
    row('output tokens', thousands(a.outputTokens), thousands(b.outputTokens), countDelta(a.outputTokens, b.outputTokens)),
    row('input/turn (avg)', fixed(inputA, 0), fixed(inputB, 0), averageDelta(inputA, inputB, true)),
    row('output/turn (avg)', fixed(outputA, 0), fixed(outputB, 0), averageDelta(outputA, outputB, true)),
    row('tool calls', a.toolCalls, b.toolCalls, countDelta(a.toolCalls, b.toolCalls)),
    row(
      'tool success rate',
      rate(a),
      rate(b),
      both(toolSuccessRate(a), toolSuccessRate(b), (x, y) => averageDelta(x, y, false)),
    ),
    row('avg tool latency', optionalDuration(toolLatency[0]), optionalDuration(toolLatency[1]), both(...toolLatency, durationDelta)),
    row('skill calls', a.skillRecords.length, b.skillRecords.length, countDelta(a.skillRecords.length, b.skillRecords.length)),
    row('shell calls', a.shellCalls, b.shellCalls, countDelta(a.shellCalls, b.shellCalls)),
    row('avg shell latency', optionalDuration(shellLatency[0]), optionalDuration(shellLatency[1]), both(...shellLatency, durationDelta)),
    row('compaction', compaction(a), compaction(b), DASH),
    row('exit status', a.exitStatus, b.exitStatus, DASH),
  ];
}

/**
 * An id cut for a table: its kind (`ses_`, `tsk_`) and its last 8 characters. Upstream shows the
 * first 12, but these ids begin with their time, so sessions or tasks started close together read
 * alike there; the end tells them apart, and is what a selector names (its last 4+ characters).
 */
export function shortId(id: string): string {
  if (id.length <= 16) return id;
  const kind = /^[a-z]+_/.exec(id)?.[0] ?? '';
  return `${kind}...${id.slice(-8)}`;
}

function sessionBlock(summary: TraceSummary): string[] {
  const id = shortId(summary.sessionId);
  const lines = [`Session ${id}  ${duration(summary.durationMs)}  ${plural(summary.totalTurns, 'turn')}`, ''];
  lines.push(
    summary.toolError > 0
      ? `  ${pad('Tool calls:', 14)} ${summary.toolCalls}  (${summary.toolOk} ok, ${summary.toolError} error)`
      : `  ${pad('Tool calls:', 14)} ${summary.toolCalls}`,
  );
  if (summary.shellCalls > 0) lines.push(`  ${pad('Shell calls:', 14)} ${summary.shellCalls}  exit codes: ${exitCodes(summary.shellExitCodes)}`);
  if (summary.redundant.length > 0) lines.push(`  Redundant calls: ${summary.redundant.length}`);
  const toolLatency = mean(summary.toolLatenciesMs);
  if (toolLatency !== undefined) {
    const shellLatency = mean(summary.shellLatenciesMs);
    lines.push(`  ${pad('Avg latency:', 14)} tool ${duration(toolLatency)}${shellLatency === undefined ? '' : `  shell ${duration(shellLatency)}`}`);
  }
  lines.push('');
  return lines;
}

const oneDecimal = (value: number): string => fixed(value, 1);

/** Mean, population standard deviation, min and max of one metric, in upstream's columns. */
function statRow(label: string, values: number[], format: (value: number) => string): string {
  const average = mean(values) ?? 0;
  const deviation = values.length < 2 ? 0 : Math.sqrt(values.reduce((sum, value) => sum + (value - average) ** 2, 0) / values.length);
  return `${pad(label, 22)} ${pad(format(average), 14)} ${pad(format(deviation), 14)} ${pad(format(values.reduce((least, value) => Math.min(least, value), Number.POSITIVE_INFINITY)), 14)} ${format(values.reduce((most, value) => Math.max(most, value), Number.NEGATIVE_INFINITY))}`;
}

const statHeader = (): string[] => [
  `${pad('Metric', 22)} ${pad('Mean', 14)} ${pad('StdDev', 14)} ${pad('Min', 14)} Max`,
  `${'─'.repeat(22)} ${'─'.repeat(14)} ${'─'.repeat(14)} ${'─'.repeat(14)} ${'─'.repeat(14)}`,
];

export function renderReport(workdir: string, summaries: TraceSummary[]): string[] {
  const lines = summaries.flatMap(sessionBlock);
  lines.push(`Sessions: ${summaries.length}  (${workdir})`, '', ...statHeader());
  const of = (metric: (summary: TraceSummary) => number): number[] => summaries.map(metric);
  lines.push(
    statRow(
      'turns',
      of((summary) => summary.totalTurns),
      oneDecimal,
    ),
    statRow(
      'duration (ms)',
      of((summary) => summary.durationMs),
      thousands,
    ),
    statRow(
      'input tokens',
      of((summary) => summary.inputTokens),
      thousands,
    ),
    statRow(
      'output tokens',
      of((summary) => summary.outputTokens),
      thousands,
    ),
    statRow(
      'tool calls',
      of((summary) => summary.toolCalls),
      oneDecimal,
    ),
  );
  const rates = summaries.map(toolSuccessRate).filter((rate): rate is number => rate !== undefined);
  if (rates.length > 0) lines.push(statRow('tool success (%)', rates, oneDecimal));
  lines.push(
    statRow(
      'shell calls',
      of((summary) => summary.shellCalls),
      oneDecimal,
    ),
    statRow(
      'redundant calls',
      of((summary) => summary.redundant.length),
      oneDecimal,
    ),
    '',
    'Exit status:',
  );
  const statuses = new Map<string, number>();
  for (const summary of summaries) statuses.set(summary.exitStatus, (statuses.get(summary.exitStatus) ?? 0) + 1);
  for (const [status, count] of [...statuses].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
    lines.push(`  ${pad(status, 24)} ${count}  (${fixed((100 * count) / summaries.length, 1)}%)`);
  // Only sessions that ran more than one task say anything per task.
  const tasks: TaskSummary[] = summaries.flatMap((summary) => (summary.tasks.length > 1 ? summary.tasks : []));
  if (tasks.length > 0) {
    lines.push('', heading('Per-task averages (multi-task sessions only)', 62), ...statHeader());
    lines.push(
      statRow(
        'task turns',
        tasks.map((task) => task.turns),
        oneDecimal,
      ),
      statRow(
        'task input tokens',
        tasks.map((task) => task.inputTokens),
        thousands,
      ),
      statRow(
        'task output tokens',
        tasks.map((task) => task.outputTokens),
        thousands,
      ),
      statRow(
        'task duration (ms)',
        tasks.map((task) => task.durationMs),
        thousands,
      ),
      `Tasks: ${tasks.length}`,
    );
  }
  return lines;
}
