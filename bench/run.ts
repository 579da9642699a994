/**
 * `npm run bench:run`: `mur run` of a script capsule with a warm cache — median and p90 wall time
 * and peak RSS over repeated runs — side by side with a bare `node` process that runs the same
 * transpiled component with no sandbox, no policy and no records. The difference is what the
 * runtime costs: staging, the executor, the sandbox, the capsule host. Aim (issue 13): the median
 * ≤ 1.5× the bare node's, peak RSS ≤ the bare node's + 20 MB.
 *
 * Three capsules: a component WAT that does nothing; upstream's kind of capsule, built from Rust
 * (it reads its environment and writes a file; needs a rustc with a WASI target, else its row says
 * why it is missing); and a 12 MB JavaScript capsule, for scale. Each is run, as a user runs it
 * (`cli/bin/mur`, so the launcher's snapshot and node flags apply):
 * - `mur run`: in-process, from the startup snapshot, with its one warm host started while the
 *   capsule is staged;
 * - from the bundle (`MURMUR_SNAPSHOT=off`): what the snapshot saves;
 * - without the warm host (`MURMUR_EXECUTOR_POOL=0`);
 * - unsealed (`MURMUR_CONFINE=none`: bubblewrap's composed root alone, which has no pool), so the
 *   sealed sandbox's own cost is the difference of its median and the unpooled sealed one's;
 * - against a stack on this machine (`nats-server` and the services as processes, the executor
 *   keeping its warm pool): `mur` as a thin client of a warm executor.
 *
 * Then, on a warm executor in one process (`bench/first-instruction.ts`): a launch request to the
 * guest's first instruction, with the warm pool and without. Aim: ≤ 20 ms p50, ≤ 50 ms p99 pooled.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { capsuleProject } from '../test/support/artifacts.js';
import { capsuleWat, helloCapsuleJs, printingCapsuleWat, rustCapsule } from '../test/support/guests.js';
import { startNatsServer } from '../test/support/nats-server.js';
import { type ServiceProcess, startService } from '../test/support/processes.js';
import { nodeStartMs } from './stats.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 30);
/** How long the stack's executor is given to refill its pool after a run against it. */
const STACK_REFILL_MS = 1_000;
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const mur = path.join(root, 'cli', 'bin', 'mur');
const bare = path.join(root, 'bench', 'bare-run.mjs');
const timeBinary = existsSync('/usr/bin/time') ? '/usr/bin/time' : undefined;

interface Sample {
  ms: number;
  rssMb: number | undefined;
}

function measure(command: string[], env: NodeJS.ProcessEnv, cwd: string): Sample {
  const started = performance.now();
  const argv = timeBinary ? [timeBinary, '-f', 'maxrss=%M', ...command] : command;
  const result = spawnSync(argv[0] as string, argv.slice(1), { env, cwd, encoding: 'utf8' });
  const ms = performance.now() - started;
  if (result.status !== 0) throw new Error(`${command.join(' ')} failed (${result.status}):\n${result.stderr}`);
  const rss = /maxrss=(\d+)/.exec(result.stderr ?? '')?.[1];
  return { ms, rssMb: rss ? Number(rss) / 1024 : undefined };
}

function stats(samples: Sample[]): { median: number; p90: number; rss: number | undefined } {
  const times = samples.map((sample) => sample.ms).sort((left, right) => left - right);
  const median =
    times.length % 2 ? (times[(times.length - 1) / 2] as number) : ((times[times.length / 2 - 1] as number) + (times[times.length / 2] as number)) / 2;
  const p90 = times[Math.min(times.length - 1, Math.floor(0.9 * times.length))] as number;
  const rss = samples.every((sample) => sample.rssMb !== undefined) ? Math.max(...samples.map((sample) => sample.rssMb as number)) : undefined;
  return { median, p90, rss };
}

const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-bench-run-'));
const nats = await startNatsServer();
const services: ServiceProcess[] = [];
try {
  const env = { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch, 'home') };
  // The stack: its own home (its stager's cache, its executor's workdirs), the executor's default pool.
  const stackEnv = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch, 'stack-home') };
  for (const name of ['stager', 'executor', 'watcher', 'door']) services.push(await startService(name, stackEnv));

  const rust = await rustCapsule();
  const capsules = [
    { label: 'WAT, returns', bytes: (await capsuleWat()).bytes },
    'missing' in rust ? { label: 'Rust, env + a file', missing: rust.missing } : { label: 'Rust, env + a file', bytes: rust.bytes },
    { label: '12 MB JS (componentize)', bytes: (await helloCapsuleJs()).bytes },
  ];
  const runners: Array<{ label: string; env: NodeJS.ProcessEnv }> = [
    { label: 'mur run', env },
    { label: 'mur run, bundle', env: { ...env, MURMUR_SNAPSHOT: 'off' } },
    { label: 'mur run, no pool', env: { ...env, MURMUR_EXECUTOR_POOL: '0' } },
    { label: 'mur run, unsealed', env: { ...env, MURMUR_CONFINE: 'none' } },
    { label: 'mur run → stack', env: { ...env, MURMUR_NATS_URL: nats.url } },
  ];
  process.stdout.write(
    `mur run, warm cache, ${RUNS} runs each (${os.cpus().length} cores, node ${process.version}, a bare node -e 0 takes ${nodeStartMs().toFixed(0)} ms${timeBinary ? '' : ', no /usr/bin/time: RSS not measured'})\n\n`,
  );
  process.stdout.write('capsule                   runner              median ms   p90 ms   peak RSS MB   × bare\n');
  for (const [index, capsule] of capsules.entries()) {
    if (!('bytes' in capsule)) {
      process.stdout.write(`${capsule.label.padEnd(26)}not built: ${capsule.missing}\n\n`);
      continue;
    }
    const manifest = `name: bench-${index}\nversion: 1.0.0\n`;
    const project = await capsuleProject(path.join(scratch, `capsule-${index}`), manifest, capsule.bytes);
    const murRun = [mur, 'run', '--manifest', path.join(project, 'murmur.yaml'), '--json'];
    // Warm the cache, and find the transpiled bundle the baseline runs.
    const warm = spawnSync(mur, ['stage', project, '--json'], { env, encoding: 'utf8' });
    if (warm.status !== 0) throw new Error(warm.stderr);
    const bundleKey = (JSON.parse(warm.stdout) as { capsule: { component: { bundle: { key: string } } } }).capsule.component.bundle.key;
    const bareRun = [process.execPath, bare, path.join(env.MURMUR_HOME, 'cache', 'transpiled', bundleKey), path.join(scratch, `bare-${index}`)];
    await fs.mkdir(bareRun[3] as string, { recursive: true });
    for (const runner of runners) measure(murRun, runner.env, project);
    measure(bareRun, env, root);
    const samples = runners.map((): Sample[] => []);
    const bareSamples: Sample[] = [];
    // Interleaved, so a machine that slows down for a while slows every runner alike. After its
    // run the stack's executor refills its pool (a host's start: ~150 ms of a core, begun 250 ms
    // after the take), which would land on whichever run came next; the next waits for it, as a
    // launch to a resting executor finds it.
    for (let run = 0; run < RUNS; run += 1) {
      for (const [at, runner] of runners.entries()) {
        samples[at]?.push(measure(murRun, runner.env, project));
        if (runner.env.MURMUR_NATS_URL) await new Promise((resolve) => setTimeout(resolve, STACK_REFILL_MS));
      }
      bareSamples.push(measure(bareRun, env, root));
    }
    const bareStats = stats(bareSamples);
    const row = (runner: string, value: ReturnType<typeof stats>): string =>
      `${capsule.label.padEnd(26)}${runner.padEnd(20)}${value.median.toFixed(1).padStart(9)}  ${value.p90.toFixed(1).padStart(7)}  ${value.rss === undefined ? 'n/a'.padStart(12) : value.rss.toFixed(1).padStart(12)}  ${(value.median / bareStats.median).toFixed(2).padStart(7)}\n`;
    const byLabel = new Map(runners.map((runner, at) => [runner.label, stats(samples[at] ?? [])]));
    for (const [label, value] of byLabel) process.stdout.write(row(label, value));
    process.stdout.write(row('bare node', bareStats));
    const of = (label: string): number => byLabel.get(label)?.median ?? Number.NaN;
    const rss = byLabel.get('mur run')?.rss;
    process.stdout.write(`${''.padEnd(26)}the snapshot saves  ${(of('mur run, bundle') - of('mur run')).toFixed(1).padStart(9)} ms (median)\n`);
    // Unsealed has no pool (a pooled host is a sealed one): sealing's own cost is against the unpooled run.
    process.stdout.write(
      `${''.padEnd(26)}sealing adds        ${(of('mur run, no pool') - of('mur run, unsealed')).toFixed(1).padStart(9)} ms (median, no pool)\n`,
    );
    process.stdout.write(`${''.padEnd(26)}the warm host saves ${(of('mur run, no pool') - of('mur run')).toFixed(1).padStart(9)} ms (median)\n`);
    process.stdout.write(
      `${''.padEnd(26)}RSS over bare node  ${rss !== undefined && bareStats.rss !== undefined ? (rss - bareStats.rss).toFixed(1).padStart(9) : 'n/a'.padStart(9)} MB (mur run)\n\n`,
    );
  }
  process.stdout.write('aim: median ≤ 1.5× the bare node, peak RSS ≤ the bare node + 20 MB\n\n');

  // A launch on a warm executor, to the guest's first instruction (its first line of output).
  const printing = await capsuleProject(path.join(scratch, 'printing'), 'name: bench-printing\nversion: 1.0.0\n', (await printingCapsuleWat()).bytes);
  const firstInstruction = spawnSync(process.execPath, ['--import', 'tsx', path.join(root, 'bench', 'first-instruction.ts'), printing, String(RUNS)], {
    env: { ...env, PATH: process.env.PATH ?? '' },
    cwd: root,
    encoding: 'utf8',
  });
  if (firstInstruction.status !== 0) throw new Error(`first-instruction.ts failed:\n${firstInstruction.stderr}`);
  process.stdout.write(`launch request → the guest's first instruction, warm executor, ${RUNS} launches each\n\n`);
  process.stdout.write('executor             p50 ms   p99 ms   max ms   launches that took a warm host   first output → ended, p50 / p99 ms\n');
  for (const line of firstInstruction.stdout.trim().split('\n')) {
    const figures = JSON.parse(line) as {
      pooled: boolean;
      pooled_launches: number;
      runs: number;
      p50_ms: number;
      p99_ms: number;
      max_ms: number;
      end_p50_ms: number;
      end_p99_ms: number;
    };
    process.stdout.write(
      `${(figures.pooled ? 'warm pool (2 hosts)' : 'no pool').padEnd(19)}${figures.p50_ms.toFixed(1).padStart(8)} ${figures.p99_ms.toFixed(1).padStart(8)} ${figures.max_ms.toFixed(1).padStart(8)}   ${`${figures.pooled_launches}/${figures.runs + 2}`.padEnd(33)}${figures.end_p50_ms.toFixed(1)} / ${figures.end_p99_ms.toFixed(1)}\n`,
    );
  }
  process.stdout.write('\naim: ≤ 20 ms p50, ≤ 50 ms p99 with the pool\n');
} finally {
  for (const service of services.reverse()) await service.stop();
  await nats.stop();
  await fs.rm(scratch, { recursive: true, force: true });
}
