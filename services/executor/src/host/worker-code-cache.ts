import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Script, constants } from 'node:vm';
import { compiledEagerly } from './code-cache-file.js';

/**
 * The bundled guest worker's V8 code cache: made by the build (`scripts/bundle.mjs`), read by the
 * worker's loader (`guest-worker-loader.ts`, which says why). Both compile the bundle here, with the
 * same wrapping, since V8 accepts a cache only for the source it was made from — and checks only
 * that source's length, so the build removes the cache before it bundles and makes it after.
 */

/**
 * The bundle as a CommonJS module's function, compiled: with `cachedData` when given, or eagerly
 * (every function, for the build to make the cache of). Dynamic `import()` in it (glue that is a
 * module only) goes to the worker's own loader, as it would from the file.
 */
export function compileBundle(bundle: string, options: { cachedData?: Buffer; eagerly?: boolean }): Script {
  const source = `(function (exports, require, module, __filename, __dirname) {${readFileSync(bundle, 'utf8')}\n})`;
  const compile = (): Script =>
    new Script(source, {
      filename: bundle,
      importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
      ...(options.cachedData ? { cachedData: options.cachedData } : {}),
    });
  return options.eagerly ? compiledEagerly(compile) : compile();
}

/** Runs the compiled bundle as the CommonJS module `bundle`. */
export function runBundle(script: Script, bundle: string): void {
  const module = { exports: {} };
  (script.runInThisContext() as (...args: unknown[]) => void)(module.exports, createRequire(bundle), module, bundle, path.dirname(bundle));
}
