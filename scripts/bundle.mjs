// Bundles the programs whose start-up time users feel: `mur`, and the capsule host that runs inside
// every session's sandbox, with its guest worker. `mur` and the host each become a few files
// instead of hundreds, which is most of their start-up time. Runs after `tsc -b`, from its
// output. Dependencies that find their own files at run time (jco, componentize-js, pino's
// transports) stay external and are loaded from node_modules as usual.
//
// The host's entry (`host.cjs`) is a CommonJS file of node's built-ins only, which begins the first
// guest worker before it imports the host's ES modules (`host-main.mjs` and its chunks).
//
// The guest worker is one CommonJS file with preview2-shim inside it. Every guest instance starts
// one (the capsule's, each tool call's, a driver's again after its session waited), and a worker
// that loads any ES module first starts Node's ES module loader in its thread: ~15 ms of a ~45 ms
// worker start here, before its first instruction. Its shim's own I/O thread is never started
// (`host/in-thread-io.ts` answers its calls in place), so nothing of the shim is needed from disk.
// A worker starts from its loader (`guest-worker-loader.cjs`), which compiles the bundle with the V8
// code cache made here, of the bundle just made (`host/guest-worker-loader.ts` says why, and why
// only here).
import { rmSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { build } from 'esbuild';

// Chunk names change with their content: an old build's chunks would pile up beside the new ones.
for (const dir of ['services/executor/dist/bundle', 'cli/dist/bundle']) rmSync(dir, { recursive: true, force: true });

const common = {
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  splitting: true,
  outExtension: { '.js': '.mjs' },
  logLevel: 'warning',
  legalComments: 'none',
  minify: true,
  // CommonJS dependencies bundled into ESM still call require() for Node built-ins.
  banner: { js: "import { createRequire as __murmurRequire } from 'node:module'; const require = __murmurRequire(import.meta.url);" },
};

await build({
  ...common,
  entryPoints: { 'host-main': 'services/executor/dist/host/main.js' },
  outdir: 'services/executor/dist/bundle',
  external: ['@bytecodealliance/*'],
});

// The host's entry: CommonJS, and of node's built-ins only, so that it begins the first guest
// worker before Node's ES module loader starts (~8 ms sooner into the host's life); it then
// imports the host's ES modules above.
const commonJs = {
  ...common,
  format: 'cjs',
  splitting: false,
  outdir: 'services/executor/dist/bundle',
  outExtension: { '.js': '.cjs' },
  // A CommonJS file has no import.meta: it is given the bundle's own URL.
  define: { 'import.meta.url': '__murmurModuleUrl' },
  // Strict as the modules it is made of were: the directive must come first.
  banner: { js: "'use strict';\nvar __murmurModuleUrl = require('node:url').pathToFileURL(__filename).href;" },
};
await build({
  ...commonJs,
  entryPoints: { host: 'services/executor/dist/host/boot.js' },
  plugins: [
    {
      name: 'host-main',
      setup(builder) {
        builder.onResolve({ filter: /^\.\/main\.js$/ }, () => ({ path: './host-main.mjs', external: true }));
      },
    },
  ],
});

await build({
  ...commonJs,
  entryPoints: {
    'guest-worker': 'services/executor/dist/host/guest-worker.js',
    'guest-worker-loader': 'services/executor/dist/host/guest-worker-loader.js',
  },
});
await makeWorkerCodeCache('services/executor/dist/bundle');

await build({
  ...common,
  entryPoints: { mur: 'cli/dist/main.js' },
  outdir: 'cli/dist/bundle',
  external: ['@bytecodealliance/*', 'pino', 'thread-stream', 'nats'],
});

/**
 * Makes the guest worker's code cache: a worker started from the loader, as a host starts one, but
 * told to compile the bundle whole and to post its cache once it has loaded. This process runs
 * with node's default flags, as a fresh host does. A node that cannot make one leaves none, and
 * says so: workers then compile as they load.
 */
async function makeWorkerCodeCache(dir) {
  const loader = path.resolve(dir, 'guest-worker-loader.cjs');
  const { codeCacheFile } = await import('../services/executor/dist/host/code-cache-file.js');
  const { writeFileAtomic } = await import('../services/executor/dist/host/atomic-file.js');
  try {
    const codeCache = await new Promise((resolve, reject) => {
      const worker = new Worker(loader, { workerData: { produceCodeCache: true, preload: { imports: [], id: 0 } }, stdout: true, stderr: true });
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`the worker exited (${code}) before it made its code cache`)));
      worker.on('message', (message) => {
        if (!(message?.codeCache instanceof Uint8Array)) return;
        resolve(Buffer.from(message.codeCache));
        void worker.terminate();
      });
    });
    writeFileAtomic(codeCacheFile(path.resolve(dir, 'guest-worker.cjs')), codeCache);
  } catch (error) {
    process.stderr.write(
      `bundle: no code cache for the guest worker (${error instanceof Error ? error.message : String(error)}); its workers compile as they load\n`,
    );
  }
}
