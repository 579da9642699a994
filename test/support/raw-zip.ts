import { crc32 } from 'node:zlib';

/**
 * A hand-rolled zip writer (stored entries, or deflate made elsewhere) for building archives that a
 * well-behaved writer refuses to produce: `../` names, absolute paths, symlink entries, entries
 * whose header lies about their size. Only for tests of the reader's guards.
 */
export interface RawEntry {
  name: string;
  data: Uint8Array;
  /** Unix mode including the file type bits, e.g. 0o120777 for a symlink. */
  unixMode?: number;
  /** Overrides the uncompressed size written in the headers (to lie about it). */
  claimedSize?: number;
  /**
   * Writes no data of its own: its central directory record points at the local header of the
   * entry at this index (the overlapping entries of a zip bomb, each inflating the same bytes).
   */
  sharesDataOf?: number;
  /** `data` is already raw deflate of `size` bytes whose CRC-32 is `crc`: written as a deflated entry. */
  deflated?: { size: number; crc: number };
  /**
   * Writes no local entry of its own: its central record points `at` bytes into the data of the
   * entry at `index`, which holds its local entry there (`rawLocalEntry`): overlapping files, each
   * header nested in the one before's data.
   */
  embeddedIn?: { index: number; at: number };
  /** General purpose bits set beside UTF-8 names' (0x0800): 0x1 says the entry is encrypted. */
  flags?: number;
}

/** A stored entry's local header, name and data, as `rawZip` writes them: to embed in another entry's data. */
export function rawLocalEntry(name: string, data: Uint8Array): Buffer {
  const nameBytes = Buffer.from(name, 'utf8');
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt16LE(0x0800, 6);
  local.writeUInt32LE(crc32(data) >>> 0, 14);
  local.writeUInt32LE(data.length, 18);
  local.writeUInt32LE(data.length, 22);
  local.writeUInt16LE(nameBytes.length, 26);
  return Buffer.concat([local, nameBytes, data]);
}

export function rawZip(entries: RawEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  const offsets: number[] = [];
  for (const entry of entries) {
    const name = Buffer.from(entry.name, 'utf8');
    const shared = entry.sharesDataOf === undefined ? undefined : entries[entry.sharesDataOf];
    const data = Buffer.from(shared ? shared.data : entry.data);
    const crc = entry.deflated ? entry.deflated.crc >>> 0 : crc32(data) >>> 0;
    const size = entry.claimedSize ?? entry.deflated?.size ?? data.length;
    const method = entry.deflated ? 8 : 0;
    const flags = 0x0800 | (entry.flags ?? 0);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(flags, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt32LE(0, 10);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(0, 28);
    const embedded = entry.embeddedIn;
    if (!shared && !embedded) locals.push(local, name, data);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(flags, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt32LE(0, 12);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(size, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE(((entry.unixMode ?? 0o100644) << 16) >>> 0, 38);
    const host = embedded ? entries[embedded.index] : undefined;
    const at = embedded
      ? (offsets[embedded.index] as number) + 30 + Buffer.byteLength(host?.name ?? '', 'utf8') + embedded.at
      : entry.sharesDataOf === undefined
        ? offset
        : (offsets[entry.sharesDataOf] as number);
    offsets.push(at);
    central.writeUInt32LE(at, 42);
    centrals.push(central, name);
    if (!shared && !embedded) offset += 30 + name.length + data.length;
  }
  const centralSize = centrals.reduce((sum, part) => sum + part.length, 0);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(centralSize, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, ...centrals, end]);
}
