import { readFileSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
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
 * Only the memory section (id 5) is rewritten. Every other section is copied as a byte slice,
 * never decoded, so a 12 MB module costs one pass over its section headers and one copy. Imported
 * memories (import section) are left untouched: whoever supplies them decides their size.
 */

const WASM_PAGE_BYTES = 65_536;
/** The most pages a 32-bit memory can have (4 GiB); a larger declared maximum does not validate. */
const MAX_MEMORY32_PAGES = 65_536;
const MEMORY_SECTION_ID = 5;

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

/** Returns a copy of `module` whose defined memories have a maximum of at most floor(maxBytes / 65536) pages. */
export function capModuleMemory(module: Uint8Array, maxBytes: number): CappedModule {
  if (!Number.isFinite(maxBytes) || maxBytes < 0) {
    throw new RangeError(`memory limit must be a finite, non-negative number of bytes (got ${String(maxBytes)})`);
  }
  const capPages = Math.min(Math.floor(maxBytes / WASM_PAGE_BYTES), MAX_MEMORY32_PAGES);
  checkHeader(module);

  let memorySection: { start: number; payloadStart: number; end: number } | undefined;
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
    offset = end;
  }

  // `new Uint8Array(view)` copies, where `slice()` on a Buffer would return a view of the input.
  if (!memorySection) return { bytes: new Uint8Array(module), memories: [] };

  const { payload, memories } = capMemorySection(module, memorySection.payloadStart, memorySection.end, capPages);
  const header = [MEMORY_SECTION_ID, ...encodeU32(payload.length)];
  const before = memorySection.start;
  const after = module.length - memorySection.end;
  const bytes = new Uint8Array(before + header.length + payload.length + after);
  bytes.set(module.subarray(0, before), 0);
  bytes.set(header, before);
  bytes.set(payload, before + header.length);
  bytes.set(module.subarray(memorySection.end), before + header.length + payload.length);
  return { bytes, memories };
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
  const where = (what: string, at: number): string => `${what} in the memory section at byte ${at}`;
  const count = readU32(module, payloadStart, where('memory count', payloadStart), end);
  if (count.value > (end - count.next) / 2) {
    throw new Error(
      `malformed WebAssembly module: the memory section declares ${count.value} memories but has room for at most ${Math.floor((end - count.next) / 2)}`,
    );
  }
  // Each rewritten memtype is at most flags + two 5-byte LEB128s.
  const out = new Uint8Array(5 + count.value * 11);
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
    const minStart = offset + 1;
    const min = readU32(module, minStart, where(`minimum of memory ${index}`, minStart), end);
    const max = hasMax ? readU32(module, min.next, where(`maximum of memory ${index}`, min.next), end) : undefined;
    const next = max ? max.next : min.next;

    if (min.value > capPages) throw new MemoryLimitError(index, min.value, capPages);
    const maxPages = max?.value;
    const cappedMaxPages = maxPages === undefined ? capPages : Math.min(maxPages, capPages);
    memories.push({ index, minPages: min.value, maxPages, cappedMaxPages });

    if (maxPages !== undefined && maxPages <= capPages) {
      // Already within the cap: the memtype stays exactly as it was.
      out.set(module.subarray(offset, next), length);
      length += next - offset;
    } else {
      out[length++] = flags | FLAG_HAS_MAX;
      out.set(module.subarray(minStart, min.next), length); // the minimum keeps its original encoding
      length += min.next - minStart;
      length = writeU32(out, length, cappedMaxPages);
    }
    offset = next;
  }
  if (offset !== end) {
    throw new Error(`malformed WebAssembly module: ${end - offset} unexpected bytes after the last memory of the memory section`);
  }
  return { payload: out.subarray(0, length), memories };
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

/** A file's bytes: read here when it is small, else by the thread pool. */
async function readBytes(file: string): Promise<Uint8Array> {
  return statSync(file).size <= ON_THREAD_MAX_BYTES ? readFileSync(file) : readFile(file);
}

/**
 * A core module compiled with its memories capped — growth past the limit fails in the guest
 * instead of succeeding — and, where it can be, with the refused growth remembered (`grow-watch`).
 */
export async function compileCoreModule(file: string, memoryLimitBytes: number): Promise<WebAssembly.Module> {
  const watched = await watchedModule(file);
  if (watched) {
    // A rewrite the engine refuses costs the watch, never the module.
    const compiled = await compile(capModuleMemory(watched, memoryLimitBytes).bytes).catch(() => undefined);
    if (compiled) return compiled;
  }
  return compile(capModuleMemory(await readBytes(file), memoryLimitBytes).bytes);
}

/**
 * The watched form of a core module: what the executor keeps beside it (`keepWatchedModule`, once
 * per machine, as the host may not write there), else made here, for this session only.
 */
async function watchedModule(file: string): Promise<Uint8Array | undefined> {
  const kept = await readBytes(watchedModuleFile(file)).catch(() => undefined);
  if (kept) return kept.length > 0 ? kept : undefined;
  return watchMemoryGrowth(await readBytes(file));
}
