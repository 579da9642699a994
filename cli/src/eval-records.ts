import { existsSync, promises as fs, readdirSync, statSync } from 'node:fs';
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

/**
 * A session's `eval.jsonl`, found and read as `mur eval` reads it.
 *
 * Finding (upstream's selectors, shared with `mur trace`): nothing for the newest session (session
 * ids sort by time), a full `ses_…` id, a case-insensitive suffix of one, `@N` for the N-th newest,
 * or a path to the file itself (anything with a `/` or ending in `.jsonl`). Sessions are the
 * `ses_*` directories of the workdir, `./workdir` unless `--workdir` says otherwise.
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

const FULL_SESSION_ID = /^ses_[0-9a-f]{32}$/i;

function sessionDirectories(workdir: string): string[] {
  if (!existsSync(workdir) || !statSync(workdir).isDirectory()) return [];
  try {
    return readdirSync(workdir, { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && entry.name.startsWith('ses_'))
      .map((entry) => entry.name)
      .sort();
  } catch (error) {
    throw new MurmurError('E-IO-003', `failed to read ${workdir}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { path: workdir });
  }
}

function noSessions(workdir: string): MurmurError {
  return new MurmurError('E-EVAL-002', `no sessions found in workdir at ${workdir}`, {
    path: workdir,
    hint: 'run the capsule first (mur run, mur eval run), or point --workdir at the directory holding its ses_* sessions',
  });
}

/** The `ses_*` directory a selector names (never a path). */
function selectSession(selector: string | undefined, workdir: string): string {
  if (selector === undefined) {
    const newest = sessionDirectories(workdir).at(-1);
    if (newest === undefined) throw noSessions(workdir);
    return newest;
  }
  if (selector.startsWith('@')) {
    const ordinal = selector.slice(1);
    if (!/^\d+$/.test(ordinal)) throw new MurmurError('E-EVAL-002', `invalid ordinal '${selector}' — expected @1, @2, ...`, { path: selector });
    const n = Number(ordinal);
    if (n === 0) throw new MurmurError('E-EVAL-002', 'ordinal must be @1 or higher', { path: selector });
    const newestFirst = sessionDirectories(workdir).reverse();
    if (newestFirst.length === 0) throw noSessions(workdir);
    const chosen = newestFirst[n - 1];
    if (chosen === undefined) {
      throw new MurmurError('E-EVAL-002', `@${n} is out of range — workdir has ${newestFirst.length} session${newestFirst.length === 1 ? '' : 's'}`, {
        path: selector,
      });
    }
    return chosen;
  }
  if (FULL_SESSION_ID.test(selector)) {
    if (!existsSync(path.join(workdir, selector))) throw new MurmurError('E-EVAL-002', `session ${selector} not found in ${workdir}`, { path: selector });
    return selector;
  }
  const suffix = selector.toLowerCase();
  const matches = sessionDirectories(workdir).filter((name) => name.toLowerCase().endsWith(suffix));
  if (matches.length === 0) throw new MurmurError('E-EVAL-002', `no session found matching suffix '${selector}' in ${workdir}`, { path: selector });
  if (matches.length > 1) {
    throw new MurmurError(
      'E-EVAL-002',
      `ambiguous: '${selector}' matches ${matches.length} sessions — provide more characters\n${matches.map((name) => `  ${name}`).join('\n')}`,
      { path: selector },
    );
  }
  return matches[0] as string;
}

/** The eval file a selector names under `workdir`. */
export function selectEvalFile(selector: string | undefined, workdir: string): EvalFileChoice {
  if (selector !== undefined && (selector.includes('/') || selector.endsWith('.jsonl'))) return { file: selector };
  const sessionId = selectSession(selector, workdir);
  return { file: path.join(workdir, sessionId, EVAL_FILE), sessionId };
}

/** One line as a record: the record, `ignored` for a type this reader does not know, or why it is unreadable. */
function readLine(text: string): { record: EventScoreRecord | DatasetRunRecord } | { ignored: true } | { unreadable: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { unreadable: `not JSON (${(error as Error).message})` };
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
export async function readEvalFile(choice: EvalFileChoice): Promise<EvalFileContents> {
  const { file } = choice;
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && choice.sessionId !== undefined) {
      throw new MurmurError('E-EVAL-002', `session ${choice.sessionId} has no ${EVAL_FILE} (${file})`, {
        path: file,
        hint: 'declare murmur-hook-eval in the capsule\'s artifacts: (with capabilities.filesystem.scope: ".") and set observability.eval.scorers',
      });
    }
    if (code === 'ENOENT') throw new MurmurError('E-IO-001', `eval file not found: ${file}`, { path: file });
    throw new MurmurError('E-IO-003', `failed to read ${file}: ${code ?? (error as Error).message}`, { path: file });
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
