import { promises as fs } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse as parseWat, print as printWasm, transpile } from '@bytecodealliance/jco';
import { beforeAll, describe, expect, it } from 'vitest';
import { TRANSPILE_OPTIONS } from '@murmur/shared';
import { encodeU32 } from '../src/host/leb128.js';
import {
  capModuleMemory,
  capModuleMemoryInPlace,
  compileCoreModule,
  MemoryLimitError,
  type ModuleWithRoom,
  TableLimitError,
  readModuleWithRoom,
} from '../src/host/memory-limit.js';
import { watchedModuleFile } from '../src/host/grow-watch.js';
import { tempDir } from '../../../test/support/fs.js';

/*
 * Every module here is real WebAssembly: hand-encoded core modules (the helpers below), plus one
 * that jco transpiles from a component. Capped modules are validated, instantiated and grown by
 * V8 itself; nothing is mocked.
 */

// The project's `lib` has no WebAssembly declarations; these are the few members the tests use.
interface WasmMemory {
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
}
interface WasmModuleObject {
  readonly __wasmModule?: never;
}
interface WasmInstance {
  readonly exports: Record<string, unknown>;
}
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  compile(bytes: Uint8Array): Promise<WasmModuleObject>;
  instantiate(bytes: Uint8Array, imports?: Record<string, Record<string, unknown>>): Promise<{ instance: WasmInstance }>;
  Memory: new (descriptor: { initial: number; maximum?: number; shared?: boolean }) => WasmMemory;
  Instance: new (module: WasmModuleObject) => WasmInstance;
}
const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

const PAGE = 65_536;
const I32 = 0x7f;

// ---------------------------------------------------------------------------------------------
// A tiny encoder for core modules: header, sections (id + u32 LEB128 size + payload), limits.

type Bytes = Uint8Array | readonly number[];

function concat(...parts: Bytes[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/** Minimal unsigned LEB128: the encoder the runtime writes modules with. */
const u32 = encodeU32;

/** Unsigned LEB128 padded to exactly `width` bytes (valid, but not minimal). */
function paddedU32(value: number, width: number): number[] {
  const out: number[] = [];
  let rest = value;
  for (let i = 0; i < width; i++) {
    const low = rest % 128;
    rest = Math.floor(rest / 128);
    out.push(i < width - 1 ? low | 0x80 : low);
  }
  return out;
}

function name(text: string): Uint8Array {
  const utf8 = new TextEncoder().encode(text);
  return concat(u32(utf8.length), utf8);
}

function vec(items: readonly Bytes[]): Uint8Array {
  return concat(u32(items.length), ...items);
}

function section(id: number, ...payload: Bytes[]): Uint8Array {
  const body = concat(...payload);
  return concat([id], u32(body.length), body);
}

function wasmModule(...sections: Uint8Array[]): Uint8Array {
  return concat([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00], ...sections);
}

const minOnly = (min: number): number[] => [0x00, ...u32(min)];
const minMax = (min: number, max: number): number[] => [0x01, ...u32(min), ...u32(max)];
const sharedMinMax = (min: number, max: number): number[] => [0x03, ...u32(min), ...u32(max)];

const customSection = (label: string, content: Bytes): Uint8Array => section(0, name(label), content);
/** Types: 0 = (i32) -> i32 for `grow`, 1 = () -> () for filler functions. */
const typeSection = (): Uint8Array =>
  section(
    1,
    vec([
      [0x60, 1, I32, 1, I32],
      [0x60, 0, 0],
    ]),
  );
const importMemorySection = (limits: number[]): Uint8Array => section(2, vec([concat(name('env'), name('memory'), [0x02], limits)]));
const functionSection = (fillers = 0): Uint8Array => section(3, u32(1 + fillers), [0], new Array<number>(fillers).fill(1));
const memorySection = (...memtypes: number[][]): Uint8Array => section(5, vec(memtypes));
const exportSection = (withMemory = true): Uint8Array =>
  section(7, vec([...(withMemory ? [concat(name('memory'), [0x02, 0])] : []), concat(name('grow'), [0x00, 0])]));

/**
 * Code: `grow(n) = memory.grow(n)` on memory 0, then `fillers` functions whose bodies are
 * `fillerSize` nops each (a cheap way to make a large, valid code section).
 */
function codeSection(fillers = 0, fillerSize = 0): Uint8Array {
  const grow = [0x00, 0x20, 0x00, 0x40, 0x00, 0x0b]; // no locals; local.get 0; memory.grow 0; end
  const fillerBody = concat([0x00], new Uint8Array(fillerSize).fill(0x01), [0x0b]);
  const filler = concat(u32(fillerBody.length), fillerBody);
  const bodies = new Uint8Array(filler.length * fillers);
  for (let i = 0; i < fillers; i++) bodies.set(filler, i * filler.length);
  return section(10, u32(1 + fillers), u32(grow.length), grow, bodies);
}

/** One active segment: "hi" at address 16 of memory 0. */
const dataSection = (): Uint8Array => section(11, vec([[0x00, 0x41, 0x10, 0x0b, 2, 0x68, 0x69]]));

/** `(memory <memtype>) (export "memory") (func (export "grow") ...)`. */
function growModule(memtype: number[]): Uint8Array {
  return wasmModule(typeSection(), functionSection(), memorySection(memtype), exportSection(), codeSection());
}

/** Every section of a module, whole (id, size and payload), in order: an independent walker for assertions. */
function sectionsOf(bytes: Uint8Array): { id: number; bytes: Uint8Array }[] {
  const found: { id: number; bytes: Uint8Array }[] = [];
  let offset = 8;
  while (offset < bytes.length) {
    const start = offset;
    const id = bytes[offset++] as number;
    let size = 0;
    for (let shift = 0; ; shift += 7) {
      const byte = bytes[offset++] as number;
      size += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) break;
    }
    offset += size;
    found.push({ id, bytes: bytes.subarray(start, offset) });
  }
  return found;
}

async function instantiateGrow(bytes: Uint8Array): Promise<{ grow: (pages: number) => number; memory: WasmMemory }> {
  const { instance } = await wasm.instantiate(bytes);
  return { grow: instance.exports.grow as (pages: number) => number, memory: instance.exports.memory as WasmMemory };
}

/** Byte equality for large buffers (a deep `toEqual` walks 12 MB element by element). */
function sameBytes(a: Uint8Array | undefined, b: Uint8Array): boolean {
  return a !== undefined && Buffer.from(a.buffer, a.byteOffset, a.length).equals(Buffer.from(b.buffer, b.byteOffset, b.length));
}

function thrown(action: () => unknown): unknown {
  try {
    action();
  } catch (error) {
    return error;
  }
  throw new Error('expected the action to throw');
}

// ---------------------------------------------------------------------------------------------

describe('capModuleMemory on hand-built core modules', () => {
  it('lets memory.grow succeed up to the cap and return -1 beyond it', async () => {
    const capped = capModuleMemory(growModule(minOnly(1)), 4 * PAGE);

    expect(wasm.validate(capped.bytes)).toBe(true);
    const { grow, memory } = await instantiateGrow(capped.bytes);
    expect(grow(3)).toBe(1); // 1 -> 4 pages: exactly the cap
    expect(memory.buffer.byteLength).toBe(4 * PAGE);
    expect(grow(1)).toBe(-1);
    expect(grow(1000)).toBe(-1);
    expect(grow(0)).toBe(4);
    expect(memory.buffer.byteLength).toBe(4 * PAGE);
  });

  it('is what bounds growth: the same module uncapped grows past the limit', async () => {
    const { grow } = await instantiateGrow(growModule(minOnly(1)));
    expect(grow(3)).toBe(1);
    expect(grow(1)).toBe(4);
  });

  it('writes the cap as the maximum and reports the declared and capped limits', () => {
    const capped = capModuleMemory(growModule(minOnly(1)), 4 * PAGE);
    expect(capped.bytes).toEqual(growModule(minMax(1, 4)));
    expect(capped.memories).toEqual([{ index: 0, minPages: 1, maxPages: undefined, cappedMaxPages: 4 }]);
  });

  it('rounds a limit that is not a whole number of pages down', () => {
    const capped = capModuleMemory(growModule(minOnly(1)), 5 * PAGE - 1);
    expect(capped.memories[0]?.cappedMaxPages).toBe(4);
    expect(capped.bytes).toEqual(growModule(minMax(1, 4)));
  });

  it('keeps an existing maximum that is already below the cap, byte for byte', async () => {
    const input = growModule(minMax(1, 2));
    const capped = capModuleMemory(input, 4 * PAGE);

    expect(capped.bytes).toEqual(input);
    expect(capped.memories).toEqual([{ index: 0, minPages: 1, maxPages: 2, cappedMaxPages: 2 }]);
    const { grow } = await instantiateGrow(capped.bytes);
    expect(grow(1)).toBe(1);
    expect(grow(1)).toBe(-1);
  });

  it('lowers an existing maximum that is above the cap', async () => {
    const capped = capModuleMemory(growModule(minMax(1, 1000)), 4 * PAGE);

    expect(capped.bytes).toEqual(growModule(minMax(1, 4)));
    expect(capped.memories).toEqual([{ index: 0, minPages: 1, maxPages: 1000, cappedMaxPages: 4 }]);
    const { grow } = await instantiateGrow(capped.bytes);
    expect(grow(3)).toBe(1);
    expect(grow(1)).toBe(-1);
  });

  it('accepts a minimum equal to the cap, leaving no room to grow', async () => {
    const capped = capModuleMemory(growModule(minOnly(4)), 4 * PAGE);
    const { grow, memory } = await instantiateGrow(capped.bytes);
    expect(memory.buffer.byteLength).toBe(4 * PAGE);
    expect(grow(1)).toBe(-1);
  });

  it('refuses a memory whose minimum is above the cap, naming both page counts', () => {
    const error = thrown(() => capModuleMemory(growModule(minOnly(5)), 4 * PAGE));

    expect(error).toBeInstanceOf(MemoryLimitError);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ name: 'MemoryLimitError', index: 0, minPages: 5, capPages: 4 });
    expect((error as Error).message).toContain('minimum of 5 pages');
    expect((error as Error).message).toContain('limit of 4 pages');
  });

  it('refuses a memory with any minimum when the limit is below one page', () => {
    expect(() => capModuleMemory(growModule(minOnly(1)), PAGE - 1)).toThrow(MemoryLimitError);
    // A zero-page memory still fits a zero-page cap.
    expect(capModuleMemory(growModule(minOnly(0)), PAGE - 1).bytes).toEqual(growModule(minMax(0, 0)));
  });

  it('keeps the shared bit of a shared memory while capping its maximum', async () => {
    const capped = capModuleMemory(growModule(sharedMinMax(1, 100)), 4 * PAGE);

    expect(capped.bytes).toEqual(growModule(sharedMinMax(1, 4)));
    expect(capped.memories).toEqual([{ index: 0, minPages: 1, maxPages: 100, cappedMaxPages: 4 }]);
    expect(wasm.validate(capped.bytes)).toBe(true);
    const { grow, memory } = await instantiateGrow(capped.bytes);
    expect(memory.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(grow(3)).toBe(1);
    expect(grow(1)).toBe(-1);
  });

  it('refuses a shared memory without a maximum as malformed', () => {
    expect(() => capModuleMemory(growModule([0x02, 1]), 4 * PAGE)).toThrow(/shared but declares no maximum/);
  });

  it.each([
    ['0x04', 0x04],
    ['0x05', 0x05],
    ['0x06', 0x06],
    ['0x07', 0x07],
  ])('refuses a 64-bit memory (limits flags %s), saying memory64 is not supported', (_label, flags) => {
    const memtype = flags & 0x01 ? [flags, 1, 2] : [flags, 1];
    expect(() => capModuleMemory(growModule(memtype), 4 * PAGE)).toThrow(/memory64.*not supported/);
  });

  it('refuses limits flags it does not know rather than guessing their meaning', () => {
    // 0x08 is the custom-page-sizes proposal: its pages are not 64 KiB, so the page arithmetic would be wrong.
    expect(() => capModuleMemory(growModule([0x08, 1, 0]), 4 * PAGE)).toThrow(/unsupported limits flags 0x08/);
  });

  it('returns a module without a memory section unchanged, in a new buffer', () => {
    const input = wasmModule(
      typeSection(),
      functionSection(),
      section(7, vec([concat(name('grow'), [0x00, 0])])),
      section(10, vec([[4, 0x00, 0x20, 0x00, 0x0b]])),
    );
    expect(wasm.validate(input)).toBe(true);
    const original = input.slice();

    const capped = capModuleMemory(input, 4 * PAGE);
    expect(capped.bytes).toEqual(original);
    expect(capped.memories).toEqual([]);
    capped.bytes[8] = 0xff;
    expect(input).toEqual(original);
  });

  it('returns a copy, not a view, when given a Buffer', () => {
    const input = Buffer.from(wasmModule(typeSection()));
    const capped = capModuleMemory(input, 4 * PAGE);
    capped.bytes[8] = 0xff;
    expect(input[8]).toBe(1);
  });

  it('never modifies its input', () => {
    const input = growModule(minOnly(1));
    const original = input.slice();
    capModuleMemory(input, 4 * PAGE);
    expect(input).toEqual(original);
  });

  it('leaves an imported memory untouched', async () => {
    const input = wasmModule(typeSection(), importMemorySection(minOnly(1)), functionSection(), exportSection(), codeSection());
    expect(wasm.validate(input)).toBe(true);

    const capped = capModuleMemory(input, 4 * PAGE);
    expect(capped.bytes).toEqual(input);
    expect(capped.memories).toEqual([]);
    // The importer decides its size: the module still instantiates against an unbounded memory.
    const memory = new wasm.Memory({ initial: 1 });
    const { instance } = await wasm.instantiate(capped.bytes, { env: { memory } });
    expect((instance.exports.grow as (pages: number) => number)(8)).toBe(1);
  });

  it('caps the defined memory of a module that also imports one, leaving the import section byte-identical', async () => {
    // Multi-memory (Node 20's V8 cannot validate it; wasm-tools, through jco, can print it).
    const imports = importMemorySection(minOnly(1));
    const input = wasmModule(typeSection(), imports, functionSection(), memorySection(minOnly(2)), exportSection(false), codeSection());

    const capped = capModuleMemory(input, 4 * PAGE);
    expect(capped.memories).toEqual([{ index: 0, minPages: 2, maxPages: undefined, cappedMaxPages: 4 }]);
    expect(sectionsOf(capped.bytes).find((s) => s.id === 2)?.bytes).toEqual(imports);
    const text = await printWasm(capped.bytes);
    expect(text).toMatch(/\(import "env" "memory" \(memory \(;0;\) 1\)\)/);
    expect(text).toMatch(/\(memory \(;1;\) 2 4\)/);
  });

  it('re-encodes a maximum that needs a longer LEB128 than anything it replaces, keeping the module valid', async () => {
    // min 200 and max 300 both need 2 bytes; the memtype grows from 3 bytes to 5.
    const input = growModule(minOnly(200));
    const capped = capModuleMemory(input, 300 * PAGE);

    expect(capped.bytes.length).toBe(input.length + 2);
    expect(capped.bytes).toEqual(growModule(minMax(200, 300)));
    expect(wasm.validate(capped.bytes)).toBe(true);
    const { grow } = await instantiateGrow(capped.bytes);
    expect(grow(100)).toBe(200);
    expect(grow(1)).toBe(-1);
  });

  it('keeps a padded LEB128 minimum as it was and writes a 3-byte maximum for a 4 GiB cap', () => {
    const paddedMin = [0x00, ...paddedU32(1, 5)];
    const capped = capModuleMemory(growModule(paddedMin), 4 * 1024 * 1024 * 1024);

    expect(capped.memories).toEqual([{ index: 0, minPages: 1, maxPages: undefined, cappedMaxPages: 65_536 }]);
    expect(capped.bytes).toEqual(growModule([0x01, ...paddedU32(1, 5), 0x80, 0x80, 0x04]));
    expect(wasm.validate(capped.bytes)).toBe(true);
  });

  it('clamps a limit above 4 GiB to the 65536 pages a 32-bit memory can have', () => {
    const capped = capModuleMemory(growModule(minOnly(1)), 64 * 1024 * 1024 * 1024);
    expect(capped.memories[0]?.cappedMaxPages).toBe(65_536);
    expect(wasm.validate(capped.bytes)).toBe(true);
  });

  it('re-encodes the memory section size when it grows past 127 bytes', async () => {
    // 40 memories of 2 bytes (81-byte payload, 1-byte size) become 40 of 4 (161 bytes, 2-byte size).
    const memtypes = Array.from({ length: 40 }, () => minOnly(1));
    const input = wasmModule(memorySection(...memtypes));

    const capped = capModuleMemory(input, 300 * PAGE);
    const memory = sectionsOf(capped.bytes).find((s) => s.id === 5);
    expect(memory?.bytes.subarray(0, 3)).toEqual(new Uint8Array([5, 0xa1, 0x01]));
    expect(capped.bytes).toEqual(wasmModule(memorySection(...memtypes.map(() => minMax(1, 300)))));
    expect(capped.memories.map((m) => m.index)).toEqual(Array.from({ length: 40 }, (_, i) => i));
    const text = await printWasm(capped.bytes);
    expect(text.match(/\(memory \(;\d+;\) 1 300\)/g)).toHaveLength(40);
  });

  it('copies every other section byte for byte, custom sections and code included', () => {
    const sections = [
      customSection('before', [1, 2, 3]),
      typeSection(),
      functionSection(50),
      memorySection(minOnly(1)),
      exportSection(),
      section(12, u32(1)), // data count
      codeSection(50, 300),
      dataSection(),
      customSection('after', new Uint8Array(1000).fill(7)),
    ];
    const input = wasmModule(...sections);
    expect(wasm.validate(input)).toBe(true);

    const capped = capModuleMemory(input, 4 * PAGE);
    expect(wasm.validate(capped.bytes)).toBe(true);
    const before = sectionsOf(input);
    const after = sectionsOf(capped.bytes);
    expect(after.map((s) => s.id)).toEqual(before.map((s) => s.id));
    after.forEach((s, i) => {
      if (s.id === 5) expect(s.bytes).toEqual(memorySection(minMax(1, 4)));
      else expect(s.bytes).toEqual(before[i]?.bytes);
    });
    expect(after.find((s) => s.id === 10)?.bytes).toEqual(sections[6]);
  });

  it('caps a 12 MB module without changing its other sections', async () => {
    const code = codeSection(1024, 12 * 1024);
    const input = wasmModule(typeSection(), functionSection(1024), memorySection(minOnly(1)), exportSection(), code);
    expect(input.length).toBeGreaterThan(12 * 1024 * 1024);

    const capped = capModuleMemory(input, 4 * PAGE);

    expect(capped.bytes.length).toBe(input.length + 1);
    const after = sectionsOf(capped.bytes);
    const before = sectionsOf(input);
    expect(after.map((s) => s.id)).toEqual([1, 3, 5, 7, 10]);
    expect(after[2]?.bytes).toEqual(memorySection(minMax(1, 4)));
    for (const i of [0, 1, 3, 4]) expect(sameBytes(after[i]?.bytes, before[i]?.bytes ?? new Uint8Array())).toBe(true);
    expect(sameBytes(after[4]?.bytes, code)).toBe(true);
    const { grow } = await instantiateGrow(capped.bytes);
    expect(grow(3)).toBe(1);
    expect(grow(1)).toBe(-1);
  });
});

/** `module` in a buffer with `room` free bytes in front of it, as `readModuleWithRoom` gives one. */
function withRoom(module: Uint8Array, room: number): ModuleWithRoom {
  const buffer = new Uint8Array(room + module.length);
  buffer.set(module, room);
  return { buffer, start: room };
}

describe('capModuleMemory on tables (limits.table_elements)', () => {
  const TABLE_GROWER = `(module
    (memory 1)
    (table $t MIN funcref)
    (func (export "grow") (param i32) (result i32) (table.grow $t (ref.null func) (local.get 0))))`;

  async function tableGrower(min: number): Promise<Uint8Array> {
    return parseWat(TABLE_GROWER.replace('MIN', String(min)));
  }

  it('lets table.grow succeed up to the cap and return -1 beyond it, where uncapped it grows on', async () => {
    const module = await tableGrower(1);
    const capped = capModuleMemory(module, 4 * PAGE, 10);
    const grow = (await wasm.instantiate(capped.bytes)).instance.exports.grow as (elements: number) => number;
    expect(grow(9)).toBe(1);
    expect(grow(1)).toBe(-1);
    expect(grow(1_000_000)).toBe(-1);
    const uncapped = (await wasm.instantiate(module)).instance.exports.grow as (elements: number) => number;
    expect(uncapped(9)).toBe(1);
    expect(uncapped(1_000_000)).toBe(10);
  });

  it('refuses a table whose minimum is above the cap, naming both counts', async () => {
    const error = thrown(() => capModuleMemory(tableModule, 4 * PAGE, 10));
    expect(error).toBeInstanceOf(TableLimitError);
    expect((error as Error).message).toBe('table 0 of the module declares a minimum of 50 elements, above the table limit of 10 elements');
  });

  it('caps a table and a memory together in the module’s own buffer, byte for byte what a copy would be', async () => {
    const module = await tableGrower(2);
    const copied = capModuleMemory(module, 4 * PAGE, 10);
    const room = withRoom(module, 64);
    const capped = capModuleMemoryInPlace(room, 4 * PAGE, 10);
    expect(capped.bytes.buffer).toBe(room.buffer.buffer);
    expect(capped.bytes).toEqual(copied.bytes);
    expect(wasm.validate(capped.bytes)).toBe(true);
  });
});

let tableModule: Uint8Array;
beforeAll(async () => {
  tableModule = await parseWat('(module (table 50 funcref))');
});

describe('capModuleMemoryInPlace: capping a module where it lies', () => {
  const cases: Array<[string, Uint8Array, number]> = [
    ['a maximum for a memory that declared none (the section grows)', growModule(minOnly(1)), 4 * PAGE],
    ['a maximum that needs a longer LEB128 than the minimum', growModule(minOnly(200)), 300 * PAGE],
    ['a padded maximum above the cap, rewritten shorter (the section shrinks)', growModule([0x01, ...u32(1), ...paddedU32(1000, 5)]), 4 * PAGE],
    ['a maximum already below the cap, kept as it was', growModule(minMax(1, 2)), 4 * PAGE],
    ['no memory section at all', wasmModule(typeSection(), customSection('note', [1, 2, 3])), 4 * PAGE],
  ];

  it.each(cases)('writes %s into the module’s own buffer, byte for byte what a copy would be', (_, module, limit) => {
    const room = withRoom(module, 64);
    const copied = capModuleMemory(module, limit);

    const capped = capModuleMemoryInPlace(room, limit);

    expect(capped.bytes.buffer).toBe(room.buffer.buffer);
    expect(capped.bytes).toEqual(copied.bytes);
    expect(capped.memories).toEqual(copied.memories);
  });

  it('caps a 12 MB module without copying it: the sections before the memory move, the rest stays where it was read', async () => {
    const code = codeSection(1024, 12 * 1024);
    const input = wasmModule(typeSection(), functionSection(1024), memorySection(minOnly(1)), exportSection(), code);
    const room = withRoom(input, 64);
    const codeAt = room.start + input.length - code.length;

    const capped = capModuleMemoryInPlace(room, 4 * PAGE);

    expect(capped.bytes.buffer).toBe(room.buffer.buffer);
    expect(capped.bytes.byteOffset).toBe(room.start - 1);
    expect(sameBytes(room.buffer.subarray(codeAt), code)).toBe(true);
    expect(sameBytes(capped.bytes, capModuleMemory(input, 4 * PAGE).bytes)).toBe(true);
    const { grow } = await instantiateGrow(capped.bytes);
    expect(grow(3)).toBe(1);
    expect(grow(1)).toBe(-1);
  });

  it('copies a module whose memory section would outgrow the room in front of it, leaving that buffer as it was', () => {
    // 40 memories of 2 bytes become 40 of 4: the section grows by 81 bytes, more than the room.
    const memtypes = Array.from({ length: 40 }, () => minOnly(1));
    const input = wasmModule(memorySection(...memtypes));
    const room = withRoom(input, 64);
    const before = new Uint8Array(room.buffer);

    const capped = capModuleMemoryInPlace(room, 300 * PAGE);

    expect(capped.bytes.buffer).not.toBe(room.buffer.buffer);
    expect(capped.bytes).toEqual(wasmModule(memorySection(...memtypes.map(() => minMax(1, 300)))));
    expect(room.buffer).toEqual(before);
  });

  it('refuses what capModuleMemory refuses, naming the same limits', () => {
    const module = growModule(minOnly(10));
    expect(thrown(() => capModuleMemoryInPlace(withRoom(module, 64), 4 * PAGE))).toEqual(thrown(() => capModuleMemory(module, 4 * PAGE)));
  });
});

describe('a core module read from its file and compiled capped', () => {
  it('is read whole, with room in front of it, whether small or larger than what is read on the calling thread', async () => {
    const { dir, cleanup } = await tempDir('murmur-memory-limit-');
    try {
      const small = growModule(minOnly(1));
      const large = wasmModule(typeSection(), functionSection(1024), memorySection(minOnly(1)), exportSection(), codeSection(1024, 2 * 1024));
      expect(large.length).toBeGreaterThan(1024 * 1024);
      for (const [file, bytes] of [
        ['small.wasm', small],
        ['large.wasm', large],
      ] as const) {
        await fs.writeFile(path.join(dir, file), bytes);
        const read = await readModuleWithRoom(path.join(dir, file));
        expect(read.start).toBeGreaterThanOrEqual(16);
        expect(sameBytes(read.buffer.subarray(read.start), bytes)).toBe(true);
      }
    } finally {
      await cleanup();
    }
  });

  /**
   * A module of one page and no maximum, compiled from its file under a cap of four pages (after
   * `beside` has put what it likes next to it): it grows to the cap and no further.
   */
  async function growsToTheCapFromFile(beside: (file: string) => Promise<void> = async () => {}): Promise<void> {
    const { dir, cleanup } = await tempDir('murmur-memory-limit-');
    try {
      const file = path.join(dir, 'core.wasm');
      await fs.writeFile(file, growModule(minOnly(1)));
      await beside(file);
      const instance = new wasm.Instance(await compileCoreModule(file, 4 * PAGE));
      const grow = instance.exports.grow as (pages: number) => number;
      expect(grow(3)).toBe(1);
      expect(grow(1)).toBe(-1);
    } finally {
      await cleanup();
    }
  }

  it('compiles the module as it is when the watched form kept beside it is damaged, rather than fail every run', async () => {
    // Cut short, as a crash or a full disk leaves the file the executor keeps for every session.
    await growsToTheCapFromFile((file) => fs.writeFile(watchedModuleFile(file), growModule(minOnly(1)).subarray(0, 10)));
  });

  it('grows up to the cap and no further, from a module file that declared no maximum', async () => {
    await growsToTheCapFromFile();
  });
});

describe('capModuleMemory on input that is not a core module it can cap', () => {
  it.each([
    ['empty input', new Uint8Array()],
    ['text', new TextEncoder().encode('hello, world')],
    ['the magic alone', new Uint8Array([0x00, 0x61, 0x73, 0x6d])],
    ['an ELF header', new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00])],
  ])('refuses %s as not WebAssembly', (_label, bytes) => {
    expect(() => capModuleMemory(bytes, 4 * PAGE)).toThrow(/not a WebAssembly module/);
  });

  it('refuses a component header, saying it is a component', () => {
    const header = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]);
    expect(() => capModuleMemory(header, 4 * PAGE)).toThrow(/got a component/);
  });

  it('refuses a real component that jco built', async () => {
    const component = await parseWat('(component (core module (memory 1)))');
    expect(() => capModuleMemory(component, 4 * PAGE)).toThrow(/got a component/);
  });

  it('refuses an unknown binary version', () => {
    const bytes = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x02, 0x00, 0x00, 0x00]);
    expect(() => capModuleMemory(bytes, 4 * PAGE)).toThrow(/unsupported WebAssembly binary version 0x02 0x00 0x00 0x00/);
  });

  it('refuses a section whose size runs past the end of the module', () => {
    const truncated = growModule(minOnly(1)).subarray(0, -1);
    expect(() => capModuleMemory(truncated, 4 * PAGE)).toThrow(/past the end of the module/);
  });

  it('refuses a section size that is cut off', () => {
    expect(() => capModuleMemory(wasmModule(new Uint8Array([1, 0x80])), 4 * PAGE)).toThrow(/truncated/);
  });

  it('refuses a memory section whose memories run past its end', () => {
    // Declares two memories but holds one.
    const bytes = wasmModule(section(5, [2], minOnly(1)));
    expect(() => capModuleMemory(bytes, 4 * PAGE)).toThrow(/malformed/);
  });

  it('refuses bytes left over after the last memory', () => {
    const bytes = wasmModule(section(5, [1], minOnly(1), [0x00]));
    expect(() => capModuleMemory(bytes, 4 * PAGE)).toThrow(/unexpected bytes after the last memory/);
  });

  it('refuses a second memory section, which could otherwise escape the cap', () => {
    const bytes = wasmModule(memorySection(minOnly(1)), memorySection(minOnly(1)));
    expect(() => capModuleMemory(bytes, 4 * PAGE)).toThrow(/second memory section/);
  });

  it.each([-1, Number.NaN, Number.POSITIVE_INFINITY])('refuses a limit of %s bytes', (limit) => {
    expect(() => capModuleMemory(growModule(minOnly(1)), limit)).toThrow(RangeError);
  });
});

describe('capModuleMemory on a core module jco transpiled from a component', () => {
  const COMPONENT_WAT = `(component
    (core module $m
      (memory (export "memory") 1)
      (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))
    (core instance $i (instantiate $m))
    (func $grow (param "pages" u32) (result s32) (canon lift (core func $i "grow")))
    (export "grow" (func $grow)))`;

  interface TranspiledEntry {
    instantiate(getCoreModule: (file: string) => Promise<WasmModuleObject>, imports: object): Promise<{ grow(pages: number): number }>;
  }

  it('bounds the component export that grows memory, through jco’s own instantiation code', async () => {
    const component = await parseWat(COMPONENT_WAT);
    const { files } = await transpile(component, { ...TRANSPILE_OPTIONS, name: 'grower' });
    const coreFiles = Object.keys(files).filter((file) => file.endsWith('.wasm'));
    expect(coreFiles).toEqual(['grower.core.wasm']);
    const core = files['grower.core.wasm'] as Uint8Array;

    const capped = capModuleMemory(core, 4 * PAGE);
    expect(capped.memories).toEqual([{ index: 0, minPages: 1, maxPages: undefined, cappedMaxPages: 4 }]);

    const { dir, cleanup } = await tempDir('murmur-memory-limit-');
    try {
      await Promise.all(Object.entries(files).map(([file, bytes]) => fs.writeFile(path.join(dir, file), bytes)));
      const entry = (await import(pathToFileURL(path.join(dir, 'grower.js')).href)) as TranspiledEntry;

      const bounded = await entry.instantiate(() => wasm.compile(capped.bytes), {});
      expect(bounded.grow(3)).toBe(1);
      expect(bounded.grow(1)).toBe(-1);

      const unbounded = await entry.instantiate(() => wasm.compile(core), {});
      expect(unbounded.grow(3)).toBe(1);
      expect(unbounded.grow(1)).toBe(4);
    } finally {
      await cleanup();
    }
  });
});
