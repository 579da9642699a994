import { closeSync, fstatSync, openSync, read, readSync } from 'node:fs';
import { watchMemoryGrowth, watchedModuleFile } from './grow-watch.js';
import { encodeU32 } from './leb128.js';
/**
 * Caps the linear memories a WebAssembly core module defines, before it is compiled.
 *
 * Untrusted core modules (the ones jco splits a component into) may `memory.grow` up to 4 GiB, and
 * a worker's `resourceLimits` do not count wasm memory in Node, so the maximum written into the
 * module itself is the only bound: with it, `memory.grow` past the limit returns -1 inside the
 * guest instead of taking host memory.
 *
 * Its tables are capped the same way (`table_elements`, upstream's limiter's per-table bound): a
 * `table.grow` past it returns -1, where tables grew unbounded and took the host hundreds of MB
 * outside any memory cap.
 *
 * Only the table and memory sections (ids 4 and 5) are rewritten. Every other section is kept as a
 * byte slice, never decoded, so a 12 MB module costs one pass over its section headers, and one copy only when it is
 * capped where the caller's bytes cannot be rewritten (`capModuleMemory`; the host caps in place). Imported
 * memories (import section) are left untouched: whoever supplies them decides their size.
 */

const WASM_PAGE_BYTES = 65_536;
/** The most pages a 32-bit memory can have (4 GiB); a larger declared maximum does not validate. */
const MAX_MEMORY32_PAGES = 65_536;
const MEMORY_SECTION_ID = 5;
const TABLE_SECTION_ID = 4;
/** The reference types a table may hold in the engines these hosts run (funcref, externref). */
const TABLE_REFTYPES = new Set([0x70, 0x6f]);
/** The most elements a table can be declared with (a u32). */
const MAX_TABLE_ELEMENTS = 2 ** 32 - 1;

const FLAG_HAS_MAX = 0x01;
const FLAG_SHARED = 0x02;
const FLAG_MEMORY64 = 0x04;
const KNOWN_FLAGS = FLAG_HAS_MAX | FLAG_SHARED | FLAG_MEMORY64;

export interface MemoryCap {
  /**
   * The memory's position among the memories this module defines (0 = first entry of the memory
   * section). Its index in the module's memory index space is this plus the number of imported
   * memories; the import section is not decoded, so that number is not known here.
   */
  index: number;
  /** The declared minimum, in 64 KiB pages (unchanged by capping). */
  minPages: number;
  /** The declared maximum before capping, in pages; `undefined` when the module declared none. */
  maxPages: number | undefined;
  /** The maximum written into the returned module, in pages: min(maxPages, the cap). */
  cappedMaxPages: number;
}

export interface CappedModule {
  /** A new buffer; the input is never modified. */
  bytes: Uint8Array;
  /** One entry per memory the module defines, in memory-section order; empty when it defines none. */
  memories: MemoryCap[];
}

/** A defined memory whose declared minimum is already above the cap, so no capped module can exist. */
export class MemoryLimitError extends Error {
  override readonly name = 'MemoryLimitError';
  readonly index: number;
  readonly minPages: number;
  readonly capPages: number;

  constructor(index: number, minPages: number, capPages: number) {
    super(
      `memory ${index} of the module declares a minimum of ${minPages} pages (${formatBytes(minPages * WASM_PAGE_BYTES)}), ` +
        `above the memory limit of ${capPages} pages (${formatBytes(capPages * WASM_PAGE_BYTES)})`,
    );
    this.index = index;
    this.minPages = minPages;
    this.capPages = capPages;
  }
}

/** A defined table whose declared minimum is already above the cap (`table_elements`). */
export class TableLimitError extends Error {
  override readonly name = 'TableLimitError';

  constructor(
    readonly index: number,
    readonly minElements: number,
    readonly capElements: number,
  ) {
    super(`table ${index} of the module declares a minimum of ${minElements} elements, above the table limit of ${capElements} elements`);
  }
}

/** A component that makes more core instances than `limits.instances` allows: the one past it is not made. */
export class InstanceLimitError extends Error {
  override readonly name = 'InstanceLimitError';

  constructor(made: number, limit: number) {
    super(`the component makes core instance ${made}, past the limit of ${limit} instances`);
  }
}

/** Returns a copy of `module` whose defined memories have a maximum of at most floor(maxBytes / 65536) pages (and tables of `tableElements`). */
export function capModuleMemory(module: Uint8Array, maxBytes: number, tableElements = MAX_TABLE_ELEMENTS): CappedModule {
  const { rewrites, memories } = planCaps(module, maxBytes, tableElements);
  // `new Uint8Array(view)` copies, where `slice()` on a Buffer would return a view of the input.
  return { bytes: rewrites.length > 0 ? rewritten(module, rewrites) : new Uint8Array(module), memories };
}

/**
 * A core module read with room in front of it (`readModuleWithRoom`): `buffer` from `start` on is
 * the module, the bytes before `start` are free.
 */
export interface ModuleWithRoom {
  buffer: Uint8Array;
  start: number;
}

/**
 * How many free bytes `readModuleWithRoom` leaves in front of a module: more than a rewritten
 * memory section grows by for up to 20 memories (at most 3 bytes of maximum each, and 4 of section
 * size), so a module is capped where it lies.
 */
const MODULE_HEADROOM = 64;

/**
 * `capModuleMemory` without the copy: the rewritten memory section is written where the module
 * lies and the sections before it (type, import, function, table: small) are moved into the room
 * in front by as much as it grew. A componentize-js module is 12–16 MB, and copying it — a fresh
 * buffer, every page of it faulted in — took longer than V8's compile of it (~65 ms against ~80 on
 * these machines) in every capsule host that runs one. `room` is the module's own buffer: it is
 * rewritten, and the returned bytes are a view of it. A module whose section would outgrow the room
 * is copied as `capModuleMemory` does.
 */
export function capModuleMemoryInPlace(room: ModuleWithRoom, maxBytes: number, tableElements = MAX_TABLE_ELEMENTS): CappedModule {
  const module = room.buffer.subarray(room.start);
  const { rewrites, memories } = planCaps(module, maxBytes, tableElements);
  if (rewrites.length === 0) return { bytes: module, memories };
  const last = rewrites.at(-1) as SectionRewrite;
  // The head — every section up to the last one rewritten, rewritten — is small (types, imports,
  // functions, tables, memories) and made apart, then put where it ends just before what follows
  // it, which stays where it was read.
  const head = rewritten(module.subarray(0, last.end), rewrites);
  const at = room.start + last.end - head.length;
  if (at < 0) return { bytes: rewritten(module, rewrites), memories };
  room.buffer.set(head, at);
  return { bytes: room.buffer.subarray(at, room.start + module.length), memories };
}

/** A section as capped (`section`: its id, size and payload) and the span of `module` it replaces. */
interface SectionRewrite {
  start: number;
  end: number;
  section: Uint8Array;
}

function planCaps(module: Uint8Array, maxBytes: number, tableElements: number): { rewrites: SectionRewrite[]; memories: MemoryCap[] } {
  if (!Number.isFinite(maxBytes) || maxBytes < 0) {
    throw new RangeError(`memory limit must be a finite, non-negative number of bytes (got ${String(maxBytes)})`);
  }
  if (!Number.isInteger(tableElements) || tableElements < 0) {
    throw new RangeError(`table limit must be a non-negative whole number of elements (got ${String(tableElements)})`);
  }
  const capPages = Math.min(Math.floor(maxBytes / WASM_PAGE_BYTES), MAX_MEMORY32_PAGES);
  const capElements = Math.min(tableElements, MAX_TABLE_ELEMENTS);
  checkHeader(module);

  let memorySection: { start: number; payloadStart: number; end: number } | undefined;
  let tableSection: { start: number; payloadStart: number; end: number } | undefined;
  let offset = 8;
  while (offset < module.length) {
    const start = offset;
    const id = module[offset] as number;
    const size = readU32(module, offset + 1, `size of section ${id} at byte ${start}`);
    const payloadStart = size.next;
    const end = payloadStart + size.value;
    if (end > module.length) {
      throw new Error(
        `malformed WebAssembly module: section ${id} at byte ${start} claims ${size.value} bytes, past the end of the module (${module.length} bytes)`,
      );
    }
    if (id === MEMORY_SECTION_ID) {
      if (memorySection) throw new Error(`malformed WebAssembly module: a second memory section at byte ${start}`);
      memorySection = { start, payloadStart, end };
    }
    if (id === TABLE_SECTION_ID) {
      if (tableSection) throw new Error(`malformed WebAssembly module: a second table section at byte ${start}`);
      tableSection = { start, payloadStart, end };
    }
    offset = end;
  }
  const rewrites: SectionRewrite[] = [];
  // In the module's order (the table section comes before the memory section), as the in-place rewrite needs.
  if (tableSection) {
    const payload = capTableSection(module, tableSection.payloadStart, tableSection.end, capElements);
    rewrites.push({ start: tableSection.start, end: tableSection.end, section: sectionOf(TABLE_SECTION_ID, payload) });
  }
  if (!memorySection) return { rewrites, memories: [] };
  const { payload, memories } = capMemorySection(module, memorySection.payloadStart, memorySection.end, capPages);
  rewrites.push({ start: memorySection.start, end: memorySection.end, section: sectionOf(MEMORY_SECTION_ID, payload) });
  return { rewrites: rewrites.sort((a, b) => a.start - b.start), memories };
}

function sectionOf(id: number, payload: Uint8Array): Uint8Array {
  const size = encodeU32(payload.length);
  const section = new Uint8Array(1 + size.length + payload.length);
  section[0] = id;
  section.set(size, 1);
  section.set(payload, 1 + size.length);
  return section;
}

/** `module` with `rewrites` (in order, apart) applied, in a new buffer. */
function rewritten(module: Uint8Array, rewrites: readonly SectionRewrite[]): Uint8Array {
  const growth = rewrites.reduce((sum, rewrite) => sum + rewrite.section.length - (rewrite.end - rewrite.start), 0);
  const bytes = new Uint8Array(module.length + growth);
  let cursor = 0;
  let from = 0;
  for (const rewrite of rewrites) {
    bytes.set(module.subarray(from, rewrite.start), cursor);
    cursor += rewrite.start - from;
    bytes.set(rewrite.section, cursor);
    cursor += rewrite.section.length;
    from = rewrite.end;
  }
  bytes.set(module.subarray(from), cursor);
  return bytes;
}

/**
 * The table section with every table's maximum at most `capElements`: a table's type is its
 * reference type and its limits, rewritten as a memory's are. A table of another form (one with
 * an initialiser, or of a reference type these engines do not take without flags) is refused
 * rather than passed uncapped.
 */
function capTableSection(module: Uint8Array, payloadStart: number, end: number, capElements: number): Uint8Array {
  // A tabletype takes at least 3 bytes (a reftype, flags, a minimum) and is rewritten in at most 12 (two 5-byte LEB128s).
  const { where, count, out } = sectionEntries(module, payloadStart, end, { section: 'table', entries: 'tables', least: 3, most: 12 });
  let length = writeU32(out, 0, count.value);
  let offset = count.next;
  for (let index = 0; index < count.value; index++) {
    if (offset + 1 >= end) throw new Error(`malformed WebAssembly module: the table section ends after ${index} of its ${count.value} tables`);
    const reftype = module[offset] as number;
    if (!TABLE_REFTYPES.has(reftype)) throw new Error(`table ${index} has a form this runtime does not cap (type ${hexByte(reftype)} at byte ${offset})`);
    const flags = module[offset + 1] as number;
    if (flags !== 0x00 && flags !== FLAG_HAS_MAX) throw new Error(`table ${index} has unsupported limits flags ${hexByte(flags)} at byte ${offset + 1}`);
    out[length++] = reftype;
    const limits = capLimits(module, offset + 1, end, capElements, `table ${index}`, where, out, length);
    if (limits.min > capElements) throw new TableLimitError(index, limits.min, capElements);
    ({ length } = limits);
    offset = limits.next;
  }
  if (offset !== end) throw new Error(`malformed WebAssembly module: ${end - offset} unexpected bytes after the last table of the table section`);
  return out.subarray(0, length);
}

function checkHeader(module: Uint8Array): void {
  if (module.length < 8 || module[0] !== 0x00 || module[1] !== 0x61 || module[2] !== 0x73 || module[3] !== 0x6d) {
    throw new Error('not a WebAssembly module: the bytes do not start with the \\0asm magic and a version');
  }
  const [v0, v1, v2, v3] = [module[4], module[5], module[6], module[7]];
  if (v0 === 0x01 && v1 === 0x00 && v2 === 0x00 && v3 === 0x00) return;
  if (v2 === 0x01 && v3 === 0x00) {
    throw new Error('expected a WebAssembly core module but got a component (layer 1); cap the core modules jco extracts from it instead');
  }
  throw new Error(`unsupported WebAssembly binary version ${[v0, v1, v2, v3].map(hexByte).join(' ')} (expected core module version 01 00 00 00)`);
}

function capMemorySection(module: Uint8Array, payloadStart: number, end: number, capPages: number): { payload: Uint8Array; memories: MemoryCap[] } {
  // A memtype takes at least 2 bytes (flags, a minimum) and is rewritten in at most 11 (two 5-byte LEB128s).
  const { where, count, out } = sectionEntries(module, payloadStart, end, { section: 'memory', entries: 'memories', least: 2, most: 11 });
  let length = writeU32(out, 0, count.value);
  const memories: MemoryCap[] = [];
  let offset = count.next;
  for (let index = 0; index < count.value; index++) {
    if (offset >= end) throw new Error(`malformed WebAssembly module: the memory section ends after ${index} of its ${count.value} memories`);
    const flags = module[offset] as number;
    if (flags & FLAG_MEMORY64) {
      throw new Error(`memory ${index} is a 64-bit memory (memory64, limits flags ${hexByte(flags)}), which is not supported`);
    }
    if (flags & ~KNOWN_FLAGS) {
      throw new Error(`memory ${index} has unsupported limits flags ${hexByte(flags)} at byte ${offset}`);
    }
    const hasMax = (flags & FLAG_HAS_MAX) !== 0;
    if ((flags & FLAG_SHARED) !== 0 && !hasMax) {
      throw new Error(`malformed WebAssembly module: memory ${index} is shared but declares no maximum`);
    }
    const limits = capLimits(module, offset, end, capPages, `memory ${index}`, where, out, length);
    if (limits.min > capPages) throw new MemoryLimitError(index, limits.min, capPages);
    memories.push({ index, minPages: limits.min, maxPages: limits.max, cappedMaxPages: limits.cappedMax });
    ({ length } = limits);
    offset = limits.next;
  }
  if (offset !== end) {
    throw new Error(`malformed WebAssembly module: ${end - offset} unexpected bytes after the last memory of the memory section`);
  }
  return { payload: out.subarray(0, length), memories };
}

/**
 * A section's count of entries, refused when the section could not hold that many (each takes at
 * least `least` bytes), with room for them rewritten (each in at most `most`) and how to say where
 * in the section a malformed piece lies.
 */
function sectionEntries(
  module: Uint8Array,
  payloadStart: number,
  end: number,
  shape: { section: string; entries: string; least: number; most: number },
): { where: (what: string, at: number) => string; count: { value: number; next: number }; out: Uint8Array } {
  const where = (what: string, at: number): string => `${what} in the ${shape.section} section at byte ${at}`;
  const count = readU32(module, payloadStart, where(`${shape.section} count`, payloadStart), end);
  const room = Math.floor((end - count.next) / shape.least);
  if (count.value > room)
    throw new Error(`malformed WebAssembly module: the ${shape.section} section declares ${count.value} ${shape.entries} but has room for at most ${room}`);
  return { where, count, out: new Uint8Array(5 + count.value * shape.most) };
}

/**
 * The limits at `at` (flags, a minimum, a maximum when the flags say so), written into `out` at
 * `length` with a maximum of at most `cap`: exactly as they were when already within it, else with
 * the flags' has-maximum bit set (others kept: a shared memory stays shared) and the minimum in its
 * original encoding. Whether the minimum itself fits is the caller's to judge, by `min`.
 */
function capLimits(
  module: Uint8Array,
  at: number,
  end: number,
  cap: number,
  what: string,
  where: (what: string, at: number) => string,
  out: Uint8Array,
  length: number,
): { min: number; max: number | undefined; cappedMax: number; next: number; length: number } {
  const flags = module[at] as number;
  const min = readU32(module, at + 1, where(`minimum of ${what}`, at + 1), end);
  const max = flags & FLAG_HAS_MAX ? readU32(module, min.next, where(`maximum of ${what}`, min.next), end) : undefined;
  const next = max ? max.next : min.next;
  const cappedMax = max === undefined ? cap : Math.min(max.value, cap);
  let written = length;
  if (max !== undefined && max.value <= cap) {
    out.set(module.subarray(at, next), written);
    written += next - at;
  } else {
    out[written++] = flags | FLAG_HAS_MAX;
    out.set(module.subarray(at + 1, min.next), written);
    written += min.next - (at + 1);
    written = writeU32(out, written, cappedMax);
  }
  return { min: min.value, max: max?.value, cappedMax, next, length: written };
}

/** Reads an unsigned LEB128 of at most 5 bytes (a u32), stopping at `limit`. */
function readU32(bytes: Uint8Array, start: number, what: string, limit = bytes.length): { value: number; next: number } {
  let value = 0;
  for (let i = 0; i < 5; i++) {
    const at = start + i;
    if (at >= limit) throw new Error(`malformed WebAssembly module: ${what} is truncated`);
    const byte = bytes[at] as number;
    if (i === 4 && byte > 0x0f) throw new Error(`malformed WebAssembly module: ${what} does not fit in 32 bits`);
    value += (byte & 0x7f) * 2 ** (7 * i);
    if ((byte & 0x80) === 0) return { value, next: at + 1 };
  }
  throw new Error(`malformed WebAssembly module: ${what} is longer than 5 bytes`);
}

/** Writes `value` as a minimal unsigned LEB128 at `offset`; returns the offset after it. */
function writeU32(out: Uint8Array, offset: number, value: number): number {
  let rest = value;
  do {
    const low = rest % 128;
    rest = Math.floor(rest / 128);
    out[offset++] = rest === 0 ? low : low | 0x80;
  } while (rest !== 0);
  return offset;
}

function hexByte(byte: number | undefined): string {
  return `0x${(byte ?? 0).toString(16).padStart(2, '0')}`;
}

function formatBytes(bytes: number): string {
  return bytes >= 1024 * 1024 ? `${bytes / (1024 * 1024)} MiB` : `${bytes / 1024} KiB`;
}

/**
 * Up to this size a core module is read and compiled on the calling thread. The asynchronous forms
 * hand the work to other threads and back, which for a small module costs more than the work: on
 * these 2-core machines a pooled host took ~8 ms to read a Rust capsule's 96 KiB module through the
 * thread pool (busy loading the guest worker's glue) and ~7 ms to compile it asynchronously, against
 * ~0.5 ms to compile it here — and a launch waits for it. A large module (a componentize-js
 * capsule's 12 MB) is still read and compiled off the thread, which would otherwise stop answering
 * its channel for as long.
 */
const ON_THREAD_MAX_BYTES = 1024 * 1024;

async function compile(bytes: Uint8Array): Promise<WebAssembly.Module> {
  return bytes.byteLength > ON_THREAD_MAX_BYTES ? WebAssembly.compile(bytes) : new WebAssembly.Module(bytes);
}

/**
 * A module file's bytes, with `MODULE_HEADROOM` free bytes in front for `capModuleMemoryInPlace`:
 * read here when it is small, else by the thread pool. Its size is the opened file's, so a file
 * replaced meanwhile (the executor writes by rename) is read whole, as it was when opened.
 */
export async function readModuleWithRoom(file: string): Promise<ModuleWithRoom> {
  // Opened and measured here, whatever the size: a syscall each, where the thread pool costs a
  // round trip each (see `ON_THREAD_MAX_BYTES`).
  const fd = openSync(file, 'r');
  try {
    const size = fstatSync(fd).size;
    const buffer = new Uint8Array(MODULE_HEADROOM + size);
    let filled = 0;
    while (filled < size) {
      const at = MODULE_HEADROOM + filled;
      const read = size <= ON_THREAD_MAX_BYTES ? readSync(fd, buffer, at, size - filled, filled) : await readOffThread(fd, buffer, at, size - filled, filled);
      if (read === 0) throw new Error(`${file} ended after ${filled} of its ${size} bytes`);
      filled += read;
    }
    return { buffer, start: MODULE_HEADROOM };
  } finally {
    closeSync(fd);
  }
}

function readOffThread(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => read(fd, buffer, offset, length, position, (error, bytesRead) => (error ? reject(error) : resolve(bytesRead))));
}

/**
 * A core module compiled with its memories capped — growth past the limit fails in the guest
 * instead of succeeding — and, where it can be, with the refused growth remembered (`grow-watch`).
 */
export async function compileCoreModule(file: string, memoryLimitBytes: number, tableElementsLimit = MAX_TABLE_ELEMENTS): Promise<WebAssembly.Module> {
  // The watched form the executor keeps beside the module (`keepWatchedModule`, once per machine,
  // as the host may not write there); an empty kept file says the module cannot be watched.
  const kept = await readModuleWithRoom(watchedModuleFile(file)).catch(() => undefined);
  if (kept && kept.buffer.length > kept.start) {
    const compiled = await compileCapped(kept, memoryLimitBytes, tableElementsLimit);
    if (compiled) return compiled;
  }
  // Read once, whether it is watched here or compiled as it is.
  const original = await readModuleWithRoom(file);
  if (!kept) {
    // None kept: watched here, for this session only.
    const made = watchMemoryGrowth(original.buffer.subarray(original.start));
    const compiled = made && (await compileCapped({ buffer: made, start: 0 }, memoryLimitBytes, tableElementsLimit));
    if (compiled) return compiled;
  }
  return compile(capModuleMemoryInPlace(original, memoryLimitBytes, tableElementsLimit).bytes);
}

/**
 * A watched module capped and compiled, or undefined when it cannot be: a rewrite the engine
 * refuses, or a kept file that is damaged (cut short by a crash, a full disk) costs the watch,
 * never the module — the module as it is is compiled instead.
 */
async function compileCapped(watched: ModuleWithRoom, memoryLimitBytes: number, tableElementsLimit: number): Promise<WebAssembly.Module | undefined> {
  let capped: Uint8Array;
  try {
    capped = capModuleMemoryInPlace(watched, memoryLimitBytes, tableElementsLimit).bytes;
  } catch (error) {
    // The caps are decided before the engine sees the module: a refusal of a limit is the limit's,
    // and the module as it is would be refused the same. Anything else is this file's damage.
    if (error instanceof MemoryLimitError || error instanceof TableLimitError || error instanceof InstanceLimitError) throw error;
    return undefined;
  }
  return compile(capped).catch(() => undefined);
}
