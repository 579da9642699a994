import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterAll, describe, expect, it } from 'vitest';
import { compileBundle, runBundle } from '../src/host/worker-code-cache.js';
import { codeCacheFile } from '../src/host/code-cache-file.js';

const bundleDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle');
const IMPORTS = ['wasi:cli/stdout', 'wasi:io/streams', 'wasi:clocks/monotonic-clock', 'wasi:filesystem/types', 'wasi:random/random'];

interface Report {
  threadsMade: number;
  loaded: string[];
  codeCache: string;
  messages: Array<Record<string, unknown>>;
}

/**
 * Starts the worker as the host does, from the loader in `dir`, with every thread made in it
 * counted, and reports once it says its pieces are loaded: the modules node loaded in it, and how
 * its code cache fared.
 */
async function startLikeTheHost(dir: string): Promise<Report> {
  const loader = path.join(dir, 'guest-worker-loader.cjs');
  const source = `
    const workerThreads = require('node:worker_threads');
    let threadsMade = 0;
    const RealWorker = workerThreads.Worker;
    workerThreads.Worker = function countedWorker(...args) { threadsMade += 1; return new RealWorker(...args); };
    const port = workerThreads.parentPort;
    const post = port.postMessage.bind(port);
    let started;
    port.postMessage = (message) => {
      post(message);
      if (message && message.type === 'preloaded') post({ threadsMade, loaded: process.moduleLoadList, codeCache: started.codeCache });
    };
    started = require(${JSON.stringify(loader)});
  `;
  const worker = new Worker(source, { eval: true, workerData: { preload: { imports: IMPORTS, id: 1 } } });
  try {
    const messages: Array<Record<string, unknown>> = [];
    const report = await new Promise<Omit<Report, 'messages'>>((resolve, reject) => {
      worker.on('message', (message: Record<string, unknown>) => {
        messages.push(message);
        if ('loaded' in message) resolve(message as unknown as Omit<Report, 'messages'>);
      });
      worker.once('error', reject);
    });
    return { ...report, messages };
  } finally {
    await worker.terminate();
  }
}

const copies: string[] = [];
afterAll(() => {
  for (const dir of copies) rmSync(dir, { recursive: true, force: true });
});

/** The bundled worker and its loader in a directory of their own, with `cache` as its code cache (none when undefined). */
function copyOfTheBundle(cache: Buffer | undefined): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'murmur-worker-bundle-'));
  copies.push(dir);
  for (const file of ['guest-worker.cjs', 'guest-worker-loader.cjs']) copyFileSync(path.join(bundleDir, file), path.join(dir, file));
  if (cache) writeFileSync(codeCacheFile(path.join(dir, 'guest-worker.cjs')), cache);
  return dir;
}

/**
 * The guest worker as the capsule host starts it: one CommonJS file with preview2-shim inside it,
 * compiled by its loader with the code cache the build made of it (`scripts/bundle.mjs`). Its start
 * is on the way to every guest's first instruction, and an ES module loaded in it would start
 * Node's ES module loader there (~15 ms a worker).
 */
describe('the bundled guest worker', () => {
  it("loads the WASI pieces a component needs without Node's ES module loader and without the shim's I/O thread", async () => {
    expect(existsSync(path.join(bundleDir, 'guest-worker-loader.cjs')), `${bundleDir} is made by npm run build`).toBe(true);
    const report = await startLikeTheHost(bundleDir);
    expect(report.messages[0]).toEqual({ type: 'preloaded', id: 1 });
    expect(report.threadsMade).toBe(0);
    // What only an ES module's load brings in: the loader's module jobs and its translators.
    expect(report.loaded.filter((name) => /esm\/(module_job|translators)$/.test(name))).toEqual([]);
    // And the pieces did load (a failed preload says `preloaded` too): the shim's random piece,
    // loaded only once the shim's io module is, brings in node's crypto, which nothing else in a
    // worker does.
    expect(report.loaded).toContain('NativeModule crypto');
  });

  it('starts from the code cache the build made, which V8 accepts', async () => {
    expect(existsSync(codeCacheFile(path.join(bundleDir, 'guest-worker.cjs'))), 'the build makes the code cache beside the bundle').toBe(true);
    expect((await startLikeTheHost(bundleDir)).codeCache).toBe('accepted');
  });

  it('compiles its bundle as if there were no cache when V8 refuses the one it finds, or finds none', async () => {
    const damaged = await startLikeTheHost(copyOfTheBundle(Buffer.from('not a code cache of this bundle')));
    expect(damaged.codeCache).toBe('rejected');
    expect(damaged.messages[0]).toEqual({ type: 'preloaded', id: 1 });
    expect(damaged.loaded).toContain('NativeModule crypto');
    const none = await startLikeTheHost(copyOfTheBundle(undefined));
    expect(none.codeCache).toBe('none');
    expect(none.loaded).toContain('NativeModule crypto');
  });

  it('lets the bundle import an ES module as its file could, for glue that is a module only', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'murmur-worker-import-'));
    copies.push(dir);
    const esm = path.join(dir, 'glue.mjs');
    writeFileSync(esm, 'export const answer = 42;\n');
    const bundle = path.join(dir, 'guest-worker.cjs');
    writeFileSync(bundle, `globalThis.__murmurBundleImport = import(${JSON.stringify(pathToFileURL(esm).href)});\n`);
    runBundle(compileBundle(bundle, {}), bundle);
    const holder = globalThis as { __murmurBundleImport?: Promise<{ answer: number }> };
    const imported = holder.__murmurBundleImport;
    delete holder.__murmurBundleImport;
    expect((await imported)?.answer).toBe(42);
  });
});
