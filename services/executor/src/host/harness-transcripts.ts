import { closeSync, constants, fstatSync, lstatSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from './atomic-file.js';
import type { HarnessSessionStore } from './harness-loop.js';

/**
 * A context's harness transcript in the session's home, for one run: the executor keeps it
 * (`harness-sessions.ts` says why), so it is put where the harness finds its session before a
 * run that resumes it, and handed back and taken out of the home after. The home is writable by
 * the capsule's tools, so what is read from it is a file of its own, never a link.
 */

/**
 * Puts a kept transcript where the harness looks for its session: under the project of its
 * working directory (Claude Code names it by the path, every character but a letter or digit a
 * `-`), in place of any copy of that session the home held.
 */
export function placeTranscript(projects: string, workdir: string, sessionId: string, transcript: Buffer): void {
  for (const copy of transcriptCopies(projects, sessionId)) rmSync(copy.file, { force: true });
  writeFileAtomic(path.join(projects, workdir.replace(/[^A-Za-z0-9]/g, '-'), `${sessionId}.jsonl`), transcript);
}

/**
 * Gives the executor what the run left of the session (the newest copy in the home), and takes it
 * out of the home once kept. Never a throw: the answer stands whatever becomes of its transcript,
 * which then stays in the home for as long as the session lives (the executor says why it kept none).
 */
export async function handBackTranscript(
  sessions: Pick<HarnessSessionStore, 'keepTranscript'>,
  projects: string,
  contextId: string,
  sessionId: string,
  limitBytes: number,
): Promise<void> {
  const copies = transcriptCopies(projects, sessionId);
  const newest = copies.sort((a, b) => b.modifiedMs - a.modifiedMs)[0];
  if (!newest) return;
  try {
    const transcript = readTranscript(newest.file, limitBytes);
    if (transcript === undefined) return;
    if (await sessions.keepTranscript(contextId, sessionId, transcript)) for (const copy of copies) rmSync(copy.file, { force: true });
  } catch {}
}

/** Every `<project>/<session-id>.jsonl` in the home that is a file of its own (a link, planted by a tool, is not one). */
function transcriptCopies(projects: string, sessionId: string): Array<{ file: string; modifiedMs: number }> {
  const copies: Array<{ file: string; modifiedMs: number }> = [];
  let names: string[];
  try {
    names = readdirSync(projects);
  } catch {
    return copies;
  }
  for (const name of names) {
    const file = path.join(projects, name, `${sessionId}.jsonl`);
    try {
      const stat = lstatSync(file);
      if (stat.isFile()) copies.push({ file, modifiedMs: stat.mtimeMs });
    } catch {}
  }
  return copies;
}

/** The file's bytes, or its size when it is larger than the executor keeps; read through no link at its end, and undefined when it is not a file. */
function readTranscript(file: string, limitBytes: number): Buffer | { oversizedBytes: number } | undefined {
  // Never waited on: a tool can swap a FIFO in after the listing saw a file, and a blocking open would hold the host's only thread.
  const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return undefined;
    if (stat.size > limitBytes) return { oversizedBytes: stat.size };
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}
