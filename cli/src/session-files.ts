import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFilesReply } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { type SessionHolder, askExecutor, removeEmptyParents, writeSessionFile } from '@murmur/shared/node';

/**
 * Copies one file of a session this process launched to `target` (whole or not at all); false
 * when the session has no such file. The executor is the one whose launch reply named it, not
 * looked up in the stack's record of where sessions live: that record is written after the launch
 * reply and may not be there yet when a quick session has already ended (the first run against a
 * fresh stack, whose executor is still making the bucket, lost its result that way).
 */
export async function fetchSessionFile(bus: Bus, holder: SessionHolder, relative: string, target: string): Promise<boolean> {
  let first: SessionFilesReply;
  try {
    first = await askExecutor(bus, holder, { path: relative });
  } catch (error) {
    if (error instanceof MurmurError && error.code === 'E-IO-001') return false;
    throw error;
  }
  if (first.type !== 'file') return false;
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
