import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchmodSync, fstatSync, mkdirSync, openSync, readSync, realpathSync, renameSync, rmSync, writeSync } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '../errors.js';

/**
 * Writing into a directory that a sandboxed guest can write, from outside its sandbox, without
 * following anything the guest put there.
 *
 * A session's workdir is the guest's: it can make any name in it a symbolic link — to
 * `/etc/cron.d/x`, to another session — or a FIFO. The executor writes there too, as the user it
 * runs as (root on a server): its records (`trace.jsonl`, `logs/`), a pulled tool's files, the
 * task, a completion. A write by path would follow the guest's link out of the workdir.
 *
 * So every write here starts from `root`, a directory the guest cannot replace (the workdir's bind
 * root, which the sandbox mounts and cannot rename), and walks to the file one name at a time,
 * each through the directory already opened (`/proc/self/fd/<fd>/<name>`, which is `openat(2)`),
 * refusing a name that is a link (`O_NOFOLLOW`) or not what it should be. A file is written under
 * a fresh name (`O_EXCL`) and renamed over the one it replaces, which replaces a link instead of
 * following it; an append opens the file itself, refusing a link, a FIFO (`O_NONBLOCK`: no reader
 * is waited for), anything but a regular file, and a file with another name elsewhere (a hard link
 * the guest made to something it cannot write).
 */

const DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

function refused(root: string, relative: string, why: string): MurmurError {
  return new MurmurError('E-SES-004', `refused to write ${relative} in ${root}: ${why}`, { path: path.join(root, relative) });
}

/** The names from `root` to `file`, which must be beneath it. */
function namesBeneath(root: string, file: string): string[] {
  const relative = path.relative(root, path.resolve(root, file));
  if (relative === '' || relative.startsWith('..') || path.isAbsolute(relative)) throw refused(root, file, 'it is not beneath that directory');
  return relative.split(path.sep);
}

const at = (directory: number, name: string): string => `/proc/self/fd/${directory}/${name}`;

/**
 * A system error named by the path beneath `root` it was about. Reached through a descriptor, it
 * named `/proc/self/fd/<n>/…`, which tells its reader nothing, and a failed write named no file at
 * all (`ENOSPC: no space left on device, write`).
 */
function named(error: unknown, root: string, relative: string): unknown {
  if (error instanceof MurmurError || !(error instanceof Error)) return error;
  const failure = error as NodeJS.ErrnoException;
  const shown = path.join(root, relative);
  if (failure.message.includes('/proc/self/fd/')) failure.message = failure.message.replace(/'\/proc\/self\/fd\/\d+[^']*'/g, `'${shown}'`);
  else if (!failure.message.includes(shown)) failure.message = `${failure.message} '${shown}'`;
  failure.path = shown;
  return failure;
}

/**
 * Opens `name` in `directory` as a directory, never through a link; made first when missing and
 * `make`. Opened before it is made: nearly every name on a record's way exists already (each log
 * line walks the same few), and a refused `mkdir` costs a system call and an error object each.
 */
function openDirectoryIn(directory: number, name: string, make: boolean, notADirectory: () => MurmurError): number {
  /** The directory's descriptor; undefined when it is missing and may be made. */
  const open = (mayBeMissing: boolean): number | undefined => {
    try {
      return openSync(at(directory, name), DIRECTORY);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOTDIR' || code === 'ELOOP') throw notADirectory();
      if (code === 'ENOENT' && mayBeMissing) return undefined;
      throw error;
    }
  };
  const found = open(make);
  if (found !== undefined) return found;
  try {
    mkdirSync(at(directory, name), 0o755);
  } catch (error) {
    // Made meanwhile by someone else (the guest, another writer): opened as it is, checked the same.
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  return open(false) as number;
}

/**
 * Opens the directory holding `file` (made, with its parents, when `make`), walking from `root`
 * without following a link. The caller closes the descriptor.
 */
function openParent(root: string, names: string[], make: boolean): number {
  let directory = openSync(root, DIRECTORY);
  const relative = names.join('/');
  try {
    for (const name of names.slice(0, -1)) {
      const next = openDirectoryIn(directory, name, make, () =>
        refused(root, relative, `'${name}' is a link or not a directory (something in the sandbox put it there)`),
      );
      closeSync(directory);
      directory = next;
    }
    return directory;
  } catch (error) {
    closeSync(directory);
    throw named(error, root, relative);
  }
}

/**
 * Makes `dir` and its parents beneath `root`, refusing a link on the way. `private`: `dir` itself
 * is then its owner's alone (0700), made so or made so now, through its descriptor.
 */
export function mkdirBeneath(root: string, dir: string, options: { private?: boolean } = {}): void {
  const names = namesBeneath(root, dir);
  const fd = openParent(root, [...names, '.'], true);
  try {
    if (options.private) fchmodSync(fd, 0o700);
  } catch (error) {
    // Another user's directory (a workdir shared on purpose) stays as its owner left it.
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') throw named(error, root, names.join('/'));
  } finally {
    closeSync(fd);
  }
}

/**
 * Opens `file` beneath `root` for appending (made when missing, with its directories), refusing a
 * link, a FIFO or device, and a hard link. The caller closes the descriptor.
 */
export function openAppendBeneath(root: string, file: string, mode = 0o644): number {
  const names = namesBeneath(root, file);
  const directory = openParent(root, names, true);
  const relative = names.join('/');
  let fd: number;
  try {
    fd = openSync(
      at(directory, names.at(-1) as string),
      constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK,
      mode,
    );
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENXIO' || code === 'EISDIR')
      throw refused(root, relative, 'it is a link, a FIFO or a directory (something in the sandbox put it there)');
    throw named(error, root, relative);
  } finally {
    closeSync(directory);
  }
  const stat = fstatSync(fd);
  if (!stat.isFile() || stat.nlink > 1) {
    closeSync(fd);
    throw refused(root, relative, stat.isFile() ? 'it has another name outside this file (a hard link)' : 'it is not a regular file');
  }
  return fd;
}

/**
 * The last `maxBytes` of `file` beneath `root` (all of it when shorter), or undefined when it is
 * missing, a link, a FIFO or anything but a regular file: read without following what the guest
 * put there, and without waiting on it.
 */
export function readTailBeneath(root: string, file: string, maxBytes: number): string | undefined {
  const names = namesBeneath(root, file);
  let fd: number;
  try {
    const directory = openParent(root, names, false);
    try {
      fd = openSync(at(directory, names.at(-1) as string), TAIL_READ);
    } finally {
      closeSync(directory);
    }
  } catch {
    return undefined;
  }
  return readTailOf(fd, maxBytes);
}

/** How a tail is opened: for reading, refusing a link, never waiting on a FIFO. */
export const TAIL_READ = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * The last `maxBytes` of `file` by its path, with `readTailBeneath`'s refusals (a link, a FIFO,
 * anything but a regular file, a missing file: undefined) where no sandbox's root stands around it.
 */
export function readTailOfFile(file: string, maxBytes: number): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, TAIL_READ);
  } catch {
    return undefined;
  }
  return readTailOf(fd, maxBytes);
}

/** The last `maxBytes` of the regular file open on `fd` (undefined for anything else), which it closes. */
export function readTailOf(fd: number, maxBytes: number): string | undefined {
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return undefined;
    const length = Math.min(stat.size, maxBytes);
    const bytes = Buffer.alloc(length);
    const read = readSync(fd, bytes, 0, length, stat.size - length);
    return bytes.subarray(0, read).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Appends `text` to `file` beneath `root` (see `openAppendBeneath`). */
export function appendBeneath(root: string, file: string, text: string): void {
  const fd = openAppendBeneath(root, file);
  try {
    writeSync(fd, text);
  } catch (error) {
    throw named(error, root, namesBeneath(root, file).join('/'));
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes `file` beneath `root` whole: under a fresh name, filled by `fill`, then renamed over
 * whatever had the name (a link is replaced, never followed), its directories made.
 */
function replaceBeneath(root: string, file: string, mode: number, fill: (fd: number) => void): void {
  const names = namesBeneath(root, file);
  try {
    replaceIn(root, names, mode, fill);
  } catch (error) {
    throw named(error, root, names.join('/'));
  }
}

function replaceIn(root: string, names: string[], mode: number, fill: (fd: number) => void): void {
  const directory = openParent(root, names, true);
  const name = names.at(-1) as string;
  const staged = `.${name}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const fd = openSync(at(directory, staged), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
    try {
      fill(fd);
      fchmodSync(fd, mode);
    } catch (error) {
      closeSync(fd);
      rmSync(at(directory, staged), { force: true });
      throw error;
    }
    closeSync(fd);
    try {
      renameSync(at(directory, staged), at(directory, name));
    } catch (error) {
      rmSync(at(directory, staged), { force: true });
      if ((error as NodeJS.ErrnoException).code === 'EISDIR') throw refused(root, names.join('/'), 'it is a directory');
      throw error;
    }
  } finally {
    closeSync(directory);
  }
}

function writeAll(fd: number, bytes: Uint8Array, length = bytes.length): void {
  for (let written = 0; written < length; ) written += writeSync(fd, bytes, written, length - written);
}

/** Writes `file` beneath `root` whole (see `replaceBeneath`). */
export function writeFileBeneath(root: string, file: string, data: string | Uint8Array, mode = 0o644): void {
  replaceBeneath(root, file, mode, (fd) => writeAll(fd, typeof data === 'string' ? Buffer.from(data) : data));
}

/** Copies `source` (a file of the runtime's own, outside any workdir) to `file` beneath `root`, a chunk at a time. */
export function copyFileBeneath(root: string, source: string, file: string, mode = 0o644): void {
  const input = openSync(source, constants.O_RDONLY);
  try {
    const chunk = Buffer.allocUnsafe(1 << 20);
    replaceBeneath(root, file, mode, (fd) => {
      for (let got = readSync(input, chunk); got > 0; got = readSync(input, chunk)) writeAll(fd, chunk, got);
    });
  } finally {
    closeSync(input);
  }
}

/** `dir` with its links resolved, or resolved as written when it cannot be (it does not exist yet, or is not readable). */
export function resolvedPath(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    return path.resolve(dir);
  }
}
