import * as z from 'zod';

/**
 * The `trace.jsonl` events a reader understands (upstream §8), as the runtime writes them
 * (`services/executor/src/records.ts` and the host's `trace.write` calls).
 *
 * Each schema names only the fields some reader uses: a reader must keep reading traces that
 * newer runtimes write, so unknown keys are dropped (zod's default for objects) and event types
 * not listed here are not errors (`isKnownTraceEventType` lets a reader pass over them). Fields
 * upstream lets older traces omit have the same defaults here (`turn` 0, `reopen_count` 0);
 * `model` and `max_turns` are null for a script capsule, which has neither.
 */

const SessionStartSchema = z.object({
  event_type: z.literal('session_start'),
  session_id: z.string(),
  timestamp: z.number().optional(),
  capsule_name: z.string(),
  capsule_version: z.string(),
  model: z.string().nullish(),
  max_turns: z.number().nullish(),
});

const InferenceSchema = z.object({
  event_type: z.literal('inference'),
  turn: z.number(),
  input_tokens: z.number().default(0),
  output_tokens: z.number().default(0),
  decision: z.string(),
  tool_name: z.string().nullish(),
});

const ToolCallSchema = z.object({
  event_type: z.literal('tool_call'),
  turn: z.number().default(0),
  tool_name: z.string(),
  input: z.unknown().optional(),
  duration_ms: z.number(),
  status: z.string(),
  /** The tool's own word on what the call did to its resource: `read` or `mutate`. */
  state_effect: z.string().nullish(),
  /** The resource the tool says the call addressed, verbatim. */
  resource_id: z.string().nullish(),
});

const SkillCallSchema = z.object({
  event_type: z.literal('skill_call'),
  turn: z.number().default(0),
  skill_name: z.string(),
  duration_ms: z.number(),
  status: z.string(),
});

const ShellSchema = z.object({
  event_type: z.literal('shell'),
  exit_code: z.number(),
  duration_ms: z.number(),
});

const CompactionSchema = z.object({
  event_type: z.literal('compaction'),
  turn: z.number(),
  tokens_before: z.number(),
  tokens_after: z.number(),
});

const SessionEndSchema = z.object({
  event_type: z.literal('session_end'),
  total_turns: z.number(),
  total_input_tokens: z.number(),
  total_output_tokens: z.number(),
  total_tool_calls: z.number(),
  total_shell_calls: z.number(),
  duration_ms: z.number(),
  exit_status: z.string(),
});

const TaskStartSchema = z.object({
  event_type: z.literal('task_start'),
  task_id: z.string(),
  context_id: z.string(),
  source: z.string(),
});

const TaskEndSchema = z.object({
  event_type: z.literal('task_end'),
  task_id: z.string(),
  exit_status: z.string(),
  duration_ms: z.number(),
  turns: z.number(),
  input_tokens: z.number(),
  output_tokens: z.number(),
  tool_calls: z.number(),
  shell_calls: z.number(),
  reopen_count: z.number().default(0),
});

const TaskReopenedSchema = z.object({
  event_type: z.literal('task_reopened'),
  hook_name: z.string(),
  reason: z.string(),
  reopen_number: z.number(),
});

export const TraceEventSchema = z.discriminatedUnion('event_type', [
  SessionStartSchema,
  InferenceSchema,
  ToolCallSchema,
  SkillCallSchema,
  ShellSchema,
  CompactionSchema,
  SessionEndSchema,
  TaskStartSchema,
  TaskEndSchema,
  TaskReopenedSchema,
]);

export type TraceEvent = z.infer<typeof TraceEventSchema>;
export type TraceEventType = TraceEvent['event_type'];
export type TraceEventOf<T extends TraceEventType> = Extract<TraceEvent, { event_type: T }>;

const KNOWN_EVENT_TYPES: ReadonlySet<string> = new Set<TraceEventType>(TraceEventSchema.options.map((option) => option.shape.event_type.value));

export function isKnownTraceEventType(type: string): type is TraceEventType {
  return KNOWN_EVENT_TYPES.has(type);
}
