import path from 'node:path';
import {
  type DatasetRunRecord,
  DatasetRunRecordSchema,
  EVAL_FILE,
  type EvalOverall,
  type EventScoreRecord,
  EventScoreRecordSchema,
  MurmurError,
} from '@murmur/shared';
import { readRecordFile, readTailOfFile, systemFailureCode, systemFailureHint } from '@murmur/shared/node';
import { type SessionRecordKind, resolveSessionRecord } from './session-selector.js';

/**
 * A session's `eval.jsonl`, found and read as `mur eval` reads it.
 *
 * Finding is `mur trace`'s (`session-selector.ts`): the newest session, a full id, a suffix of
 * one, `@N`, or a path; sessions are the `ses_*` directories of the workdir (`./workdir` unless
 * `--workdir` says otherwise) and of its `.murmur/`.
 *
 * Reading is forgiving where upstream is strict: a line that is not a record of a known type is
 * skipped and counted, never fatal, because the file is written by a hook, possibly a third
 * party's, and one bad line should not hide the scores around it. A record type this reader does
 * not know is ignored, as readers of `trace.jsonl` ignore unknown event types.
 */

/** What a selector found: the file, and the session it belongs to when a session was selected. */
export interface EvalFileChoice {
  file: string;
  sessionId?: string;
}

export interface SkippedLine {
  line: number;
  reason: string;
}

export interface EvalFileContents {
  file: string;
  eventScores: EventScoreRecord[];
  /** The last `dataset_run` record, when there is one. */
  datasetRun: DatasetRunRecord | undefined;
  skipped: SkippedLine[];
}

export interface ScorerTally {
  pass: number;
  fail: number;
}

const EVAL_RECORDS: SessionRecordKind = { file: EVAL_FILE, code: 'E-EVAL-002', noun: 'eval file' };

/** The eval file a selector names under `workdir` (the selectors of `mur trace`). */
export function selectEvalFile(selector: string | undefined, workdir: string): Promise<EvalFileChoice> {
  return resolveSessionRecord(selector, workdir, EVAL_RECORDS);
}

/** One line as a record: the record, `ignored` for a type this reader does not know, or why it is unreadable. */
function readLine(text: string): { record: EventScoreRecord | DatasetRunRecord } | { ignored: true } | { unreadable: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // Not the parser's message: it quotes the line, which may be anything a guest linked or wrote there.
    return { unreadable: 'not JSON' };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { unreadable: 'not a JSON object' };
  const recordType = (value as { record_type?: unknown }).record_type;
  const schema = recordType === 'event_score' ? EventScoreRecordSchema : recordType === 'dataset_run' ? DatasetRunRecordSchema : undefined;
  if (schema === undefined) return typeof recordType === 'string' ? { ignored: true } : { unreadable: 'no record_type' };
  const parsed = schema.safeParse(value);
  if (parsed.success) return { record: parsed.data };
  const issue = parsed.error.issues[0];
  return { unreadable: `${recordType} record: ${issue ? `${issue.path.join('.') || 'record'}: ${issue.message}` : 'invalid'}` };
}

/**
 * Reads an eval file. A missing file is refused: as `E-EVAL-002` when it was a session's (the
 * session wrote no scores), as `E-IO-001` when the path was given.
 */
/** How much of a trace's end is read for its last `session_end`: an agent writes one after each task. */
const TRACE_TAIL_BYTES = 256 * 1024;

/**
 * The end of a session's `trace.jsonl`, or undefined for none: its guest writes the workdir, so it
 * is read as the executor reads it, through no link and without waiting (a FIFO), and only its
 * tail, where a `session_end` lies, not a trace of hundreds of megabytes whole.
 */
function traceTail(file: string): string | undefined {
  return readTailOfFile(file, TRACE_TAIL_BYTES);
}

export async function readEvalFile(choice: EvalFileChoice): Promise<EvalFileContents> {
  const { file } = choice;
  let text: string;
  try {
    text = await readRecordFile(file);
  } catch (error) {
    if (error instanceof MurmurError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && choice.sessionId !== undefined) {
      // The hook writes it as the session ends: a session that never reached its end (stopped,
      // still running) was scored by nothing, however its capsule is declared.
      const trace = traceTail(path.join(path.dirname(file), 'trace.jsonl'));
      const ended = trace === undefined || trace.includes('"event_type":"session_end"');
      throw new MurmurError('E-EVAL-002', `session ${choice.sessionId} has no ${EVAL_FILE} (${file})`, {
        path: file,
        hint: ended
          ? 'declare murmur-hook-eval in the capsule\'s artifacts: (with capabilities.filesystem.scope: ".") and set observability.eval.scorers'
          : 'the session did not reach its end (its trace.jsonl has no session_end: it was stopped, or still runs), so nothing scored it; run the case again',
      });
    }
    if (code === 'ENOENT') throw new MurmurError('E-IO-001', `eval file not found: ${file}`, { path: file });
    throw new MurmurError(systemFailureCode(error), `failed to read ${file}: ${code ?? (error as Error).message}`, {
      path: file,
      hint: systemFailureHint(error),
    });
  }
  const contents: EvalFileContents = { file, eventScores: [], datasetRun: undefined, skipped: [] };
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '') return;
    const read = readLine(line);
    if ('unreadable' in read) contents.skipped.push({ line: index + 1, reason: read.unreadable });
    else if ('record' in read) {
      if (read.record.record_type === 'event_score') contents.eventScores.push(read.record);
      else contents.datasetRun = read.record;
    }
  });
  return contents;
}

/** Pass and fail counts by scorer, in scorer-name order. */
export function tallyByScorer(contents: EvalFileContents): Map<string, ScorerTally> {
  const tallies = new Map<string, ScorerTally>();
  for (const score of contents.eventScores) {
    const tally = tallies.get(score.scorer) ?? { pass: 0, fail: 0 };
    if (score.result === 'pass') tally.pass += 1;
    else tally.fail += 1;
    tallies.set(score.scorer, tally);
  }
  return new Map([...tallies].sort(([left], [right]) => (left < right ? -1 : left > right ? 1 : 0)));
}

/** The session's verdict: its `dataset_run`'s, else `pass` when every scorer passed every time, `no_scores` when none scored. */
export function overallOf(contents: EvalFileContents): EvalOverall {
  if (contents.datasetRun) return contents.datasetRun.overall;
  const tallies = [...tallyByScorer(contents).values()];
  if (tallies.length === 0) return 'no_scores';
  return tallies.every((tally) => tally.fail === 0 && tally.pass > 0) ? 'pass' : 'fail';
}

/** The skipped lines in one warning (`E-EVAL-001`, the code of an unreadable eval line), or undefined when none was. */
export function skippedWarning(contents: EvalFileContents): string | undefined {
  const { skipped } = contents;
  if (skipped.length === 0) return undefined;
  const shown = skipped
    .slice(0, 3)
    .map((entry) => `line ${entry.line} (${entry.reason})`)
    .join(', ');
  const more = skipped.length > 3 ? `, and ${skipped.length - 3} more` : '';
  return `warning[E-EVAL-001]: skipped ${skipped.length} unreadable line${skipped.length === 1 ? '' : 's'} in ${contents.file}: ${shown}${more}`;
}
