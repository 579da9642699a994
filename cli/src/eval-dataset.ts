import { promises as fs, realpathSync } from 'node:fs';
import path from 'node:path';
import { DatasetCaseSchema, MurmurError } from '@murmur/shared';
import { systemFailureCode, systemFailureHint } from '@murmur/shared/node';
import { oneLine } from './output.js';
import { readTaskFile } from './task-file.js';

/**
 * A dataset for `mur eval run`: one JSON object per line, `{case_id, task_path, expected?}`.
 *
 * The whole dataset is read and every case's task file is read before the first session starts:
 * a bad line or a missing task is refused up front, naming the line, instead of after half the
 * cases have run (upstream runs a case whose task is missing without one, with a warning).
 * A relative `task_path` is taken from the directory `mur` runs in, as upstream takes it, and
 * every task file must be there, below that directory (`taskFileWithin`): a task's text is handed
 * to the capsule, and a dataset comes with a capsule as often as not (`./eval.jsonl` is the
 * default), so a line naming `/home/me/.ssh/id_ed25519` or `../../secrets.env` gave whoever wrote
 * it the operator's file, read with the operator's rights, inside a capsule that may send it on.
 */

export interface DatasetRunCase {
  caseId: string;
  /** The task file's text, written to the session's `task.md`. */
  task: string;
}

/** `--dataset`, or upstream's default `./eval.jsonl`; refused when it is not there. */
export async function readDataset(given: string | undefined, cwd: string = process.cwd()): Promise<{ file: string; cases: DatasetRunCase[] }> {
  const file = path.resolve(cwd, given ?? 'eval.jsonl');
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      throw given === undefined
        ? new MurmurError('E-IO-001', 'no dataset found. Expected ./eval.jsonl or specify with --dataset <path>', {
            path: file,
            hint: 'write one case a line to ./eval.jsonl, {"case_id": "…", "task_path": "…"}, or name a dataset with --dataset',
          })
        : new MurmurError('E-IO-001', `dataset not found at ${file}`, {
            path: file,
            hint: '--dataset names a JSONL file of cases, one per line, relative to the working directory',
          });
    }
    throw new MurmurError(systemFailureCode(error), `failed to read dataset ${file}: ${code ?? (error as Error).message}`, {
      path: file,
      hint: systemFailureHint(error),
    });
  }
  const cases: DatasetRunCase[] = [];
  const lines = text.split('\n');
  for (const [index, raw] of lines.entries()) {
    const line = raw.trim();
    if (line === '') continue;
    const where = `${file}:${index + 1}`;
    const refuse = (reason: string, hint?: string): MurmurError =>
      new MurmurError('E-EVAL-001', `${where}: ${reason}`, { path: where, hint: hint ?? 'each line is one JSON object: {"case_id": "…", "task_path": "…"}' });
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw refuse(`not JSON (${(error as Error).message})`);
    }
    const parsed = DatasetCaseSchema.safeParse(value);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const field = issue?.path[0];
      const missing = typeof field === 'string' && (value === null || typeof value !== 'object' || !(field in value));
      throw refuse(
        field === undefined ? 'expected a JSON object' : missing ? `missing field '${String(field)}'` : `'${String(field)}': ${issue?.message ?? 'invalid'}`,
      );
    }
    const named = `${where}: task_path '${oneLine(parsed.data.task_path)}' of case '${oneLine(parsed.data.case_id)}'`;
    const taskFile = taskFileWithin(cwd, path.resolve(cwd, parsed.data.task_path), named);
    // Read as mur run reads --task, every case before the first runs: a FIFO here held mur eval
    // run for ever, and a file larger than a launch was refused only once the cases before it ran.
    const task = readTaskFile(taskFile, named, 'a relative task_path is taken from the directory mur eval run runs in');
    cases.push({ caseId: parsed.data.case_id, task });
  }
  if (cases.length === 0)
    throw new MurmurError('E-IO-003', `dataset is empty: ${file}`, { path: file, hint: 'add one line per case: {"case_id": "…", "task_path": "…"}' });
  return { file, cases };
}

/**
 * `file` with its links resolved, refused (`E-EVAL-001`) unless it lies below `cwd` (itself
 * resolved): a path outside it, given outright or through a link, is no case of this run's.
 * A file that is not there is passed on as named, for the reader to say so.
 */
function taskFileWithin(cwd: string, file: string, named: string): string {
  let real: string;
  try {
    real = realpathSync(file);
  } catch {
    return file;
  }
  let root: string;
  try {
    root = realpathSync(cwd);
  } catch {
    root = path.resolve(cwd);
  }
  const relative = path.relative(root, real);
  if (!relative.startsWith(`..${path.sep}`) && relative !== '..' && !path.isAbsolute(relative)) return real;
  throw new MurmurError('E-EVAL-001', `${named} is outside the directory mur eval run runs in (${root}): ${real}`, {
    path: file,
    hint: "a task's text is handed to the capsule, so a dataset names only files below the directory it is run from; copy the task there",
  });
}
