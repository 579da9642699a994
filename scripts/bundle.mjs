// Bundles the two programs whose start-up time users feel: `mur`, and the capsule host that runs
// inside every session's sandbox. Each becomes a few ES module files instead of hundreds, which is
// most of their start-up time. Runs after `tsc -b`, from its output. Dependencies that find their
// own files at run time (jco, componentize-js, preview2-shim's I/O worker, pino's transports)
// stay external and are loaded from node_modules as usual.
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
  entryPoints: { host: 'services/executor/dist/host/boot.js', 'guest-worker': 'services/executor/dist/host/guest-worker.js' },
  outdir: 'services/executor/dist/bundle',
  external: ['@bytecodealliance/*'],
});

await build({
  ...common,
  entryPoints: { mur: 'cli/dist/main.js' },
  outdir: 'cli/dist/bundle',
  external: ['@bytecodealliance/*', 'pino', 'thread-stream', 'nats'],
});
