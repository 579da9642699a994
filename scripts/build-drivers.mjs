// Builds the runtime's first-party artifacts written in JavaScript — the inference drivers
// murmur-driver-anthropic and murmur-driver-openai, and the hook murmur-hook-eval, from our own
// sources in drivers/ — into the store of default artifacts (drivers/dist/store), which staging
// consults after every other source. So an agent capsule naming one of them runs without an
// install step, and without network access to a registry.
//
// Components come from the guest cache (keyed by source), so only a changed artifact is rebuilt;
// an archive already in the store with the same bytes is left alone.
//
// Each component is also transpiled, by the stager's own cache code, into drivers/dist laid out
// as a cache (transpiled/<transpiler>/<sha256>/): the shipped cache a stager copies entries from
// (shippedCacheDir), so no home transpiles a 12 MB driver on its first agent run. Entries of
// components no longer built, or of another transpiler, are removed.
import { existsSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ArtifactStore, buildArtifact, sha256Hex } from '../shared/dist/artifacts/index.js';
import { TRANSPILER_ID } from '../shared/dist/index.js';
import { ComponentCache } from '../services/stager/dist/transpiler.js';
import { componentFromJs } from '../tools/guest-kit/dist/index.js';
import { DRIVERS, HOOKS, driverGuest, hookGuest } from '../drivers/guests.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const store = new ArtifactStore(path.join(root, 'drivers', 'dist', 'store'), 'default');
const shippedCache = new ComponentCache(path.join(root, 'drivers', 'dist'));
const transpiledNow = new Set();

const FIRST_PARTY = [
  ...DRIVERS.map((driver) => ({ name: `murmur-driver-${driver}`, guest: () => driverGuest(driver) })),
  ...HOOKS.map((hook) => ({ name: `murmur-hook-${hook}`, guest: () => hookGuest(hook) })),
];

for (const { name, guest } of FIRST_PARTY) {
  const started = Date.now();
  const built = await componentFromJs(guest());
  await transpileInto(shippedCache, name, built.bytes);
  const work = await fs.mkdtemp(path.join(os.tmpdir(), `${name}-`));
  try {
    const wasmName = `${name.replaceAll('-', '_')}.wasm`;
    const manifest = await fs.readFile(path.join(root, 'drivers', name, 'murmur.yaml'), 'utf8');
    await fs.writeFile(path.join(work, 'murmur.yaml'), `${manifest.trimEnd()}\nrequires_files:\n  - ${wasmName}\n`);
    await fs.writeFile(path.join(work, wasmName), built.bytes);
    const archive = await buildArtifact(work, { output: work });
    const bytes = await fs.readFile(archive.outputPath);
    const present = await store.resolve(archive.name, archive.version);
    if (present && present.recordedSha256 === sha256Hex(bytes)) continue;
    await store.install(bytes, archive.meta, sha256Hex(bytes));
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    process.stderr.write(
      `[drivers] ${archive.name}@${archive.version} ${built.cacheHit ? 'from the guest cache' : 'built'} into ${path.relative(root, store.root)} (${seconds}s)\n`,
    );
  } finally {
    await fs.rm(work, { recursive: true, force: true });
  }
}
if (!existsSync(store.root)) throw new Error(`no first-party artifact was written to ${store.root}`);
await shippedCache.close();
await removeStaleEntries(path.join(shippedCache.cacheDir, 'transpiled'));

/** The component transpiled into the shipped cache, unless it is there already. */
async function transpileInto(cache, name, bytes) {
  const sha256 = sha256Hex(bytes);
  transpiledNow.add(sha256);
  if (await cache.lookup(sha256)) return;
  const started = Date.now();
  await cache.commit(await cache.prepare(bytes, sha256, name));
  process.stderr.write(
    `[drivers] ${name} transpiled into ${path.relative(root, cache.cacheDir)}/transpiled (${((Date.now() - started) / 1000).toFixed(1)}s)\n`,
  );
}

async function removeStaleEntries(transpiled) {
  for (const transpiler of await fs.readdir(transpiled).catch(() => [])) {
    if (transpiler !== TRANSPILER_ID) {
      await fs.rm(path.join(transpiled, transpiler), { recursive: true, force: true });
      continue;
    }
    for (const entry of await fs.readdir(path.join(transpiled, transpiler))) {
      if (!transpiledNow.has(entry)) await fs.rm(path.join(transpiled, transpiler, entry), { recursive: true, force: true });
    }
  }
}
