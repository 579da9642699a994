import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { Script } from 'node:vm';
import { type CodeCacheUse, codeCacheUse, readCodeCache } from './code-cache-file.js';

/**
 * A component's transpiled glue, loaded in its guest worker.
 *
 * jco's instantiation mode writes glue that imports nothing and exports one function,
 * `instantiate` (and an empty `_util`): nothing about it needs the module loader. Evaluated as a
 * classic script, wrapped in a strict function that hands `instantiate` back, a 131 KB glue loads
 * in ~3 ms where Node 20's `import()` takes ~12 (medians, `bench/first-instruction.ts`'s
 * capsule) — time a pooled host's guest waits for between its launch and its first instruction.
 * Glue of any other shape (an import, another export, `import.meta` beyond its URL, top-level
 * await) is imported as a module, as before: the script form is only a faster way to the same
 * `instantiate`, never a different one.
 *
 * With the script comes V8's code cache (`codeCacheFile`): the glue compiled whole, made by the
 * executor (`glue-cache.ts`), never by a host. Without it V8 compiles each of the glue's functions
 * the first time it runs, which is during the guest's instantiation and first call; with it the
 * first instantiation and call of the printing capsule take ~1.5 ms rather than ~3.7. A cache V8
 * does not accept (another node, other flags, a damaged file) is ignored, and the glue compiled
 * as if there were none.
 */
export async function loadGlue<Glue>(file: string): Promise<Glue> {
  refuseJspiAtOnce();
  const compiled = compileGlue(file);
  if (compiled) return (compiled.script.runInThisContext() as () => Glue)();
  return import(pathToFileURL(file).href) as Promise<Glue>;
}

/**
 * jco's glue asks for JSPI once for each export it lifts and each `cabi_realloc`: `try { f =
 * WebAssembly.promising(g) } catch { f = g }`. Node 20 has none, so each ask throws V8's own
 * "WebAssembly.promising is not a function" — and V8 words that message by parsing again the whole
 * function the call is in, which is the glue's instantiation: one generator as long as the
 * component's interface. A StarlingMonkey hook's glue asks 11 times, ~20 ms each on these
 * machines, in every instantiation. Where `promising` is absent it is given as a function that
 * refuses at once: the glue takes the same `catch` as before, without the parse. A node with JSPI
 * keeps its own.
 */
function refuseJspiAtOnce(): void {
  if (typeof (WebAssembly as { promising?: unknown }).promising === 'function') return;
  Object.defineProperty(WebAssembly, 'promising', {
    configurable: true,
    writable: true,
    value: () => {
      throw new TypeError('WebAssembly.promising is not available: this node has no JS promise integration');
    },
  });
}

/**
 * The glue as a compiled script, with how its code cache fared; undefined for glue that is a module
 * only. The glue and its cache are read at once: a guest worker loads glue before its guest runs,
 * waiting for nothing else, and the thread pool's round trips (open, stat, read and close, for
 * each file) cost it ~1.5 ms of a launch.
 */
export function compileGlue(file: string): { script: Script; cache: CodeCacheUse } | undefined {
  const source = glueScriptOf(file, readFileSync(file, 'utf8'));
  if (source === undefined) return undefined;
  const cachedData = readCodeCache(file);
  try {
    const script = new Script(source, { filename: file, ...(cachedData ? { cachedData } : {}) });
    return { script, cache: codeCacheUse(cachedData, script) };
  } catch {
    // Valid as a module but not as a function body (top-level await): the loader's, then.
    return undefined;
  }
}

/** The glue file as the script `glueAsScript` makes of it (what the host compiles, and what its code cache is made from). */
export async function readGlueScript(file: string): Promise<string | undefined> {
  return glueScriptOf(file, await readFile(file, 'utf8'));
}

/** `file`'s glue, read as `source`, as a script (`glueAsScript`, with the file's URL for its `import.meta.url`). */
function glueScriptOf(file: string, source: string): string | undefined {
  return glueAsScript(source, pathToFileURL(file).href);
}

const EXPORT_LINE = /^export\b.*$/gm;
/** The two exports jco's instantiation mode writes; `$1` is each without its `export`. */
const OWN_EXPORT = /^export (function instantiate\(|const _util = )/;

/**
 * The glue's source as a script that evaluates to a function returning `{ instantiate }`, or
 * undefined when it is not the shape jco's instantiation mode writes. The wrapper sits on the
 * glue's first line, so a stack trace's line numbers are the file's own.
 */
export function glueAsScript(source: string, url: string): string | undefined {
  if (/^\s*import[\s{*'"]/m.test(source)) return undefined;
  const exports = source.match(EXPORT_LINE) ?? [];
  if (!exports.every((line) => OWN_EXPORT.test(line)) || !exports.some((line) => line.startsWith('export function instantiate('))) return undefined;
  if (/\bimport\s*\.\s*meta\b(?!\.url\b)/.test(source)) return undefined;
  const body = source.replace(new RegExp(OWN_EXPORT.source, 'gm'), '$1').replaceAll('import.meta.url', JSON.stringify(url));
  // Strict, as a module is; `this` is undefined at its top, as in a module.
  return `(function () { 'use strict'; ${body}\nreturn { instantiate };\n})`;
}
