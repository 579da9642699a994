import { describe, expect, it } from 'vitest';
import { DatasetRunRecordSchema, EventScoreRecordSchema, evalConfigForHooks, parseCapsuleManifest } from '@murmur/shared';
import { hookSource } from '../guests.mjs';
import { loadSources } from '../load-core.mjs';

/**
 * murmur-hook-eval's scoring (drivers/murmur-hook-eval/scoring.js), evaluated in node as the
 * build concatenates it, against the runtime's side of the contract: the configuration
 * `evalConfigForHooks` hands it, and the record schemas `mur eval` reads its file with.
 */

interface Config {
  datasetId: string | null;
  scorers: Array<Record<string, unknown>>;
  configured: number;
  warnings: string[];
}

interface Session {
  turns: number;
  inputTokens: number;
  outputTokens: number;
  exitStatus: string;
}

const scoring = loadSources([new URL('../murmur-hook-eval/scoring.js', import.meta.url)]) as {
  readEvalConfig(text: string | undefined): Config;
  isSubsequence(expected: string[], observed: string[]): boolean;
  evalRecords(config: Config, session: Session, observed: string[], ids: { datasetId: string | null; caseId: string | null }, now: number): unknown[];
  evalFileText(records: unknown[]): string;
};

/** What the executor puts in MURMUR_EVAL_CONFIG for this observability.eval block. */
function hookConfigFor(evalYaml: string): string {
  const { manifest } = parseCapsuleManifest(`name: a\nversion: 0.1.0\nobservability:\n  eval:\n${evalYaml}`);
  return JSON.stringify(evalConfigForHooks(manifest.observability?.eval ?? { scorers: [] }));
}

const SESSION: Session = { turns: 3, inputTokens: 40, outputTokens: 20, exitStatus: 'ok' };

describe('murmur-hook-eval scoring', () => {
  it('reads the configuration the runtime gives it, with upstream defaults for names and bounds', () => {
    const text = hookConfigFor(
      ['    dataset_id: ds', '    scorers:', '      - type: max_turns', '      - type: max_tokens', '        name: budget', '      - type: tool_sequence'].join(
        '\n',
      ),
    );
    expect(JSON.parse(text)).toEqual({
      dataset_id: 'ds',
      scorers: [
        { type: 'max_turns', name: 'max_turns', max: 10 },
        { type: 'max_tokens', name: 'budget', max: 100000 },
        { type: 'tool_sequence', name: 'tool_sequence', expected: [] },
      ],
    });
    expect(scoring.readEvalConfig(text)).toEqual({ datasetId: 'ds', scorers: JSON.parse(text).scorers, configured: 3, warnings: [] });
  });

  it('says what it cannot use and scores nothing for it', () => {
    expect(scoring.readEvalConfig(undefined)).toMatchObject({ configured: 0, warnings: [expect.stringContaining('MURMUR_EVAL_CONFIG is not set')] });
    expect(scoring.readEvalConfig('{nope')).toMatchObject({ configured: 0, warnings: [expect.stringContaining('MURMUR_EVAL_CONFIG is not JSON')] });
    expect(scoring.readEvalConfig('{"scorers":[]}')).toMatchObject({ configured: 0, warnings: ['observability.eval.scorers is empty: nothing is scored'] });
    expect(scoring.readEvalConfig('{"scorers":[{"type":"vibes"},{"type":"llm_judge","name":"j"}]}')).toEqual({
      datasetId: null,
      scorers: [],
      configured: 1,
      warnings: ["unknown scorer type 'vibes' (scorer 'vibes'): skipped", "scorer 'j' (llm_judge) is not implemented: it emits no score"],
    });
  });

  it('passes tool_sequence when the expected tools appear in order, other calls between them allowed', () => {
    expect(scoring.isSubsequence(['read', 'write'], ['list', 'read', 'grep', 'write'])).toBe(true);
    expect(scoring.isSubsequence(['read', 'write'], ['write', 'read'])).toBe(false);
    expect(scoring.isSubsequence([], [])).toBe(true);
    expect(scoring.isSubsequence(['read'], [])).toBe(false);
  });

  it('scores each bound inclusively and writes records mur eval reads, the dataset_run last', () => {
    const config = scoring.readEvalConfig(
      JSON.stringify({
        scorers: [
          { type: 'exit_ok', name: 'ok' },
          { type: 'max_turns', name: 'turns', max: 3 },
          { type: 'max_tokens', name: 'tokens', max: 59 },
          { type: 'tool_sequence', name: 'tools', expected: ['read'] },
        ],
      }),
    );
    const records = scoring.evalRecords(config, SESSION, ['read'], { datasetId: 'ds', caseId: 'c1' }, 42);
    const scores = records.slice(0, -1).map((record) => EventScoreRecordSchema.parse(record));
    expect(scores.map(({ scorer, result, reason }) => ({ scorer, result, reason }))).toEqual([
      { scorer: 'ok', result: 'pass', reason: 'exit_status=ok' },
      { scorer: 'turns', result: 'pass', reason: 'turns=3 max=3' },
      { scorer: 'tokens', result: 'fail', reason: 'tokens=60 max=59' },
      { scorer: 'tools', result: 'pass', reason: 'expected=[read] observed=[read]' },
    ]);
    expect(DatasetRunRecordSchema.parse(records.at(-1))).toEqual({
      record_type: 'dataset_run',
      ts: 42,
      dataset_id: 'ds',
      case_id: 'c1',
      overall: 'fail',
      scores: { ok: 1, turns: 1, tokens: 0, tools: 1 },
    });
    expect(scoring.evalFileText(records).split('\n')).toHaveLength(records.length + 1);
  });

  it('summarises a session no scorer scored as no_scores', () => {
    const config = scoring.readEvalConfig('{"scorers":[{"type":"llm_judge"}]}');
    expect(scoring.evalRecords(config, { ...SESSION, exitStatus: 'failed' }, [], { datasetId: null, caseId: null }, 1)).toEqual([
      { record_type: 'dataset_run', ts: 1, dataset_id: null, case_id: null, overall: 'no_scores', scores: {} },
    ]);
  });

  it('builds as one module of plain declarations: scoring.js imports and exports nothing, hook.js after it', () => {
    const source = hookSource('eval');
    const [scoringPart] = source.split("import { getEnvironment } from 'wasi:cli/environment@0.2.12';");
    expect(scoringPart).not.toMatch(/^\s*(import|export)\s/m);
    expect(source).toContain('export const lifecycle = {');
  });
});
