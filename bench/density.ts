/**
 * `npm run bench:density`: how many sleeping agent sessions one executor holds. N echo agents
 * (`echo-driver.ts`: no model, no network) are launched one after another on one executor (the
 * stager and the executor in this process, on the in-process bus) and left idle, waiting for a
 * message; then the proportional set size (PSS: shared pages divided among their sharers) of each
 * session's processes — its capsule host and its sandbox's bubblewrap — is read from
 * `/proc/<pid>/smaps_rollup`. Printed: PSS per idle session, the launch time of the first and the
 * N-th, and how many such sessions 24 GB would hold. Aim: ≤ 30 MB PSS per idle session.
 *
 * `BENCH_SESSIONS` (default 24) sets N. Reading another process's smaps needs the right to trace
 * it: as an unprivileged user the capsule host (not dumpable) cannot be read, and the bench says so.
 */
import { existsSync, promises as fs, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type LaunchReply, commands, newSessionId, silentLog } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';
import { componentArtifact, publishInto } from '../test/support/artifacts.js';
import { procFile, processIds } from '../test/support/proc.js';
import { echoDriver, echoManifest } from './echo-driver.js';
import { percentile } from './stats.js';

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 24);
const GIB = 1024 * 1024 * 1024;

/** Every process whose cgroup is the session's (`murmur-<session>`, v1 or v2). */
function sessionProcesses(sessionId: string): number[] {
  return processIds().filter((pid) => procFile(pid, 'cgroup')?.includes(`/murmur-${sessionId}`));
}

/** PSS in bytes, or undefined when this process may not read it. */
function pssOf(pid: number): number | undefined {
  const match = /^Pss:\s+(\d+) kB$/m.exec(procFile(pid, 'smaps_rollup') ?? '');
  return match ? Number(match[1]) * 1024 : undefined;
}

const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-bench-density-'));
const home = path.join(scratch, 'home');
// The whole process's home: the services read some of it from process.env.
process.env.MURMUR_HOME = home;
const env = process.env;
const bus = createBus(new InProcessTransport(), silentLog);
const stager = startStagerService({ bus, log: silentLog, env });
// Warm hosts as the executor service keeps them (MURMUR_EXECUTOR_POOL=0 measures fresh hosts).
const executor = startExecutorService({ bus, log: silentLog, env, pool: { size: 2, refill: true } });
const sessions: string[] = [];
try {
  await publishInto(path.join(home, 'artifacts'), await componentArtifact('echo-driver', '1.0.0', (await echoDriver()).bytes, 'driver'));
  const project = path.join(scratch, 'echo');
  await fs.mkdir(project);
  await fs.writeFile(path.join(project, 'murmur.yaml'), echoManifest());
  const plan = await requestStaging(bus, { source: { kind: 'project', project: await uploadProject(bus, project) } });
  const launchMs: number[] = [];
  let pooled = 0;
  for (let index = 0; index < SESSIONS; index += 1) {
    const sessionId = newSessionId();
    sessions.push(sessionId);
    const started = performance.now();
    const launched: LaunchReply = await bus.request(
      commands.launch,
      { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, url: `http://localhost:9/sessions/${sessionId}/` },
      { timeoutMs: 60_000 },
    );
    launchMs.push(performance.now() - started);
    if (readFileSync(path.join(launched.session_dir, 'logs', 'bootstrap.log'), 'utf8').includes('a warm host')) pooled += 1;
  }
  // Idle: every host has set up its session, is waiting for a message, and has let its spare workers go (after 2 s).
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const perSession: number[] = [];
  let unreadable = 0;
  for (const sessionId of sessions) {
    let total = 0;
    for (const pid of sessionProcesses(sessionId)) {
      const pss = pssOf(pid);
      if (pss === undefined) unreadable += 1;
      else total += pss;
    }
    perSession.push(total);
  }
  const mean = perSession.reduce((sum, value) => sum + value, 0) / perSession.length;
  const executorRss = process.memoryUsage().rss;
  process.stdout.write(`${SESSIONS} idle echo agents on one executor (${os.cpus().length} cores, node ${process.version}; ${pooled} took a warm host)\n\n`);
  if (unreadable > 0 || mean === 0) {
    process.stdout.write(
      `PSS: ${unreadable} processes could not be read (smaps_rollup needs the right to trace them: run the bench as root${existsSync('/proc/sys/kernel/yama/ptrace_scope') ? ', or with ptrace_scope 0' : ''})\n`,
    );
  }
  process.stdout.write(
    `PSS per idle session     mean ${(mean / 1024 / 1024).toFixed(1)} MB, p50 ${(percentile(perSession, 0.5) / 1024 / 1024).toFixed(1)} MB, max ${(Math.max(...perSession) / 1024 / 1024).toFixed(1)} MB\n`,
  );
  process.stdout.write(
    `sessions in 24 GB        ${mean > 0 ? Math.floor((24 * GIB) / mean) : 'n/a'} (at the mean; the executor itself holds ${(executorRss / 1024 / 1024).toFixed(0)} MB RSS)\n`,
  );
  process.stdout.write(
    `launch                   1st ${(launchMs[0] as number).toFixed(0)} ms, N-th ${(launchMs.at(-1) as number).toFixed(0)} ms, p50 ${percentile(launchMs, 0.5).toFixed(0)} ms, max ${Math.max(...launchMs).toFixed(0)} ms\n`,
  );
  process.stdout.write('\naim: ≤ 30 MB PSS per idle session (500 idle sessions in 24 GB)\n');
} finally {
  await Promise.all(
    sessions.map((sessionId) => bus.request(commands.stopSession.at(sessionId), { reason: 'the bench is over' }, { timeoutMs: 10_000 }).catch(() => undefined)),
  );
  await executor.close();
  await stager.close();
  await bus.close();
  await fs.rm(scratch, { recursive: true, force: true });
}
process.exit(0);
