/**
 * `npm run bench:stage`: how long staging takes for a capsule with a ~12 MB component (a real
 * componentize-js build), cold (nothing in the cache: jco transpiles) and warm (a cache hit), from a
 * capsule directory and from the registry. Staging is measured in-process, without the `mur`
 * process start, because that is the stager's own cost. Aim: warm ≤ 50 ms median.
 */
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BLOB_BUCKET, type StageRequest, silentLog } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { BlobCache, uploadProject } from '@murmur/shared/node';
import { Stager } from '@murmur/stager';
import { capsuleArchive, capsuleProject, publishInto } from '../test/support/artifacts.js';
import { helloCapsuleJs } from '../test/support/guests.js';
import { percentile } from './stats.js';

const COLD_RUNS = Number(process.env.BENCH_COLD_RUNS ?? 5);
const WARM_RUNS = Number(process.env.BENCH_WARM_RUNS ?? 40);

function median(values: number[]): number {
  const sorted = [...values].sort((left, right) => left - right);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 0 ? ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2 : (sorted[middle] as number);
}

const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-bench-stage-'));
try {
  const guest = await helloCapsuleJs();
  const manifest = 'name: bench-capsule\nversion: 1.0.0\ncapabilities:\n  env:\n    allow: [GREETING]\n';
  const project = await capsuleProject(path.join(scratch, 'project'), manifest, guest.bytes);
  const globalStore = path.join(scratch, 'home', 'artifacts');
  await publishInto(globalStore, await capsuleArchive(manifest, guest.bytes));

  // A directory is packed and uploaded through the bus's object store each time, as mur does: that is part of staging it.
  const bus = createBus(new InProcessTransport(), silentLog);
  const sources: Record<string, () => Promise<StageRequest>> = {
    directory: async () => ({ source: { kind: 'project', project: await uploadProject(bus, project, { digestCache: path.join(scratch, 'digests.json') }) } }),
    registry: async () => ({ source: { kind: 'registry', name: 'bench-capsule', version: '1.0.0' } }),
  };
  const stagerIn = (cacheDir: string): Stager =>
    new Stager({ cacheDir, globalStore, log: silentLog, blobs: new BlobCache(path.join(cacheDir, 'blobs'), () => bus.objectStore(BLOB_BUCKET)) });

  process.stdout.write(
    `staging a capsule with a ${(guest.bytes.byteLength / 1e6).toFixed(1)} MB component (${os.cpus().length} cores, node ${process.version})\n\n`,
  );
  process.stdout.write('source     cache  runs  median ms  p90 ms  min ms\n');
  for (const [label, request] of Object.entries(sources)) {
    const cold: number[] = [];
    for (let run = 0; run < COLD_RUNS; run += 1) {
      const stager = stagerIn(path.join(scratch, `cold-cache-${label}-${run}`));
      const started = performance.now();
      const plan = await stager.stage({ request: await request() });
      cold.push(performance.now() - started);
      if (plan.capsule.component?.cache_hit !== false) throw new Error('a cold staging must transpile');
      await stager.close();
    }
    const stager = stagerIn(path.join(scratch, `warm-cache-${label}`));
    await stager.stage({ request: await request() });
    const warm: number[] = [];
    for (let run = 0; run < WARM_RUNS; run += 1) {
      const started = performance.now();
      const plan = await stager.stage({ request: await request() });
      warm.push(performance.now() - started);
      if (plan.capsule.component?.cache_hit !== true) throw new Error('a warm staging must hit the cache');
    }
    await stager.close();
    for (const [cache, values] of [
      ['cold', cold],
      ['warm', warm],
    ] as const) {
      process.stdout.write(
        `${label.padEnd(9)}  ${cache}   ${String(values.length).padStart(4)}  ${median(values).toFixed(1).padStart(9)}  ${percentile(values, 0.9).toFixed(1).padStart(6)}  ${Math.min(
          ...values,
        )
          .toFixed(1)
          .padStart(6)}\n`,
      );
    }
  }
  process.stdout.write('\naim: warm median ≤ 50 ms\n');
} finally {
  await fs.rm(scratch, { recursive: true, force: true });
}
