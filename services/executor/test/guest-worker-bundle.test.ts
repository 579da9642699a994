import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';

const bundled = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle', 'guest-worker.cjs');

/**
 * The guest worker as the capsule host starts it: one CommonJS file with preview2-shim inside it
 * (`scripts/bundle.mjs`). Its start is on the way to every guest's first instruction, and an ES
 * module loaded in it would start Node's ES module loader there (~15 ms a worker).
 */
describe('the bundled guest worker', () => {
  it("loads the WASI pieces a component needs without Node's ES module loader and without the shim's I/O thread", async () => {
    expect(existsSync(bundled), `${bundled} is made by npm run build`).toBe(true);
    // Run as the host runs it, in a worker, with every thread made in it counted and the modules
    // node loaded in it reported once it says its pieces are loaded.
    const source = `
      const workerThreads = require('node:worker_threads');
      let threadsMade = 0;
      const RealWorker = workerThreads.Worker;
      workerThreads.Worker = function countedWorker(...args) { threadsMade += 1; return new RealWorker(...args); };
      const port = workerThreads.parentPort;
      const post = port.postMessage.bind(port);
      port.postMessage = (message) => {
        post(message);
        if (message && message.type === 'preloaded') post({ threadsMade, loaded: process.moduleLoadList });
      };
      require(${JSON.stringify(bundled)});
    `;
    const imports = ['wasi:cli/stdout', 'wasi:io/streams', 'wasi:clocks/monotonic-clock', 'wasi:filesystem/types', 'wasi:random/random'];
    const worker = new Worker(source, { eval: true, workerData: { preload: { imports, id: 1 } } });
    try {
      const messages: Array<Record<string, unknown>> = [];
      const report = await new Promise<{ threadsMade: number; loaded: string[] }>((resolve, reject) => {
        worker.on('message', (message: Record<string, unknown>) => {
          messages.push(message);
          if ('loaded' in message) resolve(message as { threadsMade: number; loaded: string[] });
        });
        worker.once('error', reject);
      });
      expect(messages[0]).toEqual({ type: 'preloaded', id: 1 });
      expect(report.threadsMade).toBe(0);
      // What only an ES module's load brings in: the loader's module jobs and its translators.
      expect(report.loaded.filter((name) => /esm\/(module_job|translators)$/.test(name))).toEqual([]);
      // And the pieces did load (a failed preload says `preloaded` too): the shim's random piece,
      // loaded only once the shim's io module is, brings in node's crypto, which nothing else in a
      // worker does.
      expect(report.loaded).toContain('NativeModule crypto');
    } finally {
      await worker.terminate();
    }
  });
});
