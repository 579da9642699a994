import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import zlib, { crc32, createInflateRaw, inflateRaw, inflateRawSync } from 'node:zlib';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { MurmurError } from '../errors.js';
import { foldedEntryName, normaliseEntryName } from '../file-set.js';
import { MAX_MANIFEST_BYTES } from '../node/manifest-file.js';
import { inSlices } from '../node/slices.js';
import { numberSetting } from '../settings.js';

export { normaliseEntryName } from '../file-set.js';

const inflateRawAsync = promisify(inflateRaw);

/** Above this, an entry is inflated on the thread pool: a large one (or a bomb) held the event loop, and every other staging with it, for seconds. */
const INFLATE_IN_THREAD_MAX_BYTES = 1024 * 1024;
/** Entries `verify` reads whole (quicker, as `read` is); a larger one is inflated as a stream and never held. */
const VERIFY_WHOLE_MAX_BYTES = 16 * 1024 * 1024;

/**
 * `.mur.zip`: read with every guard up front, written reproducibly.
 *
 * Reading refuses the whole archive if **any** entry is unsafe (an absolute path, a `..`
 * component, a symlink or other special file, a duplicate name, an encrypted entry), before a
 * single byte of any entry is used. Upstream treats such entries as absent; an archive that
 * carries one was built to attack its reader, so nothing in it is trusted. Each entry is also
 * held to a decompression ceiling, counted on the actual bytes, not the size the header claims;
 * the archive to twice that in all and to `MAX_ENTRIES` entries; and no two entries may share
 * bytes, nor may an entry's local name differ from its central one — entries that all point at
 * one payload are how a 66 KB archive inflates to gigabytes without any one entry being large.
 */

export const DEFAULT_MAX_ENTRY_BYTES = 524_288_000;
/** The most entries an artifact archive may hold (a component, its manifest, the files it requires). */
export const MAX_ENTRIES = 10_000;
/** The largest `murmur.yaml` an archive may carry: a project's, as `mur build` reads it. */
export { MAX_MANIFEST_BYTES };
export const MAX_ENTRY_BYTES_ENV = 'MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES';

/** The per-entry ceiling: `MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES`, 500 MiB when unset. */
export function maxEntryBytesFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  return numberSetting(env, MAX_ENTRY_BYTES_ENV, DEFAULT_MAX_ENTRY_BYTES, { unit: 'bytes' });
}

const S_IFMT = 0o170000;
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;
const S_IFLNK = 0o120000;

interface GuardedEntry {
  readonly name: string;
  readonly directory: boolean;
  readonly executable: boolean;
  readonly declaredSize: number;
  readonly raw: yauzl.Entry;
}

function openZip(bytes: Uint8Array): Promise<yauzl.ZipFile> {
  return new Promise((resolve, reject) => {
    yauzl.fromBuffer(
      Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      { lazyEntries: true, decodeStrings: false, validateEntrySizes: false, autoClose: false, strictFileNames: false },
      (error, zip) => {
        if (error || !zip) reject(error ?? new Error('no archive'));
        else resolve(zip);
      },
    );
  });
}

/** The archive's central directory: as many entries as the archive declares (`zip.entryCount`), and no more. */
function readEntries(zip: yauzl.ZipFile): Promise<yauzl.Entry[]> {
  return new Promise((resolve, reject) => {
    const entries: yauzl.Entry[] = [];
    zip.on('entry', (entry: yauzl.Entry) => {
      entries.push(entry);
      zip.readEntry();
    });
    zip.on('end', () => resolve(entries));
    zip.on('error', reject);
    zip.readEntry();
  });
}

/**
 * Where the central directory ends as the archive's end record declares it (its offset plus its
 * size; zip64's when the 32-bit fields are saturated), or undefined when that cannot be read.
 */
function declaredCentralDirectoryEnd(bytes: Uint8Array): number | undefined {
  const archive = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // The end record is 22 bytes and a comment of up to 65 535; the reader took the one whose
  // comment length reaches the archive's end, as this does.
  for (let at = archive.length - 22; at >= Math.max(0, archive.length - 22 - 0xffff); at -= 1) {
    if (archive.readUInt32LE(at) !== 0x06054b50 || archive.readUInt16LE(at + 20) !== archive.length - at - 22) continue;
    const size = archive.readUInt32LE(at + 12);
    const offset = archive.readUInt32LE(at + 16);
    const locator = at - 20;
    if ((size === 0xffffffff || offset === 0xffffffff) && locator >= 0 && archive.readUInt32LE(locator) === 0x07064b50) {
      const record = Number(archive.readBigUInt64LE(locator + 8));
      if (record + 56 > archive.length || archive.readUInt32LE(record) !== 0x06064b50) return undefined;
      return Number(archive.readBigUInt64LE(record + 48)) + Number(archive.readBigUInt64LE(record + 40));
    }
    return offset + size;
  }
  return undefined;
}

/**
 * Why two entries share bytes, if any do: each entry's data, from its local header to the end of
 * its compressed bytes, must lie in the archive apart from every other entry's, under the name its
 * central record gives.
 */
function sharedBytes(bytes: Uint8Array, entries: yauzl.Entry[]): string | undefined {
  const archive = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const spans: Array<{ name: string; start: number; end: number }> = [];
  for (const entry of entries) {
    const start = entry.relativeOffsetOfLocalHeader;
    const central = Buffer.isBuffer(entry.fileName) ? entry.fileName : Buffer.from(String(entry.fileName));
    const name = central.toString('utf8');
    if (start + 30 > archive.length || archive.readUInt32LE(start) !== 0x04034b50) return `zip entry '${name}' has no local header where its record says`;
    const nameLength = archive.readUInt16LE(start + 26);
    const extraLength = archive.readUInt16LE(start + 28);
    if (!archive.subarray(start + 30, start + 30 + nameLength).equals(central))
      return `zip entry '${name}' is named otherwise in its local header; an archive with two readings of one entry is refused`;
    spans.push({ name, start, end: start + 30 + nameLength + extraLength + entry.compressedSize });
  }
  spans.sort((left, right) => left.start - right.start);
  for (let index = 1; index < spans.length; index += 1) {
    const before = spans[index - 1] as (typeof spans)[number];
    const span = spans[index] as (typeof spans)[number];
    if (span.start < before.end)
      return `zip entries '${before.name}' and '${span.name}' share bytes; an archive that reads one payload as several entries is refused`;
  }
  return undefined;
}

export interface MurZipOptions {
  /** What the archive is, for messages: `echo-tool@0.1.0`, or a file path. */
  label: string;
  maxEntryBytes?: number;
}

export class MurZip {
  private constructor(
    private readonly zip: yauzl.ZipFile,
    private readonly entries: Map<string, GuardedEntry>,
    private readonly order: string[],
    readonly label: string,
    readonly maxEntryBytes: number,
  ) {}

  /** Opens and vets every entry. Refuses the archive whole on the first unsafe entry. */
  static async open(bytes: Uint8Array, options: MurZipOptions): Promise<MurZip> {
    const maxEntryBytes = options.maxEntryBytes ?? maxEntryBytesFromEnv();
    let zip: yauzl.ZipFile;
    let rawEntries: yauzl.Entry[];
    try {
      zip = await openZip(bytes);
      // Refused by the count the archive declares, before a single entry is read: a million empty
      // entries cost ~800 MB and half a minute to list. The reader never yields more than it declares.
      if (zip.entryCount > MAX_ENTRIES) {
        zip.close();
        throw new MurmurError('E-ART-003', `${options.label}: the archive has ${zip.entryCount} entries; an artifact archive holds at most ${MAX_ENTRIES}`);
      }
      rawEntries = await readEntries(zip);
    } catch (error) {
      if (error instanceof MurmurError) throw error;
      throw new MurmurError('E-ART-003', `${options.label} is not a valid .mur.zip archive: ${error instanceof Error ? error.message : String(error)}`, {
        cause: error,
      });
    }
    const entries = new Map<string, GuardedEntry>();
    const order: string[] = [];
    const folded = new Map<string, string>();
    const refuse = (code: 'E-ART-001' | 'E-ART-002' | 'E-ART-003', message: string): never => {
      zip.close();
      throw new MurmurError(code, `${options.label}: ${message}`);
    };
    // The records the end record counts must fill the directory it declares: records past them
    // are entries other readers list (a second `murmur.yaml`, which Python's zipfile reads), an
    // archive with two readings. The reader's cursor stands after the last record it read.
    const recordsEnd = (zip as unknown as { readEntryCursor?: number }).readEntryCursor;
    const declaredEnd = declaredCentralDirectoryEnd(bytes);
    if (recordsEnd !== undefined && declaredEnd !== undefined && recordsEnd !== declaredEnd)
      refuse(
        'E-ART-001',
        `the central directory holds ${declaredEnd > recordsEnd ? 'more' : 'less'} than the ${rawEntries.length} records its end record counts (${Math.abs(declaredEnd - recordsEnd)} bytes ${declaredEnd > recordsEnd ? 'past them' : 'short'}): other tools read entries there that this reader does not; an archive with two readings is refused`,
      );
    const sharing = sharedBytes(bytes, rawEntries);
    if (sharing) refuse('E-ART-001', sharing);
    let total = 0;
    for (const entry of rawEntries) {
      const rawName = Buffer.isBuffer(entry.fileName) ? entry.fileName.toString('utf8') : String(entry.fileName);
      const normalised = normaliseEntryName(rawName);
      if (!normalised.ok) refuse('E-ART-001', `zip entry '${rawName}' has an unsafe path: ${normalised.reason}`);
      const name = (normalised as { name: string }).name;
      if ((entry.generalPurposeBitFlag & 0x1) !== 0) refuse('E-ART-001', `zip entry '${rawName}' is encrypted`);
      const madeByUnix = entry.versionMadeBy >> 8 === 3;
      const mode = madeByUnix ? (entry.externalFileAttributes >>> 16) & 0xffff : 0;
      const type = mode & S_IFMT;
      const nameSaysDirectory = rawName.endsWith('/');
      if (type === S_IFLNK) refuse('E-ART-001', `zip entry '${rawName}' is a symlink; artifacts may contain only regular files`);
      if (type !== 0 && type !== S_IFREG && type !== S_IFDIR)
        refuse('E-ART-001', `zip entry '${rawName}' is a special file (mode ${mode.toString(8)}); artifacts may contain only regular files`);
      const directory = nameSaysDirectory || type === S_IFDIR;
      // A stored entry's bytes are its compressed size, whatever its header claims they inflate to.
      const claimed = Math.max(entry.uncompressedSize, entry.compressionMethod === 0 ? entry.compressedSize : 0);
      if (!directory && claimed > maxEntryBytes) {
        refuse('E-ART-002', `zip entry '${rawName}' exceeds the ${maxEntryBytes}-byte decompression ceiling`);
      }
      total += directory ? 0 : claimed;
      if (total > 2 * maxEntryBytes)
        refuse('E-ART-002', `the archive's entries hold more than ${2 * maxEntryBytes} bytes in all (twice the per-entry ceiling)`);
      if (entries.has(name)) refuse('E-ART-001', `zip entry '${name}' appears more than once; an archive with two readings of one path is refused`);
      const foldedName = foldedEntryName(name);
      const earlier = folded.get(foldedName);
      if (earlier !== undefined)
        refuse('E-ART-001', `zip entries '${earlier}' and '${name}' differ only in case or Unicode form; an archive with two readings of one path is refused`);
      folded.set(foldedName, name);
      entries.set(name, { name, directory, executable: (mode & 0o111) !== 0, declaredSize: entry.uncompressedSize, raw: entry });
      order.push(name);
    }
    // `a` as a file and `a/b` beside it cannot both be written.
    const directories = new Set<string>();
    for (const foldedName of folded.keys()) {
      const parts = foldedName.split('/');
      for (let depth = 1; depth < parts.length; depth += 1) directories.add(parts.slice(0, depth).join('/'));
    }
    const both = [...folded].find(([foldedName, name]) => !entries.get(name)?.directory && directories.has(foldedName));
    if (both) refuse('E-ART-001', `zip entry '${both[1]}' is both a file and a directory`);
    return new MurZip(zip, entries, order, options.label, maxEntryBytes);
  }

  /** File entries in archive order. */
  get names(): string[] {
    return this.order.filter((name) => !this.entries.get(name)?.directory);
  }

  has(name: string): boolean {
    const entry = this.entries.get(name);
    return entry !== undefined && !entry.directory;
  }

  isExecutable(name: string): boolean {
    return this.entries.get(name)?.executable ?? false;
  }

  /**
   * The bytes of one entry, held to the ceiling whatever the header claimed. The compressed bytes
   * are taken raw and inflated in one synchronous call bounded by `maxOutputLength`: a streaming
   * inflate of a 12 MB component costs hundreds of thread-pool round trips, which dominated a
   * warm staging.
   */
  async read(name: string): Promise<Buffer> {
    const entry = this.entries.get(name);
    if (!entry || entry.directory) throw new MurmurError('E-ART-003', `${this.label}: missing required file ${name}`);
    const unreadable = (error: unknown): MurmurError =>
      new MurmurError('E-ART-003', `${this.label}: cannot read zip entry '${name}': ${error instanceof Error ? error.message : String(error)}`);
    const method = entry.raw.compressionMethod;
    if (method !== 0 && method !== 8)
      throw new MurmurError('E-ART-003', `${this.label}: zip entry '${name}' uses compression method ${method}; only stored and deflated entries are read`);
    let compressed: Buffer;
    try {
      const stream = await new Promise<Readable>((resolve, reject) => {
        this.zip.openReadStream(entry.raw, (method === 8 ? { decompress: false } : {}) as yauzl.ZipFileOptions, (error, readable) =>
          error || !readable ? reject(error ?? new Error('no stream')) : resolve(readable),
        );
      });
      const chunks: Buffer[] = [];
      for await (const chunk of stream) chunks.push(chunk as Buffer);
      compressed = Buffer.concat(chunks);
    } catch (error) {
      throw unreadable(error);
    }
    let bytes: Buffer;
    if (method === 0) {
      bytes = compressed;
    } else {
      try {
        // No more than the header declares, plus one to see a lie: a liar is refused below.
        const limit = { maxOutputLength: Math.min(this.maxEntryBytes, entry.declaredSize) + 1 };
        bytes = entry.declaredSize <= INFLATE_IN_THREAD_MAX_BYTES ? inflateRawSync(compressed, limit) : await inflateRawAsync(compressed, limit);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') bytes = Buffer.alloc(Math.min(this.maxEntryBytes, entry.declaredSize) + 1);
        else throw unreadable(error);
      }
    }
    this.judgeSize(name, entry.declaredSize, bytes.length);
    // Bytes changed in place (a bad disk, a cut download patched up) keep their sizes: only the checksum tells.
    let checksum = 0;
    await inSlices(bytes, (slice) => {
      checksum = crc32(slice, checksum);
    });
    this.judgeChecksum(name, entry.raw.crc32, checksum);
    return bytes;
  }

  /**
   * Checks one entry as `read` does (its size against its header and the ceiling, its checksum)
   * without keeping its bytes: a large entry is inflated as a stream, so what checking an archive
   * holds at once is a piece of it, not the whole. An upload of 450 KB that inflates to 450 MiB
   * held as much in a registry, for each such upload at once.
   */
  async verify(name: string): Promise<void> {
    const entry = this.entries.get(name);
    if (!entry || entry.directory || entry.declaredSize <= VERIFY_WHOLE_MAX_BYTES) {
      await this.read(name);
      return;
    }
    const method = entry.raw.compressionMethod;
    if (method !== 0 && method !== 8) return void (await this.read(name));
    const limit = Math.min(this.maxEntryBytes, entry.declaredSize) + 1;
    let length = 0;
    let checksum = 0;
    try {
      const raw = await new Promise<Readable>((resolve, reject) => {
        this.zip.openReadStream(entry.raw, (method === 8 ? { decompress: false } : {}) as yauzl.ZipFileOptions, (error, readable) =>
          error || !readable ? reject(error ?? new Error('no stream')) : resolve(readable),
        );
      });
      const bytes: Readable = method === 8 ? raw.pipe(createInflateRaw()) : raw;
      raw.on('error', (error) => bytes.destroy(error));
      for await (const chunk of bytes) {
        length += (chunk as Buffer).length;
        // Past what the header declares (or the ceiling): enough to refuse, nothing more is inflated.
        if (length >= limit) {
          raw.destroy();
          bytes.destroy();
          break;
        }
        checksum = crc32(chunk as Buffer, checksum);
      }
    } catch (error) {
      throw new MurmurError('E-ART-003', `${this.label}: cannot read zip entry '${name}': ${error instanceof Error ? error.message : String(error)}`);
    }
    this.judgeSize(name, entry.declaredSize, length);
    this.judgeChecksum(name, entry.raw.crc32, checksum);
  }

  private judgeSize(name: string, declared: number, length: number): void {
    if (length > this.maxEntryBytes) {
      throw new MurmurError('E-ART-002', `${this.label}: zip entry '${name}' exceeds the ${this.maxEntryBytes}-byte decompression ceiling`);
    }
    // Sizes are checked here, on the bytes, rather than by the zip library: a header that lies is
    // malformed, and one that lies past the ceiling has already been stopped above.
    if (length > declared) {
      throw new MurmurError('E-ART-003', `${this.label}: zip entry '${name}' holds more than the ${declared} bytes its header declares`);
    }
    if (length !== declared) {
      throw new MurmurError('E-ART-003', `${this.label}: zip entry '${name}' holds ${length} bytes but its header declares ${declared}`);
    }
  }

  private judgeChecksum(name: string, declared: number, checksum: number): void {
    if (checksum !== declared) {
      throw new MurmurError('E-ART-003', `${this.label}: zip entry '${name}' is corrupt: its bytes do not match the CRC-32 its header declares`, {
        hint: 'the archive was damaged after it was built: fetch or copy it again, or rebuild it with mur build',
      });
    }
  }

  async readText(name: string): Promise<string> {
    const bytes = await this.read(name);
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    } catch {
      throw new MurmurError('E-ART-003', `${this.label}: zip entry '${name}' is not valid UTF-8`);
    }
  }

  /** `murmur.yaml`, which every artifact must carry. */
  async manifestText(): Promise<string> {
    if (!this.has('murmur.yaml')) throw new MurmurError('E-ART-003', `${this.label}: artifact missing required file murmur.yaml`);
    const size = this.entries.get('murmur.yaml')?.declaredSize ?? 0;
    // A manifest is parsed whole on the event loop: 20 KB of archive carrying a 20 MiB description
    // held a registry for ten seconds, and its index past every client's ceiling from then on.
    if (size > MAX_MANIFEST_BYTES)
      throw new MurmurError('E-ART-002', `${this.label}: murmur.yaml is ${size} bytes; an artifact's manifest is at most ${MAX_MANIFEST_BYTES}`, {
        hint: 'a manifest describes the artifact; what it carries belongs in files of the archive (requires_files)',
      });
    return this.readText('murmur.yaml');
  }

  /**
   * The root component: `capsule.wasm` when present, else the one `*.wasm` at the root. Nested
   * wasm files never count; two candidates without a `capsule.wasm` is ambiguous and refused.
   */
  rootWasmName(): string {
    const candidates = this.names.filter((name) => !name.includes('/') && name.endsWith('.wasm'));
    if (candidates.includes('capsule.wasm')) return 'capsule.wasm';
    if (candidates.length === 1) return candidates[0] as string;
    if (candidates.length === 0) throw new MurmurError('E-ART-003', `${this.label}: missing root .wasm file (expected capsule.wasm or one root *.wasm)`);
    throw new MurmurError('E-ART-003', `${this.label}: multiple root .wasm files found: ${[...candidates].sort().join(', ')}`);
  }

  /** Whether the archive has a root component at all (a packaged agent capsule has none). */
  hasRootWasm(): boolean {
    return this.names.some((name) => !name.includes('/') && name.endsWith('.wasm'));
  }

  /**
   * Writes every file entry except those in `skip` under `directory`, which must not exist yet
   * and is created. Entry names were vetted at open, and each target is checked again to lie
   * inside `directory` before it is written.
   */
  async extractTo(directory: string, skip: ReadonlySet<string> = new Set()): Promise<string[]> {
    const base = path.resolve(directory);
    await fs.mkdir(base, { recursive: true });
    const written: string[] = [];
    for (const name of this.names) {
      if (skip.has(name)) continue;
      const target = path.resolve(base, name);
      if (!target.startsWith(`${base}${path.sep}`))
        throw new MurmurError('E-ART-001', `${this.label}: zip entry '${name}' resolves outside the target directory`);
      await fs.mkdir(path.dirname(target), { recursive: true });
      await fs.writeFile(target, await this.read(name), { mode: this.isExecutable(name) ? 0o755 : 0o644, flag: 'wx' });
      written.push(name);
    }
    return written;
  }

  close(): void {
    this.zip.close();
  }
}

/** Fixed entry timestamp: two builds of the same files are the same bytes, so the same sha256. */
const REPRODUCIBLE_MTIME = new Date(Date.UTC(1980, 0, 2, 0, 0, 0));

export interface ZipInput {
  name: string;
  data: Uint8Array;
  executable?: boolean;
}

/**
 * Deflate-compressed archive of `files` in the given order.
 *
 * yazl deflates each buffer it is given at once, through `zlib.deflateRaw`, whose stream state
 * (~270 KB) is allocated as the call is made: 10 000 small files held 2.2 GB before the first was
 * done. While the entries are added (a synchronous loop, so nothing else runs), its calls are
 * answered by the synchronous deflate instead — one state at a time, freed as each entry is done,
 * and the same bytes, from the same zlib at the same level.
 */
export function writeMurZip(files: readonly ZipInput[]): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  const deflateRaw = zlib.deflateRaw;
  const deflateRawNow = (buffer: zlib.InputType, options: zlib.ZlibOptions, callback: (error: Error | null, result?: Buffer) => void): void => {
    let deflated: Buffer;
    try {
      deflated = zlib.deflateRawSync(buffer, options);
    } catch (error) {
      setImmediate(() => callback(error as Error));
      return;
    }
    setImmediate(() => callback(null, deflated));
  };
  zlib.deflateRaw = deflateRawNow as unknown as typeof zlib.deflateRaw;
  try {
    for (const file of files) {
      zip.addBuffer(Buffer.from(file.data), file.name, { mtime: REPRODUCIBLE_MTIME, mode: file.executable ? 0o100755 : 0o100644, compress: true });
    }
  } finally {
    zlib.deflateRaw = deflateRaw;
  }
  zip.end();
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    zip.outputStream.on('data', (chunk: Buffer) => chunks.push(chunk));
    zip.outputStream.on('end', () => resolve(Buffer.concat(chunks)));
    zip.outputStream.on('error', reject);
  });
}
