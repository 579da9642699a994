import { existsSync, readFileSync, readdirSync, readlinkSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LaunchReply, type Log, commands, newSessionId, silentLog, topics } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';
import { capsuleProject } from './support/artifacts.js';
import { printingCapsuleWat } from './support/guests.js';
import { probeProject, probeResults } from './support/capsules.js';
import { procFile, processIds } from './support/proc.js';
import { componentFromWat } from '@murmur/guest-kit';
import { tempDir } from './support/fs.js';
import { agentManifest, agentProject } from './support/agents.js';
import { RecordingLog } from './support/recording-log.js';
import { eventually, runMur } from './support/processes.js';

/**
 * The warm pool (`services/executor/src/host-pool.ts`), through `mur run`: its in-process executor
 * warms one sealed host while the capsule is staged, and `MURMUR_EXECUTOR_POOL=0` turns that off,
 * so the same capsule can be run on a pooled and on a fresh host and what each shows compared.
 */
describe('the warm pool', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-pool-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  /**
   * A stager and an executor in this process, on the in-process bus, with one warm host and a home
   * of their own under `name`: for what `mur run` does not show (the pool's state, the executor's log).
   */
  function pooledExecutor(name: string, log: Log = silentLog) {
    const home = path.join(scratch.dir, name);
    const serviceEnv = { ...process.env, MURMUR_HOME: home, MURMUR_EXECUTOR_POOL: '1' };
    const bus = createBus(new InProcessTransport(), silentLog);
    const stager = startStagerService({ bus, log: silentLog, env: serviceEnv });
    const executor = startExecutorService({ bus, log, env: serviceEnv });
    return {
      home,
      bus,
      executor,
      stage: async (project: string) => requestStaging(bus, { source: { kind: 'project', project: await uploadProject(bus, project) } }),
      close: async () => {
        await executor.close();
        await stager.close();
        await bus.close();
      },
    };
  }

  /** Runs the probe capsule with `actions`, pooled or not; its results with the session's id taken out. */
  async function probeRun(name: string, actions: unknown[], pooled: boolean, manifest = '') {
    const project = await probeProject(path.join(scratch.dir, name), manifest);
    const result = await runMur(['run', '--json', '--task', JSON.stringify(actions)], {
      cwd: project,
      env: { ...env, ...(pooled ? {} : { MURMUR_EXECUTOR_POOL: '0' }) },
    });
    expect(result.code, result.stderr).toBe(0);
    const launch = JSON.parse(result.stdout) as { session_id: string; workdir: string };
    const log = await fs.readFile(path.join(launch.workdir, 'logs', 'session.log'), 'utf8');
    const bootstrap = await fs.readFile(path.join(launch.workdir, 'logs', 'bootstrap.log'), 'utf8');
    const anonymous = (text: string): string => text.replaceAll(launch.session_id, '<session>').replaceAll(path.join(scratch.dir, name), '<project>');
    return { results: JSON.parse(anonymous(JSON.stringify(probeResults(log.replaceAll('[stdout] ', ''))))) as unknown[], bootstrap, launch };
  }

  const looks = [
    { op: 'env' },
    { op: 'preopen' },
    { op: 'list', path: '.' },
    { op: 'read', path: 'task.md' },
    { op: 'write', path: 'out/written.txt', text: 'kept' },
    { op: 'read', path: 'out/written.txt' },
    { op: 'list', path: 'out' },
    { op: 'list', path: '..' },
    { op: 'read', path: '../../etc/passwd' },
    { op: 'stat', path: '.' },
    { op: 'fetch', url: 'http://127.0.0.1:9/denied' },
    { op: 'write', path: 'children/planted.txt', text: 'x' },
    { op: 'rename', path: 'trace.jsonl', to: 'moved-trace.jsonl' },
  ];

  it('a capsule on a pooled host sees exactly what it sees on a fresh one', async () => {
    const pooled = await probeRun('looks-pooled', looks, true);
    const fresh = await probeRun('looks-fresh', looks, false);
    expect(pooled.bootstrap).toContain('a warm host from the executor’s pool');
    expect(fresh.bootstrap).not.toContain('warm host');
    expect(pooled.results).toHaveLength(looks.length);
    // The write landed in the session's own workdir, on the host's side of the mount.
    expect(readFileSync(path.join(pooled.launch.workdir, 'out', 'written.txt'), 'utf8')).toBe('kept');
    const withoutTimes = (results: unknown[]): unknown =>
      JSON.parse(JSON.stringify(results), (key, value) => (/(^|_)(timestamp|time|mtime|atime|ctime)$|Timestamp$/i.test(key) ? '<time>' : value));
    expect(withoutTimes(pooled.results)).toEqual(withoutTimes(fresh.results));
    // The runtime's records are read-only in both: a delegated child's directory and the trace.
    expect((pooled.results.slice(-2) as Array<{ ok: boolean }>).map((result) => result.ok)).toEqual([false, false]);
  });

  it('a warm host whose held helper has gone is replaced by a fresh one, and the launch still runs', async () => {
    const { home, bus, executor, stage, close } = pooledExecutor('executor-home');
    try {
      const plan = await stage(await probeProject(path.join(scratch.dir, 'helper-gone'), ''));
      await eventually(() => executor.warmHosts() === 1 || undefined, 20_000, 'a warm host');
      // The helper waiting to mount a session in: the one process of a pooled sandbox still running murmur-confine.
      const helper = await eventually(() => pooledHelper(home), 10_000, 'the held helper');
      process.kill(helper, 'SIGKILL');
      const sessionId = newSessionId();
      let ended: { exit_status: string } | undefined;
      bus.subscribe(topics.sessionEnded, (event) => {
        if (event.session_id === sessionId) ended = event;
      });
      await bus.flush();
      const launched: LaunchReply = await bus.request(
        commands.launch,
        { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, task: JSON.stringify([{ op: 'print', text: 'ran' }]) },
        { timeoutMs: 60_000 },
      );
      const end = await eventually(() => ended, 20_000, 'the session’s end');
      expect(end.exit_status).toBe('ok');
      const bootstrap = readFileSync(path.join(launched.session_dir, 'logs', 'bootstrap.log'), 'utf8');
      expect(bootstrap).toContain('[sandbox] a warm host from the executor’s pool');
      // bubblewrap keeps its own copy of the helper's socket, so a helper that is gone is found by its silence.
      expect(bootstrap).toMatch(
        /\[sandbox\] the warm host could not be attached \(the pooled sandbox's helper did not attach the workdir within 5s\); a fresh host instead/,
      );
      expect(readFileSync(path.join(launched.session_dir, 'logs', 'session.log'), 'utf8')).toContain('"op":"print","ok":true');
    } finally {
      await close();
    }
  });

  it('a warm host that dies while it waits is replaced at once, its group removed, and the next launch takes a warm host', async () => {
    const { home, bus, executor, stage, close } = pooledExecutor('died-waiting-home');
    try {
      const plan = await stage(await probeProject(path.join(scratch.dir, 'died-waiting'), ''));
      await eventually(() => executor.warmHosts() === 1 || undefined, 20_000, 'a warm host');
      const warm = await warmSandbox(home);
      const poolGroup = groupOf(warm[0] as number);
      // What the OOM killer or an operator's kill does to a host nobody has taken yet.
      for (const pid of warm) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already: killing the sandbox's first process took the rest with it
        }
      }
      await eventually(() => warm.every((pid) => !isRunning(pid)) || undefined, 10_000, 'the killed host to be gone');
      // Replaced with no launch asking: a new sandbox, warm.
      await eventually(() => (executor.warmHosts() === 1 && pooledSandbox(home).some((pid) => !warm.includes(pid))) || undefined, 20_000, 'a new warm host');
      if (poolGroup) await eventually(() => !existsSync(poolGroup) || undefined, 10_000, `${poolGroup} to be removed`);
      else console.log('[pool] the warm host ran in no cgroup of its own here: that its group is removed is not checked');
      const sessionId = newSessionId();
      const launched: LaunchReply = await bus.request(
        commands.launch,
        { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, task: JSON.stringify([{ op: 'print', text: 'ran' }]) },
        { timeoutMs: 60_000 },
      );
      expect(readFileSync(path.join(launched.session_dir, 'logs', 'bootstrap.log'), 'utf8')).toContain('[sandbox] a warm host from the executor’s pool');
    } finally {
      await close();
    }
  });

  it('a warm host told to expect a component its memory cap refuses reports it as a fresh host does', async () => {
    // Taken for this launch, the warm host compiles what it was told to expect while its workdir is
    // attached; that compile fails (the module's minimum is above the cap), and the failure must
    // come out of the run, in the same words, not out of the head start.
    const wasm = (await componentFromWat(LARGE_MEMORY_CAPSULE_WAT)).bytes;
    const manifest = 'name: large-memory\nversion: 1.0.0\ncapabilities:\n  limits:\n    memory_bytes: 131072\n';
    const outcomes: Array<{ code: number | null; error: string; bootstrap: string }> = [];
    for (const pooled of [true, false]) {
      const project = await capsuleProject(path.join(scratch.dir, `large-memory-${pooled}`), manifest, wasm);
      const result = await runMur(['run', '--json'], { cwd: project, env: { ...env, ...(pooled ? {} : { MURMUR_EXECUTOR_POOL: '0' }) } });
      const launch = JSON.parse(result.stdout.split('\n')[0] as string) as { workdir: string };
      const bootstrap = await fs.readFile(path.join(launch.workdir, 'logs', 'bootstrap.log'), 'utf8');
      outcomes.push({ code: result.code, error: result.stderr.split('\n').find((line) => line.includes('E-RUN-')) ?? result.stderr, bootstrap });
    }
    const [pooled, fresh] = outcomes as [(typeof outcomes)[0], (typeof outcomes)[0]];
    expect(pooled.bootstrap).toContain('a warm host from the executor’s pool');
    expect(fresh.bootstrap).not.toContain('warm host');
    expect(pooled.error).toContain('declares a minimum of 4 pages');
    expect(pooled.error).toContain('capabilities.limits.memory_bytes');
    expect(pooled.code).not.toBe(0);
    expect({ code: pooled.code, error: pooled.error }).toEqual({ code: fresh.code, error: fresh.error });
  });

  it('a warm host started after a launch has that capsule loaded ahead; one that guessed wrong runs what it is given, and each sees the same', async () => {
    const executorLog = new RecordingLog();
    const { bus, executor, stage, close } = pooledExecutor('anticipating-home', executorLog);
    try {
      const plans = {
        probe: await stage(await probeProject(path.join(scratch.dir, 'anticipated-probe'), '')),
        printing: await stage(
          await capsuleProject(path.join(scratch.dir, 'anticipated-printing'), 'name: printing\nversion: 1.0.0\n', (await printingCapsuleWat()).bytes),
        ),
      };
      /** Launches `which` on the pool's one warm host (waited for, as a launch to a resting executor finds it). */
      const launch = async (which: keyof typeof plans) => {
        await eventually(() => executor.warmHosts() === 1 || undefined, 20_000, 'a warm host');
        const sessionId = newSessionId();
        let ended: { exit_status: string } | undefined;
        const end = bus.subscribe(topics.sessionEnded, (event) => {
          if (event.session_id === sessionId) ended = event;
        });
        await bus.flush();
        const launched: LaunchReply = await bus.request(
          commands.launch,
          { session_id: sessionId, plan: plans[which], env: { PATH: process.env.PATH ?? '' }, task: JSON.stringify(looks) },
          { timeoutMs: 60_000 },
        );
        expect((await eventually(() => ended, 20_000, 'the session’s end')).exit_status).toBe('ok');
        end.unsubscribe();
        const log = readFileSync(path.join(launched.session_dir, 'logs', 'session.log'), 'utf8').replaceAll('[stdout] ', '');
        const results = JSON.parse(JSON.stringify(probeResults(log)).replaceAll(sessionId, '<session>'), (key, value) =>
          /(^|_)(timestamp|time|mtime|atime|ctime)$|Timestamp$/i.test(key) ? '<time>' : value,
        ) as unknown[];
        // Said in the executor's own log only: the guest reads its bootstrap log, and this says what the last launch here ran.
        const ahead = executorLog.entries.some(
          (entry) => entry.fields.session_id === sessionId && entry.message?.startsWith('the warm host was told this capsule’s component ahead'),
        );
        return { bootstrap: readFileSync(path.join(launched.session_dir, 'logs', 'bootstrap.log'), 'utf8'), log, results, ahead };
      };
      // The pool's first host was started before any launch: nothing to anticipate.
      const first = await launch('probe');
      expect(first.bootstrap).toContain('a warm host from the executor’s pool');
      expect(first.ahead).toBe(false);
      // Its replacement was told to expect the probe, and was given the probe.
      const second = await launch('probe');
      expect(second.ahead).toBe(true);
      expect(second.bootstrap).not.toContain('ahead');
      expect(second.results).toHaveLength(looks.length);
      expect(second.results).toEqual(first.results);
      // The next one expected the probe too, and is given another capsule: that one runs, alone.
      const printing = await launch('printing');
      expect(printing.bootstrap).toContain('a warm host from the executor’s pool');
      expect(printing.ahead).toBe(false);
      expect(printing.log).toContain('first output');
      expect(printing.results).toEqual([]);
      // And the one after expected that capsule, and is given the probe again.
      const third = await launch('probe');
      expect(third.ahead).toBe(false);
      expect(third.results).toEqual(first.results);
    } finally {
      await close();
    }
  });

  it('a launch refused after it took a warm host throws that host away, its group with it, and the pool is warm again', async () => {
    // A launch takes its warm host as soon as its workdir is made, so the host mounts it in while
    // the launch prepares the rest; a refusal after that (here: a context to resume that was never
    // recorded) must not leave the host running under the session's name with nobody to end it.
    const { home, bus, executor, stage, close } = pooledExecutor('refused-home');
    try {
      const manifest = agentManifest(
        { endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' },
        { name: 'threaded', lifecycle: '  conversation: threaded' },
      );
      const plan = await stage(await agentProject(path.join(scratch.dir, 'refused-threaded'), manifest));
      await eventually(() => executor.warmHosts() === 1 || undefined, 20_000, 'a warm host');
      const warm = await warmSandbox(home);
      const poolGroup = groupOf(warm[0] as number);
      const sessionId = newSessionId();
      const refused = bus.request(
        commands.launch,
        { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, context_id: 'ctx-never-recorded', resume: true },
        { timeoutMs: 60_000 },
      );
      await expect(refused).rejects.toMatchObject({ code: 'E-CTX-001' });
      await eventually(() => warm.every((pid) => !isRunning(pid)) || undefined, 10_000, 'the taken host to be gone');
      if (poolGroup) {
        const sessionGroup = path.join(path.dirname(poolGroup), `murmur-${sessionId}`);
        await eventually(() => !existsSync(sessionGroup) || undefined, 10_000, `${sessionGroup} to be removed`);
      } else {
        console.log('[pool] the warm host ran in no cgroup of its own here: that its group is removed is not checked');
      }
      await eventually(() => executor.warmHosts() === 1 || undefined, 20_000, 'the pool to be warm again');
      // And the executor's close throws its waiting hosts away with their groups before it returns.
      const refilledGroup = await eventually(
        () =>
          pooledSandbox(home)
            .filter((pid) => !warm.includes(pid))
            .map(groupOf)
            .find((group) => group !== undefined),
        10_000,
        'the refilled sandbox’s group',
      ).catch(() => undefined);
      await executor.close();
      if (refilledGroup) expect(existsSync(refilledGroup)).toBe(false);
      if (poolGroup && !refilledGroup) throw new Error('the refilled warm host was found in no group of its own, though the first was');
    } finally {
      await close();
    }
  });

  it('a capsule that can start subprocesses gets a fresh host, and its bootstrap log says why', async () => {
    const { bootstrap } = await probeRun('shell-fresh', [{ op: 'preopen' }], true, 'capabilities:\n  shell:\n    allow: ["true"]\n');
    expect(bootstrap).toContain('[sandbox] a fresh host: the capsule can start subprocesses');
  });

  it.runIf(process.getuid?.() === 0)(
    'a pooled host runs sealed like a fresh one: no capabilities, seccomp, its workdir mounted where a fresh one binds it',
    async () => {
      const shapes: Array<{ status: Record<string, string>; mounts: string[]; sockets: string[] }> = [];
      for (const pooled of [true, false]) {
        const project = await probeProject(path.join(scratch.dir, `sealed-${pooled}`), '');
        const release = path.join(project, 'workdir');
        const task = [
          { op: 'write', path: 'running', text: 'yes' },
          { op: 'waitfor', path: 'go', seconds: 30 },
        ];
        const running = runMur(['run', '--json', '--task', JSON.stringify(task)], {
          cwd: project,
          env: { ...env, ...(pooled ? {} : { MURMUR_EXECUTOR_POOL: '0' }) },
        });
        const host = await eventually(() => findHost(release), 20_000, 'the capsule host');
        // Looked at once the guest runs: a fresh host is found before it has been given its session.
        await eventually(() => existsSync(path.join(host.workdir, 'running')) || undefined, 20_000, 'the guest to run');
        const status = Object.fromEntries(
          readFileSync(`/proc/${host.pid}/status`, 'utf8')
            .split('\n')
            .filter((line) => /^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp|Uid):/.test(line))
            .map((line) => line.split(':\t') as [string, string]),
        );
        // Mount points as the host sees them, with the session's own directory named alike.
        const mounts = readFileSync(`/proc/${host.pid}/mountinfo`, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((line) => {
            const fields = line.split(' ');
            const options = (fields[5] ?? '').split(',').filter((option) => ['ro', 'rw', 'nosuid', 'nodev', 'noexec'].includes(option));
            return `${(fields[4] ?? '').replace(host.workdir, '<workdir>').replace(path.dirname(host.workdir), '<workdirs>')} ${options.sort().join(',')}`;
          });
        // The descriptors that are sockets, once the guest runs: its sandbox's were handed out and
        // closed, and so was the IPC channel they went over; its stdout and stderr (Node makes pipes
        // of socket pairs) and its framed channel are left.
        const sockets = readdirSync(`/proc/${host.pid}/fd`).filter((fd) => {
          try {
            return readlinkSync(`/proc/${host.pid}/fd/${fd}`).startsWith('socket:');
          } catch {
            return false;
          }
        });
        await fs.writeFile(path.join(host.workdir, 'go'), 'go');
        const result = await running;
        expect(result.code, result.stderr).toBe(0);
        shapes.push({ status, mounts, sockets });
      }
      const [pooled, fresh] = shapes as [(typeof shapes)[0], (typeof shapes)[0]];
      expect(pooled.status).toEqual(fresh.status);
      expect(pooled.status.CapEff).toBe('0000000000000000');
      expect(pooled.status.Seccomp).toBe('2');
      expect(pooled.status.NoNewPrivs).toBe('1');
      expect(pooled.sockets).toEqual(['1', '2', '3']);
      expect(fresh.sockets).toEqual(['1', '2', '3']);
      // The workdir is the one writable place in both, and nothing on it executes (not even through
      // the dynamic loader); a pooled sandbox's /tmp is an empty read-only tmpfs, and its staging
      // view of the other workdirs is covered (an empty read-only tmpfs).
      expect(pooled.mounts.filter((mount) => mount.startsWith('<workdir> '))).toEqual(fresh.mounts.filter((mount) => mount.startsWith('<workdir> ')));
      // The records bound over themselves inside it, read-only, alike (`recordBinds`).
      const records = (mounts: string[]) => mounts.filter((mount) => mount.startsWith('<workdir>/') && !mount.startsWith('<workdir>/.capsule-tmp'));
      expect(records(pooled.mounts)).toEqual(records(fresh.mounts));
      expect(records(pooled.mounts)).toEqual(['<workdir>/children nodev,noexec,nosuid,ro', '<workdir>/trace.jsonl nodev,noexec,nosuid,ro']);
      expect(pooled.mounts).toContain('<workdir> nodev,noexec,nosuid,rw');
      expect(pooled.mounts.filter((mount) => mount.startsWith('<workdirs> '))).toEqual(['<workdirs> nodev,noexec,nosuid,ro']);
      expect(pooled.mounts.filter((mount) => mount.startsWith('/.murmur-attach ')).at(-1)).toMatch(/^\/\.murmur-attach .*ro/);
      expect(pooled.mounts.filter((mount) => mount.startsWith('/tmp ')).at(-1)).toMatch(/ro/);
    },
  );
});

/** A capsule whose one core module declares a 4-page (256 KiB) memory: above a 128 KiB cap before anything runs. */
const LARGE_MEMORY_CAPSULE_WAT = `(component
  (core module $main (memory 4) (func (export "run")))
  (core instance $i (instantiate $main))
  (func $run (canon lift (core func $i "run")))
  (instance $inst (export "run" (func $run)))
  (export "murmur:capsule/run@0.1.0" (instance $inst)))`;

/** The capsule host of the one session running under `workdirs`: the node process whose cwd is its workdir. */
function findHost(workdirs: string): { pid: number; workdir: string } | undefined {
  if (!existsSync(workdirs)) return undefined;
  const sessions = readdirSync(workdirs).map((name) => path.join(workdirs, name));
  for (const pid of processIds()) {
    const command = procFile(pid, 'cmdline') ?? '';
    if (!command.includes('host.cjs') || command.startsWith('bwrap') || command.includes('murmur-confine')) continue;
    if (!/^Seccomp:\t2$/m.test(procFile(pid, 'status') ?? '')) continue;
    const mountinfo = procFile(pid, 'mountinfo') ?? '';
    const workdir = sessions.find((dir) => mountinfo.includes(` ${dir} `));
    if (workdir) return { pid, workdir };
  }
  return undefined;
}

/** The processes of a warm sandbox whose workdirs are under `base` (its staging view is mounted in each). */
function pooledSandbox(base: string): number[] {
  return processIds().filter((pid) => procFile(pid, 'mountinfo')?.includes(` ${base} /.murmur-attach `) === true);
}

/** The processes of the warm sandbox whose workdirs are under `home`, once there are any. */
function warmSandbox(home: string): Promise<number[]> {
  return eventually(
    () => {
      const pids = pooledSandbox(home);
      return pids.length > 0 ? pids : undefined;
    },
    10_000,
    'the warm sandbox’s processes',
  );
}

/** The directory of the warm sandbox group `pid` runs in: cgroup v2's one hierarchy, or v1's memory controller. */
function groupOf(pid: number): string | undefined {
  const line = procFile(pid, 'cgroup')?.match(/^\d+:(|memory):(\/.*\/murmur-pool-[^/\n]+)/m);
  return line ? path.join('/sys/fs/cgroup', line[1] ?? '', line[2] ?? '') : undefined;
}

/** Whether `pid` is a process that has not ended (a zombie has ended). */
function isRunning(pid: number): boolean {
  const state = procFile(pid, 'status')?.match(/^State:\s+(\S)/m)?.[1];
  return state !== undefined && state !== 'Z';
}

/**
 * The pid of the held helper of a pooled sandbox whose workdirs are under `base`: `murmur-confine
 * enter` in a `murmur-pool-*` cgroup, with `base` mounted (its staging view). Other suites' pools
 * run beside this one: theirs are not touched.
 */
function pooledHelper(base: string): number | undefined {
  return processIds().find((pid) => {
    const command = (procFile(pid, 'cmdline') ?? '').split('\0');
    if (!(command[0] ?? '').endsWith('murmur-confine') || command[1] !== 'enter') return false;
    return procFile(pid, 'cgroup')?.includes('/murmur-pool-') === true && procFile(pid, 'mountinfo')?.includes(` ${base} /.murmur-attach `) === true;
  });
}
