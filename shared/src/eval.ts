import * as z from 'zod';
import type { CapsuleManifest } from './manifest/capsule.js';

/**
 * Evaluation, as upstream shapes it: the scorers a capsule declares (`observability.eval`), the
 * configuration `murmur-hook-eval` is handed for them (`MURMUR_EVAL_CONFIG`), the records it
 * writes to a session's `eval.jsonl`, and the dataset cases `mur eval run` drives a capsule with.
 *
 * The hook is JavaScript built into a component and cannot import these schemas; it writes the
 * records to exactly the shapes below, and `mur eval` reads them back through them.
 */

/** The scorer types upstream knows; any other type in a manifest is skipped with a warning. */
export const SCORER_TYPES = ['exit_ok', 'max_turns', 'max_tokens', 'tool_sequence', 'llm_judge'] as const;
export type ScorerType = (typeof SCORER_TYPES)[number];

/** Upstream's bounds when a scorer gives no `max`. */
export const DEFAULT_MAX_TURNS = 10;
export const DEFAULT_MAX_TOKENS = 100_000;

/**
 * One scorer as the hook receives it: its name already defaulted to its type, its bound or its
 * expected list already defaulted, keyed by `type` (upstream serialises its scorer enum this way,
 * so a hook written against upstream reads ours unchanged).
 */
export const ScorerConfigSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('exit_ok'), name: z.string() }),
  z.object({ type: z.literal('max_turns'), name: z.string(), max: z.number().int().nonnegative() }),
  z.object({ type: z.literal('max_tokens'), name: z.string(), max: z.number().int().nonnegative() }),
  z.object({ type: z.literal('tool_sequence'), name: z.string(), expected: z.array(z.string()) }),
  z.object({ type: z.literal('llm_judge'), name: z.string() }),
]);
export type ScorerConfig = z.infer<typeof ScorerConfigSchema>;

/** `MURMUR_EVAL_CONFIG`: `{dataset_id?, scorers}`. */
export const EvalConfigSchema = z.object({
  dataset_id: z.string().optional(),
  scorers: z.array(ScorerConfigSchema),
});
export type EvalConfig = z.infer<typeof EvalConfigSchema>;

type ManifestEval = NonNullable<NonNullable<CapsuleManifest['observability']>['eval']>;

function isScorerType(type: string): type is ScorerType {
  return (SCORER_TYPES as readonly string[]).includes(type);
}

/**
 * The manifest's `observability.eval` as hooks are given it. Defaults are applied here, once, so
 * every hook scores against the same bounds; a scorer of an unknown type is left out (the
 * manifest's parse has already warned about it), as upstream leaves it out.
 */
export function evalConfigForHooks(manifestEval: ManifestEval): EvalConfig {
  const scorers: ScorerConfig[] = [];
  for (const scorer of manifestEval.scorers) {
    const type = scorer.type.trim();
    if (!isScorerType(type)) continue;
    const name = scorer.name ?? type;
    switch (type) {
      case 'max_turns':
        scorers.push({ type, name, max: scorer.max ?? DEFAULT_MAX_TURNS });
        break;
      case 'max_tokens':
        scorers.push({ type, name, max: scorer.max ?? DEFAULT_MAX_TOKENS });
        break;
      case 'tool_sequence':
        scorers.push({ type, name, expected: scorer.expected ?? [] });
        break;
      default:
        scorers.push({ type, name });
    }
  }
  return { ...(manifestEval.dataset_id !== undefined ? { dataset_id: manifestEval.dataset_id } : {}), scorers };
}

// ── eval.jsonl ──────────────────────────────────────────────────────────────

export const EVAL_FILE = 'eval.jsonl';

/**
 * The first-party hook that writes `EVAL_FILE`. The file lies in a workdir its guest writes, so
 * it is the hook's only where the hook ran: the capsule host removes whatever is there before
 * the session-end hooks run, and `mur eval run` reads no score from a session that had no hook.
 */
export const EVAL_HOOK = 'murmur-hook-eval';

/** One scorer's verdict on one event (the hook scores at `session_end`). */
export const EventScoreRecordSchema = z.object({
  record_type: z.literal('event_score'),
  ts: z.number().int().nonnegative(),
  turn: z.number().int().nonnegative(),
  event_type: z.string(),
  scorer: z.string(),
  result: z.enum(['pass', 'fail']),
  score: z.number().nullish(),
  reason: z.string().nullish(),
});
export type EventScoreRecord = z.infer<typeof EventScoreRecordSchema>;

export const EVAL_OVERALL = ['pass', 'fail', 'no_scores'] as const;
export type EvalOverall = (typeof EVAL_OVERALL)[number];

/** The session's summary, always the file's last record: `fail` when any scorer failed, `no_scores` when none scored. */
export const DatasetRunRecordSchema = z.object({
  record_type: z.literal('dataset_run'),
  ts: z.number().int().nonnegative(),
  dataset_id: z.string().nullish(),
  case_id: z.string().nullish(),
  overall: z.enum(EVAL_OVERALL),
  scores: z.record(z.string(), z.number()),
});
export type DatasetRunRecord = z.infer<typeof DatasetRunRecordSchema>;

export const EvalRecordSchema = z.discriminatedUnion('record_type', [EventScoreRecordSchema, DatasetRunRecordSchema]);
export type EvalRecord = z.infer<typeof EvalRecordSchema>;

// ── datasets ────────────────────────────────────────────────────────────────

/** One line of a dataset: the case's id (the hook's `MURMUR_CASE_ID`) and the task file it runs. */
export const DatasetCaseSchema = z.object({
  case_id: z.string().trim().min(1, 'case_id must not be empty'),
  task_path: z.string().trim().min(1, 'task_path must not be empty'),
  /** Scorer-defined; no deterministic scorer reads it (upstream reserves it for an llm_judge). */
  expected: z.unknown().optional(),
});
export type DatasetCase = z.infer<typeof DatasetCaseSchema>;
