import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { Script } from 'node:vm';

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
 */
export async function loadGlue<Glue>(file: string): Promise<Glue> {
  const url = pathToFileURL(file).href;
  const script = glueAsScript(await readFile(file, 'utf8'), url);
  if (script !== undefined) {
    let compiled: Script | undefined;
    try {
      compiled = new Script(script, { filename: file });
    } catch {
      // Valid as a module but not as a function body (top-level await): the loader's, then.
    }
    if (compiled) return (compiled.runInThisContext() as () => Glue)();
  }
  return import(url) as Promise<Glue>;
}

const EXPORT_LINE = /^export\b.*$/gm;
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
  const body = source.replace(/^export (function instantiate\(|const _util = )/gm, '$1').replaceAll('import.meta.url', JSON.stringify(url));
  // Strict, as a module is; `this` is undefined at its top, as in a module.
  return `(function () { 'use strict'; ${body}\nreturn { instantiate };\n})`;
}
