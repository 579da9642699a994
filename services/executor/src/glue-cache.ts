import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { packageFile } from '@murmur/shared/node';
import { glueAsScript, glueCacheFile } from './host/glue.js';

const PRODUCER = packageFile('@murmur/executor', 'dist/glue-cache-producer.js', import.meta.url, '../dist/glue-cache-producer.js');
/** A producer that has not finished in this long is abandoned: the cache only ever saves milliseconds. */
const PRODUCER_TIMEOUT_MS = 10_000;

/**
 * A component glue's V8 code cache (`host/glue.ts`), made once per bundle on this machine, by the
 * executor: the capsule host may not write into the bundle cache, and a cache a host made could
 * carry whatever a compromised one put in it into every later session's host. It is made by a
 * node of its own with the host's flags (none), since V8 refuses a cache made under other flags.
 * A failure costs the host only the head start: it compiles the glue as it would without one.
 */
export class GlueCaches {
  private readonly making = new Map<string, Promise<void>>();

  /** Resolves once `glueFile`'s cache exists or could not be made; the first call for a glue makes it (~60 ms, once). */
  keep(glueFile: string): Promise<void> {
    let made = this.making.get(glueFile);
    if (!made) {
      made = existsSync(glueCacheFile(glueFile)) ? Promise.resolve() : produce(glueFile);
      this.making.set(glueFile, made);
    }
    return made;
  }
}

async function produce(glueFile: string): Promise<void> {
  // Glue the host will import as a module gets no cache: no node is started for it, in every
  // in-process `mur run` that finds none.
  const source = await readFile(glueFile, 'utf8').catch(() => undefined);
  if (source === undefined || glueAsScript(source, pathToFileURL(glueFile).href) === undefined) return;
  return new Promise((resolve) => {
    // Nothing of the executor's environment: NODE_OPTIONS there would give the producer other flags.
    execFile(process.execPath, [PRODUCER, glueFile], { env: {}, timeout: PRODUCER_TIMEOUT_MS }, () => resolve());
  });
}
