import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFilesReply } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { askExecutor, locateSession, removeEmptyParents, writeSessionFile } from '@murmur/shared/node';

/** Copies one file of the session to `target` (whole or not at all); false when the session has no such file. */
export async function fetchSessionFile(bus: Bus, sessionId: string, relative: string, target: string): Promise<boolean> {
  const location = await locateSession(bus, sessionId);
  let first: SessionFilesReply;
  try {
    first = await askExecutor(bus, location, { path: relative });
  } catch (error) {
    if (error instanceof MurmurError && error.code === 'E-IO-001') return false;
    throw error;
  }
  if (first.type !== 'file') return false;
  // What this made for the file goes again with a copy that failed: no empty out/ left where a
  // script would look for the answer and find a run that seems to have given none.
  const made = await fs.mkdir(path.dirname(target), { recursive: true });
  try {
    await writeSessionFile(bus, location, relative, target, { first });
  } catch (error) {
    if (made !== undefined) await removeEmptyParents(path.dirname(target), path.dirname(made));
    throw error;
  }
  return true;
}
