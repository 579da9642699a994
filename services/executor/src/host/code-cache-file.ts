import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import type { Script } from 'node:vm';

/**
 * Where the V8 code cache of a script file is kept: beside it, named for the node that reads it. V8
 * accepts a cache only from its own version and flags, so a node of another version finds no file
 * rather than one it refuses. A component's glue (`glue.ts`) and the bundled guest worker
 * (`guest-worker-loader.ts`) keep theirs so.
 */
export function codeCacheFile(file: string): string {
  return `${file}.node-${process.version}-${process.arch}.v8cache`;
}

/** How a script's code cache fared: none kept, used, or refused by V8 (and compiled without). */
export type CodeCacheUse = 'none' | 'accepted' | 'rejected';

/** The code cache kept for `file`, read at once; undefined when none is kept for this node or it cannot be read. */
export function readCodeCache(file: string): Buffer | undefined {
  try {
    return readFileSync(codeCacheFile(file));
  } catch {
    return undefined;
  }
}

/** How `cachedData` (what `readCodeCache` gave) fared in compiling `script`. */
export function codeCacheUse(cachedData: Buffer | undefined, script: Script): CodeCacheUse {
  return cachedData === undefined ? 'none' : script.cachedDataRejected ? 'rejected' : 'accepted';
}

/**
 * What `compile` makes, with every function of it compiled at once: V8 compiles lazily otherwise,
 * and a cache holds only what was compiled. The flag is the process's, and V8 accepts a cache only
 * under the flags it was made with, a fresh host's (node's defaults): it is put back before this
 * returns, whatever `compile` did. The build makes the guest worker's cache so, and the executor's
 * producer a glue's.
 */
export function compiledEagerly<T>(compile: () => T): T {
  setFlagsFromString('--no-lazy');
  try {
    return compile();
  } finally {
    setFlagsFromString('--lazy');
  }
}
