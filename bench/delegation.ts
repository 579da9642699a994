/**
 * `npm run bench:delegation`: how long a finished child's completion takes to be recorded — from
 * the moment the child's process exits to the moment its completion has been posted to the
 * parent's door, answered (here refused: no task of the parent awaits these children, so the
 * door refuses with -31002) and written to the child's `completion.json` (`delegation.completed`
 * is published after that last write). Median, p90 and p99 over repeated delegations of a small
 * script capsule. Aim: ≤ 100 ms median.
 *
 * Every service runs in this process on the in-process bus — roost, stager, executor, watcher,
 * door — with real sandboxes, real HTTP and real components. `BENCH_RUNS` (default 30).
 */
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type DelegationCompleted, type SessionEnded, commands, newContextId, newSessionId, sessionUrl, silentLog, topics } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { listenHttp } from '@murmur/shared/service';
import { startDoorService } from '@murmur/door';
import { startExecutorService } from '@murmur/executor';
import { startRoostService } from '@murmur/roost';
import { startStagerService } from '@murmur/stager';
import { startWatcherService } from '@murmur/watcher';
import { capsuleArchive, componentArtifact, publishInto } from '../test/support/artifacts.js';
import { capsuleWat } from '../test/support/guests.js';
import { echoDriver } from './echo-driver.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 30);

const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-bench-delegation-'));
const closers: Array<() => Promise<void>> = [];
try {
  const home = path.join(scratch, 'home');
  const store = path.join(home, 'artifacts');
  await publishInto(store, await capsuleArchive('name: bench/child\nversion: 1.0.0\n', (await capsuleWat()).bytes));
  await publishInto(store, await componentArtifact('echo-driver', '1.0.0', (await echoDriver()).bytes, 'driver'));
  const parentManifest =
    'name: bench/parent\nversion: 1.0.0\nartifacts:\n  - name: echo-driver\n    version: 1.0.0\n    runtime: driver\ncapabilities:\n  spawn:\n    allow: [bench/child]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\ninference:\n  endpoint: http://127.0.0.1:9\n  model: echo\n  driver:\n    artifact: echo-driver\n';
  await publishInto(store, await capsuleArchive(parentManifest));

  const bus = createBus(new InProcessTransport(), silentLog);
  const baseEnv = { PATH: process.env.PATH ?? '', MURMUR_HOME: home };
  const roost = startRoostService({ bus, log: silentLog, env: baseEnv, registryPath: store, spawnAllow: ['bench/child'] });
  const roostListener = await listenHttp(roost.http);
  closers.push(async () => {
    await roostListener.close();
    await roost.close();
  });
  const env = { ...baseEnv, MURMUR_ROOST_URL: roostListener.url };
  for (const service of [
    startStagerService({ bus, log: silentLog, env }),
    startExecutorService({ bus, log: silentLog, env }),
    startWatcherService({ bus, log: silentLog, env }),
  ])
    closers.push(() => service.close());
  const door = startDoorService({ bus, log: silentLog, env });
  const doorListener = await listenHttp(door.http, {}, door.ahead);
  door.setBaseUrl(doorListener.url);
  closers.push(async () => {
    await doorListener.close();
    await door.close();
  });

  // The parent: an agent capsule that sleeps between tasks, so its door answers throughout.
  const plan = await bus.request(commands.stage, { source: { kind: 'registry', name: 'bench/parent', version: '1.0.0' } }, { timeoutMs: 120_000 });
  const parentId = newSessionId();
  const parentUrl = `${sessionUrl(doorListener.url, parentId)}/`;
  const parentDir = path.join(scratch, 'parent');
  await fs.mkdir(parentDir);
  await bus.request(
    commands.launch,
    { session_id: parentId, plan, workdir: parentDir, default_workdir_base: parentDir, url: parentUrl },
    { timeoutMs: 60_000 },
  );
  const parentEnded = new Promise<void>((resolve) => bus.subscribe(topics.sessionEnded, (event) => (event.session_id === parentId ? resolve() : undefined)));
  closers.unshift(async () => {
    await bus.request(commands.stopSession.at(parentId), { reason: 'the benchmark is over' }).catch(() => undefined);
    await parentEnded;
  });

  const exits = new Map<string, number>();
  const recorded = new Map<string, (event: DelegationCompleted) => void>();
  bus.subscribe(topics.sessionEnded, (event: SessionEnded) => {
    if (event.exited_at) exits.set(event.session_id, Date.parse(event.exited_at));
  });
  bus.subscribe(topics.delegationCompleted, (event) => recorded.get(event.outcome.delegation_id)?.(event));

  const latencies: number[] = [];
  const outcomes = new Map<string, number>();
  for (let run = 0; run < RUNS + 2; run++) {
    const spawn = await fetch(new URL('/spawn', roostListener.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench/child', version: '1.0.0' }),
    });
    const { approval } = (await spawn.json()) as { approval: string };
    let resolveCompleted!: (event: DelegationCompleted) => void;
    const completed = new Promise<DelegationCompleted>((resolve) => (resolveCompleted = resolve));
    const launched = await bus.request(
      commands.launchDelegation,
      {
        approval,
        roost_url: roostListener.url,
        capsule_name: 'bench/child',
        capsule_version: '1.0.0',
        parent: { session_id: parentId, context_id: newContextId(), url: parentUrl },
      },
      { timeoutMs: 60_000 },
    );
    recorded.set(launched.delegation_id as string, resolveCompleted);
    const event = await completed;
    const receivedAt = Date.now();
    // The child's end is announced just after its completion is recorded; its exit time rides on it.
    let exitedAt = exits.get(launched.session_id);
    for (let wait = 0; exitedAt === undefined && wait < 200; wait++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      exitedAt = exits.get(launched.session_id);
    }
    if (exitedAt === undefined) throw new Error(`no exit time for ${launched.session_id}`);
    // The first two warm the caches (staging, the door, the host's worker); they are not counted.
    if (run >= 2) latencies.push(receivedAt - exitedAt);
    // The refusal names each delegation; group them by what they say.
    const outcome = event.outcome.delivered ? 'delivered' : `refused: ${(event.outcome.delivery_error ?? '').replace(/dlg_[0-9a-f]+/g, 'dlg_…')}`;
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
  }
  latencies.sort((left, right) => left - right);
  const at = (quantile: number): number => latencies[Math.min(latencies.length - 1, Math.floor(quantile * latencies.length))] as number;
  process.stdout.write(`delegation completions, ${RUNS} runs (${os.cpus().length} cores, node ${process.version})\n\n`);
  process.stdout.write(
    `child exit → completion recorded in the parent's door: median ${at(0.5).toFixed(0)} ms, p90 ${at(0.9).toFixed(0)} ms, p99 ${at(0.99).toFixed(0)} ms (aim: median ≤ 100 ms)\n`,
  );
  for (const [outcome, count] of outcomes) process.stdout.write(`  ${count}× ${outcome}\n`);
  closers.push(() => bus.close());
} finally {
  for (const close of closers) await close().catch(() => undefined);
  await fs.rm(scratch, { recursive: true, force: true });
}
