import { writeFileAtomic } from '@murmur/shared/node';
import { eagerGlueCache, glueCacheFile } from './host/glue.js';

/**
 * `node glue-cache-producer.js <glue file>`: writes the glue's V8 code cache beside it
 * (`glueCacheFile`), or nothing for glue that is not script-shaped. Started by the executor
 * (`glue-cache.ts`) as a node of its own, with no flags and no `NODE_OPTIONS`, as the capsule host
 * is started: V8 accepts a code cache only from a process with its own flags, and the executor's
 * may have others (`mur` runs with a small young generation). Written whole or not at all.
 */
const file = process.argv[2];
if (!file) {
  process.stderr.write('usage: glue-cache-producer.js <glue file>\n');
  process.exit(2);
}
const cache = await eagerGlueCache(file);
if (cache) await writeFileAtomic(glueCacheFile(file), cache);
