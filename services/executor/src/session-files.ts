import { constants, promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type SessionFileEntry, type SessionFilesReply, normaliseEntryName } from '@murmur/shared';
import { sessionFilePath } from '@murmur/shared/node';

/**
 * A session's workdir, read for someone outside it (`mur files`): read-only, and never beyond the
 * workdir. The guest may have written anything there — symlinks to the executor's own files, a
 * FIFO that would block a reader — and may still be writing, so a path is not trusted because it
 * looked safe a moment ago: the path is resolved first, following links, to a descriptor that
 * names what it found without opening it (`O_PATH`: no FIFO's writer is woken, no device's driver
 * is called — a link to a host FIFO let its writer's open return before), and what was found, as
 * the kernel names it (`/proc/self/fd/N`), must lie inside the workdir. Only a regular file or a
 * directory is then opened, through that descriptor: the same file, whatever its path names by now.
 */

/** `O_PATH` (Linux; the same on every architecture node runs on), which node's constants leave out. */
const O_PATH = 0o10000000;

export interface FilesQuery {
  path: string;
  offset: number;
  length: number;
  after?: string | undefined;
}

function refuse(relative: string, reason: string): never {
  throw new MurmurError('E-SES-002', `'${relative}' ${reason}`, { path: relative });
}

export async function readSessionFiles(workdir: string, query: FilesQuery): Promise<SessionFilesReply> {
  const relative = sessionFilePath(query.path);
  const root = await fs.realpath(workdir);
  const shown = relative === '' ? '.' : relative;
  // The workdir was recorded as it resolved at launch. One that resolves elsewhere now was
  // replaced by a link — a delegated child's, by its parent's guest where no bubblewrap made
  // children/ read-only to it, or by an earlier guest of a reused workdir — and reading beneath
  // where it leads would read the host.
  if (root !== path.resolve(workdir))
    refuse(shown, `cannot be read: the session's workdir ${workdir} now resolves to ${root}, so something replaced it with a link; nothing was read`);
  let found: fs.FileHandle;
  try {
    found = await fs.open(path.join(root, relative), O_PATH);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') {
      // What is there is one listing away: the directory it was looked for in, or the workdir's top.
      const above = path.posix.dirname(shown);
      throw new MurmurError('E-IO-001', `'${shown}' does not exist in the session's workdir`, {
        path: shown,
        hint: `list ${above === '.' ? "the workdir's top" : `'${above}'`} to see what the session left there`,
      });
    }
    if (code === 'ELOOP') refuse(shown, 'is a loop of symlinks');
    throw new MurmurError('E-IO-003', `'${shown}' cannot be read: ${code ?? (error as Error).message}`, { path: shown });
  }
  try {
    const located = `/proc/self/fd/${found.fd}`;
    const opened = await fs.readlink(located);
    if (opened !== root && !opened.startsWith(`${root}${path.sep}`)) refuse(shown, "resolves outside the session's workdir; nothing was opened");
    const stat = await found.stat();
    if (stat.isDirectory()) return { type: 'directory', path: shown, ...(await listDirectory(located, query.after)) };
    if (!stat.isFile()) refuse(shown, 'is not a regular file or a directory');
    const handle = await fs.open(located, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
    try {
      const length = Math.max(0, Math.min(query.length, stat.size - query.offset));
      const buffer = Buffer.alloc(length);
      const { bytesRead } = length > 0 ? await handle.read(buffer, 0, length, query.offset) : { bytesRead: 0 };
      return { type: 'file', path: shown, size: stat.size, offset: query.offset, data: buffer.subarray(0, bytesRead).toString('base64') };
    } finally {
      await handle.close();
    }
  } finally {
    await found.close();
  }
}

/**
 * A file name as a listing gives it: as it is when it is UTF-8, else each byte past ASCII's
 * printable ones as `\xNN` — a guest's shell names a file with any bytes, and one of them dropped
 * from the listing hid it from whoever looked.
 */
function shownName(bytes: Buffer): { name: string; askable: boolean } {
  const text = bytes.toString('utf8');
  if (Buffer.from(text, 'utf8').equals(bytes)) return { name: text, askable: normaliseEntryName(text).ok };
  const escaped = [...bytes].map((byte) =>
    byte >= 0x20 && byte < 0x7f && byte !== 0x5c ? String.fromCharCode(byte) : `\\x${byte.toString(16).padStart(2, '0')}`,
  );
  return { name: escaped.join(''), askable: false };
}

/**
 * How much of a directory's listing one reply carries, as JSON: well inside a bus message (1 MiB),
 * which a guest's directory of many long names outgrew.
 */
const DIRECTORY_PAGE_BYTES = 256 * 1024;

/**
 * The directory that was opened, through its descriptor (not whatever its path names by now), in
 * name order from the first name after `after`, as many entries as a page holds.
 */
async function listDirectory(opened: string, after: string | undefined): Promise<{ entries: SessionFileEntry[]; next?: string }> {
  const names = (await fs.readdir(opened, { encoding: 'buffer' }))
    .map((bytes) => ({ bytes, ...shownName(bytes) }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const entries: SessionFileEntry[] = [];
  let bytes = 0;
  const from = after === undefined ? 0 : names.findIndex((found) => found.name > after);
  for (let index = from < 0 ? names.length : from; index < names.length; index += 1) {
    const { name, askable, bytes: raw } = names[index] as (typeof names)[number];
    const stat = await fs.lstat(Buffer.concat([Buffer.from(`${opened}/`), raw])).catch(() => undefined);
    if (!stat) continue;
    const entry: SessionFileEntry = {
      name,
      // A name no path can ask for again (not UTF-8, a control character, a backslash) is listed as what it cannot be read as.
      type: stat.isFile() && askable ? 'file' : stat.isDirectory() && askable ? 'directory' : 'other',
      size: stat.isFile() ? stat.size : 0,
      modified_at: stat.mtime.toISOString(),
    };
    bytes += Buffer.byteLength(JSON.stringify(entry)) + 1;
    if (bytes > DIRECTORY_PAGE_BYTES && entries.length > 0) return { entries, next: (entries.at(-1) as SessionFileEntry).name };
    entries.push(entry);
  }
  return { entries };
}
