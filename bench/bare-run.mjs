// The baseline `bench:run` compares `mur run` against: a bare node process that imports a
// transpiled component from the cache and calls its `run`, with preview2-shim's WASI (no sandbox,
// no policy, no records), the directory given as its one preopen.
// Usage: node bench/bare-run.mjs <bundle dir> <workdir>
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [bundleDir, workdir] = process.argv.slice(2);
const bundle = JSON.parse(readFileSync(path.join(bundleDir, 'bundle.json'), 'utf8'));
const needsWasi = bundle.imports.length > 0;
const imports = needsWasi
  ? new (await import('@bytecodealliance/preview2-shim/instantiation')).WASIShim({ sandbox: { preopens: { '/': workdir } } }).getImportObject()
  : {};
const { instantiate } = await import(pathToFileURL(path.join(bundleDir, bundle.entry)).href);
const instance = await instantiate((file) => WebAssembly.compile(readFileSync(path.join(bundleDir, file))), imports);
await instance['murmur:capsule/run@0.1.0'].run();
