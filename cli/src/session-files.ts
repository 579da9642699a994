import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFilesReply } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { type SessionHolder, askExecutor, removeEmptyParents, writeSessionFile } from '@murmur/shared/node';

/** The most of one file `mur run` and `mur eval` fetch from a session's executor unasked. */
export const FETCHED_FILE_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Copies one file of a session this process launched to `target` (whole or not at all); false
 * when the session has no such file, refused (`E-IO-003`) when it is larger than `limitBytes`. The executor is the one whose launch reply named it, not
 * looked up in the stack's record of where sessions live: that record is written after the launch
 * reply and may not be there yet when a quick session has already ended (the first run against a
 * fresh stack, whose executor is still making the bucket, lost its result that way).
 */
export async function fetchSessionFile(
  bus: Bus,
  holder: SessionHolder,
  relative: string,
  target: string,
  limitBytes = FETCHED_FILE_MAX_BYTES,
): Promise<boolean> {
  let first: SessionFilesReply;
  try {
    first = await askExecutor(bus, holder, { path: relative });
  } catch (error) {
    if (error instanceof MurmurError && error.code === 'E-IO-001') return false;
    throw error;
  }
  if (first.type !== 'file') return false;
  // Its size is the session's to choose: a sparse gigabyte on the executor, which costs it nothing,
  // was written out whole on the launcher's disk.
  if (first.size > limitBytes)
    throw new MurmurError('E-IO-003', `${relative} is ${first.size} bytes, more than the ${limitBytes} bytes a run fetches by itself; nothing was fetched`, {
      path: relative,
      hint: `'mur files ${holder.session_id} ${relative} --out <file>' copies it whole`,
    });
  // What this made for the file goes again with a copy that failed: no empty out/ left where a
  // script would look for the answer and find a run that seems to have given none.
  const made = await fs.mkdir(path.dirname(target), { recursive: true });
  try {
    await writeSessionFile(bus, holder, relative, target, { first });
  } catch (error) {
    if (made !== undefined) await removeEmptyParents(path.dirname(target), path.dirname(made));
    throw error;
  }
  return true;
}
