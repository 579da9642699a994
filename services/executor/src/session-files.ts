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
 *
 * A directory is the guest's to fill, and the executor that lists it serves every session on it:
 * one listing reads at most `LISTING_ENTRIES_MAX` entries, streamed, and refuses a directory that
 * holds more (a guest's 200 000 empty files had one listing take 96 s, 67 s of it the executor's
 * one thread, and its health answer half a second). A listing read is kept, sorted, for the pages
 * that follow it (`LISTINGS_KEPT` of them, each for `LISTING_KEPT_MS`), so a page costs a binary
 * search and its own entries, not the whole directory again.
 */

/** `O_PATH` (Linux; the same on every architecture node runs on), which node's constants leave out. */
const O_PATH = 0o10000000;

export interface FilesQuery {
  path: string;
  offset: number;
  length: number;
  after?: string | undefined;
}

function refuse(relative: string, reason: string, hint?: string): never {
  throw new MurmurError('E-SES-002', `'${relative}' ${reason}`, hint === undefined ? { path: relative } : { path: relative, hint });
}

/**
 * What the executor could not open, named by its path in the workdir: the error's own words name
 * the descriptor it was opened through (`/proc/self/fd/24`), which says nothing to whoever asked.
 * A permission refused is the session's doing — its guest sets the modes of what it writes, and a
 * non-root executor is held to them — so it is said as that.
 */
function unreadable(shown: string, error: unknown): MurmurError {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM')
    return new MurmurError('E-IO-002', `'${shown}' cannot be read on the session's executor: its permissions refuse it (${code}); nothing was read`, {
      path: shown,
      hint: 'the session set those permissions on what it wrote; a session that should hand it over leaves it readable',
    });
  return new MurmurError('E-IO-003', `'${shown}' cannot be read: ${code ?? (error as Error).message}`, { path: shown });
}

/**
 * The most entries one listing reads of a directory. Reading, naming and sorting this many takes
 * the executor's thread a fraction of a second, once per listing (the sort, which is not cut into
 * slices, held it some 60 ms at once); a directory past it is refused rather than read whole, since its names, held and sorted,
 * would cost the executor time and memory every other session waits on. A workdir may still hold
 * many more files (`MURMUR_WORKDIR_MAX_ENTRIES`): spread over directories, each is listed.
 */
export const LISTING_ENTRIES_MAX = 100_000;

/**
 * How many listings are kept between pages, and for how long: one of `LISTING_ENTRIES_MAX` names
 * holds 10 MB of the executor's memory (names of 30 characters; long ones more), so a few are kept,
 * the newest, and none for longer than someone paging through one waits between pages.
 */
export const LISTINGS_KEPT = 4;
export const LISTING_KEPT_MS = 30_000;

/** The bounds a listing keeps to: the constants above, smaller in tests. */
export interface ListingLimits {
  entriesMax: number;
  kept: number;
  keptMs: number;
}

const LISTING_LIMITS: ListingLimits = { entriesMax: LISTING_ENTRIES_MAX, kept: LISTINGS_KEPT, keptMs: LISTING_KEPT_MS };

export async function readSessionFiles(workdir: string, query: FilesQuery, limits: ListingLimits = LISTING_LIMITS): Promise<SessionFilesReply> {
  const relative = sessionFilePath(query.path);
  const shown = relative === '' ? '.' : relative;
  let root: string;
  try {
    root = await fs.realpath(workdir);
  } catch (error) {
    // Removed after the session (by hand, by a cleanup): said as that, not as the executor's failure.
    if ((error as NodeJS.ErrnoException).code === 'ENOENT')
      throw new MurmurError('E-IO-001', `the session's workdir ${workdir} is no longer there: it was removed after the session`, {
        path: shown,
        hint: 'nothing of the session is left to read on its executor',
      });
    throw error;
  }
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
      // Listed, and then said not to exist: a link whose target is not there as this machine sees it.
      const isLink = (await fs.lstat(path.join(root, relative)).catch(() => undefined))?.isSymbolicLink() === true;
      if (isLink)
        throw new MurmurError('E-IO-001', `'${shown}' is a symbolic link whose target is not there on the session's executor`, {
          path: shown,
          hint: "mur files reads what a link names only where that lies in the session's workdir",
        });
      throw new MurmurError('E-IO-001', `'${shown}' does not exist in the session's workdir`, {
        path: shown,
        hint: `list ${above === '.' ? "the workdir's top" : `'${above}'`} to see what the session left there`,
      });
    }
    if (code === 'ELOOP') refuse(shown, 'is a loop of symlinks');
    throw unreadable(shown, error);
  }
  try {
    const located = `/proc/self/fd/${found.fd}`;
    const opened = await fs.readlink(located);
    if (opened !== root && !opened.startsWith(`${root}${path.sep}`)) refuse(shown, "resolves outside the session's workdir; nothing was opened");
    // In nanoseconds, as the filesystem keeps them: a listing is kept by the directory's times (`listings`).
    const stat = await found.stat({ bigint: true });
    if (stat.isDirectory()) {
      const key = [root, relative, stat.dev, stat.ino, stat.mtimeNs, stat.ctimeNs].join('\0');
      const names = await sortedNames(key, stat.ctimeNs, located, shown, limits).catch((error: unknown) => {
        throw error instanceof MurmurError ? error : unreadable(shown, error);
      });
      return { type: 'directory', path: shown, ...(await listPage(located, names, query.after)) };
    }
    if (!stat.isFile()) refuse(shown, 'is not a regular file or a directory');
    const size = Number(stat.size);
    const handle = await fs.open(located, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY).catch((error: unknown) => {
      throw unreadable(shown, error);
    });
    try {
      const length = Math.max(0, Math.min(query.length, size - query.offset));
      const buffer = Buffer.alloc(length);
      const { bytesRead } = length > 0 ? await handle.read(buffer, 0, length, query.offset) : { bytesRead: 0 };
      return { type: 'file', path: shown, size, offset: query.offset, data: buffer.subarray(0, bytesRead).toString('base64') };
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
function shownName(bytes: Buffer): { name: string; askable: boolean; escaped: boolean } {
  const text = bytes.toString('utf8');
  if (Buffer.from(text, 'utf8').equals(bytes)) return { name: text, askable: normaliseEntryName(text).ok, escaped: false };
  const escaped = [...bytes].map((byte) =>
    byte >= 0x20 && byte < 0x7f && byte !== 0x5c ? String.fromCharCode(byte) : `\\x${byte.toString(16).padStart(2, '0')}`,
  );
  return { name: escaped.join(''), askable: false, escaped: true };
}

/**
 * How much of a directory's listing one reply carries, as JSON: well inside a bus message (1 MiB),
 * which a guest's directory of many long names outgrew.
 */
const DIRECTORY_PAGE_BYTES = 256 * 1024;

/**
 * One name of a listing: as shown, whether a path can ask for it again, and its bytes where they
 * are not the shown name's UTF-8 (only then: most names are, and a kept listing holds many).
 */
interface ListedName {
  name: string;
  askable: boolean;
  raw?: Buffer;
}

interface KeptListing {
  names: Promise<ListedName[]>;
  until: number;
}

/**
 * Listings read lately, by the directory as it was when read: the session's workdir, the path
 * within it, and the directory's device, inode, and modification and change times in nanoseconds.
 * A directory that gained, lost or renamed an entry since has another change time (which, unlike
 * the modification time, no guest can set back), so it is read anew. A read still under way is
 * kept too, so pages asked for at once share it; a refusal for too many entries is kept like a
 * listing (the directory is no smaller until it changes), any other failure is not.
 */
const listings = new Map<string, KeptListing>();

/**
 * How long a directory must have been left unchanged for a listing of it to be kept. A change time
 * is the clock as the filesystem last read it — a tick behind (milliseconds; a second on a
 * filesystem that keeps no finer) — so a directory changed again within that tick keeps its time;
 * but one last changed well before it was read has only later changes to come, each of which moves
 * its change time, so a listing kept of it is never one the directory no longer matches. A
 * directory still being written is read for every page, as it would be with any time in the key.
 */
const LISTING_SETTLED_MS = 2_000n;

/** Every name in the directory, sorted: a kept listing of it if one is, else read and kept if it had settled. */
function sortedNames(key: string, changed: bigint, opened: string, shown: string, limits: ListingLimits): Promise<ListedName[]> {
  const now = Date.now();
  const kept = listings.get(key);
  if (kept && kept.until > now) return kept.names;
  const names = readNames(opened, shown, limits.entriesMax);
  if (BigInt(now) * 1_000_000n - changed < LISTING_SETTLED_MS * 1_000_000n) return names;
  const listing: KeptListing = { names, until: now + limits.keptMs };
  // The newest kept, the oldest forgotten past the bound.
  listings.delete(key);
  listings.set(key, listing);
  for (const oldest of listings.keys()) {
    if (listings.size <= limits.kept) break;
    listings.delete(oldest);
  }
  // Forgotten once its time is up, not at the next listing: one that is never paged through
  // again would otherwise hold its names until one is.
  setTimeout(() => {
    if (listings.get(key) === listing) listings.delete(key);
  }, limits.keptMs).unref();
  listing.names.catch((error: unknown) => {
    if (!(error instanceof MurmurError && error.code === 'E-SES-002') && listings.get(key) === listing) listings.delete(key);
  });
  return listing.names;
}

/**
 * The directory's names, read as the kernel gives them (not all at once: a `readdir` of it whole
 * held every name before any was counted), counted as they come, and refused past `entriesMax`;
 * then sorted by the shown name in code-unit order — the order `after` pages by.
 */
async function readNames(opened: string, shown: string, entriesMax: number): Promise<ListedName[]> {
  // 'buffer' gives each name as its bytes (node's types know only text encodings here).
  const directory = await fs.opendir(opened, { encoding: 'buffer' as BufferEncoding, bufferSize: 256 });
  const names: ListedName[] = [];
  // Leaving the loop early (a refusal) closes the directory; reading it to the end does too.
  for await (const entry of directory) {
    if (names.length === entriesMax)
      refuse(
        shown,
        `holds more than ${entriesMax} entries, more than one listing reads; nothing was listed`,
        `read a file in it by its name ('${shown === '.' ? '' : `${shown}/`}<name>'), or list one of its subdirectories`,
      );
    const bytes = entry.name as unknown as Buffer;
    const { name, askable, escaped } = shownName(bytes);
    names.push(escaped ? { name, askable, raw: bytes } : { name, askable });
  }
  return names.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The index of the first of `names` (sorted) that sorts after `after`, by halving. */
function firstAfter(names: readonly ListedName[], after: string): number {
  let low = 0;
  let high = names.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if ((names[middle] as ListedName).name > after) high = middle;
    else low = middle + 1;
  }
  return low;
}

/**
 * The directory that was opened, through its descriptor (not whatever its path names by now), in
 * name order from the first name after `after`, as many entries as a page holds.
 */
async function listPage(opened: string, names: readonly ListedName[], after: string | undefined): Promise<{ entries: SessionFileEntry[]; next?: string }> {
  const entries: SessionFileEntry[] = [];
  let bytes = 0;
  for (let index = after === undefined ? 0 : firstAfter(names, after); index < names.length; index += 1) {
    const { name, askable, raw } = names[index] as ListedName;
    const stat = await fs.lstat(raw ? Buffer.concat([Buffer.from(`${opened}/`), raw]) : `${opened}/${name}`).catch(() => undefined);
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
