import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, promises as fs, readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentEmbed, componentNew, parse as parseWat, preview1AdapterReactorPath } from '@bytecodealliance/jco';

/**
 * Builds guest components from our own sources, for tests, benchmarks and the demo: JavaScript
 * through componentize-js, component WAT through jco's `parse`, or Rust through a `rustc` that
 * has a WASI target (Debian's `rustc` with `libstd-rust-dev-wasm32`). Each build lands in a cache
 * keyed by the hash of everything that decides its bytes (source, WIT, options, tool versions), so
 * a second build of the same guest is a file read. Nothing built here is ever committed.
 *
 * The WIT a guest is built against is composed from this repository's `wit/` packages (the ABI)
 * and the WASI packages jco ships, as nested packages of one inline WIT document, so
 * componentize-js never reads WIT from disk (which would need process-wide preopens).
 */

const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export function guestCacheDir(): string {
  const explicit = process.env.MURMUR_GUEST_CACHE?.trim();
  return explicit ? path.resolve(explicit) : path.join(repositoryRoot, '.cache', 'guests');
}

export interface BuiltGuest {
  /** The cached `.wasm`. */
  path: string;
  bytes: Buffer;
  sha256: string;
  cacheHit: boolean;
}

/**
 * A dependency's root directory: the nearest `node_modules/<name>` above this file, found by
 * walking up (its package.json is not exported, and test runners do not all offer
 * module resolution helpers).
 */
function packageRoot(name: string): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(dir, 'node_modules', ...name.split('/'));
    if (existsSync(path.join(candidate, 'package.json'))) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`cannot find ${name} in any node_modules above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

function packageVersion(name: string): string {
  return (JSON.parse(readFileSync(path.join(packageRoot(name), 'package.json'), 'utf8')) as { version: string }).version;
}

const murmurWitDir = path.join(repositoryRoot, 'wit', 'murmur');
const WASI_VERSION = '0.2.12';

function wasiWitDir(): string {
  return path.join(packageRoot('@bytecodealliance/jco'), 'lib', 'wit', 'builtin', WASI_VERSION);
}

/** A WIT file's single package, rewritten as a nested `package x { ... }` block. */
function asNestedPackage(text: string): string {
  const match = /^\s*package\s+([^;\s]+)\s*;/m.exec(text);
  if (!match) throw new Error('WIT file without a package declaration');
  const body = text.slice(0, match.index) + text.slice(match.index + match[0].length);
  return `package ${match[1]} {\n${body}\n}\n`;
}

let composedDependencies: string | undefined;

/** Every murmur and WASI package, nested, to append to a guest's own WIT. */
export function witDependencies(): string {
  if (composedDependencies !== undefined) return composedDependencies;
  const parts: string[] = [];
  for (const file of fsReadDirSorted(murmurWitDir)) {
    if (file.endsWith('.wit')) parts.push(asNestedPackage(readFileSync(path.join(murmurWitDir, file), 'utf8')));
  }
  const wasiDir = wasiWitDir();
  for (const entry of fsReadDirSorted(wasiDir)) {
    const packageFile = path.join(wasiDir, entry, 'package.wit');
    if (existsSync(packageFile)) parts.push(asNestedPackage(readFileSync(packageFile, 'utf8')));
  }
  composedDependencies = parts.join('\n');
  return composedDependencies;
}

/** Synchronous on purpose: a handful of files, read once per process. */
function fsReadDirSorted(dir: string): string[] {
  return readdirSync(dir).sort();
}

function cacheKey(parts: unknown[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

async function cached(kind: string, key: string, build: () => Promise<Uint8Array>): Promise<BuiltGuest> {
  const dir = guestCacheDir();
  const file = path.join(dir, `${kind}-${key.slice(0, 32)}.wasm`);
  try {
    const bytes = await fs.readFile(file);
    return { path: file, bytes, sha256: createHash('sha256').update(bytes).digest('hex'), cacheHit: true };
  } catch {
    // not built yet
  }
  const bytes = Buffer.from(await build());
  await fs.mkdir(dir, { recursive: true });
  const temporary = path.join(dir, `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  await fs.writeFile(temporary, bytes);
  await fs.rename(temporary, file);
  return { path: file, bytes, sha256: createHash('sha256').update(bytes).digest('hex'), cacheHit: false };
}

export type JsFeature = 'stdio' | 'random' | 'clocks' | 'http' | 'fetch-event';

export interface JsGuest {
  /** The guest's JavaScript module. Exports are named by interface (`export const run = { run() {} }`). */
  source: string;
  /**
   * The guest's own WIT: a package with the world to build, e.g.
   * `package test:guest; world capsule { export murmur:capsule/run@0.1.0; }`.
   */
  world: string;
  worldName: string;
  disableFeatures?: JsFeature[];
}

/** Builds (or reads from the cache) a component from a JavaScript guest. */
export async function componentFromJs(guest: JsGuest): Promise<BuiltGuest> {
  const wit = `${guest.world}\n${witDependencies()}`;
  const disableFeatures = [...(guest.disableFeatures ?? [])].sort();
  const key = cacheKey(['js', packageVersion('@bytecodealliance/componentize-js'), wit, guest.source, guest.worldName, disableFeatures]);
  return cached('js', key, async () => {
    const { componentize } = await import('@bytecodealliance/componentize-js');
    const workDir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-guest-'));
    try {
      const sourcePath = path.join(workDir, 'guest.js');
      await fs.writeFile(sourcePath, guest.source);
      // `witWorld` (inline WIT) is honoured by componentize-js but missing from its typings.
      const options = { sourcePath, witWorld: wit, worldName: guest.worldName, disableFeatures };
      const { component } = await (componentize as unknown as (options: object) => Promise<{ component: Uint8Array }>)(options);
      return component;
    } finally {
      await fs.rm(workDir, { recursive: true, force: true });
    }
  });
}

/** Builds (or reads from the cache) a component from component-model WAT text. */
export async function componentFromWat(wat: string): Promise<BuiltGuest> {
  const key = cacheKey(['wat', packageVersion('@bytecodealliance/jco'), wat]);
  return cached('wat', key, () => parseWat(wat));
}

export interface RustGuest {
  /**
   * The crate: one file with no dependencies, built as a `cdylib` for WASI preview 1 against
   * Rust's standard library. It exports its functions under their canonical ABI names, e.g.
   * `#[export_name = "murmur:capsule/run@0.1.0#run"] pub extern "C" fn run()` for a `func()`.
   */
  source: string;
  /** The guest's own WIT package and world, as for a JavaScript guest. */
  world: string;
  worldName: string;
}

export type RustToolchain = { rustc: string; target: string; version: string } | { missing: string };

let foundToolchain: RustToolchain | undefined;

/**
 * A `rustc` whose sysroot has the standard library for WASI preview 1 (`wasm32-wasip1`, called
 * `wasm32-wasi` before Rust 1.78): `MURMUR_RUSTC`, else the first such `rustc` on `PATH` or at
 * `/usr/bin/rustc`. A rustup toolchain usually lacks the target (it is a download); Debian's
 * `rustc` gets it from the `libstd-rust-dev-wasm32` package. Says why when there is none.
 */
export function rustToolchain(): RustToolchain {
  if (foundToolchain) return foundToolchain;
  const explicit = process.env.MURMUR_RUSTC?.trim();
  const candidates = explicit ? [explicit] : ['rustc', '/usr/bin/rustc'];
  const tried: string[] = [];
  for (const rustc of candidates) {
    const sysroot = spawnSync(rustc, ['--print', 'sysroot'], { encoding: 'utf8' });
    if (sysroot.status !== 0) {
      tried.push(`${rustc}: ${sysroot.error?.message ?? sysroot.stderr.trim()}`);
      continue;
    }
    const target = ['wasm32-wasip1', 'wasm32-wasi'].find((name) => existsSync(path.join(sysroot.stdout.trim(), 'lib', 'rustlib', name, 'lib')));
    if (!target) {
      tried.push(`${rustc}: no wasm32-wasip1 or wasm32-wasi standard library in ${sysroot.stdout.trim()}`);
      continue;
    }
    const version = spawnSync(rustc, ['--version'], { encoding: 'utf8' }).stdout.trim();
    foundToolchain = { rustc, target, version };
    return foundToolchain;
  }
  foundToolchain = { missing: `no rustc can build a WASI guest (${tried.join('; ')}); on Debian: apt-get install rustc libstd-rust-dev-wasm32` };
  return foundToolchain;
}

/**
 * Builds (or reads from the cache) a component from a Rust guest: `rustc` makes a core module that
 * imports WASI preview 1, jco embeds the world's WIT in it and adapts it to preview 2 with the
 * reactor adapter jco ships, as `cargo component` does for upstream's Rust capsules.
 */
export async function componentFromRust(guest: RustGuest): Promise<BuiltGuest> {
  const toolchain = rustToolchain();
  if ('missing' in toolchain) throw new Error(toolchain.missing);
  const wit = `${guest.world}\n${witDependencies()}`;
  const key = cacheKey(['rust', toolchain.version, toolchain.target, packageVersion('@bytecodealliance/jco'), wit, guest.source, guest.worldName]);
  return cached('rust', key, async () => {
    const workDir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-guest-'));
    try {
      const sourcePath = path.join(workDir, 'guest.rs');
      const corePath = path.join(workDir, 'guest.wasm');
      await fs.writeFile(sourcePath, guest.source);
      const codegen = ['-C', 'opt-level=s', '-C', 'strip=symbols'];
      const args = ['--edition', '2021', '--target', toolchain.target, '--crate-type', 'cdylib', ...codegen, '-o', corePath, sourcePath];
      const compiled = spawnSync(toolchain.rustc, args, { encoding: 'utf8' });
      if (compiled.status !== 0) throw new Error(`${toolchain.rustc} ${args.join(' ')} failed:\n${compiled.stderr}`);
      const embedded = await componentEmbed({ binary: await fs.readFile(corePath), witSource: wit, world: guest.worldName });
      return componentNew(embedded, [['wasi_snapshot_preview1', await fs.readFile(preview1AdapterReactorPath())]]);
    } finally {
      await fs.rm(workDir, { recursive: true, force: true });
    }
  });
}
