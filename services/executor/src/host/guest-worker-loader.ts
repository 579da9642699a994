import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parentPort, workerData } from 'node:worker_threads';
import { type CodeCacheUse, codeCacheUse, readCodeCache } from './code-cache-file.js';
import { compileBundle, runBundle } from './worker-code-cache.js';

/**
 * What a bundled guest worker starts as (`scripts/bundle.mjs` makes it `guest-worker-loader.cjs`,
 * beside `guest-worker.cjs`): it compiles the worker's bundle with the V8 code cache the build made
 * of it (`worker-code-cache.ts`), then runs it as Node would have run the file.
 *
 * Without the cache V8 compiles each of the bundle's functions the first time it runs, and in a
 * fresh worker every function runs for the first time: loading the WASI pieces, building a guest's
 * imports, the shim's calls in the guest's first run. The cache holds them all compiled, made
 * eagerly by the build, never by a host: a cache a host made could carry whatever a compromised one
 * put in it into later workers. A cache V8 refuses — another node, a host started with other V8
 * flags (a pooled host boots with `--no-lazy`), a damaged file — is ignored, and the bundle
 * compiled as if there were none.
 */

/** Asked by the build (`scripts/bundle.mjs`): compile the bundle whole and post its cache once the worker has loaded. */
export interface CodeCacheRequest {
  produceCodeCache: true;
}

function start(): CodeCacheUse {
  const bundle = path.join(path.dirname(fileURLToPath(import.meta.url)), 'guest-worker.cjs');
  if ((workerData as Partial<CodeCacheRequest> | undefined)?.produceCodeCache === true && parentPort) {
    const script = compileBundle(bundle, { eagerly: true });
    const port = parentPort;
    const post = port.postMessage.bind(port);
    port.postMessage = (message: unknown) => {
      if ((message as { type?: unknown } | null)?.type === 'preloaded') post({ codeCache: script.createCachedData() });
      else post(message);
    };
    runBundle(script, bundle);
    return 'none';
  }
  const cachedData = readCodeCache(bundle);
  const script = compileBundle(bundle, cachedData ? { cachedData } : {});
  runBundle(script, bundle);
  return codeCacheUse(cachedData, script);
}

/** How this worker's start fared with the code cache (the bundle's test reads it). */
export const codeCache: CodeCacheUse = start();
