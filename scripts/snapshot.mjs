// Builds `mur`'s V8 startup snapshots: `cli/dist/snapshot/mur.blob` (in-process) and
// `mur-client.blob` (a thin client of a stack), which `cli/bin/mur` starts node from, so that a
// run begins with `mur`'s modules already evaluated (cli/src/snapshot-main.ts says why two, and
// each entry what is in it). Runs after `tsc -b` and scripts/bundle.mjs, from their output.
//
// Three things make a snapshot of this code safe, and each is checked here rather than hoped for:
// - Node 20 verifies only some built-in modules for snapshots; it warns about the rest. Those
//   `mur` uses (child_process, worker_threads, tls, http, https) are loaded on their first use at run time,
//   never while the snapshot is built, and any warning from Node fails the build.
// - Evaluating a module must not read the environment (the build's values would be frozen into
//   every run): the build watches `process.env` and `process.cwd()` while the code is evaluated
//   and fails naming what was read. The one exception is a name a library reads afresh on every
//   call and keeps nothing of (`CALL_TIME_ENV`), read when the build warms that call.
// - A snapshot cannot `import()`: esbuild turns every dynamic import into a require (the bundle
//   imports only built-ins and CommonJS packages dynamically), and the build fails if one is left.
//
// A node that cannot build snapshots at all leaves no blob, says so, and `mur` runs from its
// bundle as before; the build still succeeds. SNAPSHOT_NO_MINIFY=1 keeps the code's names, for
// reading a CPU profile of `mur`.
import { spawnSync } from 'node:child_process';
import { readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';

/** The node flags `cli/bin/mur` starts the snapshot with: V8 refuses a snapshot built under other heap flags. */
export const NODE_FLAGS = ['--max-semi-space-size=1'];

// Built-ins Node does not verify for user snapshots (it warns "not yet fully verified"). A require
// of one returns a stand-in that loads the module on first use.
const DEFERRED_BUILTINS = ['child_process', 'worker_threads', 'tls', 'http', 'https'];

/**
 * Read by `yaml` on each parse, as debugging switches (its parser's LOG_TOKENS, its composer's
 * LOG_STREAM), never kept: the build's parse of a sample manifest (`warmManifestParser`) reads
 * them and freezes nothing.
 */
const CALL_TIME_ENV = ['LOG_TOKENS', 'LOG_STREAM'];

// The snapshot builder's `require` knows built-ins only, and so does the one a snapshot starts
// with; the external packages (those that find their own files at run time) are required, at run
// time, through a require made for the bundle's own path.
const banner = `
var __murmurModuleUrl = require('node:url').pathToFileURL(__filename).href;
require = ((builtin) => {
  const builtins = new Set(${JSON.stringify(builtinModules)});
  const deferred = new Set(${JSON.stringify(DEFERRED_BUILTINS.flatMap((name) => [name, `node:${name}`]))});
  let external;
  return (id) => {
    if (!id.startsWith('node:') && !builtins.has(id)) return (external ??= builtin('node:module').createRequire(__filename))(id);
    if (!deferred.has(id)) return builtin(id);
    let module;
    const real = () => (module ??= builtin(id));
    return new Proxy(Object.create(null), {
      get: (_, key) => real()[key],
      has: (_, key) => key in real(),
      ownKeys: () => Reflect.ownKeys(real()),
      getOwnPropertyDescriptor: (_, key) => {
        const descriptor = Reflect.getOwnPropertyDescriptor(real(), key);
        return descriptor && { ...descriptor, configurable: true };
      },
    });
  };
})(require);
var __murmurProcessReads;
if (require('node:v8').startupSnapshot.isBuildingSnapshot()) {
  const reads = (__murmurProcessReads = { env: new Set(), cwd: 0, realEnv: process.env, realCwd: process.cwd });
  const callTime = new Set(${JSON.stringify(CALL_TIME_ENV)});
  process.env = new Proxy(reads.realEnv, { get: (target, key) => (typeof key === 'string' && !callTime.has(key) && reads.env.add(key), Reflect.get(target, key)) });
  process.cwd = () => (reads.cwd += 1, reads.realCwd.call(process));
}
`;

const footer = `
if (__murmurProcessReads) {
  const reads = __murmurProcessReads;
  process.env = reads.realEnv;
  process.cwd = reads.realCwd;
  if (reads.env.size > 0 || reads.cwd > 0) {
    throw new Error('evaluating the code of the snapshot read the process it runs in (' + [...[...reads.env].map((name) => 'process.env.' + name), ...(reads.cwd ? ['process.cwd()'] : [])].join(', ') + '): read it when it is used, not when the module loads');
  }
}
`;

/** The services `mur` runs in-process; a thin client of a stack runs none of them. */
const SERVICE_PACKAGES = ['@murmur/executor', '@murmur/stager', '@murmur/watcher', '@murmur/door', '@murmur/roost'];

/**
 * An esbuild plugin that puts, in place of each package in `names`, a module with the same
 * exports, every one a function that throws: the snapshot then holds none of the package's code,
 * and a named import of it still resolves (esbuild refuses a missing one). The exports' names are
 * read by importing the package here, in the build.
 */
async function absentPackages(names, snapshotName) {
  const exportsOf = new Map();
  for (const name of names)
    exportsOf.set(
      name,
      Object.keys(await import(name)).filter((key) => key !== 'default'),
    );
  return {
    name: 'absent-packages',
    setup(builder) {
      const filter = new RegExp(`^(${names.map((name) => name.replace(/[/.]/g, '\\$&')).join('|')})$`);
      builder.onResolve({ filter }, (args) => ({ path: args.path, namespace: 'absent' }));
      builder.onLoad({ filter: /.*/, namespace: 'absent' }, (args) => ({
        loader: 'js',
        contents: [
          `const absent = () => { throw new Error(${JSON.stringify(
            `${args.path} is not in ${snapshotName}.blob, mur's snapshot for a thin client of a stack: cli/bin/mur started it for a command it does not serve (MURMUR_SNAPSHOT=off runs mur from its bundle)`,
          )}); };`,
          ...exportsOf.get(args.path).map((key) => `export const ${key} = absent;`),
        ].join('\n'),
      }));
    },
  };
}

/**
 * Bundles `entry` (a module that calls `v8.startupSnapshot.setDeserializeMainFunction`) into one
 * CommonJS file in `outDir` and builds `<name>.blob` from it with this node. Returns the blob's
 * path, or undefined (with the reason) when this node cannot build snapshots; throws when the
 * code breaks one of the rules above.
 */
export async function buildSnapshot({ entry, outDir, name, external = [], absent = [] }) {
  const script = path.join(outDir, `${name}.cjs`);
  const blob = path.join(outDir, `${name}.blob`);
  for (const file of [script, blob, `${blob}.node`]) rmSync(file, { force: true });
  await build({
    entryPoints: [entry],
    outfile: script,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    minify: !process.env.SNAPSHOT_NO_MINIFY,
    legalComments: 'none',
    logLevel: 'warning',
    external,
    supported: { 'dynamic-import': false },
    define: { 'import.meta.url': '__murmurModuleUrl' },
    banner: { js: banner },
    footer: { js: footer },
    plugins: absent.length > 0 ? [await absentPackages(absent, name)] : [],
  });
  if (/\bimport\(/.test(readFileSync(script, 'utf8'))) throw new Error(`${script} still holds a dynamic import(), which a snapshot cannot run`);

  const building = spawnSync(process.execPath, [...NODE_FLAGS, '--snapshot-blob', `${blob}.tmp`, '--build-snapshot', script], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '' },
  });
  const warnings = (building.stderr ?? '').split('\n').filter((line) => /not yet fully verified/.test(line));
  if (warnings.length > 0) throw new Error(`node warned while the snapshot was built:\n${warnings.join('\n')}`);
  if (building.status !== 0) {
    rmSync(`${blob}.tmp`, { force: true });
    const refusal = /Error: (evaluating the code of the snapshot read the process it runs in[^\n]*)/.exec(building.stderr ?? '');
    if (refusal) throw new Error(refusal[1]);
    return { blob: undefined, reason: (building.stderr ?? '').trim() || `node exited with ${building.status}` };
  }
  // `cli/bin/mur` uses the blob only with the node it was built by (V8 refuses any other).
  writeFileSync(`${blob}.node`, `${realpathSync(process.execPath)}\n`);
  renameSync(`${blob}.tmp`, blob);
  return { blob, reason: undefined };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const outDir = 'cli/dist/snapshot';
  rmSync(outDir, { recursive: true, force: true });
  // Packages that find their own files at run time stay in node_modules, as in the bundle; so
  // do the OpenTelemetry SDK (~290 KB, loaded only when a run exports spans) and prom-client (only
  // a service process serves metrics), which would otherwise be source text in every run's heap.
  const external = ['@bytecodealliance/*', 'pino', 'thread-stream', '@opentelemetry/*', 'prom-client'];
  const flavours = [
    // In-process: the NATS client (~280 KB with its signing code) is loaded from node_modules by
    // the commands other than a run that talk to a stack.
    { entry: 'cli/dist/snapshot.js', name: 'mur', external: [...external, 'nats'] },
    // A thin client of a stack: none of the services' code.
    { entry: 'cli/dist/snapshot-client.js', name: 'mur-client', external, absent: SERVICE_PACKAGES },
  ];
  for (const flavour of flavours) {
    const built = await buildSnapshot({ ...flavour, outDir });
    if (!built.blob) {
      rmSync(outDir, { recursive: true, force: true });
      process.stdout.write(`no startup snapshot for mur (this node could not build one), so mur runs from its bundle:\n${built.reason}\n`);
      break;
    }
  }
}
