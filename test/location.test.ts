import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BLOB_BUCKET,
  type LaunchReply,
  type SessionEnded,
  type SessionStarted,
  type StagedPlan,
  SESSION_LOCATIONS_BUCKET,
  SETTLE_WITHIN_MAX_MS,
  TRANSPILER_ID,
  commands,
  newSessionId,
  silentLog,
  topics,
} from '@murmur/shared';
import { sha256Hex } from '@murmur/shared/artifacts';
import { type Bus, type ObjectStore, createBus } from '@murmur/shared/bus';
import { NatsTransport } from '@murmur/shared/bus/nats';
import { BlobCache, packProject, publishProject, requestStaging, uploadProject } from '@murmur/shared/node';
import { type StageProgress, Stager } from '@murmur/stager';
import { fetchedBundleName } from '../services/executor/src/bundles.js';
import { agentManifest, agentProject, openStream, readSse, startAgent, textMessage } from './support/agents.js';
import { probeProject } from './support/capsules.js';
import { listTree, tempDir } from './support/fs.js';
import { capsuleWat, printingCapsuleWat, toolWat } from './support/guests.js';
import { capsuleProject } from './support/artifacts.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { rawZip } from './support/raw-zip.js';
import { rejectionOf } from './support/refusals.js';
import { type ServiceProcess, eventually, murBin, runMur, spawnMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * Nothing shared but the bus, on real processes: a real nats-server and service processes that
 * each have their own `MURMUR_HOME` — the stager's cache, each executor's cache and workdirs, the
 * watcher's records, the client's project — so anything that still reached for another service's
 * disk would fail here as it would across containers. Two executors, so a launch can be placed.
 */
describe('the stack with nothing shared but the bus', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let bus: Bus;
  let blobs: ObjectStore;
  let stager: ServiceProcess;
  const executors: ServiceProcess[] = [];
  const services: ServiceProcess[] = [];
  let inference: ScriptedInference;
  const started: SessionStarted[] = [];
  const ended: SessionEnded[] = [];
  const homes: Record<string, string> = {};
  let client: Record<string, string>;

  const home = (name: string): string => {
    homes[name] ??= path.join(scratch.dir, `home-${name}`);
    return homes[name];
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-location-');
    const bus$ = { MURMUR_NATS_URL: nats.url, MURMUR_EXECUTOR_HEARTBEAT_MS: '250', MURMUR_EXECUTOR_LOST_MS: '2000' };
    stager = await startService('stager', { ...bus$, MURMUR_HOME: home('stager') });
    for (const name of ['a', 'b']) executors.push(await startService('executor', { ...bus$, MURMUR_HOME: home(`executor-${name}`) }));
    services.push(
      stager,
      await startService('watcher', { ...bus$, MURMUR_HOME: home('watcher') }),
      await startService('door', { ...bus$, MURMUR_HOME: home('door') }),
    );
    client = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: home('client') };
    bus = createBus(await NatsTransport.connect(nats.url, { log: silentLog }), silentLog);
    blobs = await bus.objectStore(BLOB_BUCKET);
    bus.subscribe(topics.sessionStarted, (event) => void started.push(event));
    bus.subscribe(topics.sessionEnded, (event) => void ended.push(event));
    await bus.flush();
    inference = await startScriptedInference({ script: [{ text: 'the answer, from the stack' }] });
  });

  afterAll(async () => {
    await bus?.close();
    for (const service of [...services, ...executors]) await service.stop();
    await inference?.close();
    await nats?.stop();
    await scratch?.cleanup();
  });

  /** Staged as any client stages: packed, uploaded, asked of a stager. */
  async function stage(dir: string): Promise<StagedPlan> {
    return requestStaging(bus, {
      source: { kind: 'project', project: await uploadProject(bus, dir, { digestCache: path.join(home('client'), 'digests.json') }) },
    });
  }

  /** A launch on one executor, as the test chooses; resolves with the reply and the session's end. */
  async function launchOn(
    executor: ServiceProcess,
    plan: StagedPlan,
    extra: Record<string, unknown> = {},
  ): Promise<{ reply: LaunchReply; end: Promise<SessionEnded> }> {
    const sessionId = newSessionId();
    const reply = await bus.request(
      commands.launchOn.at(executor.ready.instance_id as string),
      { session_id: sessionId, plan, ...extra },
      { timeoutMs: 60_000 },
    );
    // Waited for only once the launch is taken (every end is collected since the suite began, so
    // none is missed): a refused launch must leave no wait behind to reject after its test.
    const end = eventually(() => ended.find((event) => event.session_id === sessionId), 30_000, `the end of ${sessionId}`);
    return { reply, end };
  }

  const fetchedBlobs = (executor: ServiceProcess): number =>
    executor
      .logs()
      .split('\n')
      .filter((line) => line.includes('fetched a blob from the object store')).length;

  it('runs a capsule on an executor that shares no disk with its stager: the bundle is fetched, verified, kept, and a second launch is a local hit', async () => {
    const project = await probeProject(path.join(scratch.dir, 'fetched'), 'capabilities:\n  limits:\n    deadline_seconds: 10\n');
    const plan = await stage(project);
    expect(JSON.stringify(plan)).not.toContain(home('stager'));
    const [executor] = executors as [ServiceProcess];
    const before = fetchedBlobs(executor);
    const first = await launchOn(executor, plan, { task: JSON.stringify([{ op: 'print', text: 'ran where it was sent' }]) });
    expect((await first.end).exit_status).toBe('ok');
    expect(first.reply.executor_id).toBe(executor.ready.instance_id);
    expect(fetchedBlobs(executor)).toBeGreaterThan(before);
    // What the executor keeps is the bundle the plan names, byte for byte.
    const component = plan.capsule.component!;
    const bundleDir = path.join(home('executor-a'), 'cache', 'transpiled', TRANSPILER_ID, fetchedBundleName(component.bundle.files));
    for (const file of component.bundle.files) expect(sha256Hex(await fs.readFile(path.join(bundleDir, file.path)))).toBe(file.sha256);
    // The workdir is the executor's, under its own home.
    expect(first.reply.workdir.startsWith(home('executor-a'))).toBe(true);

    const afterFirst = fetchedBlobs(executor);
    const second = await launchOn(executor, plan, { task: JSON.stringify([{ op: 'print', text: 'again' }]) });
    expect((await second.end).exit_status).toBe('ok');
    expect(fetchedBlobs(executor)).toBe(afterFirst);
  });

  it("a plan forged to name another component's bundle key takes nothing of it: the honest plan runs its own bundle, and a stager sharing the executor's cache transpiles it itself", async () => {
    // The victim: a component this executor has not run. The forger: a plan with the victim's
    // digest and bundle key, and the files of a bundle of its own.
    const victim = await stage(await capsuleProject(path.join(scratch.dir, 'victim'), 'name: victim\nversion: 0.1.0\n', (await printingCapsuleWat()).bytes));
    const own = await stage(await probeProject(path.join(scratch.dir, 'forger'), 'capabilities:\n  limits:\n    deadline_seconds: 10\n'));
    const victimComponent = victim.capsule.component!;
    const forged = structuredClone(own);
    Object.assign(forged.capsule.component!, { sha256: victimComponent.sha256, size_bytes: victimComponent.size_bytes });
    forged.capsule.component!.bundle.key = victimComponent.bundle.key;
    const [executor] = executors as [ServiceProcess];
    const forgery = await launchOn(executor, forged, { task: JSON.stringify([{ op: 'print', text: 'the forger ran' }]) });
    expect((await forgery.end).exit_status).toBe('ok');

    // The victim's own launch runs the victim's code (it prints "first output"), not the forger's.
    const printed: string[] = [];
    const output = bus.subscribe(topics.sessionOutput, (event) => void printed.push(`${event.session_id} ${event.text}`));
    await bus.flush();
    try {
      const honest = await launchOn(executor, victim, { relay_output: true, task: JSON.stringify([{ op: 'print', text: 'the forger ran' }]) });
      expect((await honest.end).exit_status).toBe('ok');
      await eventually(
        () => printed.find((line) => line.startsWith(`${honest.reply.session_id} `) && line.includes('first output')),
        10_000,
        "the victim's own output",
      );
      expect(printed.filter((line) => line.startsWith(`${honest.reply.session_id} `)).join('')).not.toContain('the forger ran');
    } finally {
      output.unsubscribe();
    }

    // A stager on this executor's machine, its cache the executor's: what the executor fetched is
    // no transpile of the stager's, so it transpiles the victim's component itself.
    const cacheDir = path.join(home('executor-a'), 'cache');
    const sharing = new Stager({
      cacheDir,
      globalStore: path.join(home('executor-a'), 'artifacts'),
      defaultStore: null,
      log: silentLog,
      blobs: new BlobCache(path.join(cacheDir, 'blobs'), () => bus.objectStore(BLOB_BUCKET)),
    });
    try {
      const progress: StageProgress[] = [];
      const again = await sharing.stage({
        request: {
          source: {
            kind: 'project',
            project: await uploadProject(bus, path.join(scratch.dir, 'victim'), { digestCache: path.join(home('client'), 'digests.json') }),
          },
        },
        onProgress: (event) => progress.push(event),
      });
      expect(again.capsule.component?.cache_hit).toBe(false);
      expect(progress.filter((event) => event.phase === 'transpile').map((event) => (event as { state: string }).state)).toEqual(['start', 'done']);
      expect(again.capsule.component?.bundle.files).not.toEqual(own.capsule.component?.bundle.files);
    } finally {
      await sharing.close();
    }
  });

  it('mur run against the stack streams the output, gives the status and exit code, and fetches out/result.txt to where an in-process run leaves it', async () => {
    const project = await probeProject(path.join(scratch.dir, 'result'), 'capabilities:\n  limits:\n    deadline_seconds: 10\n');
    const task = JSON.stringify([
      { op: 'print', text: 'printed on the executor' },
      { op: 'write', path: 'out/result.txt', text: 'the result, fetched' },
    ]);
    const result = await runMur(['run', '--task', task], { cwd: project, env: client });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('printed on the executor');
    const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1] as string;
    const local = path.join(project, 'workdir', sessionId, 'out', 'result.txt');
    expect(result.stdout).toContain(`result:  ${local}`);
    expect(await fs.readFile(local, 'utf8')).toBe('the result, fetched');
    expect(result.stdout.trim().split('\n').at(-1)).toBe('status:  ok');

    // With --json, stdout is the launch line alone, and it names where the answer is fetched to.
    const json = await runMur(['run', '--json', '--task', task], { cwd: project, env: client });
    expect(json.code, json.stderr).toBe(0);
    const lines = json.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const launch = JSON.parse(lines[0] as string) as { session_id: string; result: string; executor_id: string };
    expect(launch.result).toBe(path.join(project, 'workdir', launch.session_id, 'out', 'result.txt'));
    expect(launch.executor_id).toMatch(/^executor-/);
    expect(await fs.readFile(launch.result, 'utf8')).toBe('the result, fetched');

    const failed = await runMur(['run', '--task', JSON.stringify([{ op: 'spin' }])], {
      cwd: await probeProject(path.join(scratch.dir, 'spins'), 'capabilities:\n  limits:\n    deadline_seconds: 1\n'),
      env: client,
    });
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain('error[E-RUN-001]');
    expect(failed.stdout.trim().split('\n').at(-1)).toBe('status:  trapped');
  });

  it('mur run fetches no result larger than it fetches unasked (a sparse file costs the executor nothing), and says how to copy it', async () => {
    const project = await probeProject(path.join(scratch.dir, 'sparse-result'), 'capabilities:\n  shell:\n    allow: [truncate]\n');
    const task = JSON.stringify([{ op: 'shell', binary: 'truncate', args: ['-s', '65M', 'out/result.txt'] }]);
    const result = await runMur(['run', '--task', task], { cwd: project, env: client });
    expect(result.code, result.stderr).toBe(0);
    const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1] as string;
    expect(result.stderr).toContain(`could not fetch out/result.txt from executor executor-`);
    expect(result.stderr).toContain(
      `error[E-IO-003]: out/result.txt is ${65 * 1024 * 1024} bytes, more than the ${64 * 1024 * 1024} bytes a run fetches by itself; nothing was fetched ('mur files ${sessionId} out/result.txt --out <file>' copies it whole)`,
    );
    expect(result.stdout).not.toContain('result:');
    expect(await listTree(path.join(project, 'workdir'))).toEqual([]);
  });

  it('mur run says with a code and what to do when out/result.txt cannot be written here, the answer left on the executor', async () => {
    const project = await probeProject(path.join(scratch.dir, 'unwritable-result'), '');
    // Where the answer would go cannot be made: a file stands where the workdir would be.
    await fs.writeFile(path.join(project, 'workdir'), 'not a directory');
    const task = JSON.stringify([{ op: 'write', path: 'out/result.txt', text: 'kept on the executor' }]);
    const result = await runMur(['run', '--task', task], { cwd: project, env: client });
    expect(result.code, result.stderr).toBe(0);
    const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1] as string;
    expect(result.stderr).toMatch(
      new RegExp(
        `warning: could not fetch out/result\\.txt from executor executor-\\w+: error\\[E-IO-003\\]: could not write ${path.join(project, 'workdir', sessionId, 'out', 'result.txt').replaceAll('.', '\\.')}: .*ENOTDIR.* \\(a file is where a directory is expected along that path: move it aside, or name another path; 'mur files ${sessionId} out/result\\.txt --out <file>' copies it from the executor\\)`,
      ),
    );
    expect(result.stdout).not.toContain('result:');
    // Fetched into a project whose path holds a line break, the result line is still one line.
    const broken = await probeProject(path.join(scratch.dir, 'line\nbreak'), '');
    const fetched = await runMur(['run', '--task', task], { cwd: broken, env: client });
    expect(fetched.code, fetched.stderr).toBe(0);
    const said = /^result: {2}(.+)$/m.exec(fetched.stdout)?.[1];
    expect(said).toMatch(/line\\nbreak\/workdir\/ses_[0-9a-f]{32}\/out\/result\.txt$/);
  });

  it('mur run interrupted (Ctrl-C) while it fetches out/result.txt leaves nothing of the fetch behind', async () => {
    const project = await probeProject(path.join(scratch.dir, 'big-result'), 'capabilities:\n  shell:\n    allow: [truncate]\n');
    // Large enough that the fetch, a slice at a time over the bus, is still going when it is interrupted.
    const task = JSON.stringify([{ op: 'shell', binary: 'truncate', args: ['-s', '512M', 'out/result.txt'] }]);
    // Past what a run fetches unasked (64 MiB), so it is raised for this one.
    const { child } = spawnMur(['run', '--task', task], { cwd: project, env: { ...client, MURMUR_RESULT_FETCH_MAX_BYTES: String(1024 * 1024 * 1024) } });
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    const outDir = async (): Promise<string | undefined> => {
      const sessions = await fs.readdir(path.join(project, 'workdir')).catch(() => []);
      return sessions[0] === undefined ? undefined : path.join(project, 'workdir', sessions[0], 'out');
    };
    // Interrupted once some of the fetch is on disk.
    await eventually(async () => {
      const dir = await outDir();
      const names = dir === undefined ? [] : await fs.readdir(dir).catch(() => []);
      const sizes = await Promise.all(names.map(async (name) => (await fs.stat(path.join(dir as string, name))).size));
      expect(sizes.some((size) => size > 0 && size < 512 * 1024 * 1024)).toBe(true);
      return true;
    }, 60_000);
    child.kill('SIGINT');
    // mur run's own exit on an interrupt, once the partial file is gone.
    const [code, signal] = await exited;
    expect({ code, signal }).toEqual({ code: 130, signal: null });
    expect(await fs.readdir((await outDir()) as string)).toEqual([]);
  });

  describe('mur files', () => {
    let sessionId: string;
    let workdir: string;

    beforeAll(async () => {
      const project = await probeProject(path.join(scratch.dir, 'files'), 'capabilities:\n  limits:\n    deadline_seconds: 10\n');
      const plan = await stage(project);
      const launched = await launchOn(executors[0] as ServiceProcess, plan, {
        task: JSON.stringify([
          { op: 'write', path: 'out/result.txt', text: 'line one\nline two\n' },
          { op: 'mkdir', path: 'out/deep' },
          { op: 'write', path: 'out/deep/note.txt', text: 'deep' },
        ]),
      });
      await launched.end;
      sessionId = launched.reply.session_id;
      workdir = launched.reply.workdir;
      // What a guest could have left behind: links out of its workdir, and a FIFO that would block a reader.
      await fs.symlink('/etc', path.join(workdir, 'out', 'etc'));
      await fs.symlink('/etc/passwd', path.join(workdir, 'out', 'passwd'));
      execFileSync('mkfifo', [path.join(workdir, 'out', 'fifo')]);
    });

    it('lists a session workdir and prints a file, read through the executor that holds it', async () => {
      const listing = await runMur(['files', sessionId, 'out', '--json'], { env: client });
      expect(listing.code, listing.stderr).toBe(0);
      const entries = (JSON.parse(listing.stdout) as { entries: Array<{ name: string; type: string; size: number }> }).entries;
      expect(entries.find((entry) => entry.name === 'result.txt')).toMatchObject({ type: 'file', size: 18 });
      expect(entries.find((entry) => entry.name === 'deep')).toMatchObject({ type: 'directory' });
      const table = await runMur(['files', sessionId], { env: client });
      expect(table.stdout).toMatch(/directory\s+-\s+\S+\s+out\//);
      const file = await runMur(['files', sessionId, 'out/result.txt'], { env: client });
      expect(file.code, file.stderr).toBe(0);
      expect(file.stdout).toBe('line one\nline two\n');
    });

    it('prints a file to a terminal with its control characters shown, and to a pipe as it is', async () => {
      const written = 'ok \u001b]52;c;cGF3bmVk\u0007 é\r\nkept\rover\n';
      await fs.writeFile(path.join(workdir, 'out', 'escapes.txt'), written);
      // A real pseudo-terminal, from util-linux's script(1).
      const terminal = spawnSync('script', ['-qec', `${JSON.stringify(murBin)} files ${sessionId} out/escapes.txt`, '/dev/null'], {
        env: { PATH: process.env.PATH ?? '', TERM: 'dumb', ...client },
        encoding: 'utf8',
      });
      expect(terminal.status, terminal.stdout).toBe(0);
      expect(terminal.stdout).toContain('ok \\x1b]52;c;cGF3bmVk\\x07 é');
      expect(terminal.stdout).toContain('kept\\x0dover');
      expect(terminal.stdout).not.toContain('\u001b]52');
      const piped = await runMur(['files', sessionId, 'out/escapes.txt'], { env: client });
      expect(piped.stdout).toBe(written);
      await fs.rm(path.join(workdir, 'out', 'escapes.txt'));
    });

    it('copies a file or a whole directory out with --out, writing nothing it could not read', async () => {
      const target = path.join(scratch.dir, 'copied');
      const copied = await runMur(['files', sessionId, 'out/deep', '--out', target], { env: client });
      expect(copied.code, copied.stderr).toBe(0);
      expect(await fs.readFile(path.join(target, 'note.txt'), 'utf8')).toBe('deep');
      const single = await runMur(['files', sessionId, 'out/result.txt', '--out', path.join(scratch.dir, 'single.txt')], { env: client });
      expect(single.code, single.stderr).toBe(0);
      expect(await fs.readFile(path.join(scratch.dir, 'single.txt'), 'utf8')).toBe('line one\nline two\n');
      // To a new directory whose name is as long as a name may be: its staging name was longer, and refused.
      const long = path.join(scratch.dir, 'T'.repeat(250));
      const longCopy = await runMur(['files', sessionId, 'out/deep', '--out', long], { env: client });
      expect(longCopy.code, longCopy.stderr).toBe(0);
      expect(await fs.readFile(path.join(long, 'note.txt'), 'utf8')).toBe('deep');
    });

    it('copies a directory whole or not at all: into a directory it merges, onto a file or a clash it writes nothing', async () => {
      // Into an existing directory: merged, what was there kept.
      const existing = path.join(scratch.dir, 'existing');
      await fs.mkdir(existing);
      await fs.writeFile(path.join(existing, 'mine.txt'), 'mine');
      const merged = await runMur(['files', sessionId, 'out/deep', '--out', existing], { env: client });
      expect(merged.code, merged.stderr).toBe(0);
      expect((await fs.readdir(existing)).sort()).toEqual(['mine.txt', 'note.txt']);
      // Through a link to a directory, as to the directory; a new directory gets the usual modes.
      await fs.symlink(existing, path.join(scratch.dir, 'linked'));
      expect((await runMur(['files', sessionId, 'out/deep', '--out', path.join(scratch.dir, 'linked')], { env: client })).code).toBe(0);
      const made = path.join(scratch.dir, 'made');
      expect((await runMur(['files', sessionId, 'out/deep', '--out', made], { env: client })).code).toBe(0);
      expect((await fs.stat(made)).mode & 0o777).toBe(0o777 & ~process.umask());
      // Onto a file: refused, the file as it was.
      const file = path.join(scratch.dir, 'a-file');
      await fs.writeFile(file, 'untouched');
      const ontoFile = await runMur(['files', sessionId, 'out/deep', '--out', file], { env: client });
      expect(ontoFile.code).toBe(1);
      expect(ontoFile.stderr).toContain(`error[E-IO-003]: --out ${file} is a file, and out/deep is a directory`);
      expect(ontoFile.stderr).not.toMatch(/\n\s+at |this is a bug in mur/);
      expect(await fs.readFile(file, 'utf8')).toBe('untouched');
      // A directory where a copied file would go: refused before anything moves.
      const clashing = path.join(scratch.dir, 'clashing');
      await fs.mkdir(path.join(clashing, 'deep', 'note.txt'), { recursive: true });
      const clash = await runMur(['files', sessionId, 'out', '--out', clashing], { env: client });
      expect(clash.code).toBe(1);
      expect(clash.stderr).toContain('error[E-IO-003]');
      expect(await fs.readdir(clashing)).toEqual(['deep']);
      expect(await fs.readdir(path.join(clashing, 'deep'))).toEqual(['note.txt']);
      expect(
        (await fs.readdir(scratch.dir)).filter((name) => name.includes('.mur-files-')),
        'no staging directory left',
      ).toEqual([]);
    });

    it('never opens what a link leads to outside the workdir, nor a socket inside it', async () => {
      // A writer that waits for a reader of a FIFO outside: an executor that opened the link's target would let it go.
      const outside = path.join(scratch.dir, 'outside-fifo');
      execFileSync('mkfifo', [outside]);
      await fs.symlink(outside, path.join(workdir, 'out', 'to-fifo'));
      const writer = spawn('python3', ['-c', `open(${JSON.stringify(outside)}, 'w'); print('opened')`], { stdio: ['ignore', 'pipe', 'ignore'] });
      let written = '';
      writer.stdout.on('data', (chunk: Buffer) => (written += chunk.toString()));
      try {
        const refused = await runMur(['files', sessionId, 'out/to-fifo'], { env: client });
        expect(refused.stderr).toContain("error[E-SES-002]: 'out/to-fifo' resolves outside the session's workdir; nothing was opened");
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(written).toBe('');
      } finally {
        writer.kill('SIGKILL');
      }
      const socket = net.createServer().listen(path.join(workdir, 'out', 'sock'));
      await once(socket, 'listening');
      try {
        const refused = await runMur(['files', sessionId, 'out/sock'], { env: client });
        expect(refused.stderr).toContain("error[E-SES-002]: 'out/sock' is not a regular file or a directory");
      } finally {
        socket.close();
      }
    });

    it('writes no regular file in the place of a device, a FIFO or a link to nothing given as --out, and through a link to a file', async () => {
      const fifo = path.join(scratch.dir, 'out-fifo');
      execFileSync('mkfifo', [fifo]);
      const dangling = path.join(scratch.dir, 'out-dangling');
      await fs.symlink(path.join(scratch.dir, 'nowhere'), dangling);
      for (const [target, kind] of [
        ['/dev/null', 'a character device'],
        [fifo, 'a FIFO'],
        [dangling, 'a symbolic link to nothing'],
      ] as const) {
        const refused = await runMur(['files', sessionId, 'out/result.txt', '--out', target], { env: client });
        expect(refused.code).toBe(1);
        expect(refused.stderr).toContain(`error[E-IO-003]: --out ${target} is ${kind}, where mur files writes out/result.txt as a file`);
        expect(refused.stderr).toContain(`hint: to send the file there, leave --out out and redirect stdout: mur files <session> out/result.txt > ${target}`);
      }
      const nothing = await runMur(['files', sessionId, 'out/result.txt', '--out', ''], { env: client });
      expect(nothing.code).toBe(2);
      expect(nothing.stderr).toContain('error[E-IO-003]: --out names nothing');
      // --json is a listing's form: a file's bytes or a copy's report under it is no JSON, and is refused as misuse.
      const fileAsJson = await runMur(['files', sessionId, 'out/result.txt', '--json'], { env: client });
      expect(fileAsJson).toMatchObject({ code: 2, stdout: '' });
      expect(fileAsJson.stderr).toContain("error[E-IO-003]: --json prints a directory listing, and 'out/result.txt' is a file");
      const copyAsJson = await runMur(['files', sessionId, 'out', '--json', '--out', path.join(scratch.dir, 'never-copied')], { env: client });
      expect(copyAsJson).toMatchObject({ code: 2, stdout: '' });
      expect(copyAsJson.stderr).toContain('error[E-IO-003]: --json and --out cannot be given together');
      await expect(fs.access(path.join(scratch.dir, 'never-copied'))).rejects.toThrow();
      expect((await fs.stat('/dev/null')).isCharacterDevice()).toBe(true);
      expect((await fs.lstat(fifo)).isFIFO()).toBe(true);
      expect((await fs.lstat(dangling)).isSymbolicLink()).toBe(true);
      const real = path.join(scratch.dir, 'real-result.txt');
      await fs.writeFile(real, 'old');
      const link = path.join(scratch.dir, 'link-to-result');
      await fs.symlink(real, link);
      expect((await runMur(['files', sessionId, 'out/result.txt', '--out', link], { env: client })).code).toBe(0);
      expect((await fs.lstat(link)).isSymbolicLink()).toBe(true);
      expect(await fs.readFile(real, 'utf8')).toBe('line one\nline two\n');
    });

    it('lists what a guest named with a line break or with bytes that are not UTF-8, each on a row of its own, and says what a copy left out', async () => {
      const odd = path.join(workdir, 'odd');
      await fs.mkdir(odd);
      await fs.writeFile(path.join(odd, 'plain.txt'), 'plain');
      await fs.writeFile(path.join(odd, 'two\nlines'), 'x');
      await fs.writeFile(Buffer.concat([Buffer.from(`${odd}/bad`), Buffer.from([0xff]), Buffer.from('name')]), 'x');
      const table = await runMur(['files', sessionId, 'odd'], { env: client });
      expect(table.code, table.stderr).toBe(0);
      const rows = table.stdout.trim().split('\n');
      expect(rows).toHaveLength(4);
      expect(rows.some((row) => /other .* bad\\xffname$/.test(row))).toBe(true);
      expect(rows.some((row) => row.endsWith('two\\nlines'))).toBe(true);
      const target = path.join(scratch.dir, 'odd-copy');
      const copied = await runMur(['files', sessionId, 'odd', '--out', target], { env: client });
      expect(copied.code, copied.stderr).toBe(0);
      expect(copied.stdout).toContain('copied 1 file');
      expect(copied.stderr).toContain(
        'mur: left out 2 entries that are neither a file nor a directory, or no path can name (a link, a FIFO, a device, a name that is not UTF-8 or holds a control character): odd/bad\\xffname, odd/two\\nlines',
      );
      expect(await fs.readdir(target)).toEqual(['plain.txt']);
    });

    it('copies a file whose name is as long as a name may be, and a directory holding one, leaving out and naming what no request can ask for', async () => {
      const long = path.join(workdir, 'long');
      const longest = 'L'.repeat(255);
      await fs.mkdir(path.join(long, ...Array.from({ length: 520 }, () => 'd')), { recursive: true });
      await fs.writeFile(path.join(long, longest), 'long name');
      const into = path.join(scratch.dir, 'long-into');
      await fs.mkdir(into);
      const single = await runMur(['files', sessionId, `long/${longest}`, '--out', into], { env: client });
      expect(single.code, single.stderr).toBe(0);
      expect(await fs.readFile(path.join(into, longest), 'utf8')).toBe('long name');

      const target = path.join(scratch.dir, 'long-copy');
      const copied = await runMur(['files', sessionId, 'long', '--out', target], { env: client });
      expect(copied.code, copied.stderr).toBe(0);
      expect(copied.stdout).toContain('copied 1 file');
      expect(await fs.readFile(path.join(target, longest), 'utf8')).toBe('long name');
      // The tree below d/ is copied as deep as a path can name, and what lies past it is named as left out.
      expect(copied.stderr).toMatch(
        /mur: left out 1 entry the session's executor would not read: long\/d\/d\/.*….* \(error\[E-SES-002\]: .*longer than 1024 bytes\)/,
      );
      expect(copied.stderr.length).toBeLessThan(1_000);
      await fs.rm(long, { recursive: true });
    });

    it('refuses a path past what a request carries in the words of any other path it refuses', async () => {
      const long = `out/${'x'.repeat(5_000)}`;
      const refused = await runMur(['files', sessionId, long], { env: client });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain("error[E-SES-002]: 'out/xxx");
      expect(refused.stderr).toContain("is not a path inside the session's workdir");
      expect(refused.stderr).not.toContain('E-BUS-001');
    });

    it.each([
      ['a path that climbs out', '../..', 'E-SES-002', "'../..' is not a path inside the session's workdir"],
      ['an absolute path', '/etc/passwd', 'E-SES-002', "'/etc/passwd' is not a path inside the session's workdir"],
      ['a directory symlink the guest pointed outside', 'out/etc/passwd', 'E-SES-002', "'out/etc/passwd' resolves outside the session's workdir"],
      ['a file symlink the guest pointed outside', 'out/passwd', 'E-SES-002', "'out/passwd' resolves outside the session's workdir"],
      ['a FIFO, which would block a reader', 'out/fifo', 'E-SES-002', "'out/fifo' is not a regular file or a directory"],
      // …and where to look instead: the directory it was looked for in.
      [
        'a path that does not exist',
        'out/none.txt',
        'E-IO-001',
        "'out/none.txt' does not exist in the session's workdir\n  hint: list 'out' to see what the session left there",
      ],
    ])('refuses %s with its code and the path, and the executor goes on serving', async (_what, wanted, code, message) => {
      const target = path.join(scratch.dir, `never-${code}-${wanted.replace(/\W/g, '_')}`);
      const refused = await runMur(['files', sessionId, wanted, '--out', target], { env: client, timeoutMs: 20_000 });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(`error[${code}]: ${message}`);
      expect(await fs.stat(target).catch(() => undefined)).toBeUndefined();
      expect((await runMur(['files', sessionId, 'out/result.txt'], { env: client })).stdout).toBe('line one\nline two\n');
    });

    it('lists and copies a directory whose listing is larger than a bus message, a page at a time', async () => {
      // 4 000 names of 200 characters: over 1 MiB of listing, which one reply cannot carry.
      const many = path.join(workdir, 'out', 'many');
      await fs.mkdir(many);
      const names = Array.from({ length: 4_000 }, (_, index) => `${String(index).padStart(4, '0')}-${'n'.repeat(195)}`);
      for (const name of names) await fs.writeFile(path.join(many, name), '');
      await fs.writeFile(path.join(many, names[0] as string), 'first');
      try {
        const listed = await runMur(['files', sessionId, 'out/many', '--json'], { env: client });
        expect(listed.code, listed.stderr).toBe(0);
        const entries = (JSON.parse(listed.stdout) as { entries: Array<{ name: string }> }).entries;
        expect(entries.map((entry) => entry.name)).toEqual(names);
        const target = path.join(scratch.dir, 'many-copied');
        const copied = await runMur(['files', sessionId, 'out/many', '--out', target], { env: client, timeoutMs: 120_000 });
        expect(copied.code, copied.stderr).toBe(0);
        expect((await fs.readdir(target)).sort()).toEqual(names);
        expect(await fs.readFile(path.join(target, names[0] as string), 'utf8')).toBe('first');
      } finally {
        await fs.rm(many, { recursive: true, force: true });
      }
    }, 180_000);

    it.each([
      ['a file', 'out/big/big.bin'],
      ['a directory', 'out/big'],
    ])('leaves nothing of %s it was copying out when it is interrupted (Ctrl-C) in the middle', async (what, wanted) => {
      // Large enough that the copy, a slice at a time over the bus, is still going when it is interrupted.
      await fs.mkdir(path.join(workdir, 'out', 'big'), { recursive: true });
      await fs.writeFile(path.join(workdir, 'out', 'big', 'big.bin'), Buffer.alloc(0));
      await fs.truncate(path.join(workdir, 'out', 'big', 'big.bin'), 512 * 1024 * 1024);
      const into = path.join(scratch.dir, `interrupted-${what.replace(/\W/g, '-')}`);
      await fs.mkdir(into);
      const { child } = spawnMur(['files', sessionId, wanted, '--out', path.join(into, 'copy')], { env: client });
      const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
      // Interrupted once some of the copy is on disk.
      await eventually(async () => {
        const copied = (await listTree(into)).filter((name) => !name.endsWith('/'));
        const sizes = await Promise.all(copied.map(async (name) => (await fs.stat(path.join(into, name))).size));
        expect(copied.length > 0 && sizes.some((size) => size > 0 && size < 512 * 1024 * 1024)).toBe(true);
        return true;
      }, 30_000);
      child.kill('SIGINT');
      const [code, signal] = await exited;
      expect({ code, signal }).toEqual({ code: null, signal: 'SIGINT' });
      expect(await fs.readdir(into)).toEqual([]);
      await fs.rm(path.join(workdir, 'out', 'big'), { recursive: true });
    });

    it('refuses an unknown session and what is no session id with E-SES-001, saying where ids are found, and mur files without a stack with E-BUS-005', async () => {
      const unknown = await runMur(['files', newSessionId()], { env: client });
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/error\[E-SES-001\]: no session 'ses_[0-9a-f]{32}' is known on nats:\/\//);
      // `mur ps` lists only the running sessions; an ended one is read by the id its launch printed.
      expect(unknown.stderr).toContain(
        "hint: 'mur ps' lists the stack's running sessions; a session that has ended is still read by the id its launch printed",
      );
      const malformed = await runMur(['files', '../../etc'], { env: client });
      expect(malformed.code).toBe(1);
      expect(malformed.stderr).toContain("error[E-SES-001]: '../../etc' is not a session id (ses_ followed by 32 hex digits)");
      const local = await runMur(['files', sessionId], { env: { MURMUR_HOME: home('client') } });
      expect(local.code).toBe(1);
      expect(local.stderr).toContain('error[E-BUS-005]');
    });
  });

  describe('bad input at the new boundaries is refused with a code, writes nothing, and the stager goes on serving', () => {
    async function stagerCacheFiles(): Promise<string[]> {
      return (await listTree(path.join(home('stager'), 'cache'))).filter((entry) => !entry.endsWith('/'));
    }

    async function uploadListing(listing: unknown): Promise<{ sha256: string; size: number }> {
      const bytes = Buffer.from(JSON.stringify(listing));
      const ref = { sha256: sha256Hex(bytes), size: bytes.byteLength };
      await blobs.put(ref.sha256, { bytes });
      return ref;
    }

    async function stillServing(): Promise<void> {
      const plan = await stage(await probeProject(path.join(scratch.dir, `after-${Date.now()}`)));
      expect(plan.capsule.name).toBe('probe');
    }

    it('a project over the client limit is refused before anything is uploaded', async () => {
      const project = await probeProject(path.join(scratch.dir, 'too-big-here'));
      const result = await runMur(['stage', project], { env: { ...client, MURMUR_MAX_PROJECT_BYTES: '1000' } });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('error[E-PRJ-001]');
      expect(result.stderr).toContain('over the 1000-byte staging limit');
    });

    it('a listing over the stager limit is refused before a single file is fetched', async () => {
      const before = await stagerCacheFiles();
      const huge = 'a'.repeat(64);
      const ref = await uploadListing({ format: 'murmur-project/1', label: 'huge', files: [{ path: 'murmur.yaml', sha256: huge, size: 40 * 1024 ** 3 }] });
      const error = await rejectionOf(requestStaging(bus, { source: { kind: 'project', project: ref } }));
      expect(error.code).toBe('E-PRJ-001');
      expect(error.message).toContain("the uploaded project 'huge' is 42949672960 bytes");
      expect(await stagerCacheFiles()).toEqual(before);
      await stillServing();
    });

    it('a murmur.yaml over 1 MiB is refused by its size, before it is parsed, as an archive’s is', async () => {
      const manifest = Buffer.from(`name: wordy\nversion: 0.1.0\ndescription: ${'d'.repeat(1_100_000)}\n`);
      await blobs.put(sha256Hex(manifest), { bytes: manifest });
      const ref = await uploadListing({
        format: 'murmur-project/1',
        label: 'wordy',
        files: [{ path: 'murmur.yaml', sha256: sha256Hex(manifest), size: manifest.byteLength }],
      });
      const error = await rejectionOf(requestStaging(bus, { source: { kind: 'project', project: ref } }));
      expect(error.code).toBe('E-MAN-002');
      expect(error.message).toBe(`murmur.yaml of the project 'wordy' is ${manifest.byteLength} bytes; a manifest is at most 1048576`);
      await stillServing();
    });

    it('a listing with a path that climbs out is refused whole, as a .mur.zip entry would be', async () => {
      const before = await stagerCacheFiles();
      const manifest = Buffer.from('name: sly\nversion: 0.1.0\n');
      await blobs.put(sha256Hex(manifest), { bytes: manifest });
      const ref = await uploadListing({
        format: 'murmur-project/1',
        label: 'sly',
        files: [
          { path: 'murmur.yaml', sha256: sha256Hex(manifest), size: manifest.byteLength },
          { path: '../../outside', sha256: sha256Hex(manifest), size: manifest.byteLength },
        ],
      });
      const error = await rejectionOf(requestStaging(bus, { source: { kind: 'project', project: ref } }));
      expect(error.code).toBe('E-ART-001');
      expect(error.message).toContain("unsafe path '../../outside'");
      expect(await stagerCacheFiles()).toEqual(before);
      await stillServing();
    });

    it('an object whose bytes do not match its digest is refused by name, taken out of the store, and nothing is kept', async () => {
      const before = await stagerCacheFiles();
      const project = await probeProject(path.join(scratch.dir, 'forged'), 'description: forged\n');
      const packed = await packProject(project, { digestCache: null });
      const manifest = packed.listing.files.find((file) => file.path === 'murmur.yaml')!;
      await publishProject(blobs, packed);
      // Someone with access to the store writes other bytes of the same size under the manifest's name.
      await blobs.put(manifest.sha256, { bytes: Buffer.alloc(manifest.size, 0x41) });
      const error = await rejectionOf(requestStaging(bus, { source: { kind: 'project', project: packed.ref } }));
      expect(error.code).toBe('E-REG-002');
      expect(error.message).toContain(`object ${manifest.sha256}`);
      expect(error.message).toContain("the uploaded project 'forged': murmur.yaml");
      expect(await blobs.info(manifest.sha256)).toBeUndefined();
      expect(await stagerCacheFiles()).toEqual(before);
      // Uploaded again, the right bytes are back and it stages.
      expect((await stage(project)).capsule.name).toBe('probe');
    });

    it('a reference that understates an object’s size is refused, and the object, right under its name, stays for its other readers', async () => {
      const manifest = Buffer.from('name: understated\nversion: 0.1.0\n');
      await blobs.put(sha256Hex(manifest), { bytes: manifest });
      const ref = await uploadListing({
        format: 'murmur-project/1',
        label: 'understated',
        files: [{ path: 'murmur.yaml', sha256: sha256Hex(manifest), size: 1 }],
      });
      const error = await rejectionOf(requestStaging(bus, { source: { kind: 'project', project: ref } }));
      expect(error.code).toBe('E-REG-002');
      expect(error.message).toContain('holds more than 1 bytes, not the 1 it was published as');
      expect(error.hint).toContain('the object was left as it is');
      expect((await blobs.info(sha256Hex(manifest)))?.size).toBe(manifest.byteLength);
    });

    it('a project store artifact that fails the .mur.zip guards is refused, and nothing of the project is kept', async () => {
      const project = await probeProject(path.join(scratch.dir, 'hostile-store'), 'artifacts:\n  - name: echo-tool\n    version: 0.1.0\n');
      const archive = rawZip([
        { name: 'murmur.yaml', data: Buffer.from('name: echo-tool\nversion: "0.1.0"\nruntime: tool\n') },
        { name: 'echo-tool.wasm', data: (await toolWat()).bytes },
        { name: '../../outside.txt', data: Buffer.from('x') },
      ]);
      const dir = path.join(project, '.murmur', 'artifacts', 'echo-tool', '0.1.0');
      await fs.mkdir(dir, { recursive: true });
      await fs.writeFile(path.join(dir, 'echo-tool-0.1.0.mur.zip'), archive);
      await fs.writeFile(path.join(dir, 'echo-tool-0.1.0.sha256'), sha256Hex(archive));
      const before = await stagerCacheFiles();
      const result = await runMur(['stage', project], { env: client });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("error[E-ART-001]: echo-tool@0.1.0: zip entry '../../outside.txt' has an unsafe path");
      expect(await stagerCacheFiles()).toEqual(before);
      await stillServing();
    });
  });

  it('refuses a bundle object whose bytes are not its digest at the executor, before use, and runs once it is staged again', async () => {
    // A component no executor has run yet, so none has its bundle.
    const project = await capsuleProject(path.join(scratch.dir, 'bad-bundle'), 'name: fresh\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const plan = await stage(project);
    const [, executor] = executors as [ServiceProcess, ServiceProcess];
    const core = plan.capsule.component!.bundle.files.find((file) => file.path.endsWith('.wasm'))!;
    const bundleDir = path.join(home('executor-b'), 'cache', 'transpiled', TRANSPILER_ID, fetchedBundleName(plan.capsule.component!.bundle.files));
    await blobs.put(core.sha256, { bytes: Buffer.alloc(core.size, 0) });
    const error = await rejectionOf(launchOn(executor, plan));
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toContain(`the transpiled bundle of fresh@0.1.0: ${core.path}`);
    expect(await fs.stat(bundleDir).catch(() => undefined)).toBeUndefined();
    // Staged again, the bundle is published again, and the same executor runs it.
    const restaged = await stage(project);
    const launched = await launchOn(executor, restaged);
    expect((await launched.end).exit_status).toBe('ok');
  });

  it('an agent on the stack answers over A2A at a door on another home, and its door URL is the door’s', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep\n' }),
    );
    const agent = await startAgent(project, client);
    try {
      expect(agent.url).toMatch(new RegExp(`^http://localhost:\\d+/sessions/${agent.sessionId}/$`));
      const response = await fetch(agent.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { ...textMessage('hello'), configuration: { blocking: true } } }),
      });
      const body = (await response.json()) as { result: { status: { state: string; message?: { parts: Array<{ text: string }> } } } };
      expect(body.result.status.state).toBe('completed');
      expect(JSON.stringify(body.result)).toContain('the answer, from the stack');
    } finally {
      await agent.stop();
    }
  });

  it('answers a blocking send whose session ends while the door follows its task with the task failed, not with a session that never was', async () => {
    // A model that answers after a minute: the task is still working when its session is stopped.
    const slow = await startScriptedInference({ script: [{ text: 'too late', delayMs: 60_000 }] });
    const project = await agentProject(
      path.join(scratch.dir, 'ended-while-followed'),
      agentManifest(slow, { name: 'followed', lifecycle: '  task_acceptance: queue\n  after_task: sleep\n' }),
    );
    const agent = await startAgent(project, client);
    try {
      const answer = fetch(agent.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'a2a-version': '1.0' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'SendMessage',
          params: { message: { messageId: 'm-1', role: 'ROLE_USER', parts: [{ text: 'hello' }] } },
        }),
      });
      // The host answers a blocking send within 8 s (SETTLE_WITHIN_MAX_MS) with the task as it
      // stands; past that the door follows the task on the session's feed. It is stopped then,
      // counted from the model's request: the host's wait began before it, however slow the start.
      await eventually(async () => (slow.requests().length > 0 ? true : undefined), 30_000, 'the task to ask its model');
      await new Promise((resolve) => setTimeout(resolve, SETTLE_WITHIN_MAX_MS + 2_000));
      await bus.request(commands.stopSession.at(agent.sessionId), { reason: 'the test stops it while its task is followed' }, { timeoutMs: 10_000 });
      const response = await answer;
      expect(response.status).toBe(200);
      const body = (await response.json()) as { result?: { task?: { status?: { state?: string; message?: { parts?: Array<{ text?: string }> } } } } };
      expect(body.result?.task?.status?.state).toBe('TASK_STATE_FAILED');
      // Why it ended, by its code and what that means, never the end's own message (the executor's paths).
      expect(JSON.stringify(body.result?.task?.status?.message)).toContain('session ended: E-SES-005 (the session was stopped before it finished)');
    } finally {
      await agent.stop();
      await slow.close();
    }
  });

  // Last: it takes an executor away.
  it('notices an executor killed under its sessions within seconds: each ends naming the loss, mur ps shows it gone, and launches go to the one left', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'lost'),
      agentManifest(inference, { name: 'lost', lifecycle: '  task_acceptance: queue\n  after_task: sleep\n' }),
    );
    const agent = await startAgent(project, client);
    try {
      const start = await eventually(() => started.find((event) => event.session_id === agent.sessionId), 10_000, 'session.started');
      const victim = executors.find((executor) => executor.ready.instance_id === start.executor_id) as ServiceProcess;
      const survivor = executors.find((executor) => executor !== victim) as ServiceProcess;
      const killedAt = Date.now();
      victim.kill('SIGKILL');
      const end = await eventually(() => ended.find((event) => event.session_id === agent.sessionId), 10_000, 'the lost session to end');
      expect(Date.now() - killedAt).toBeLessThan(10_000);
      expect(end).toMatchObject({ executor_id: victim.ready.instance_id, exit_status: 'failed', error: { code: 'E-EXE-001' } });
      expect(end.error?.message).toContain(`executor ${victim.ready.instance_id as string} stopped answering`);
      // The launcher waiting on it hears the same end.
      const exited = await agent.exited;
      expect(exited.code).toBe(1);
      expect(exited.stderr).toContain('error[E-EXE-001]');

      const listed = await runMur(['ps', '--json'], { env: client });
      const row = (JSON.parse(listed.stdout) as Array<{ session_id: string; liveness: string; executor_id?: string; reason?: string }>).find(
        (session) => session.session_id === agent.sessionId,
      );
      expect(row).toMatchObject({ liveness: 'gone', executor_id: victim.ready.instance_id });
      expect(row?.reason).toContain('was lost');

      const after = await probeProject(path.join(scratch.dir, 'after-loss'), 'capabilities:\n  limits:\n    deadline_seconds: 10\n');
      for (let run = 0; run < 3; run += 1) {
        const result = await runMur(['run', '--task', JSON.stringify([{ op: 'print', text: 'still running' }])], { cwd: after, env: client });
        expect(result.code, result.stderr).toBe(0);
        const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1];
        expect((await eventually(() => started.find((event) => event.session_id === sessionId), 5_000, 'session.started')).executor_id).toBe(
          survivor.ready.instance_id,
        );
      }
    } finally {
      await agent.stop();
    }
  });
});

/** Faults of the services a request passes through: a stager or a door that goes while a request is in flight. */
describe('a stager or a door that stops mid-request', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  const running: ServiceProcess[] = [];
  let env: Record<string, string>;
  let watcher: Bus;
  const transpiling: string[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-faults-');
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    // Every staging's progress, whoever asked for it: how the test knows a transpile is under way.
    watcher = createBus(await NatsTransport.connect(nats.url, { log: silentLog }), silentLog);
    watcher.tap('stage.*.progress', (_subject, payload) => {
      const progress = payload as { phase: string; state?: string; artifact?: string };
      if (progress.phase === 'transpile' && progress.state === 'start') transpiling.push(progress.artifact ?? '');
    });
    await watcher.flush();
  });

  afterAll(async () => {
    await watcher?.close();
    for (const service of running) await service.stop();
    await nats?.stop();
    await scratch?.cleanup();
  });

  /** A project whose component is the 12 MB componentize-js one, so a cold staging takes long enough to interrupt. */
  async function bigProject(name: string): Promise<string> {
    const { helloCapsuleJs } = await import('./support/guests.js');
    const dir = path.join(scratch.dir, name);
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(path.join(dir, 'murmur.yaml'), `name: ${name}\nversion: 0.1.0\n`);
    await fs.writeFile(path.join(dir, 'capsule.wasm'), (await helloCapsuleJs()).bytes);
    return dir;
  }

  async function transpileUnderway(name: string): Promise<void> {
    await eventually(() => (transpiling.includes(`${name}@0.1.0`) ? true : undefined), 30_000, `the transpile of ${name} to start`);
  }

  it('a stager stopped mid-staging answers the request with E-BUS-006, and the next staging succeeds', async () => {
    const stager = await startService('stager', { ...env, MURMUR_HOME: path.join(scratch.dir, 'stager-1') });
    running.push(stager);
    const project = await bigProject('interrupted');
    const staging = runMur(['stage', project], { env: { ...env, MURMUR_HOME: path.join(scratch.dir, 'client') } });
    await transpileUnderway('interrupted');
    await stager.stop();
    const result = await staging;
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`error[E-BUS-006]: the stager ${stager.ready.instance_id as string} shut down before it finished staging`);
    const next = await startService('stager', { ...env, MURMUR_HOME: path.join(scratch.dir, 'stager-2') });
    running.push(next);
    const again = await runMur(['stage', project], { env: { ...env, MURMUR_HOME: path.join(scratch.dir, 'client') } });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('staged interrupted@0.1.0');
    await next.stop();
  });

  it('a stager killed mid-staging is noticed by its silence, with E-BUS-003, long before the staging timeout', async () => {
    const stager = await startService('stager', { ...env, MURMUR_HOME: path.join(scratch.dir, 'stager-3') });
    running.push(stager);
    const project = await bigProject('killed');
    const began = Date.now();
    const staging = runMur(['stage', project], { env: { ...env, MURMUR_HOME: path.join(scratch.dir, 'client'), MURMUR_STAGE_IDLE_MS: '2000' } });
    await transpileUnderway('killed');
    stager.kill('SIGKILL');
    const result = await staging;
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-BUS-003]: the stager stopped answering while staging the uploaded project: no word from it for 2s');
    expect(Date.now() - began).toBeLessThan(20_000);
  });

  it('a door stopped under an open stream tells the client to resubscribe, and another door serves the session', async () => {
    const inference = await startScriptedInference({ script: [{ text: 'watched' }] });
    try {
      for (const name of ['stager', 'executor', 'watcher']) running.push(await startService(name, { ...env, MURMUR_HOME: path.join(scratch.dir, name) }));
      const door = await startService('door', env);
      const project = await agentProject(
        path.join(scratch.dir, 'watched'),
        agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep\n' }),
      );
      const agent = await startAgent(project, { ...env, MURMUR_HOME: path.join(scratch.dir, 'client') });
      try {
        const stream = await openStream(agent.url, 'stream/watch', {});
        const frames = readSse(stream);
        await new Promise((resolve) => setTimeout(resolve, 300));
        await door.stop();
        const read = await frames;
        const last = read.at(-1);
        expect(last?.event).toBe('error');
        expect(JSON.parse(last?.data ?? '{}')).toMatchObject({
          error: {
            code: -32603,
            message: expect.stringContaining('this door is shutting down'),
            // The cut carries its own code, as the door's other refusals do.
            data: [{ reason: 'E_DOOR_005', domain: 'murmur', metadata: { murmur_code: 'E-DOOR-005' } }],
          },
        });
        const other = await startService('door', env);
        running.push(other);
        const card = await fetch(new URL(`/sessions/${agent.sessionId}/.well-known/agent-card.json`, other.url));
        expect(card.status).toBe(200);
        expect(((await card.json()) as { session_id: string }).session_id).toBe(agent.sessionId);
      } finally {
        await agent.stop();
      }
    } finally {
      await inference.close();
    }
  });
});

/**
 * A stack whose record of where each session lives cannot be written (the executor's put is
 * refused, as any put to a bucket that is away or full is): what a run needs of its own session
 * does not depend on that record. The record is written after the launch reply, so a quick
 * session may also end before it is there (the first run against a fresh stack did).
 */
describe('a stack that cannot record where its sessions live', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  const running: ServiceProcess[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-unrecorded-');
    // The bucket, made first by the test as the executor would make it, but taking no value of more than a byte.
    const transport = await NatsTransport.connect(nats.url, { log: silentLog });
    try {
      const config = {
        name: `KV_${SESSION_LOCATIONS_BUCKET}`,
        subjects: [`$KV.${SESSION_LOCATIONS_BUCKET}.>`],
        max_msgs_per_subject: 1,
        max_msg_size: 1,
        discard: 'new',
        allow_rollup_hdrs: true,
        deny_delete: true,
        storage: 'memory',
        num_replicas: 1,
      };
      const reply = JSON.parse(
        new TextDecoder().decode(await transport.request(`$JS.API.STREAM.CREATE.${config.name}`, new TextEncoder().encode(JSON.stringify(config)), 5_000)),
      ) as { error?: unknown };
      expect(reply.error).toBeUndefined();
    } finally {
      await transport.close();
    }
    for (const name of ['stager', 'executor']) running.push(await startService(name, { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, name) }));
  });

  afterAll(async () => {
    for (const service of running) await service.stop();
    await nats?.stop();
    await scratch?.cleanup();
  });

  it('mur run fetches out/result.txt from the executor that launched its session, whatever that record says', async () => {
    const project = await probeProject(path.join(scratch.dir, 'unrecorded'), 'capabilities:\n  limits:\n    deadline_seconds: 10\n');
    const task = JSON.stringify([{ op: 'write', path: 'out/result.txt', text: 'the answer, unrecorded' }]);
    const client = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'client') };
    const result = await runMur(['run', '--task', task], { cwd: project, env: client });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).not.toContain('could not fetch');
    const sessionId = /^session: (\S+)$/m.exec(result.stdout)?.[1] as string;
    expect(await fs.readFile(path.join(project, 'workdir', sessionId, 'out', 'result.txt'), 'utf8')).toBe('the answer, unrecorded');
    // What the record is for is refused as it should be: nobody can say where the session lives.
    const files = await runMur(['files', sessionId], { env: client });
    expect(files.code).not.toBe(0);
    expect(files.stderr).toContain('E-SES-001');
  });
});
