/**
 * Part of `npm run bench:run`: on a warm executor (the stager and the executor in this process, on
 * the in-process bus, the capsule staged once), how long from a launch request to the guest's
 * first instruction — with the warm pool and without it (`MURMUR_EXECUTOR_POOL=0`). The guest's
 * first instruction writes a line to stdout, so the time is taken when that line's
 * `session.<id>.output` event arrives: an upper bound, by the relay's fraction of a millisecond.
 * Each launch waits for the pool to be warm again, as a launch to a resting executor would find it.
 * Aim: ≤ 20 ms p50, ≤ 50 ms p99 with the pool. Also printed, with no aim: from that first line to
 * the session's end (`session.ended`), which a `mur run` waits for as well (the host exits, its
 * sandbox and cgroups are taken down).
 *
 * Usage: tsx bench/first-instruction.ts <capsule project> <runs>; prints one JSON line per mode.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type LaunchReply, commands, newSessionId, silentLog, topics } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';
import { eventually } from '../test/support/processes.js';
import { percentile } from './stats.js';

const [project, runsText] = process.argv.slice(2);
const runs = Number(runsText);
if (!project || !Number.isInteger(runs) || runs < 1) throw new Error('usage: first-instruction.ts <project dir> <runs>');

for (const pooled of [true, false]) {
  const env = { ...process.env, MURMUR_EXECUTOR_POOL: pooled ? '2' : '0' };
  const bus = createBus(new InProcessTransport(), silentLog);
  const stager = startStagerService({ bus, log: silentLog, env });
  const executor = startExecutorService({ bus, log: silentLog, env });
  const plan = await requestStaging(bus, { source: { kind: 'project', project: await uploadProject(bus, project) } });
  const samples: number[] = [];
  const ends: number[] = [];
  let pooledLaunches = 0;
  for (let run = 0; run < runs + 2; run += 1) {
    if (pooled) await eventually(() => executor.warmHosts() === 2 || undefined, 20_000, 'two warm hosts');
    const sessionId = newSessionId();
    let firstOutput = 0;
    let endedAt = 0;
    const output = bus.subscribe(topics.sessionOutput.at(sessionId), () => {
      firstOutput ||= performance.now();
    });
    const end = bus.subscribe(topics.sessionEnded, (event) => {
      if (event.session_id === sessionId) endedAt ||= performance.now();
    });
    await bus.flush();
    const requested = performance.now();
    const launched: LaunchReply = await bus.request(
      commands.launch,
      { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, relay_output: true },
      { timeoutMs: 60_000 },
    );
    await eventually(() => (endedAt > 0 && firstOutput > 0) || undefined, 30_000, 'the session’s output and end');
    output.unsubscribe();
    end.unsubscribe();
    const bootstrap = readFileSync(path.join(launched.session_dir, 'logs', 'bootstrap.log'), 'utf8');
    if (bootstrap.includes('a warm host from the executor’s pool')) pooledLaunches += 1;
    // The first two warm the caches (the component compiled, the bundle's watched forms kept).
    if (run >= 2) {
      samples.push(firstOutput - requested);
      ends.push(endedAt - firstOutput);
    }
  }
  process.stdout.write(
    `${JSON.stringify({ pooled, runs, pooled_launches: pooledLaunches, p50_ms: percentile(samples, 0.5), p99_ms: percentile(samples, 0.99), max_ms: Math.max(...samples), end_p50_ms: percentile(ends, 0.5), end_p99_ms: percentile(ends, 0.99) })}\n`,
  );
  await executor.close();
  await stager.close();
  await bus.close();
}
process.exit(0);
