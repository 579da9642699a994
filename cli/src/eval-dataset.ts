import { promises as fs } from 'node:fs';
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
 * A relative `task_path` is taken from the directory `mur` runs in, as upstream takes it.
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
        ? new MurmurError('E-IO-001', 'no dataset found. Expected ./eval.jsonl or specify with --dataset <path>', { path: file })
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
    const taskFile = path.resolve(cwd, parsed.data.task_path);
    // Read as mur run reads --task, every case before the first runs: a FIFO here held mur eval
    // run for ever, and a file larger than a launch was refused only once the cases before it ran.
    const task = readTaskFile(
      taskFile,
      `${where}: task_path '${parsed.data.task_path}' of case '${oneLine(parsed.data.case_id)}'`,
      'a relative task_path is taken from the directory mur eval run runs in',
    );
    cases.push({ caseId: parsed.data.case_id, task });
  }
  if (cases.length === 0)
    throw new MurmurError('E-IO-003', `dataset is empty: ${file}`, { path: file, hint: 'add one line per case: {"case_id": "…", "task_path": "…"}' });
  return { file, cases };
}
