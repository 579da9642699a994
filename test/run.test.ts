import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readLockfile, sha256Hex } from '@murmur/shared/artifacts';
import { capsuleArchive, capsuleProject, componentArtifact, publishInto } from './support/artifacts.js';
import { probeProject, probeResults } from './support/capsules.js';
import { listTree, tempDir, tmpfsOrSkip } from './support/fs.js';
import { capsuleWat, floodingCapsuleWat, forgingStatusCapsuleWat, toolWat, unversionedCapsuleWat } from './support/guests.js';
import { probeTool } from './support/probe-guests.js';
import { procFile } from './support/proc.js';
import { murBin, runMur, spawnMur, untilSaid } from './support/processes.js';

/** `mur run` as a user runs it, everything inside the one `mur` process (the embedded default). */
describe('mur run', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-run-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  const actions = (list: unknown[]): string => JSON.stringify(list);

  it('refuses a project whose workdir directory is a link into the machine’s own directories, at once, where mkdir spun on /proc for good', async () => {
    const project = await probeProject(path.join(scratch.dir, 'linked-workdir'));
    await fs.symlink('/proc', path.join(project, 'workdir'));
    const result = await runMur(['run', '--task', '[]'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/error\[E-IO-002\]: workdir '\/proc\/ses_[0-9a-f]+' lies in \/proc, one of the machine's own directories/);
    // A link to nothing is said to be one, where mkdir's ENOENT said to check the path.
    const dangling = await probeProject(path.join(scratch.dir, 'dangling-workdir'));
    await fs.symlink(path.join(scratch.dir, 'not-mounted'), path.join(dangling, 'workdir'));
    const refused = await runMur(['run', '--task', '[]'], { cwd: dangling, env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `error[E-IO-002]: cannot write ${path.join(dangling, 'workdir')}: it is a link to ${path.join(scratch.dir, 'not-mounted')}, which does not exist`,
    );
  });

  it('refuses a runtime grant that reaches where sessions’ workdirs are made or the executor’s home, before anything is made, where it read other sessions’ files and ran what they wrote', async () => {
    const grant = (dir: string): string =>
      `capabilities:\n  shell:\n    allow: [cat]\n    interpreter_runtime:\n      - binary: cat\n        dirs:\n          - { path: "${dir}", list_dir: true }\n`;
    const project = path.join(scratch.dir, 'grant-over-workdirs');
    await probeProject(project, grant(project));
    const over = await runMur(['run', '--task', '[]'], { cwd: project, env });
    expect(over.code).toBe(1);
    expect(over.stderr).toContain(
      `error[E-IO-002]: capabilities.shell.interpreter_runtime names '${project}' for 'cat', which holds ${path.join(project, 'workdir')}, the executor's own state or where sessions' workdirs are made`,
    );
    expect(over.stderr).toContain("hint: grant only the directories the runtime itself needs (its interpreter's library tree)");
    // The executor's home (its config's keys, its cache) is as far out of reach, through a link too.
    const linked = path.join(scratch.dir, 'link-to-scratch');
    await fs.symlink(scratch.dir, linked);
    const homeward = await probeProject(path.join(scratch.dir, 'grant-over-home'), grant(linked));
    const home = await runMur(['run', '--task', '[]'], { cwd: homeward, env });
    expect(home.code).toBe(1);
    expect(home.stderr).toContain(`names '${linked}' for 'cat', which holds ${await fs.realpath(scratch.dir)}`);
    for (const refused of [project, homeward]) await expect(fs.readdir(path.join(refused, 'workdir'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('refuses a runtime grant in /run, outside where the executor takes runtimes from, or holding a socket when the capsule may make unix sockets, where a granted docker.sock was the host’s root', async () => {
    const grant = (dir: string, unixSockets: boolean): string =>
      `capabilities:\n  network:\n    unix_sockets: ${unixSockets}\n  shell:\n    allow: [cat]\n    interpreter_runtime:\n      - binary: cat\n        dirs:\n          - { path: "${dir}", list_dir: true }\n`;
    const inRun = await probeProject(path.join(scratch.dir, 'grant-in-run'), grant('/run/lock', false));
    const run = await runMur(['run', '--task', '[]'], { cwd: inRun, env });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(
      "error[E-IO-002]: capabilities.shell.interpreter_runtime names '/run/lock' for 'cat', which lies in /run, where the host keeps its services' sockets and secrets",
    );
    // A runtime tree with a service's socket in it, a level down.
    const tree = path.join(scratch.dir, 'runtime-with-socket');
    await fs.mkdir(path.join(tree, 'lib'), { recursive: true });
    const service = net.createServer((connection) => connection.end('host secret\n'));
    await new Promise<void>((resolve) => service.listen(path.join(tree, 'lib', 'service.sock'), resolve));
    // This executor's operator takes runtimes from the scratch directory as well.
    const rooted = { ...env, MURMUR_RUNTIME_GRANT_ROOTS: `/usr:${scratch.dir}` };
    try {
      const sockets = await probeProject(path.join(scratch.dir, 'grant-with-socket'), grant(tree, true));
      const refused = await runMur(['run', '--task', '[]'], { cwd: sockets, env: rooted });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(
        `names '${tree}' for 'cat', which holds the socket ${path.join(tree, 'lib', 'service.sock')}, which the capsule could connect to as the executor's user`,
      );
      // Without unix sockets none can be made at all (sealed, as this host seals), so the same tree is granted.
      const withoutSockets = await probeProject(path.join(scratch.dir, 'grant-without-sockets'), grant(tree, false));
      const ran = await runMur(['run', '--task', '[]'], { cwd: withoutSockets, env: rooted });
      expect(ran.code, ran.stderr).toBe(0);
      // The grant's own path is bound, later: a socket named as the grant, or a link (its owner could
      // point it elsewhere before the bind), is refused as well.
      const named = await probeProject(path.join(scratch.dir, 'grant-is-socket'), grant(path.join(tree, 'lib', 'service.sock'), true));
      expect((await runMur(['run', '--task', '[]'], { cwd: named, env: rooted })).stderr).toContain(
        `which is the socket ${path.join(tree, 'lib', 'service.sock')}, which the capsule could connect to`,
      );
      const link = path.join(scratch.dir, 'runtime-link');
      await fs.symlink(tree, link);
      const linked = await probeProject(path.join(scratch.dir, 'grant-through-link'), grant(link, false));
      const throughLink = await runMur(['run', '--task', '[]'], { cwd: linked, env: rooted });
      expect(throughLink.code).toBe(1);
      expect(throughLink.stderr).toContain(`names '${link}' for 'cat', which leads through a link to ${tree}: it is bound by the path it names`);
      expect(throughLink.stderr).toContain(`hint: name the directory itself (${tree}) in the manifest`);
      // Where the operator takes no runtimes from, the same tree is the capsule's word alone.
      const unrooted = await runMur(['run', '--task', '[]'], { cwd: withoutSockets, env });
      expect(unrooted.code).toBe(1);
      expect(unrooted.stderr).toContain(`names '${tree}' for 'cat', which lies outside where this executor takes runtimes from (/usr, /opt, /lib,`);
      expect(unrooted.stderr).toContain("have the executor's operator add its place to MURMUR_RUNTIME_GRANT_ROOTS");
      const misnamed = await runMur(['run', '--task', '[]'], { cwd: withoutSockets, env: { ...env, MURMUR_RUNTIME_GRANT_ROOTS: '/usr:runtimes' } });
      expect(misnamed.code).toBe(1);
      expect(misnamed.stderr).toContain('error[E-CFG-003]: MURMUR_RUNTIME_GRANT_ROOTS names "runtimes", which is no absolute directory');
    } finally {
      await new Promise((resolve) => service.close(resolve));
    }
  });

  it('drops a flooding capsule’s output past a bound while stdout is not read, says so, and ends as its deadline says, with no stack', async () => {
    const project = await capsuleProject(
      path.join(scratch.dir, 'flood'),
      'name: flood\nversion: 0.1.0\ncapabilities:\n  limits:\n    deadline_seconds: 4\n',
      (await floodingCapsuleWat()).bytes,
    );
    // Nobody reads this stdout until the capsule's deadline is past: its pipe fills, and what mur writes there waits in mur.
    const child = spawn(murBin, ['run', '--manifest', path.join(project, 'murmur.yaml')], {
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    let peakRssKb = 0;
    const sampler = setInterval(() => {
      const rss = /VmRSS:\s+(\d+)/.exec(procFile(child.pid as number, 'status') ?? '')?.[1];
      if (rss) peakRssKb = Math.max(peakRssKb, Number(rss));
    }, 100);
    const reader = setTimeout(() => child.stdout?.resume(), 7_000);
    const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
    const [code] = (await once(child, 'exit')) as [number | null];
    clearInterval(sampler);
    clearTimeout(reader);
    clearTimeout(timer);
    expect(code, stderr).toBe(1);
    expect(stderr).toContain('error[E-RUN-001]');
    expect(stderr).toContain(
      "warning: stdout is not being read as fast as the capsule's stdout comes; the capsule's stdout is dropped until stdout catches up",
    );
    expect(stderr).toMatch(/warning: \d+ bytes of the capsule's stdout were dropped: stdout was not read as fast as it came/);
    expect(stderr).not.toMatch(/\n\s+at |ENOBUFS/);
    // What waits for stdout is bounded (8 MiB): mur's whole memory stays far from the gigabyte it reached.
    expect(peakRssKb / 1024).toBeLessThan(400);
  });

  it('runs a script capsule and prints its session, its output and last its status', async () => {
    const project = await probeProject(path.join(scratch.dir, 'hello'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const result = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml')], {
      env: { ...env, PROBE_ACTIONS: actions([{ op: 'print', text: 'hello from inside' }]) },
    });
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^session: ses_[0-9a-f]{32}$/);
    expect(lines).toContain('hello from inside');
    expect(lines.at(-1)).toBe('status:  ok');
  });

  it('adds the accessible workdir with -v, a directory its owner alone may read', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'tiny'), 'name: tiny\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['run', '-v'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const workdir = /^workdir: (.+)$/m.exec(result.stdout)?.[1];
    expect(workdir).toBeDefined();
    expect(workdir?.startsWith(path.join(project, 'workdir', 'ses_'))).toBe(true);
    const stat = await fs.stat(workdir as string);
    expect(stat.isDirectory()).toBe(true);
    // Another local user could list its children/, whose names are its delegations' completion credentials.
    expect((stat.mode & 0o777).toString(8)).toBe('700');
  });

  it('refuses a context given to a script capsule, which has no conversation, and runs nothing', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'contextless'), 'name: contextless\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    for (const [flag, verb] of [
      ['--resume', 'resume'],
      ['--context', 'continue'],
    ] as const) {
      const result = await runMur(['run', flag, 'ctx-1'], { cwd: project, env });
      expect(result.code, result.stderr).toBe(1);
      expect(result.stderr).toContain(
        `error[E-CTX-001]: contextless is a script capsule, which answers no tasks and records no conversation: context 'ctx-1' has nothing to ${verb}`,
      );
      expect(result.stderr).toContain('hint: --context and --resume are for agent capsules');
      expect(result.stdout).not.toContain('status:');
    }
    expect(await listTree(path.join(project, 'workdir')).catch(() => [])).toEqual([]);
  });

  it('refuses a runtime setting that does not hold (not the number it names, a cgroup parent no group can be made in) before anything runs, naming it', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'settings'), 'name: settings\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const cases: Array<[name: string, value: string, expected: string]> = [
      ['MURMUR_A2A_TIMEOUT_SECS', 'soon', "invalid MURMUR_A2A_TIMEOUT_SECS: 'soon' is not a number of seconds"],
      ['MURMUR_RESULT_FETCH_MAX_BYTES', '64M', "invalid MURMUR_RESULT_FETCH_MAX_BYTES: '64M' is not a whole number of bytes above 0"],
      ['MURMUR_HARD_LIMIT_GRACE_MS', '10s', "invalid MURMUR_HARD_LIMIT_GRACE_MS: '10s' is not a whole number of milliseconds above 0"],
      // Named, and no group can be made there: sessions would have run with no group's ceilings.
      ['MURMUR_CGROUP_PARENT', 'murmur-no-such-parent', "MURMUR_CGROUP_PARENT names 'murmur-no-such-parent', where no session cgroups can be made"],
    ];
    for (const [name, value, expected] of cases) {
      const result = await runMur(['run', '--json'], { cwd: project, env: { ...env, [name]: value } });
      expect(result.code, name).not.toBe(0);
      expect(result.stderr).toContain('E-CFG-003');
      expect(result.stderr).toContain(expected);
      expect(result.stdout, name).toBe('');
    }
    // Nothing ran: no session directory was made for either.
    await expect(fs.readdir(path.join(project, 'workdir'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('prints exactly one launch line with --json, and nothing else on stdout, while the capsule’s stderr still reaches stderr', async () => {
    const project = await probeProject(path.join(scratch.dir, 'json'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const result = await runMur(['run', '--json'], {
      cwd: project,
      env: {
        ...env,
        PROBE_ACTIONS: actions([
          { op: 'print', text: 'not on stdout' },
          { op: 'stderr', text: 'the capsule complains' },
        ]),
      },
    });
    expect(result.stderr).toContain('the capsule complains');
    expect(result.stderr).not.toContain('not on stdout');
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.split('\n').filter((line) => line !== '');
    expect(lines).toHaveLength(1);
    const launch = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(Object.keys(launch).sort()).toEqual(['name', 'pid', 'session_id', 'url', 'version', 'workdir']);
    expect(launch).toMatchObject({ name: 'probe', version: '0.1.0' });
    expect(launch.session_id).toMatch(/^ses_[0-9a-f]{32}$/);
    expect(typeof launch.pid).toBe('number');
    const sessionLog = await fs.readFile(path.join(launch.workdir as string, 'logs', 'session.log'), 'utf8');
    expect(sessionLog).toContain('[stdout] not on stdout');
  });

  it('fails with a non-zero exit and status failed when the capsule exits non-zero', async () => {
    const project = await probeProject(path.join(scratch.dir, 'exit'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const result = await runMur(['run'], { cwd: project, env: { ...env, PROBE_ACTIONS: actions([{ op: 'exit', code: 3, withCode: true }]) } });
    expect(result.code).toBe(1);
    expect(result.stdout.trim().split('\n').at(-1)).toBe('status:  failed');
    expect(result.stderr).toContain('error[E-RUN-001]: capsule exited with code 3');
  });

  it('says a session it stopped on Ctrl-C was stopped, not failed, and exits 130', async () => {
    const project = await probeProject(path.join(scratch.dir, 'interrupted'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const { child, output } = spawnMur(['run'], { cwd: project, env: { ...env, PROBE_ACTIONS: actions([{ op: 'spin' }]) } });
    const exited = once(child, 'close');
    const sessionId = await untilSaid(child, 'stdout', (text) => /session: (ses_\w+)/.exec(text)?.[1]);
    child.kill('SIGINT');
    const [code] = (await exited) as [number | null];
    expect(code, output.stderr).toBe(130);
    expect(output.stderr).toContain(`mur: interrupted; stopping session ${sessionId} (again to leave at once)`);
    expect(output.stdout.trim().split('\n').at(-1)).toBe('status:  stopped');
    expect(output.stderr).not.toContain('error[');
  });

  it('stops its session when its terminal hangs up (SIGHUP), as on an interrupt: the trace ends, and nothing of the session is left running or held', async () => {
    const project = await probeProject(path.join(scratch.dir, 'hung-up'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const { child, output } = spawnMur(['run'], { cwd: project, env: { ...env, PROBE_ACTIONS: actions([{ op: 'spin' }]) } });
    const exited = once(child, 'close');
    const sessionId = await untilSaid(child, 'stdout', (text) => /session: (ses_\w+)/.exec(text)?.[1]);
    child.kill('SIGHUP');
    const [code, signal] = (await exited) as [number | null, NodeJS.Signals | null];
    expect({ code, signal }, output.stderr).toEqual({ code: 130, signal: null });
    expect(output.stdout.trim().split('\n').at(-1)).toBe('status:  stopped');
    const trace = await fs.readFile(path.join(project, 'workdir', sessionId, 'trace.jsonl'), 'utf8');
    expect(trace).toContain('"event_type":"session_end"');
    // Its cgroups are gone with it (a hangup left them for the next run's sweep).
    const groups = spawnSync('find', ['/sys/fs/cgroup', '-maxdepth', '6', '-name', `*${sessionId}*`], { encoding: 'utf8' }).stdout.trim();
    expect(groups).toBe('');
  });

  /** `mur run` in `project` in a process group of its own, as a terminal's foreground job is: an interrupt goes to the whole group. */
  function runInOwnGroup(project: string, extraEnv: Record<string, string>) {
    const { child, output } = spawnMur(['run'], { cwd: project, env: { ...env, ...extraEnv }, ownGroup: true });
    return { child, output, exited: once(child, 'close') };
  }

  it("says a session was stopped when a terminal's Ctrl-C or hangup reaches its host too, as it does a host outside bubblewrap", async () => {
    const project = await probeProject(path.join(scratch.dir, 'interrupted-group'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    // Outside bubblewrap, and inside it (bubblewrap in the group, the host its child).
    const sandboxes: Array<Record<string, string>> = [{ MURMUR_BWRAP: 'none', MURMUR_UNSHARE: 'none' }, {}];
    for (const [signal, sandbox] of (['SIGINT', 'SIGHUP'] as const).flatMap((each) => sandboxes.map((one) => [each, one] as const))) {
      const { child, output, exited } = runInOwnGroup(project, { ...sandbox, PROBE_ACTIONS: actions([{ op: 'spin' }]) });
      await untilSaid(child, 'stdout', (text) => /session: (ses_\w+)/.exec(text)?.[1]);
      process.kill(-(child.pid as number), signal);
      const [code] = (await exited) as [number | null];
      expect(code, `${signal}: ${output.stderr}`).toBe(130);
      expect(output.stdout.trim().split('\n').at(-1), signal).toBe('status:  stopped');
      expect(output.stderr, signal).not.toContain('error[');
    }
  });

  it("exits 130 saying nothing more when a terminal's Ctrl-C reaches its host as it starts, at any moment of the start", async () => {
    const project = await probeProject(path.join(scratch.dir, 'interrupted-start'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    // A fresh host (no pool), whose start is the launch's longest part, and the whole group signalled
    // a while after the launch is asked for: the interrupt reaches the host at one moment or another
    // of its start (each of these landed somewhere else on this machine: refused as a failure, a 30 s
    // wait, a stop after the launch).
    for (const delayMs of [0, 25, 50, 100, 150]) {
      const { child, output, exited } = runInOwnGroup(project, { MURMUR_EXECUTOR_POOL: '0', MURMUR_TIMING: '1', PROBE_ACTIONS: actions([{ op: 'spin' }]) });
      await untilSaid(child, 'stderr', (text) => (/\[timing\] launch asked/.test(text) ? true : undefined));
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      process.kill(-(child.pid as number), 'SIGINT');
      const [code] = (await exited) as [number | null];
      expect(code, `${delayMs} ms: ${output.stderr}`).toBe(130);
      expect(output.stderr, `${delayMs} ms`).not.toContain('error[');
    }
  });

  it('says a sandbox that could no longer be made in bubblewrap’s words, with what to do, and probes the host again next time', async () => {
    // A bubblewrap that works, then stops making namespaces: user namespaces turned off after the
    // host's containment was probed and kept.
    const bin = path.join(scratch.dir, 'failing-bwrap');
    await fs.mkdir(bin, { recursive: true });
    const failing = path.join(bin, 'fail');
    await fs.writeFile(
      path.join(bin, 'bwrap'),
      `#!/bin/sh
if [ -e ${failing} ]; then cat ${failing} >&2; exit 1; fi
exec bwrap "$@"
`,
      { mode: 0o755 },
    );
    const project = await probeProject(path.join(scratch.dir, 'sandbox-gone'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const runEnv = {
      ...env,
      MURMUR_HOME: path.join(scratch.dir, 'sandbox-gone-home'),
      MURMUR_BWRAP: path.join(bin, 'bwrap'),
      PROBE_ACTIONS: actions([{ op: 'print', text: 'ran' }]),
    };
    // What else bubblewrap may say at a launch gets its own hint: a full disk, or nothing at all.
    for (const [said, shown, hint] of [
      [
        "bwrap: Can't mkdir parents for /tmp/x: No space left on device\n",
        "bwrap: Can't mkdir parents for /tmp/x: No space left on device",
        "the file system bubblewrap made the sandbox's directories on is full",
      ],
      ['bwrap: \n', 'bwrap: it exited 1 without saying why', "bubblewrap's words above say what it could not do"],
    ]) {
      await fs.rm(failing, { force: true });
      expect((await runMur(['run'], { cwd: project, env: runEnv })).code).toBe(0);
      await fs.writeFile(failing, said as string);
      const refused = await runMur(['run'], { cwd: project, env: runEnv });
      expect(refused.stderr).toContain(`error[E-CAP-005]: the session's sandbox could not be made: ${shown}`);
      expect(refused.stderr).toContain(`hint: ${hint}`);
      expect(refused.stderr).not.toContain('user namespaces');
    }
    await fs.rm(failing, { force: true });
    expect((await runMur(['run'], { cwd: project, env: runEnv })).code).toBe(0);
    await fs.writeFile(failing, 'bwrap: Creating new namespace failed: No space left on device\n');
    const refused = await runMur(['run'], { cwd: project, env: runEnv });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      "error[E-CAP-005]: the session's sandbox could not be made: bwrap: Creating new namespace failed: No space left on device",
    );
    expect(refused.stderr).toContain('hint: bubblewrap needs unprivileged user namespaces');
    // Probed again: no namespaces, so the capsule runs at the class this host now achieves.
    const again = await runMur(['run'], { cwd: project, env: runEnv });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('ran');
  });

  it('reports a trap as status trapped', async () => {
    const project = await probeProject(path.join(scratch.dir, 'trap'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const result = await runMur(['run'], { cwd: project, env: { ...env, PROBE_ACTIONS: actions([{ op: 'trap' }]) } });
    expect(result.code).toBe(1);
    expect(result.stdout.trim().split('\n').at(-1)).toBe('status:  trapped');
    expect(result.stderr).toContain('error[E-RUN-001]: capsule execution trapped');
  });

  it('says why a guest that wrote past check-write to a file stream trapped, where its worker was ended without a word', async () => {
    const project = await probeProject(path.join(scratch.dir, 'stream-trap'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const result = await runMur(['run'], {
      cwd: project,
      env: { ...env, PROBE_ACTIONS: actions([{ op: 'stream-zeroes', path: 'zeroes', count: 2 * 1024 * 1024 }]) },
    });
    expect(result.code).toBe(1);
    expect(result.stdout.trim().split('\n').at(-1)).toBe('status:  trapped');
    expect(result.stderr).toContain(`wasi-io trap: a write of ${2 * 1024 * 1024} zeroes to a file, more than the 1048576 check-write permits`);
  });

  it("answers a positioned read it cannot make with the filesystem's error code, never a trap in node's words", async () => {
    const project = await probeProject(path.join(scratch.dir, 'pread-codes'), 'capabilities:\n  env:\n    allow: [PROBE_ACTIONS]\n');
    const reads = [
      { op: 'write', path: 'file.txt', text: 'five!' },
      { op: 'mkdir', path: 'dir' },
      { op: 'pread', path: 'file.txt' },
      { op: 'pread', path: 'dir', directory: true },
      { op: 'pread', path: 'file.txt', write: true },
      { op: 'pread', path: 'file.txt', offset: '18446744073709551615' },
      { op: 'print', text: 'still running' },
    ];
    const result = await runMur(['run'], { cwd: project, env: { ...env, PROBE_ACTIONS: actions(reads) } });
    expect(result.code, result.stderr).toBe(0);
    const [read, fromDirectory, fromWriteOnly, pastAnyOffset] = probeResults(result.stdout).filter((each) => each.op === 'pread');
    expect(read).toMatchObject({ ok: true, value: { bytes: 5, eof: false } });
    expect(fromDirectory).toMatchObject({ ok: false, error: expect.stringContaining('is-directory') });
    expect(fromWriteOnly).toMatchObject({ ok: false, error: expect.stringContaining('bad-descriptor') });
    expect(pastAnyOffset).toMatchObject({ ok: false, error: expect.stringContaining('invalid') });
    expect(result.stdout).toContain('still running');
  });

  it("begins its status line on a line of its own when the capsule's output left its last line open", async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'forger'), 'name: forger\nversion: 0.1.0\n', (await forgingStatusCapsuleWat()).bytes);
    const result = await runMur(['run'], { cwd: project, env });
    expect(result.code).toBe(1);
    const lines = result.stdout.split('\n');
    // The capsule's own words stay on their line; the runtime's status is the last line, whole.
    expect(lines.slice(-3)).toEqual(['status:  ok', 'status:  trapped', '']);
  });

  it('refuses a component that exports only the unversioned capsule interface', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'unversioned'), 'name: old\nversion: 0.1.0\n', (await unversionedCapsuleWat()).bytes);
    const result = await runMur(['run', '--json'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('murmur:capsule/run@0.1.0');
  });

  it('writes --task text to task.md, and copies a --task file', async () => {
    const project = await probeProject(path.join(scratch.dir, 'task'));
    const asText = await runMur(['run', '--json', '--task', actions([{ op: 'print', text: 'from task text' }])], { cwd: project, env });
    expect(asText.code, asText.stderr).toBe(0);
    const textWorkdir = (JSON.parse(asText.stdout) as { workdir: string }).workdir;
    expect(await fs.readFile(path.join(textWorkdir, 'task.md'), 'utf8')).toContain('from task text');
    expect(await fs.readFile(path.join(textWorkdir, 'logs', 'session.log'), 'utf8')).toContain('from task text');

    const taskFile = path.join(scratch.dir, 'task-file.md');
    await fs.writeFile(taskFile, `Do this:\n${actions([{ op: 'print', text: 'from a task file' }])}\n`);
    const asFile = await runMur(['run', '--json', '--task', taskFile], { cwd: project, env });
    const fileWorkdir = (JSON.parse(asFile.stdout) as { workdir: string }).workdir;
    expect(await fs.readFile(path.join(fileWorkdir, 'task.md'), 'utf8')).toBe(await fs.readFile(taskFile, 'utf8'));
  });

  it('runs in an existing --workdir, keeping the session records under .murmur/<session>', async () => {
    const project = await probeProject(path.join(scratch.dir, 'chosen'));
    const workdir = path.join(scratch.dir, 'chosen-workdir');
    await fs.mkdir(workdir);
    await fs.chmod(workdir, 0o755);
    const result = await runMur(['run', '--json', '--workdir', workdir, '--task', actions([{ op: 'write', path: 'made-here.txt', text: 'x' }])], {
      cwd: project,
      env,
    });
    expect(result.code, result.stderr).toBe(0);
    const launch = JSON.parse(result.stdout) as { workdir: string; session_id: string };
    expect(launch.workdir).toBe(await fs.realpath(workdir));
    expect(await fs.readFile(path.join(workdir, 'made-here.txt'), 'utf8')).toBe('x');
    expect(await fs.readFile(path.join(workdir, 'murmur.yaml'), 'utf8')).toContain('name: probe');
    const sessionDir = path.join(workdir, '.murmur', launch.session_id);
    expect(await listTree(sessionDir)).toEqual(expect.arrayContaining(['trace.jsonl', 'logs/', 'logs/bootstrap.log', 'logs/session.log', 'out/', 'tools/']));
    // The workdir is the user's to share; the runtime's records in it are its owner's alone.
    expect(((await fs.stat(workdir)).mode & 0o777).toString(8)).toBe('755');
    expect(((await fs.stat(path.join(workdir, '.murmur'))).mode & 0o777).toString(8)).toBe('700');
  });

  it('records session_start with the effective grants, and session_end, in trace.jsonl', async () => {
    const project = await probeProject(
      path.join(scratch.dir, 'traced'),
      'capabilities:\n  env:\n    allow: [GREETING]\n  network:\n    allow: [api.example.com]\n  limits:\n    deadline_seconds: 30\n',
    );
    const result = await runMur(['run', '--json', '--task', '[]'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const events = (await fs.readFile(path.join(workdir, 'trace.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(events.map((event) => event.event_type)).toEqual(['session_start', 'session_end']);
    expect(events[0]).toMatchObject({
      capsule_name: 'probe',
      capsule_version: '0.1.0',
      capabilities: ['network'],
      containment_declared: 'advisory',
      containment_achieved: 'sealed',
      effective_grants: {
        declared_containment: 'advisory',
        achieved_containment: 'sealed',
        floor_met: true,
        enforcement_tier: 'mountns+pivot_root+landlock+seccomp',
        filesystem_scope: '.',
        network_allow: ['api.example.com'],
        env_allow: ['GREETING'],
        shell_allow: [],
      },
    });
    // Upstream's keys, in upstream's order (shortfall_reason only when the floor is not met).
    expect(Object.keys(events[0]?.effective_grants as object)).toEqual([
      'declared_containment',
      'achieved_containment',
      'floor_met',
      'enforcement_tier',
      'filesystem_scope',
      'workdir_exec',
      'network_allow',
      'unix_sockets',
      'shell_allow',
      'spawn_allow',
      'env_allow',
      'interpreter_runtime_grants',
      'staged_runtime_grants',
    ]);
    expect(events[1]).toMatchObject({ exit_status: 'ok', total_tool_calls: 0 });
    for (const event of events) expect(event).toMatchObject({ session_id: path.basename(workdir), timestamp: expect.any(Number) });
    const bootstrap = await fs.readFile(path.join(workdir, 'logs', 'bootstrap.log'), 'utf8');
    expect(bootstrap).toContain('containment: sealed (mountns+pivot_root+landlock+seccomp), declared advisory');
    expect(bootstrap).toContain('session ended: ok');
  });

  it("loads the project's .env for the capsule's allowlisted names, unless --no-env-file", async () => {
    const project = await probeProject(path.join(scratch.dir, 'dotenv'), 'capabilities:\n  env:\n    allow: [FROM_DOTENV, SHADOWED]\n');
    await fs.writeFile(path.join(project, '.env'), '# the project\'s settings\nFROM_DOTENV="from the file"\nSHADOWED=file\n');
    const task = JSON.stringify([{ op: 'env' }]);
    const withFile = await runMur(['run', '--task', task], { cwd: project, env: { ...env, SHADOWED: 'environment wins' } });
    const seen = probeResults(withFile.stdout)[0]?.value as Record<string, string>;
    expect(seen.FROM_DOTENV).toBe('from the file');
    expect(seen.SHADOWED).toBe('environment wins');
    const withoutFile = await runMur(['run', '--no-env-file', '--task', task], { cwd: project, env });
    expect((probeResults(withoutFile.stdout)[0]!.value as Record<string, string>).FROM_DOTENV).toBeUndefined();
  });

  it('leaves nothing of a session whose workdir a full disk refused, and names the directory it could not make', async (context) => {
    const project = await probeProject(path.join(scratch.dir, 'full-workdir'));
    const workdir = path.join(scratch.dir, 'full-workdir-mount');
    await fs.mkdir(workdir);
    // Room for .murmur, the session's directory and two of its own: the third is refused.
    const mounted = tmpfsOrSkip(context, workdir, 'size=1m,nr_inodes=5', '[run] a workdir on a full disk not exercised');
    try {
      const result = await runMur(['run', '--workdir', workdir, '--task', '[]'], { cwd: project, env });
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(
        new RegExp(
          `^error\\[E-RUN-001\\]: the capsule could not be launched: ENOSPC: no space left on device, mkdir '${workdir}/\\.murmur/ses_[0-9a-f]{32}/logs'$`,
          'm',
        ),
      );
      expect(result.stderr).toContain('the file system is full: free some space');
      // --workdir was given: its hint offers another.
      expect(result.stderr).toContain("(mur run --workdir <another dir> puts the session's directory elsewhere)");
      // Where the newest session was taken to be this half-made one, which held no trace; and the
      // directories the launch made in the user's workdir are gone with it.
      expect(await fs.readdir(workdir)).toEqual([]);
    } finally {
      mounted.unmount();
    }
  });

  it('refuses a --workdir that does not exist with E-IO-001', async () => {
    const project = await probeProject(path.join(scratch.dir, 'missing-workdir'));
    const result = await runMur(['run', '--workdir', path.join(scratch.dir, 'nowhere')], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-IO-001]');
    expect(result.stderr).toContain('does not exist');
  });

  it('runs a capsule from the registry with --capsule and --capsule-version', async () => {
    await publishInto(
      path.join(env.MURMUR_HOME as string, 'artifacts'),
      await capsuleArchive('name: local/tiny\nversion: 2.0.0\n', (await capsuleWat()).bytes),
    );
    const cwd = path.join(scratch.dir, 'elsewhere');
    await fs.mkdir(cwd, { recursive: true });
    const result = await runMur(['run', '--capsule', 'local/tiny', '--capsule-version', '2.0.0', '--json'], { cwd, env });
    expect(result.code, result.stderr).toBe(0);
    const launch = JSON.parse(result.stdout) as { name: string; workdir: string };
    expect(launch.name).toBe('local/tiny');
    expect(launch.workdir.startsWith(path.join(await fs.realpath(cwd), 'workdir'))).toBe(true);
  });

  describe('murmur.lock', () => {
    let project: string;
    let toolZip: Buffer;

    beforeAll(async () => {
      project = await probeProject(path.join(scratch.dir, 'locked'), 'artifacts:\n  - name: echo-tool\n    version: 0.1.0\n');
      toolZip = await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes);
      await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), toolZip);
      await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), await componentArtifact('echo-tool', '0.2.0', (await probeTool()).bytes));
    });

    it('is written by the first run, pinning what was resolved', async () => {
      const result = await runMur(['run', '--json', '--task', '[]'], { cwd: project, env });
      expect(result.code, result.stderr).toBe(0);
      expect(await readLockfile(path.join(project, 'murmur.lock'))).toEqual({
        lock_version: 1,
        artifacts: [{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: sha256Hex(toolZip) } }],
      });
    });

    it('is honoured afterwards: a later manifest version runs the pinned artifact, with a warning', async () => {
      const manifest = path.join(project, 'murmur.yaml');
      await fs.writeFile(
        manifest,
        (await fs.readFile(manifest, 'utf8')).replace('version: 0.1.0\n', 'version: 0.1.0\n').replace('    version: 0.1.0', '    version: 0.2.0'),
      );
      const lockBefore = await fs.readFile(path.join(project, 'murmur.lock'), 'utf8');
      const result = await runMur(['run', '--json', '--task', JSON.stringify([{ op: 'describe', name: 'echo-tool' }])], { cwd: project, env });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toContain('warning[W-LCK-001]');
      expect(result.stderr).toContain('murmur.lock pins 0.1.0');
      const workdir = (JSON.parse(result.stdout) as { workdir: string }).workdir;
      const described = probeResults(await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8').then((log) => log.replaceAll('[stdout] ', '')));
      expect(described[0]).toMatchObject({ op: 'describe', ok: true, value: { name: 'echo-tool', version: '0.1.0' } });
      expect(await fs.readFile(path.join(project, 'murmur.lock'), 'utf8')).toBe(lockBefore);
    });

    it('refuses a tampered installed artifact with an integrity error before anything is compiled', async () => {
      const zip = path.join(env.MURMUR_HOME as string, 'artifacts', 'echo-tool', '0.1.0', 'echo-tool-0.1.0.mur.zip');
      const original = await fs.readFile(zip);
      const tampered = Buffer.from(original);
      tampered[100] = (tampered[100] ?? 0) ^ 0x01;
      await fs.writeFile(zip, tampered);
      try {
        const before = await listTree(path.join(project, 'workdir'));
        const result = await runMur(['run', '--json'], { cwd: project, env });
        expect(result.code).toBe(1);
        expect(result.stdout).toBe('');
        expect(result.stderr).toContain('error[E-REG-002]: artifact integrity check failed for echo-tool@0.1.0');
        expect(await listTree(path.join(project, 'workdir'))).toEqual(before);
      } finally {
        await fs.writeFile(zip, original);
      }
    });
  });
});
