import { closeSync, constants, promises as fs, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { type ErrorCode, MurmurError } from '../errors.js';

/**
 * A small text file a command reads whole — a manifest, a lock, a configuration — read so that
 * whatever sits at its path cannot hold the command.
 *
 * A project is anyone's directory, and its files may be anything: a FIFO named `murmur.yaml` made
 * `mur build`, `stage`, `doctor` and `install` wait for a writer for ever, and `mur run` with them,
 * its signal handlers waiting behind the blocked read; a link to `/dev/zero` was read until memory
 * gave out. So the file is opened without blocking (a FIFO's open returns at once), judged by its
 * descriptor (a regular file, or it is refused by what it is), and read up to its bound and one
 * byte more (a file that grows as it is read, or one of `/proc`'s that says it is empty, is caught
 * by what it gave, not by what it claimed). Its text must be UTF-8: a byte that is not would be
 * read as U+FFFD here and refused as an archive's manifest later.
 *
 * What the open itself reports (`ENOENT`, `EACCES`) is thrown as it came, and a directory as
 * `EISDIR`, so each caller still says in its own words that the file is missing or unreadable.
 */
export interface SmallTextFile {
  /** What the file is to the user, for a refusal: `murmur.yaml`, `the lock`. */
  what: string;
  maxBytes: number;
  /** The code of a refusal for bytes that are not UTF-8 (default `E-IO-003`). */
  notUtf8Code?: ErrorCode;
}

/** Opening for a read that a FIFO cannot hold (its open returns at once) and a terminal cannot take over. */
export const OPEN_WITHOUT_BLOCKING = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;
const OPEN_FLAGS = OPEN_WITHOUT_BLOCKING;

/** What a file that is not a regular file is, for a refusal: `a FIFO`, `a socket`, `a device`. */
export function kindOf(stat: Stats): string {
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isSocket()) return 'a socket';
  if (stat.isCharacterDevice() || stat.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/** The refusal of what `stat` says is at `file`, or undefined for a regular file. */
function refusal(file: string, stat: Stats, options: SmallTextFile): Error | undefined {
  if (stat.isDirectory()) return Object.assign(new Error(`EISDIR: illegal operation on a directory, read '${file}'`), { code: 'EISDIR', path: file });
  if (!stat.isFile())
    return new MurmurError('E-IO-003', `${options.what} at ${file} is ${kindOf(stat)}, not a regular file: nothing was read from it`, {
      path: file,
      hint: `put the file itself at ${file}`,
    });
  if (stat.size > options.maxBytes) return tooLarge(file, stat.size, options);
  return undefined;
}

function tooLarge(file: string, size: number | undefined, options: SmallTextFile): MurmurError {
  const measure = size === undefined ? `is over ${options.maxBytes} bytes` : `is ${size} bytes; at most ${options.maxBytes} are read`;
  return new MurmurError('E-IO-003', `${options.what} at ${file} ${measure}`, { path: file, hint: `keep ${options.what} under ${options.maxBytes} bytes` });
}

/** Where a read starts: the size the file claims (a little at least, for `/proc`'s that claim none), grown as it fills. */
const FIRST_READ_BYTES = 64 * 1024;

/**
 * What a read has gathered of a file judged regular: room for the next read, grown as it fills up
 * to one byte past the bound (which tells a file over it), and the text once the file has ended.
 */
class Gathered {
  private buffer: Buffer;
  private length = 0;

  constructor(
    private readonly file: string,
    stat: Stats,
    private readonly options: SmallTextFile,
  ) {
    this.buffer = Buffer.allocUnsafe(Math.min(Math.max(stat.size, FIRST_READ_BYTES), options.maxBytes) + 1);
  }

  /** Where the next read goes: the buffer, the offset in it, and how much it may bring. */
  room(): [Buffer, number, number] {
    if (this.length === this.buffer.length) {
      if (this.length > this.options.maxBytes) throw tooLarge(this.file, undefined, this.options);
      const larger = Buffer.allocUnsafe(Math.min(this.buffer.length * 2, this.options.maxBytes + 1));
      this.buffer.copy(larger);
      this.buffer = larger;
    }
    return [this.buffer, this.length, this.buffer.length - this.length];
  }

  /** A read brought `bytes`; whether the file has more. */
  took(bytes: number): boolean {
    this.length += bytes;
    return bytes > 0;
  }

  text(): string {
    if (this.length > this.options.maxBytes) throw tooLarge(this.file, undefined, this.options);
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(this.buffer.subarray(0, this.length));
    } catch {
      throw new MurmurError(this.options.notUtf8Code ?? 'E-IO-003', `${this.options.what} at ${this.file} is not UTF-8 text`, {
        path: this.file,
        hint: `save ${this.options.what} as UTF-8`,
      });
    }
  }
}

export function readSmallTextFileSync(file: string, options: SmallTextFile): string {
  const fd = openSync(file, OPEN_FLAGS);
  try {
    const stat = fstatSync(fd);
    const refused = refusal(file, stat, options);
    if (refused) throw refused;
    const gathered = new Gathered(file, stat, options);
    while (gathered.took(readSync(fd, ...gathered.room(), null)));
    return gathered.text();
  } finally {
    closeSync(fd);
  }
}

export async function readSmallTextFile(file: string, options: SmallTextFile): Promise<string> {
  const handle = await fs.open(file, OPEN_FLAGS);
  try {
    const stat = await handle.stat();
    const refused = refusal(file, stat, options);
    if (refused) throw refused;
    const gathered = new Gathered(file, stat, options);
    while (gathered.took((await handle.read(...gathered.room(), null)).bytesRead));
    return gathered.text();
  } finally {
    await handle.close();
  }
}
