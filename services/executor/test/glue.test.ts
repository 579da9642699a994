import { spawnSync } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { keepGlueCache } from '../src/glue-cache.js';
import { compileGlue, glueAsScript, loadGlue } from '../src/host/glue.js';
import { tempDir } from '../../../test/support/fs.js';
import { codeCacheFile } from '../src/host/code-cache-file.js';

interface Glue {
  instantiate(...args: unknown[]): unknown;
}

/** This node's own `WebAssembly.promising`, read before any glue is loaded here. */
const nativePromising = (WebAssembly as { promising?: unknown }).promising;

let scratch: { dir: string; cleanup: () => Promise<void> };

beforeEach(async () => {
  scratch = await tempDir('murmur-glue-');
});

afterEach(async () => {
  await scratch.cleanup();
});

async function glueFile(name: string, source: string): Promise<string> {
  const file = path.join(scratch.dir, name);
  await fs.writeFile(file, source);
  return file;
}

describe('a component’s glue, loaded as a script', () => {
  it('evaluates as a module would: strict, `this` undefined at its top, its own file as import.meta.url', async () => {
    const source = [
      '"use components";',
      'const topLevelThis = typeof this;',
      'export function instantiate(base) {',
      '  const strict = (function () { return this === undefined; })();',
      '  return { base, strict, url: import.meta.url, topLevelThis };',
      '}',
      'export const _util = {};',
    ].join('\n');
    const file = await glueFile('component.js', source);
    expect(glueAsScript(source, 'file:///x')).toBeDefined();
    const scripted = await loadGlue<Glue>(file);
    expect(scripted.instantiate(7)).toEqual({ base: 7, strict: true, url: pathToFileURL(file).href, topLevelThis: 'undefined' });
  });

  it('keeps the file’s own line numbers in a stack trace', async () => {
    const file = await glueFile('component.js', 'export function instantiate() {\n\n  throw new Error("from line three");\n}\n');
    const glue = await loadGlue<Glue>(file);
    let stack = '';
    try {
      glue.instantiate();
    } catch (error) {
      stack = (error as Error).stack ?? '';
    }
    expect(stack).toContain(`${file}:3`);
  });

  it('is not used for glue of any other shape', () => {
    const url = 'file:///glue.js';
    expect(glueAsScript('import fs from "node:fs";\nexport function instantiate() {}', url)).toBeUndefined();
    expect(glueAsScript('export function instantiate() {}\nexport const other = 1;', url)).toBeUndefined();
    expect(glueAsScript('export default function () {}', url)).toBeUndefined();
    expect(glueAsScript('export function instantiate() { return import.meta.resolve("x"); }', url)).toBeUndefined();
    expect(glueAsScript('function instantiate() {}', url)).toBeUndefined();
  });

  it('takes the glue’s own way round a JSPI this node lacks, refused at once rather than by V8’s reworded TypeError', async () => {
    const source = [
      'export function instantiate(lifted) {',
      '  let promised;',
      '  let refusal;',
      '  try { promised = WebAssembly.promising(lifted); } catch (error) { promised = lifted; refusal = error; }',
      '  return { promised, refusal };',
      '}',
    ].join('\n');
    const glue = await loadGlue<Glue>(await glueFile('component.js', source));
    const lifted = (): number => 1;
    const { promised, refusal } = glue.instantiate(lifted) as { promised: unknown; refusal: unknown };
    if (typeof nativePromising === 'function') {
      // A node with JSPI keeps its own.
      expect((WebAssembly as { promising?: unknown }).promising).toBe(nativePromising);
      return;
    }
    // The same catch the glue took before, now without V8 parsing the calling function again to word its message.
    expect(promised).toBe(lifted);
    expect(refusal).toBeInstanceOf(TypeError);
    expect((refusal as TypeError).message).toContain('no JS promise integration');
  });

  it('falls back to the module loader for glue that is a module only (top-level await)', async () => {
    const file = await glueFile('component.js', 'const value = await Promise.resolve(5);\nexport function instantiate() { return value; }\n');
    expect(glueAsScript(await fs.readFile(file, 'utf8'), pathToFileURL(file).href)).toBeDefined();
    const glue = await loadGlue<Glue>(file);
    expect(glue.instantiate()).toBe(5);
  });
});

describe('a glue’s code cache', () => {
  const builtGlue = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'host', 'glue.js');
  const glueSource = [
    'export function instantiate(base) {',
    '  const twice = (value) => value * 2;',
    '  return twice(base) + 1;',
    '}',
    'export const _util = {};',
  ].join('\n');

  /** How a node started as the capsule host is (no flags, no NODE_OPTIONS) fares with the glue's cache. */
  function cacheUseInHostLikeNode(file: string): string {
    const result = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { compileGlue } = await import(${JSON.stringify(pathToFileURL(builtGlue).href)}); process.stdout.write(compileGlue(${JSON.stringify(file)}).cache);`,
      ],
      { env: {}, encoding: 'utf8' },
    );
    expect(result.stderr).toBe('');
    return result.stdout;
  }

  it('is made by the executor once, in a node of its own, and a node started as the host is accepts it', async () => {
    const file = await glueFile('component.js', glueSource);
    expect(cacheUseInHostLikeNode(file)).toBe('none');
    await keepGlueCache(file);
    const made = await fs.stat(codeCacheFile(file));
    expect(cacheUseInHostLikeNode(file)).toBe('accepted');
    // Kept: a second launch of the component makes nothing anew.
    await keepGlueCache(file);
    expect((await fs.stat(codeCacheFile(file))).mtimeMs).toBe(made.mtimeMs);
  });

  it('is refused when damaged, and the glue compiles and runs without it', async () => {
    const file = await glueFile('component.js', glueSource);
    await fs.writeFile(codeCacheFile(file), Buffer.alloc(4096, 7));
    expect(compileGlue(file)?.cache).toBe('rejected');
    expect((await loadGlue<Glue>(file)).instantiate(20)).toBe(41);
  });

  it('is not made for glue that only the module loader can load', async () => {
    const awaiting = await glueFile('awaiting.js', 'const value = await Promise.resolve(5);\nexport function instantiate() { return value; }\n');
    const importing = await glueFile('importing.js', "import { readFileSync } from 'node:fs';\nexport function instantiate() { return readFileSync; }\n");
    await Promise.all([keepGlueCache(awaiting), keepGlueCache(importing)]);
    expect(existsSync(codeCacheFile(awaiting))).toBe(false);
    expect(existsSync(codeCacheFile(importing))).toBe(false);
  });
});
