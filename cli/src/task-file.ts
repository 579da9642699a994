import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { MurmurError } from '@murmur/shared';
import { OPEN_WITHOUT_BLOCKING, kindOf } from '@murmur/shared/node';

/** The largest task file a launch can carry: the bus's message limit (the plan rides beside it). */
export const TASK_FILE_MAX_BYTES = 1024 * 1024;

/**
 * A task file's text (`mur run --task <file>`, a dataset case's `task_path`), refused, as `named`
 * with `hint`, when it is no regular file (a FIFO's read waited for a writer for ever, a device's
 * read had no end), when it is larger than one launch carries (refused by the bus only after the
 * runs before it), or when it cannot be read. Judged by the descriptor it is read through, opened
 * without waiting.
 */
export function readTaskFile(file: string, named: string, hint: string): string {
  let fd: number;
  try {
    fd = openSync(file, OPEN_WITHOUT_BLOCKING);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new MurmurError(
      code === 'EACCES' || code === 'EPERM' ? 'E-IO-002' : 'E-IO-001',
      `${named} ${code === 'ENOENT' ? 'was not found' : `cannot be read (${code})`} at ${file}`,
      { path: file, hint },
    );
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile())
      throw new MurmurError('E-IO-001', `${named} is ${stat.isDirectory() ? 'a directory' : kindOf(stat)}, not a task file: ${file}`, { path: file, hint });
    if (stat.size > TASK_FILE_MAX_BYTES)
      throw new MurmurError(
        'E-IO-003',
        `${named} is ${stat.size} bytes; a task file is at most ${TASK_FILE_MAX_BYTES} bytes, what one launch carries: ${file}`,
        {
          path: file,
          hint: 'put large inputs beside the task in the workdir and name them in a short task',
        },
      );
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}
