import { constants as fsConstants, promises as fs } from 'node:fs';
import { normaliseEntryName } from '../file-set.js';
import { MurmurError } from '../errors.js';
import { SessionIdSchema, notASessionId } from '../ids.js';
import { SESSION_LOCATIONS_BUCKET, type SessionFileEntry, type SessionFilesReply, type SessionLocation, SessionLocationSchema } from '../launch.js';
import { commands } from '../topics.js';
import type { Bus } from '../bus/bus.js';
import { removedIfInterrupted, temporarySibling } from './atomic.js';

/**
 * A session's workdir, read from wherever it lives: the stack records which executor holds each
 * session (`murmur-sessions`), and only that executor can read it, a slice at a time
 * (`executor.<id>.files`). Every path stays inside the workdir (the executor refuses one that does
 * not, `E-SES-002`). `mur files`, `mur run`'s result fetch and the dashboard's timeline all read
 * through here.
 */

/** Which executor holds a session, and the session: all a read needs. */
export type SessionHolder = Pick<SessionLocation, 'executor_id' | 'session_id'>;

/** Where a user finds a session's id: `mur ps` shows only the running ones, and an ended session's files are still read. */
const FINDING_A_SESSION =
  "'mur ps' lists the stack's running sessions; a session that has ended is still read by the id its launch printed ('session:' from mur run, 'session_id' with --json)";

/**
 * Refuses a session whose workdir its executor removed past its retention (`E-SES-001`): there is
 * nothing left to read, and the reader is told why rather than that no such session ever was.
 */
export function refuseRemovedWorkdir(location: SessionLocation): void {
  if (location.workdir_removed_at === undefined) return;
  throw new MurmurError(
    'E-SES-001',
    `the workdir of session '${location.session_id}'${location.ended_at ? `, which ended at ${location.ended_at},` : ''} was removed at ${location.workdir_removed_at} by executor ${location.workdir_removed_by ?? location.executor_id}, past the retention its operator set (MURMUR_SESSION_RETENTION_HOURS)`,
    {
      path: location.session_id,
      hint: "copy what a session leaves with 'mur files' before the retention passes, or raise MURMUR_SESSION_RETENTION_HOURS on the executors",
    },
  );
}

/** Where the session lives, from the stack's record of it; refused when there is none, or its workdir was removed. */
export async function locateSession(bus: Bus, sessionId: string): Promise<SessionLocation> {
  if (!SessionIdSchema.safeParse(sessionId).success)
    throw new MurmurError('E-SES-001', notASessionId(sessionId), {
      path: sessionId.slice(0, 80),
      hint: FINDING_A_SESSION,
    });
  const raw = await (await bus.keyValue(SESSION_LOCATIONS_BUCKET)).get(`session.${sessionId}`);
  const parsed = raw === undefined ? undefined : SessionLocationSchema.safeParse(JSON.parse(raw));
  if (!parsed?.success)
    throw new MurmurError('E-SES-001', `no session '${sessionId}' is known on ${bus.description}`, { path: sessionId, hint: FINDING_A_SESSION });
  refuseRemovedWorkdir(parsed.data);
  return parsed.data;
}

/**
 * A path in a session's workdir as a read takes it: `''` for the workdir's top, else the path held
 * to an archive entry's rules (relative, no `..`, at most 1 024 bytes), or refused (`E-SES-002`).
 * The executor holds every request to it; `askExecutor` holds its own first, so a path past what a
 * request carries is refused in these words, not as a bus contract's.
 */
export function sessionFilePath(wanted: string): string {
  const trimmed = wanted.trim();
  if (trimmed === '' || trimmed === '.' || trimmed === './') return '';
  const normal = normaliseEntryName(trimmed);
  if (!normal.ok)
    throw new MurmurError(
      'E-SES-002',
      `'${trimmed.length > 200 ? `${trimmed.slice(0, 200)}…` : trimmed}' is not a path inside the session's workdir: it ${normal.reason}`,
      {
        path: trimmed.slice(0, 200),
        hint: "give a path relative to the session's workdir, as 'mur files <session>' lists it",
      },
    );
  return normal.name;
}

/** One request to the executor that holds the session, its silence turned into a refusal that names it. */
export async function askExecutor(bus: Bus, holder: SessionHolder, query: { path: string; offset?: number; after?: string }): Promise<SessionFilesReply> {
  sessionFilePath(query.path);
  try {
    return await bus.request(
      commands.sessionFiles.at(holder.executor_id),
      { session_id: holder.session_id, path: query.path, offset: query.offset ?? 0, ...(query.after === undefined ? {} : { after: query.after }) },
      { timeoutMs: 15_000 },
    );
  } catch (error) {
    if (error instanceof MurmurError && (error.code === 'E-BUS-004' || error.code === 'E-BUS-003')) {
      throw new MurmurError('E-SES-003', `executor ${holder.executor_id}, which holds session ${holder.session_id}, does not answer (${error.code})`, {
        path: holder.session_id,
      });
    }
    throw error;
  }
}

/**
 * A directory's entries, page after page: `first` is its first page, as `askExecutor` answered it.
 * A directory that became something else between pages is refused, as a file that did is.
 */
export async function* directoryEntries(bus: Bus, holder: SessionHolder, first: SessionFilesReply & { type: 'directory' }): AsyncIterable<SessionFileEntry> {
  let page: SessionFilesReply & { type: 'directory' } = first;
  for (;;) {
    yield* page.entries;
    if (page.next === undefined) return;
    const next: SessionFilesReply = await askExecutor(bus, holder, { path: first.path, after: page.next });
    if (next.type !== 'directory')
      throw new MurmurError('E-IO-003', `'${first.path}' in session ${holder.session_id} changed into a file while it was listed`, { path: first.path });
    page = next;
  }
}

/**
 * A file's bytes, slice by slice, each checked against the size the first slice announced; with
 * `limitBytes`, no slice is asked for once that many bytes came (the last may go past it).
 */
export async function* sessionFileChunks(
  bus: Bus,
  holder: SessionHolder,
  relative: string,
  options: { first?: SessionFilesReply & { type: 'file' }; limitBytes?: number } = {},
): AsyncIterable<Buffer> {
  let reply = options.first ?? (await askExecutor(bus, holder, { path: relative }));
  if (reply.type !== 'file') throw new MurmurError('E-IO-003', `'${relative}' in session ${holder.session_id} is a directory, not a file`, { path: relative });
  const size = reply.size;
  const limit = options.limitBytes ?? Number.POSITIVE_INFINITY;
  let offset = 0;
  for (;;) {
    const chunk = Buffer.from(reply.data, 'base64');
    if (chunk.length > 0) yield chunk;
    offset += chunk.length;
    if (offset >= size || offset >= limit || chunk.length === 0) return;
    const next = await askExecutor(bus, holder, { path: relative, offset });
    if (next.type !== 'file')
      throw new MurmurError('E-IO-003', `'${relative}' in session ${holder.session_id} changed into a directory while it was read`, { path: relative });
    reply = next;
  }
}

/**
 * A file of the session written to `target` whole or not at all, never held in memory whole (a
 * session may leave gigabytes): its slices go into a new temporary sibling (`wx`: one already there
 * is not written through), renamed over `target` once complete; removed if the read fails or the
 * process is interrupted (Ctrl-C) meanwhile. With `exclusive`, a `target` already there is refused
 * rather than replaced. Returns its size.
 */
export async function writeSessionFile(
  bus: Bus,
  holder: SessionHolder,
  relative: string,
  target: string,
  options: { first?: SessionFilesReply & { type: 'file' }; exclusive?: boolean } = {},
): Promise<number> {
  const temporary = temporarySibling(target);
  const handle = await fs.open(temporary, 'wx');
  const release = removedIfInterrupted(temporary);
  let bytes = 0;
  try {
    for await (const chunk of sessionFileChunks(bus, holder, relative, options.first ? { first: options.first } : {})) {
      await handle.write(chunk);
      bytes += chunk.length;
    }
    await handle.close();
    if (options.exclusive) {
      // A hard link fails where the name is taken: nothing already there is replaced. Where the
      // filesystem has no hard links (FAT, some network mounts), an exclusive copy does the same.
      await fs.link(temporary, target).catch(async (error: NodeJS.ErrnoException) => {
        if (error.code !== 'EPERM' && error.code !== 'ENOTSUP' && error.code !== 'EOPNOTSUPP') throw error;
        await fs.copyFile(temporary, target, fsConstants.COPYFILE_EXCL);
      });
      await fs.rm(temporary, { force: true });
    } else await fs.rename(temporary, target);
    return bytes;
  } catch (error) {
    await handle.close().catch(() => {});
    await fs.rm(temporary, { force: true });
    throw error;
  } finally {
    release();
  }
}
