/**
 * `npm run bench:stack`: launches on the compose stack, with one executor and with two, beside the
 * same launches in-process. From 8 concurrent clients, each launching a small script capsule (a
 * kilobyte of component WAT that prints one line) and waiting for its end before the next: launches per second, p50/p99
 * from the launch request to the capsule's first output, and how the launches split between
 * executors. The plan is staged once (and each executor warmed once), so what is measured is the
 * launch: the request over the bus, the sandboxed capsule host starting, the first output coming
 * back.
 *
 * Aims: a warm launch on the stack ≤ 50 ms p50 beyond the same launch in-process; with two
 * executors each takes 35–65% of the launches and the total is no lower than with one. Both
 * executors share this machine's cores here, so two are not expected to be faster; on two
 * machines the launch rate would be the per-executor rate times two, less the bus's share.
 *
 * `BENCH_LAUNCHES` (default 64 per configuration), `BENCH_CLIENTS` (default 8).
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type SessionStarted, type StagedPlan, commands, newSessionId, silentLog, topics } from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { NatsTransport } from '@murmur/shared/bus/nats';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';
import { capsuleProject } from '../test/support/artifacts.js';
import { printingCapsuleWat } from '../test/support/guests.js';
import { ComposeProject, buildImages } from '../test/support/compose.js';
import { freePorts } from '../test/support/ports.js';
import { percentile } from './stats.js';

const LAUNCHES = Number(process.env.BENCH_LAUNCHES ?? 64);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8);

interface Result {
  label: string;
  perSecond: number;
  p50: number;
  p99: number;
  split: Map<string, number>;
}

/** One launch: the request sent, the first output heard, the end heard. */
async function launchOnce(bus: Bus, plan: StagedPlan, executors: Map<string, string>): Promise<number> {
  const sessionId = newSessionId();
  let firstOutput: number | undefined;
  let resolveOutput!: () => void;
  let resolveEnd!: () => void;
  const output = new Promise<void>((resolve) => (resolveOutput = resolve));
  const ended = new Promise<void>((resolve) => (resolveEnd = resolve));
  const subscriptions = [
    bus.subscribe(topics.sessionOutput.at(sessionId), () => {
      firstOutput ??= performance.now();
      resolveOutput();
    }),
    bus.subscribe(topics.sessionEnded, (event) => (event.session_id === sessionId ? resolveEnd() : undefined)),
    bus.subscribe(topics.sessionStarted, (event: SessionStarted) =>
      event.session_id === sessionId ? void executors.set(sessionId, event.executor_id) : undefined,
    ),
  ];
  await bus.flush();
  const requested = performance.now();
  try {
    await bus.request(commands.launch, { session_id: sessionId, plan, relay_output: true }, { timeoutMs: 60_000 });
    await Promise.all([output, ended]);
    return (firstOutput as number) - requested;
  } finally {
    for (const subscription of subscriptions) subscription.unsubscribe();
  }
}

async function measure(label: string, bus: Bus, plan: StagedPlan, clients = CLIENTS, launches = LAUNCHES): Promise<Result> {
  const latencies: number[] = [];
  const executors = new Map<string, string>();
  let remaining = launches;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (remaining > 0) {
        remaining -= 1;
        latencies.push(await launchOnce(bus, plan, executors));
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  const split = new Map<string, number>();
  for (const executor of executors.values()) split.set(executor, (split.get(executor) ?? 0) + 1);
  return { label, perSecond: latencies.length / elapsed, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), split };
}

/** Launches until every executor has run the capsule once: its bundle is fetched, its cache warm. */
async function warm(bus: Bus, plan: StagedPlan, executorCount: number): Promise<void> {
  const seen = new Map<string, string>();
  for (let attempt = 0; attempt < 40 && new Set(seen.values()).size < executorCount; attempt += 1) await launchOnce(bus, plan, seen);
}

function row(result: Result): string {
  const total = [...result.split.values()].reduce((sum, count) => sum + count, 0);
  const split = [...result.split.values()].map((count) => `${((count / total) * 100).toFixed(0)}%`).join(' / ');
  return `${result.label.padEnd(26)}${result.perSecond.toFixed(1).padStart(10)}${result.p50.toFixed(1).padStart(10)}${result.p99.toFixed(1).padStart(10)}   ${split}\n`;
}

const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-bench-stack-'));
const [natsPort, doorPort, roostPort] = (await freePorts(3)).map(String);
const compose = new ComposeProject(`murmurbench${randomBytes(3).toString('hex')}`, ['docker-compose.yml'], {
  MURMUR_NATS_PORT: natsPort as string,
  MURMUR_DOOR_PORT: doorPort as string,
  MURMUR_ROOST_PORT: roostPort as string,
});
const results: Result[] = [];
/** One client, one launch at a time: a warm launch on an idle machine, the latency without queueing. */
const alone: Result[] = [];
const ALONE_LAUNCHES = 20;
try {
  const project = await capsuleProject(path.join(scratch, 'capsule'), 'name: printer\nversion: 0.1.0\n', (await printingCapsuleWat()).bytes);
  process.stdout.write(
    `${LAUNCHES} launches of a small script capsule from ${CLIENTS} concurrent clients (${os.cpus().length} cores, node ${process.version})\n\n`,
  );

  // In-process: the stager and the executor beside the clients, on the in-process bus.
  {
    const bus = createBus(new InProcessTransport(), silentLog);
    const env = { ...process.env, MURMUR_HOME: path.join(scratch, 'home') };
    const stager = startStagerService({ bus, log: silentLog, env });
    const executor = startExecutorService({ bus, log: silentLog, env });
    const plan = await requestStaging(bus, {
      source: { kind: 'project', project: await uploadProject(bus, project, { digestCache: path.join(scratch, 'digests.json') }) },
    });
    await warm(bus, plan, 1);
    alone.push(await measure('in-process', bus, plan, 1, ALONE_LAUNCHES));
    results.push(await measure('in-process', bus, plan));
    await executor.close();
    await stager.close();
    await bus.close();
  }

  for (const line of await buildImages()) if (/built|up to date|done/.test(line)) process.stderr.write(`${line}\n`);
  await compose.up();
  const bus = createBus(await NatsTransport.connect(`nats://127.0.0.1:${compose.env.MURMUR_NATS_PORT}`, { log: silentLog }), silentLog);
  try {
    const plan = await requestStaging(bus, {
      source: { kind: 'project', project: await uploadProject(bus, project, { digestCache: path.join(scratch, 'digests.json') }) },
    });
    await warm(bus, plan, 1);
    alone.push(await measure('stack, 1 executor', bus, plan, 1, ALONE_LAUNCHES));
    results.push(await measure('stack, 1 executor', bus, plan));
    await compose.scale('executor', 2);
    await warm(bus, plan, 2);
    results.push(await measure('stack, 2 executors', bus, plan));
  } finally {
    await bus.close();
  }

  const header = `${'configuration'.padEnd(26)}${'launch/s'.padStart(10)}${'p50 ms'.padStart(10)}${'p99 ms'.padStart(10)}   split between executors\n`;
  process.stdout.write(`${CLIENTS} concurrent clients:\n${header}`);
  for (const result of results) process.stdout.write(row(result));
  process.stdout.write(`\none client, ${ALONE_LAUNCHES} launches one after another:\n${header}`);
  for (const result of alone) process.stdout.write(row(result));
  const [local, one, two] = results as [Result, Result, Result];
  const [localAlone, oneAlone] = alone as [Result, Result];
  process.stdout.write(
    `\nstack p50 beyond in-process: ${(oneAlone.p50 - localAlone.p50).toFixed(1)} ms for a warm launch on its own, ${(one.p50 - local.p50).toFixed(1)} ms under ${CLIENTS} clients (aim ≤ 50 ms)\n`,
  );
  const shares = [...two.split.values()].map((count) => count / LAUNCHES);
  process.stdout.write(
    `two executors: shares ${shares.map((share) => `${(share * 100).toFixed(0)}%`).join(', ')} (aim 35–65% each); launch/s ${two.perSecond.toFixed(1)} vs ${one.perSecond.toFixed(1)} with one (aim: no lower)\n`,
  );
} finally {
  await compose.down().catch((error: unknown) => process.stderr.write(`could not take the benchmark stack down: ${String(error)}\n`));
  await fs.rm(scratch, { recursive: true, force: true });
}
