// Bundles the programs whose start-up time users feel: `mur`, and the capsule host that runs inside
// every session's sandbox, with its guest worker. `mur` and the host each become a few ES module
// files instead of hundreds, which is most of their start-up time. Runs after `tsc -b`, from its
// output. Dependencies that find their own files at run time (jco, componentize-js, pino's
// transports) stay external and are loaded from node_modules as usual.
//
// The guest worker is one CommonJS file with preview2-shim inside it. Every guest instance starts
// one (the capsule's, each tool call's, a driver's again after its session waited), and a worker
// that loads any ES module first starts Node's ES module loader in its thread: ~15 ms of a ~45 ms
// worker start here, before its first instruction. Its shim's own I/O thread is never started
// (`host/in-thread-io.ts` answers its calls in place), so nothing of the shim is needed from disk.
import { rmSync } from 'node:fs';
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
  entryPoints: { host: 'services/executor/dist/host/boot.js' },
  outdir: 'services/executor/dist/bundle',
  external: ['@bytecodealliance/*'],
});

await build({
  ...common,
  format: 'cjs',
  splitting: false,
  entryPoints: ['services/executor/dist/host/guest-worker.js'],
  outfile: 'services/executor/dist/bundle/guest-worker.cjs',
  // The shim computes URLs from its own (its I/O thread's file, which is never started); a
  // CommonJS file has no import.meta, so it is given the bundle's.
  define: { 'import.meta.url': '__murmurModuleUrl' },
  // Strict as the modules it is made of were: the directive must come first.
  banner: { js: "'use strict';\nvar __murmurModuleUrl = require('node:url').pathToFileURL(__filename).href;" },
});

await build({
  ...common,
  entryPoints: { mur: 'cli/dist/main.js' },
  outdir: 'cli/dist/bundle',
  external: ['@bytecodealliance/*', 'pino', 'thread-stream', 'nats'],
});
