/**
 * `npm run demo`: the whole path a capsule takes before it runs, on the embedded default (every
 * service inside `mur`, on the in-process bus, no NATS needed).
 *
 *   1. build the example capsule's component from JavaScript (componentize-js)
 *   2. mur build    → a .mur.zip
 *   3. mur publish  → the global store
 *   4. mur stage    → resolve, verify, transpile; print the staged plan
 *   5. mur stage    → again: the transpiled component comes from the cache
 *
 * Everything it writes goes to .cache/demo/ in this repository (its own MURMUR_HOME), which it
 * clears first, so it can be run again and again.
 */
import { spawnSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentFromJs } from '@murmur/guest-kit';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const example = path.join(root, 'examples', 'hello-capsule');
const demoDir = path.join(root, '.cache', 'demo');
const home = path.join(demoDir, 'home');
const capsuleDir = path.join(demoDir, 'hello-capsule');
const mur = path.join(root, 'cli', 'bin', 'mur.js');

function step(title: string): void {
  process.stdout.write(`\n\u001b[1m== ${title}\u001b[0m\n`);
}

function runMur(...args: string[]): void {
  process.stdout.write(`$ mur ${args.join(' ')}\n`);
  const result = spawnSync(process.execPath, [mur, ...args], { stdio: 'inherit', env: { ...process.env, MURMUR_HOME: home, MURMUR_NATS_URL: '' } });
  if (result.status !== 0) {
    process.stderr.write(`\nthe demo stopped: 'mur ${args[0]}' exited with ${result.status}\n`);
    process.exit(result.status ?? 1);
  }
}

await fs.rm(demoDir, { recursive: true, force: true });
await fs.mkdir(capsuleDir, { recursive: true });

step('1. the capsule component, from examples/hello-capsule/capsule.js');
const started = Date.now();
process.stdout.write('componentize-js: building a WebAssembly component from JavaScript (a few seconds the first time)...\n');
const guest = await componentFromJs({
  source: await fs.readFile(path.join(example, 'capsule.js'), 'utf8'),
  world: await fs.readFile(path.join(example, 'capsule.wit'), 'utf8'),
  worldName: 'capsule',
});
process.stdout.write(`${guest.cacheHit ? 'reused' : 'built'} ${(guest.bytes.byteLength / 1e6).toFixed(1)} MB component in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
await fs.copyFile(path.join(example, 'murmur.yaml'), path.join(capsuleDir, 'murmur.yaml'));
await fs.writeFile(path.join(capsuleDir, 'capsule.wasm'), guest.bytes);

step('2. package it');
runMur('build', capsuleDir);

step('3. publish it to the global store');
runMur('publish', path.join(capsuleDir, 'hello-0.1.0.mur.zip'));
runMur('list', '-g');

step('4. stage it from the registry: resolve, verify sha256, transpile with jco');
runMur('stage', '--capsule', 'hello', '--capsule-version', '0.1.0');

step('5. stage it again: the transpiled component is a cache hit');
runMur('stage', '--capsule', 'hello', '--capsule-version', '0.1.0');

process.stdout.write(`\nDone. The demo's store and cache are in ${path.relative(process.cwd(), home) || home}.\n`);
