// Builds the runtime's first-party artifacts written in JavaScript — the inference drivers
// murmur-driver-anthropic and murmur-driver-openai, and the hook murmur-hook-eval, from our own
// sources in drivers/ — into the store of default artifacts (drivers/dist/store), which staging
// consults after every other source. So an agent capsule naming one of them runs without an
// install step, and without network access to a registry.
//
// Components come from the guest cache (keyed by source), so only a changed artifact is rebuilt;
// an archive already in the store with the same bytes is left alone.
import { existsSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ArtifactStore, buildArtifact, sha256Hex } from '../shared/dist/artifacts/index.js';
import { componentFromJs } from '../tools/guest-kit/dist/index.js';
import { DRIVERS, HOOKS, driverGuest, hookGuest } from '../drivers/guests.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const store = new ArtifactStore(path.join(root, 'drivers', 'dist', 'store'), 'default');

const FIRST_PARTY = [
  ...DRIVERS.map((driver) => ({ name: `murmur-driver-${driver}`, guest: () => driverGuest(driver) })),
  ...HOOKS.map((hook) => ({ name: `murmur-hook-${hook}`, guest: () => hookGuest(hook) })),
];

for (const { name, guest } of FIRST_PARTY) {
  const started = Date.now();
  const built = await componentFromJs(guest());
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
