import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse as parseWat } from '@bytecodealliance/jco';
import { describe, expect, it } from 'vitest';
import { repositoryRoot } from '../../../test/support/processes.js';
import { GROW_DENIED_EXPORT, watchMemoryGrowth } from '../src/host/grow-watch.js';

/*
 * The watch on `memory.grow`: real core modules (WAT through jco's parser, and a large
 * Rust-built module from node_modules), validated, instantiated and run by V8.
 */

interface WasmGlobal {
  value: number;
}
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  instantiate(bytes: Uint8Array, imports?: Record<string, Record<string, unknown>>): Promise<{ instance: { exports: Record<string, unknown> } }>;
}
const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

/** One memory of `pages` pages, at most 4; `grow(n)` returns what `memory.grow` did, and more code. */
async function module(extra = ''): Promise<Uint8Array> {
  return parseWat(`(module
    (global $g (mut i32) (i32.const 7))
    (memory (export "memory") 1 4)
    (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
    (func (export "busy") (result i32)
      (local $x i64)
      (block $out (loop $l (br_if $out (i32.eqz (i32.const 1))) (br $l)))
      (local.set $x (i64.const -123456789))
      (f64.store (i32.const 8) (f64.const 1.5))
      (i32.wrap_i64 (i64.add (local.get $x) (i64.load offset=8 (i32.const 0)))))
    (func (export "get") (result i32) (global.get $g))
    ${extra})`);
}

async function instantiate(bytes: Uint8Array) {
  const { instance } = await wasm.instantiate(bytes);
  return instance.exports as Record<string, unknown> & { grow(n: number): number; get(): number };
}

describe('the memory.grow watch', () => {
  it('records nothing while growth is granted, and the module answers as before', async () => {
    const original = await instantiate(await module());
    const watched = watchMemoryGrowth(await module());
    expect(watched).toBeDefined();
    const instance = await instantiate(watched as Uint8Array);
    expect(instance.grow(1)).toBe(original.grow(1));
    expect(instance.grow(2)).toBe(original.grow(2));
    expect(instance.get()).toBe(7);
    expect((instance[GROW_DENIED_EXPORT] as WasmGlobal).value).toBe(0);
  });

  it('records the pages a refused growth asked for in total, and still returns -1 to the guest', async () => {
    const instance = await instantiate(watchMemoryGrowth(await module()) as Uint8Array);
    expect(instance.grow(1)).toBe(1);
    expect(instance.grow(3)).toBe(-1);
    // Two pages held, three more asked for.
    expect((instance[GROW_DENIED_EXPORT] as WasmGlobal).value).toBe(5);
  });

  it('gives up on an instruction it does not know, leaving the module to run unwatched', async () => {
    const bytes = await module();
    // The body of `grow` (local.get 0; memory.grow 0) with its memory.grow turned into an unknown opcode 0xff.
    const at = bytes.findIndex((byte, index) => byte === 0x20 && bytes[index + 1] === 0x00 && bytes[index + 2] === 0x40 && bytes[index + 3] === 0x00);
    expect(at).toBeGreaterThan(0);
    const unknown = Uint8Array.from(bytes);
    unknown[at + 2] = 0xff;
    expect(watchMemoryGrowth(unknown)).toBeUndefined();
  });

  it('keeps a large compiled Rust module valid', () => {
    const vendor = path.join(repositoryRoot, 'node_modules', '@bytecodealliance', 'jco-transpile', 'vendor', 'wasm-tools.core.wasm');
    const watched = watchMemoryGrowth(readFileSync(vendor));
    expect(watched).toBeDefined();
    expect(wasm.validate(watched as Uint8Array)).toBe(true);
  });
});
