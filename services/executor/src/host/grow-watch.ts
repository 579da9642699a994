import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { encodeU32 } from './leb128.js';

/**
 * Makes a core module remember the `memory.grow` its memory limit refused, so that a guest ending
 * in a trap after a refused growth is reported as having hit `capabilities.limits.memory_bytes`.
 *
 * Why: the limit is the maximum written into the module (see `memory-limit.ts`), so a refused
 * growth is `memory.grow` returning -1 inside the guest, which the host never sees. A Rust guest's
 * allocator answers -1 with `unreachable` — a trap that says nothing about memory, possibly
 * megabytes below the ceiling (an 8 MiB allocation refused at 9 MiB of 16). Upstream's limiter
 * records the refusal at the moment it happens; this does the same from inside the module.
 *
 * How: three mutable i32 globals are appended (appending shifts no existing global index) and
 * every `memory.grow` is wrapped: the requested delta is kept, and when the result is -1 the
 * size the guest asked for (current pages + delta) is stored in the exported global
 * {@link GROW_DENIED_EXPORT}. Nothing else in the module changes: no function, type or table
 * index moves, and a module's behaviour is the same, grow for grow.
 *
 * The rewrite decodes every instruction of every function body. Anything it does not know (the GC
 * proposal, an unknown opcode, a malformed body) makes it give up and return `undefined`: the
 * module then runs as it was, and its traps are judged by the host's fallback heuristic. The
 * caller compiles the result and falls back to the module as it was if that fails, for the same
 * reason (compiling validates; validating first would cost a second pass over a 12 MB module).
 */

/** The export holding the pages a refused `memory.grow` asked for in total (0: none was refused). */
export const GROW_DENIED_EXPORT = 'murmur:memory-grow-denied';

/**
 * Where the watched form of a core module is kept, beside it: bundles are content-addressed and
 * never change, so what is derived from one is made once per machine (the rewrite is a pass over
 * every instruction, a tenth of a second for a 16 MB StarlingMonkey module). The version in the
 * name is the rewrite's; an empty file means "could not be watched".
 */
export function watchedModuleFile(file: string): string {
  return `${file}.grow-watch-v1`;
}

/** Makes the watched form of `file` unless it is there; written whole (temporary sibling, rename) or not at all. */
export async function keepWatchedModule(file: string): Promise<void> {
  const target = watchedModuleFile(file);
  if (existsSync(target)) return;
  const watched = watchMemoryGrowth(await readFile(file));
  const temporary = `${target}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    await writeFile(temporary, watched ?? new Uint8Array());
    await rename(temporary, target);
  } finally {
    await rm(temporary, { force: true });
  }
}

const SECTION = { import: 2, global: 6, export: 7, code: 10 } as const;
/** Sections after the global section, in the binary's order (datacount, 12, comes before code). */
const AFTER_GLOBAL = new Set([7, 8, 9, 12, 10, 11]);
const AFTER_EXPORT = new Set([8, 9, 12, 10, 11]);

class Unsupported extends Error {}

interface Section {
  id: number;
  payload: Uint8Array;
}

/** The instrumented module, or `undefined` when it could not be instrumented (it then runs unchanged). */
export function watchMemoryGrowth(module: Uint8Array): Uint8Array | undefined {
  try {
    return instrument(module);
  } catch (error) {
    if (error instanceof Unsupported || error instanceof RangeError) return undefined;
    throw error;
  }
}

function instrument(module: Uint8Array): Uint8Array {
  const sections = readSections(module);
  const importedGlobals = countImportedGlobals(sections.find((section) => section.id === SECTION.import));
  const globals = sections.find((section) => section.id === SECTION.global);
  const definedGlobals = globals ? new Reader(globals.payload).u32() : 0;
  const delta = importedGlobals + definedGlobals;
  const indices = { delta, result: delta + 1, denied: delta + 2 };

  const out: Section[] = [];
  let globalsWritten = false;
  let exportWritten = false;
  const newGlobals = [0, 1, 2].map(() => [0x7f, 0x01, 0x41, 0x00, 0x0b]);
  const deniedExport = [...encodeName(GROW_DENIED_EXPORT), 0x03, ...encodeU32(indices.denied)];
  const appendEntries = (payload: Uint8Array | undefined, entries: number[][]): Uint8Array => {
    const reader = payload ? new Reader(payload) : undefined;
    const count = reader ? reader.u32() : 0;
    const rest = payload && reader ? payload.subarray(reader.at) : new Uint8Array();
    return concat([encodeU32(count + entries.length), rest, ...entries]);
  };
  for (const section of sections) {
    if (!globalsWritten && (section.id === SECTION.global || AFTER_GLOBAL.has(section.id))) {
      out.push({ id: SECTION.global, payload: appendEntries(section.id === SECTION.global ? section.payload : undefined, newGlobals) });
      globalsWritten = true;
      if (section.id === SECTION.global) continue;
    }
    if (!exportWritten && (section.id === SECTION.export || AFTER_EXPORT.has(section.id))) {
      out.push({ id: SECTION.export, payload: appendEntries(section.id === SECTION.export ? section.payload : undefined, [deniedExport]) });
      exportWritten = true;
      if (section.id === SECTION.export) continue;
    }
    out.push(section.id === SECTION.code ? { id: SECTION.code, payload: rewriteCode(section.payload, indices) } : section);
  }
  if (!globalsWritten) out.push({ id: SECTION.global, payload: appendEntries(undefined, newGlobals) });
  if (!exportWritten) out.push({ id: SECTION.export, payload: appendEntries(undefined, [deniedExport]) });

  const parts: Array<Uint8Array | number[]> = [module.subarray(0, 8)];
  for (const section of out) parts.push([section.id, ...encodeU32(section.payload.length)], section.payload);
  return concat(parts);
}

function readSections(module: Uint8Array): Section[] {
  const reader = new Reader(module);
  reader.at = 8;
  const sections: Section[] = [];
  while (reader.at < module.length) {
    const id = reader.byte();
    const size = reader.u32();
    sections.push({ id, payload: reader.take(size) });
  }
  return sections;
}

function countImportedGlobals(section: Section | undefined): number {
  if (!section) return 0;
  const reader = new Reader(section.payload);
  let globals = 0;
  for (let count = reader.u32(); count > 0; count--) {
    reader.take(reader.u32()); // module name
    reader.take(reader.u32()); // field name
    const kind = reader.byte();
    switch (kind) {
      case 0x00: // function: type index
      case 0x04: // tag: attribute, type index
        if (kind === 0x04) reader.byte();
        reader.u32();
        break;
      case 0x01: // table: reftype, limits
        reader.valueType();
        reader.limits();
        break;
      case 0x02:
        reader.limits();
        break;
      case 0x03:
        reader.valueType();
        reader.byte(); // mutability
        globals++;
        break;
      default:
        throw new Unsupported(`import kind ${kind}`);
    }
  }
  return globals;
}

/** Each function body re-encoded with its `memory.grow`s wrapped; bodies without one are copied as they are. */
function rewriteCode(payload: Uint8Array, globals: { delta: number; result: number; denied: number }): Uint8Array {
  const reader = new Reader(payload);
  const count = reader.u32();
  const parts: Array<Uint8Array | number[]> = [encodeU32(count)];
  const saveDelta = [0x24, ...encodeU32(globals.delta), 0x23, ...encodeU32(globals.delta)];
  for (let index = 0; index < count; index++) {
    const size = reader.u32();
    const body = reader.take(size);
    const grows = findMemoryGrows(body);
    if (grows.length === 0) {
      parts.push(encodeU32(size), body);
      continue;
    }
    const pieces: Array<Uint8Array | number[]> = [];
    let copied = 0;
    for (const grow of grows) {
      const memory = Array.from(body.subarray(grow.at + 1, grow.end));
      pieces.push(body.subarray(copied, grow.at), saveDelta, body.subarray(grow.at, grow.end));
      // result kept; if it is -1, the pages asked for in total (size + delta) go to the denied global.
      pieces.push([
        ...[0x24, ...encodeU32(globals.result), 0x23, ...encodeU32(globals.result), 0x23, ...encodeU32(globals.result)],
        ...[0x41, 0x7f, 0x46, 0x04, 0x40],
        ...[0x3f, ...memory, 0x23, ...encodeU32(globals.delta), 0x6a, 0x24, ...encodeU32(globals.denied), 0x0b],
      ]);
      copied = grow.end;
    }
    pieces.push(body.subarray(copied));
    const rewritten = concat(pieces);
    parts.push(encodeU32(rewritten.length), rewritten);
  }
  if (reader.at !== payload.length) throw new Unsupported('bytes after the last function body');
  return concat(parts);
}

/** How an opcode's immediates are skipped: the common cases in one table lookup, the rest by `skipImmediates`. */
const Kind = { None: 1, Index: 2, Memarg: 3, Leb: 4, Other: 5 } as const;

const KINDS = (() => {
  const kinds = new Uint8Array(256);
  for (let opcode = 0x45; opcode <= 0xc4; opcode++) kinds[opcode] = Kind.None;
  for (const opcode of [0x00, 0x01, 0x05, 0x0a, 0x0b, 0x0f, 0x19, 0x1a, 0x1b, 0xd1, 0xd3, 0xd4]) kinds[opcode] = Kind.None;
  // br, br_if, catch, throw, rethrow, delegate, call, return_call, call_ref, return_call_ref,
  // locals, globals, table.get/set, ref.func, br_on_null, br_on_non_null, memory.size. (ref.eq
  // 0xd3 and ref.as_non_null 0xd4 take none; br_on_null 0xd5 and br_on_non_null 0xd6 a label.)
  for (const opcode of [0x07, 0x08, 0x09, 0x0c, 0x0d, 0x10, 0x12, 0x14, 0x15, 0x18, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x3f, 0xd2, 0xd5, 0xd6])
    kinds[opcode] = Kind.Index;
  for (let opcode = 0x28; opcode <= 0x3e; opcode++) kinds[opcode] = Kind.Memarg;
  // block, loop, if, try (a block type is one s33), i32.const, i64.const, ref.null (a heap type).
  for (const opcode of [0x02, 0x03, 0x04, 0x06, 0x41, 0x42, 0xd0]) kinds[opcode] = Kind.Leb;
  for (const opcode of [0x0e, 0x11, 0x13, 0x1c, 0x1f, 0x43, 0x44, 0xfc, 0xfd, 0xfe]) kinds[opcode] = Kind.Other;
  return kinds;
})();

/**
 * Where each `memory.grow` of a function body is: its opcode's offset and the end of its memory
 * index. The hot loop of the rewrite (a 12 MB module is millions of instructions), so LEB128s are
 * skipped inline rather than decoded.
 */
function findMemoryGrows(body: Uint8Array): Array<{ at: number; end: number }> {
  const reader = new Reader(body);
  for (let groups = reader.u32(); groups > 0; groups--) {
    reader.u32();
    reader.valueType();
  }
  const grows: Array<{ at: number; end: number }> = [];
  const length = body.length;
  let at = reader.at;
  while (at < length) {
    const opcode = body[at] as number;
    if (opcode === 0x40) {
      const start = at;
      at++;
      while ((body[at++] as number) & 0x80);
      grows.push({ at: start, end: at });
      continue;
    }
    switch (KINDS[opcode]) {
      case Kind.None:
        at++;
        break;
      case Kind.Index:
      case Kind.Leb:
        at++;
        while ((body[at++] as number) & 0x80);
        break;
      case Kind.Memarg: {
        at++;
        const align = body[at] as number;
        while ((body[at++] as number) & 0x80);
        // The memory index flag (bit 6) of a one-byte alignment; a longer one goes the slow way.
        if (align & 0x80) throw new Unsupported('multi-byte memarg alignment');
        if (align & 0x40) while ((body[at++] as number) & 0x80);
        while ((body[at++] as number) & 0x80);
        break;
      }
      case Kind.Other:
        reader.at = at + 1;
        skipImmediates(reader, opcode);
        at = reader.at;
        break;
      default:
        throw new Unsupported(`opcode 0x${opcode.toString(16)}`);
    }
  }
  // An immediate that ran past the body's end: the body was not what it was taken for.
  if (at !== length) throw new Unsupported('an instruction runs past the end of its function body');
  return grows;
}

/** The immediates of the opcodes the table leaves to code. */
function skipImmediates(reader: Reader, opcode: number): void {
  switch (opcode) {
    case 0x0e: // br_table
      for (let labels = reader.u32(); labels > 0; labels--) reader.u32();
      reader.u32();
      return;
    case 0x11: // call_indirect, return_call_indirect
    case 0x13:
      reader.u32();
      reader.u32();
      return;
    case 0x1c: // select with types
      for (let types = reader.u32(); types > 0; types--) reader.valueType();
      return;
    case 0x1f: // try_table
      reader.s33();
      for (let catches = reader.u32(); catches > 0; catches--) {
        const kind = reader.byte();
        if (kind > 0x03) throw new Unsupported(`try_table catch kind ${kind}`);
        if (kind <= 0x01) reader.u32();
        reader.u32();
      }
      return;
    case 0x43:
      reader.take(4);
      return;
    case 0x44:
      reader.take(8);
      return;
    case 0xfc:
      skipMiscellaneous(reader, reader.u32());
      return;
    case 0xfd:
      skipVector(reader, reader.u32());
      return;
    case 0xfe:
      skipAtomic(reader, reader.u32());
      return;
    default:
      throw new Unsupported(`opcode 0x${opcode.toString(16)}`);
  }
}

function skipMiscellaneous(reader: Reader, sub: number): void {
  if (sub <= 7) return; // saturating truncations
  if (sub === 9 || sub === 11 || sub === 13 || (sub >= 15 && sub <= 17)) {
    reader.u32();
    return;
  }
  if (sub === 8 || sub === 10 || sub === 12 || sub === 14) {
    reader.u32();
    reader.u32();
    return;
  }
  throw new Unsupported(`0xfc ${sub}`);
}

function skipVector(reader: Reader, sub: number): void {
  if (sub <= 11 || sub === 92 || sub === 93) reader.memarg();
  else if (sub === 12 || sub === 13) reader.take(16);
  else if (sub >= 21 && sub <= 34) reader.byte();
  else if (sub >= 84 && sub <= 91) {
    reader.memarg();
    reader.byte();
  } else if (sub > 0x113) throw new Unsupported(`0xfd ${sub}`);
}

function skipAtomic(reader: Reader, sub: number): void {
  if (sub === 0x03) reader.byte();
  else if (sub <= 0x02 || (sub >= 0x10 && sub <= 0x4e)) reader.memarg();
  else throw new Unsupported(`0xfe ${sub}`);
}

/** A cursor over bytes; reading past the end is a RangeError, which gives the rewrite up. */
class Reader {
  at = 0;
  constructor(private readonly bytes: Uint8Array) {}

  byte(): number {
    if (this.at >= this.bytes.length) throw new RangeError('unexpected end of the module');
    return this.bytes[this.at++] as number;
  }

  take(length: number): Uint8Array {
    if (this.at + length > this.bytes.length) throw new RangeError('unexpected end of the module');
    const slice = this.bytes.subarray(this.at, this.at + length);
    this.at += length;
    return slice;
  }

  /** Any LEB128, skipped (at most 10 bytes). */
  leb(): void {
    for (let i = 0; i < 10; i++) if ((this.byte() & 0x80) === 0) return;
    throw new Unsupported('LEB128 longer than 10 bytes');
  }

  u32(): number {
    let value = 0;
    for (let i = 0; i < 5; i++) {
      const byte = this.byte();
      value += (byte & 0x7f) * 2 ** (7 * i);
      if ((byte & 0x80) === 0) return value;
    }
    throw new Unsupported('u32 longer than 5 bytes');
  }

  s33(): void {
    this.leb();
  }

  /** A value type: one byte, or a reference type with a heap type (0x63, 0x64). */
  valueType(): void {
    const type = this.byte();
    if (type === 0x63 || type === 0x64) this.s33();
  }

  limits(): void {
    const flags = this.byte();
    this.leb();
    if (flags & 0x01) this.leb();
  }

  /** alignment (with the memory index flag, bit 6), [memory index], offset. */
  memarg(): void {
    const align = this.u32();
    if (align & 0x40) this.u32();
    this.leb();
  }
}

function encodeName(name: string): number[] {
  const bytes = Array.from(new TextEncoder().encode(name));
  return [...encodeU32(bytes.length), ...bytes];
}

function concat(parts: Array<Uint8Array | number[]>): Uint8Array {
  const length = parts.reduce((sum, part) => sum + part.length, 0);
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}
