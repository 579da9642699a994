// murmur-hook-eval's scoring: what `MURMUR_EVAL_CONFIG` asks for, each scorer's verdict on a
// finished session, and the records of `eval.jsonl` — upstream's `event_score` lines, one per
// scorer, then one `dataset_run` line, always last.
//
// Plain functions over plain values, with no imports and no exports: drivers/guests.mjs builds the
// hook's source as this file followed by hook.js (componentize-js resolves no relative imports),
// and node tests evaluate this file alone with drivers/load-core.mjs (`loadSources`).
//
// A session is `{turns, inputTokens, outputTokens, exitStatus}` (the session-end event's totals);
// `observedTools` are the names of the tools it called, in order.

/** Upstream's bounds for a scorer that gives no `max` (the runtime applies them too; a hook handed upstream's JSON may see none). */
const SCORER_DEFAULT_MAX = { max_turns: 10, max_tokens: 100000 };

/** Whether a value is a plain JSON object. */
function isPlainObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * `MURMUR_EVAL_CONFIG`'s text as `{datasetId, scorers, configured, warnings}`. `scorers` are the
 * ones that score; `configured` also counts those that parse but score nothing (`llm_judge`), because
 * a session whose scorers all abstain still gets its `dataset_run` (overall `no_scores`), and one
 * with no scorer at all gets no file. Never throws: what cannot be used is a warning.
 */
function readEvalConfig(text) {
  const nothing = (warning) => ({ datasetId: null, scorers: [], configured: 0, warnings: [warning] });
  if (text === undefined || text.trim() === '') {
    return nothing('MURMUR_EVAL_CONFIG is not set (the capsule manifest has no observability.eval): nothing is scored');
  }
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    return nothing(`MURMUR_EVAL_CONFIG is not JSON (${error instanceof Error ? error.message : String(error)}): nothing is scored`);
  }
  if (!isPlainObject(parsed) || !Array.isArray(parsed.scorers)) return nothing('MURMUR_EVAL_CONFIG has no scorers list: nothing is scored');
  const warnings = [];
  const scorers = [];
  let configured = 0;
  parsed.scorers.forEach((entry, index) => {
    if (!isPlainObject(entry) || typeof entry.type !== 'string') {
      warnings.push(`scorer ${index} has no type: skipped`);
      return;
    }
    const name = typeof entry.name === 'string' && entry.name !== '' ? entry.name : entry.type;
    switch (entry.type) {
      case 'exit_ok':
        scorers.push({ type: entry.type, name });
        break;
      case 'max_turns':
      case 'max_tokens':
        scorers.push({ type: entry.type, name, max: Number.isInteger(entry.max) ? entry.max : SCORER_DEFAULT_MAX[entry.type] });
        break;
      case 'tool_sequence':
        scorers.push({ type: entry.type, name, expected: Array.isArray(entry.expected) ? entry.expected.map(String) : [] });
        break;
      case 'llm_judge':
        configured += 1;
        warnings.push(`scorer '${name}' (llm_judge) is not implemented: it emits no score`);
        return;
      default:
        warnings.push(`unknown scorer type '${entry.type}' (scorer '${name}'): skipped`);
        return;
    }
    configured += 1;
  });
  if (configured === 0 && warnings.length === 0) warnings.push('observability.eval.scorers is empty: nothing is scored');
  const datasetId = typeof parsed.dataset_id === 'string' && parsed.dataset_id !== '' ? parsed.dataset_id : null;
  return { datasetId, scorers, configured, warnings };
}

/** Whether `expected` appears in `observed` in order, other calls allowed between (an empty list always does). */
function isSubsequence(expected, observed) {
  let next = 0;
  for (const name of observed) {
    if (next < expected.length && name === expected[next]) next += 1;
  }
  return next === expected.length;
}

/** One scorer's verdict on a finished session: `{pass, reason}`. */
function verdict(scorer, session, observedTools) {
  switch (scorer.type) {
    case 'exit_ok':
      return { pass: session.exitStatus === 'ok', reason: `exit_status=${session.exitStatus}` };
    case 'max_turns':
      return { pass: session.turns <= scorer.max, reason: `turns=${session.turns} max=${scorer.max}` };
    case 'max_tokens': {
      const tokens = session.inputTokens + session.outputTokens;
      return { pass: tokens <= scorer.max, reason: `tokens=${tokens} max=${scorer.max}` };
    }
    case 'tool_sequence':
      return {
        pass: isSubsequence(scorer.expected, observedTools),
        reason: `expected=[${scorer.expected.join(', ')}] observed=[${observedTools.join(', ')}]`,
      };
  }
  throw new Error(`no verdict for scorer type '${scorer.type}'`);
}

/**
 * The records of `eval.jsonl` for a finished session: one `event_score` per scorer (event
 * `session_end`, turn = the session's turns), then the `dataset_run` summary — `fail` when any
 * scorer failed, `no_scores` when none scored, else `pass`. `ids` are `{datasetId, caseId}`, each
 * a string or null.
 */
function evalRecords(config, session, observedTools, ids, now) {
  const records = [];
  const scores = {};
  for (const scorer of config.scorers) {
    const { pass, reason } = verdict(scorer, session, observedTools);
    const score = pass ? 1 : 0;
    scores[scorer.name] = score;
    records.push({
      record_type: 'event_score',
      ts: now,
      turn: session.turns,
      event_type: 'session_end',
      scorer: scorer.name,
      result: pass ? 'pass' : 'fail',
      score,
      reason,
    });
  }
  const outcomes = Object.values(scores);
  const overall = outcomes.length === 0 ? 'no_scores' : outcomes.every((score) => score === 1) ? 'pass' : 'fail';
  records.push({ record_type: 'dataset_run', ts: now, dataset_id: ids.datasetId, case_id: ids.caseId, overall, scores });
  return records;
}

/** `eval.jsonl`'s text: one JSON object per line, each line ended. */
function evalFileText(records) {
  return records.map((record) => `${JSON.stringify(record)}\n`).join('');
}
