import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, SESSION_LOCATIONS_BUCKET, type SessionFilesReply, type SessionLocation, SessionLocationSchema, commands } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { writeFileAtomic } from '@murmur/shared/node';

/**
 * A session's workdir, read from wherever it lives: the stack records which executor holds each
 * session (`murmur-sessions`), and only that executor can read it. Every path stays inside the
 * workdir (the executor refuses one that does not, `E-SES-002`).
 */

export async function locateSession(bus: Bus, sessionId: string): Promise<SessionLocation> {
  const raw = /^ses_[0-9a-f]{32}$/.test(sessionId) ? await (await bus.keyValue(SESSION_LOCATIONS_BUCKET)).get(`session.${sessionId}`) : undefined;
  const parsed = raw === undefined ? undefined : SessionLocationSchema.safeParse(JSON.parse(raw));
  if (!parsed?.success) throw new MurmurError('E-SES-001', `no session '${sessionId}' is known on ${bus.description}`, { path: sessionId });
  return parsed.data;
}

/** One request to the executor that holds the session, its silence turned into a refusal that names it. */
export async function askExecutor(bus: Bus, location: SessionLocation, query: { path: string; offset?: number }): Promise<SessionFilesReply> {
  try {
    return await bus.request(
      commands.sessionFiles.at(location.executor_id),
      { session_id: location.session_id, path: query.path, offset: query.offset ?? 0 },
      { timeoutMs: 15_000 },
    );
  } catch (error) {
    if (error instanceof MurmurError && (error.code === 'E-BUS-004' || error.code === 'E-BUS-003')) {
      throw new MurmurError('E-SES-003', `executor ${location.executor_id}, which holds session ${location.session_id}, does not answer (${error.code})`, {
        path: location.session_id,
      });
    }
    throw error;
  }
}

/** A file's bytes, slice by slice, each checked against the size the first slice announced. */
export async function* sessionFileChunks(
  bus: Bus,
  location: SessionLocation,
  relative: string,
  first?: SessionFilesReply & { type: 'file' },
): AsyncIterable<Buffer> {
  let reply = first ?? (await askExecutor(bus, location, { path: relative }));
  if (reply.type !== 'file')
    throw new MurmurError('E-IO-003', `'${relative}' in session ${location.session_id} is a directory, not a file`, { path: relative });
  const size = reply.size;
  let offset = 0;
  for (;;) {
    const chunk = Buffer.from(reply.data, 'base64');
    if (chunk.length > 0) yield chunk;
    offset += chunk.length;
    if (offset >= size || chunk.length === 0) return;
    const next = await askExecutor(bus, location, { path: relative, offset });
    if (next.type !== 'file')
      throw new MurmurError('E-IO-003', `'${relative}' in session ${location.session_id} changed into a directory while it was read`, { path: relative });
    reply = next;
  }
}

/** A whole file of the session, in memory (what `--out` and a fetched result write, by rename). */
export async function sessionFileBytes(bus: Bus, location: SessionLocation, relative: string, first?: SessionFilesReply & { type: 'file' }): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of sessionFileChunks(bus, location, relative, first)) parts.push(chunk);
  return Buffer.concat(parts);
}

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
  const bytes = await sessionFileBytes(bus, location, relative, first);
  await fs.mkdir(path.dirname(target), { recursive: true });
  await writeFileAtomic(target, bytes);
  return true;
}
