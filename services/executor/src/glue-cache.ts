import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { packageFile } from '@murmur/shared/node';
import { readGlueScript } from './host/glue.js';
import { codeCacheFile } from './host/code-cache-file.js';

const PRODUCER = packageFile('@murmur/executor', 'dist/glue-cache-producer.js', import.meta.url, '../dist/glue-cache-producer.js');
/** A producer that has not finished in this long is abandoned: the cache only ever saves milliseconds. */
const PRODUCER_TIMEOUT_MS = 10_000;

/**
 * A component glue's V8 code cache (`host/glue.ts`), made beside it when it has none, by the
 * executor (`LocalBundles` asks once per bundle): the capsule host may not write into the bundle
 * cache, and a cache a host made could carry whatever a compromised one put in it into every later
 * session's host. It is made by a node of its own with the host's flags (none), since V8 refuses a
 * cache made under other flags (~60 ms). Never rejects: a failure costs the host only the head
 * start, and it compiles the glue as it would without one.
 */
export async function keepGlueCache(glueFile: string): Promise<void> {
  if (existsSync(codeCacheFile(glueFile))) return;
  // Glue the host will import as a module gets no cache: no node is started for it, in every
  // in-process `mur run` that finds none.
  if ((await readGlueScript(glueFile).catch(() => undefined)) === undefined) return;
  return new Promise((resolve) => {
    // Nothing of the executor's environment: NODE_OPTIONS there would give the producer other flags.
    execFile(process.execPath, [PRODUCER, glueFile], { env: {}, timeout: PRODUCER_TIMEOUT_MS }, () => resolve());
  });
}
