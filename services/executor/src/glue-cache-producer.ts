import { Script } from 'node:vm';
// Node's built-ins and three of the host's own small modules only: this process's start is what a
// bundle's first launch waits for, and `@murmur/shared/node` alone took ~340 ms of it to load.
import { writeFileAtomic } from './host/atomic-file.js';
import { readGlueScript } from './host/glue.js';
import { codeCacheFile, compiledEagerly } from './host/code-cache-file.js';

/**
 * `node glue-cache-producer.js <glue file>`: writes the glue's V8 code cache beside it
 * (`codeCacheFile`), or nothing for glue that is not script-shaped. Started by the executor
 * (`glue-cache.ts`) as a node of its own, with no flags and no `NODE_OPTIONS`, as the capsule host
 * is started: V8 accepts a code cache only from a process with its own flags, and the executor's
 * may have others (`mur` runs with a small young generation). Written whole or not at all.
 */

/**
 * The glue compiled as the host compiles it (`readGlueScript`, the same file name), every function
 * at once (`compiledEagerly`): the flag that takes is process-wide, which is why this runs in a
 * process of its own and nowhere else.
 */
async function eagerGlueCache(file: string): Promise<Buffer | undefined> {
  const source = await readGlueScript(file);
  if (source === undefined) return undefined;
  try {
    return compiledEagerly(() => new Script(source, { filename: file })).createCachedData();
  } catch {
    return undefined;
  }
}

const file = process.argv[2];
if (!file) {
  process.stderr.write('usage: glue-cache-producer.js <glue file>\n');
  process.exit(2);
}
const cache = await eagerGlueCache(file);
if (cache) writeFileAtomic(codeCacheFile(file), cache);
