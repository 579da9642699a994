import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFilesReply } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { askExecutor, locateSession, writeSessionFile } from '@murmur/shared/node';

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
    if (made !== undefined) await removeEmptyUpTo(path.dirname(target), made);
    throw error;
  }
  return true;
}

/**
 * Removes `dir` and its parents up to and including `top`, each only while it is empty: another
 * run may have put its own answer beside this one's in the meantime, and that stays.
 */
async function removeEmptyUpTo(dir: string, top: string): Promise<void> {
  for (let current = dir; current.startsWith(top); current = path.dirname(current)) {
    try {
      await fs.rmdir(current);
    } catch {
      return;
    }
    if (current === top) return;
  }
}
