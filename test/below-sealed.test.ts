import { promises as fs, readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ProbeResult, probeProject, probeResults } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { UNPRIVILEGED, delegatedCgroups } from './support/cgroups.js';
import { runMur } from './support/processes.js';

/**
 * A capsule with a shell on a host that cannot seal (`MURMUR_CONFINE=none`: bubblewrap's composed
 * root alone, `scoped`). What that class still holds, and what a launcher is told it does not.
 */
describe('a capsule with a shell, contained at scoped', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-below-sealed-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_CONFINE: 'none' };
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  // Its parent is the capsule host: the environment it was given and its memory both hold the secret.
  const readHost = [
    'import json, os',
    'secret = os.environ.get("NEEDLE", "").encode()',
    'out = {}',
    'host = os.getppid()',
    'try:',
    '    out["environ"] = secret in open(f"/proc/{host}/environ", "rb").read()',
    'except OSError as error:',
    '    out["environ"] = type(error).__name__',
    'try:',
    '    maps = open(f"/proc/{host}/maps").read().splitlines()',
    '    memory = open(f"/proc/{host}/mem", "rb", 0)',
    '    found = False',
    '    for line in maps:',
    '        span, perms = line.split()[0], line.split()[1]',
    '        start, end = (int(part, 16) for part in span.split("-"))',
    '        if "r" not in perms or end - start > 256 << 20: continue',
    '        try:',
    '            memory.seek(start); found = found or secret in memory.read(end - start)',
    '        except OSError: continue',
    '    out["mem"] = found',
    'except OSError as error:',
    '    out["mem"] = type(error).__name__',
    'print(json.dumps(out))',
  ].join('\n');

  it('runs its host from the execute-only node: a tool cannot read the host’s memory or environment, where an allowed secret is', async () => {
    const project = await probeProject(
      path.join(scratch.dir, 'read-host'),
      'capabilities:\n  env:\n    allow: [BELOW_SEALED_SECRET]\n  shell:\n    allow: [python3]\n',
    );
    const result = await runMur(
      [
        'run',
        '--json',
        '--task',
        // The tool is told which value to look for by name: its own environment never holds it.
        JSON.stringify([{ op: 'shell', binary: 'python3', args: ['-c', readHost], env: [['NEEDLE', 'below-sealed-secret-7f3a']] }]),
      ],
      { cwd: project, env: { ...env, BELOW_SEALED_SECRET: 'below-sealed-secret-7f3a' } },
    );
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const [shell] = probeResults((await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8')).replaceAll('[stdout] ', ''));
    const seen = JSON.parse(((shell?.value ?? { stdout: '{}' }) as { stdout: string }).stdout) as { environ: unknown; mem: unknown };
    expect(seen).toEqual({ environ: 'PermissionError', mem: 'PermissionError' });
    expect(await fs.readFile(path.join(workdir, 'logs', 'bootstrap.log'), 'utf8')).toContain('[bootstrap] containment: scoped (mountns+pivot_root)');
  });

  it('keeps /proc read-only for its tools: no kernel setting can be opened for writing, whichever user the executor is', async () => {
    const project = await probeProject(path.join(scratch.dir, 'proc-sys'), 'capabilities:\n  shell:\n    allow: [python3]\n');
    // Opened to append and never written: on a host where the old sandbox let it through, nothing changes.
    const tryOpen = [
      'import json',
      'out = {}',
      'for name in ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"]:',
      '    try:',
      '        open(name, "a").close(); out[name] = "opened"',
      '    except OSError as error:',
      '        out[name] = type(error).__name__',
      'proc = [line.split() for line in open("/proc/self/mountinfo") if line.split()[4] == "/proc"]',
      'out["mount"] = proc[-1][5].split(",")[0] if proc else "none"',
      'print(json.dumps(out))',
    ].join('\n');
    const result = await runMur(['run', '--json', '--task', JSON.stringify([{ op: 'shell', binary: 'python3', args: ['-c', tryOpen] }])], {
      cwd: project,
      env,
    });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const [shell] = probeResults((await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8')).replaceAll('[stdout] ', ''));
    const seen = JSON.parse(((shell?.value ?? { stdout: '{}' }) as { stdout: string }).stdout) as Record<string, string>;
    expect(seen.mount).toBe('ro');
    for (const name of ['/proc/sys/kernel/core_pattern', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger']) expect(seen[name], name).not.toBe('opened');
  });

  it('holds its tools to their ceilings, as sealed: rlimits through prlimit, the tools’ cgroup joined before each runs, and the trace names each', async () => {
    const project = await probeProject(
      path.join(scratch.dir, 'ceilings'),
      'capabilities:\n  shell:\n    allow: [python3, dd]\n  resources:\n    cpu_seconds: 1\n    max_file_size_bytes: 1048576\n    memory_bytes: 268435456\n    cgroup_memory_bytes: 67108864\n    cgroup_pids_max: 8\n',
    );
    const workdir = path.join(scratch.dir, 'ceilings-wd');
    await fs.mkdir(workdir);
    await fs.copyFile(path.join(path.dirname(new URL(import.meta.url).pathname), 'sealed', 'ceilings.py'), path.join(workdir, 'ceilings.py'));
    const python = (...args: string[]) => ({ op: 'shell', binary: 'python3', args });
    const result = await runMur(
      [
        'run',
        '--workdir',
        workdir,
        '--task',
        JSON.stringify([
          python('ceilings.py', 'cpu'),
          { op: 'shell', binary: 'dd', args: ['if=/dev/zero', 'of=big', 'bs=65536', 'count=64'] },
          python('ceilings.py', 'memory', '400'),
          // Written, not only reserved: 128 MiB the tools' 64 MiB group cannot hold.
          python('-c', 'x = b"x" * (128 << 20); print(len(x))'),
          python('ceilings.py', 'nproc', '40'),
        ]),
      ],
      { cwd: project, env },
    );
    expect(result.code, result.stderr).toBe(0);
    const [session] = readdirSync(path.join(workdir, '.murmur')).filter((entry) => entry.startsWith('ses_'));
    const records = path.join(workdir, '.murmur', session as string);
    const results = probeResults((await fs.readFile(path.join(records, 'logs', 'session.log'), 'utf8')).replaceAll('[stdout] ', ''));
    const shell = (await fs.readFile(path.join(records, 'trace.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((event) => event.event_type === 'shell');
    const value = (at: number) => (results[at] as ProbeResult).value as { exitCode: number; stdout: string };
    expect(value(0).exitCode, JSON.stringify(results[0])).toBe(152);
    expect(shell[0]).toMatchObject({ resource_limit: 'cpu_seconds' });
    expect(value(1).exitCode).toBe(153);
    expect(shell[1]).toMatchObject({ resource_limit: 'max_file_size_bytes' });
    expect((await fs.stat(path.join(workdir, 'big'))).size).toBe(1048576);
    expect(JSON.parse(value(2).stdout)).toEqual({ error: 'MemoryError', as_limit: 268435456 });
    expect(value(3).exitCode).toBe(137);
    expect(shell[3]).toMatchObject({ resource_limit: 'cgroup_memory_bytes' });
    const forks = JSON.parse(value(4).stdout) as { forked: number; refusal: string | null };
    expect(forks.refusal).toBe('Resource temporarily unavailable');
    expect(forks.forked).toBeLessThan(8);
  });

  // A harness the capsule names by path is its own program: a subprocess like any tool.
  async function harnessProject(name: string): Promise<{ project: string; workdir: string }> {
    const project = path.join(scratch.dir, name);
    await fs.mkdir(project, { recursive: true });
    await fs.writeFile(
      path.join(project, 'murmur.yaml'),
      'name: harnessed\nversion: 0.1.0\ninference:\n  transport: process\n  command: ./harness.sh\n  model: test-model\n',
    );
    await fs.writeFile(
      path.join(project, 'harness.sh'),
      [
        '#!/bin/sh',
        'cat /proc/self/cgroup > "$PWD/harness-cgroup.txt"',
        'echo \'{"type":"result","subtype":"success","result":"done","session_id":"00000000-0000-0000-0000-000000000000"}\'',
        '',
      ].join('\n'),
      { mode: 0o755 },
    );
    const workdir = path.join(project, 'wd');
    await fs.mkdir(workdir);
    return { project, workdir };
  }

  it('counts a harness the manifest names as a subprocess: it runs in the tools’ cgroup, and its launch is told what it is not held to', async () => {
    const { project, workdir } = await harnessProject('harness-scoped');
    const result = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--workdir', workdir, '--task', 'hi'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("warning: this executor contains the capsule's tools at mountns+pivot_root, below sealed");
    const groups = await fs.readFile(path.join(workdir, 'harness-cgroup.txt'), 'utf8');
    // Seen from its cgroup namespace, whose root is the session's group.
    expect(groups).toMatch(/^\d+:memory:\/tools$/m);
    expect(groups).toMatch(/^\d+:pids:\/tools$/m);
  });

  it('refuses such a harness, as any subprocess, on a root executor with only unshare', async (context) => {
    if (process.getuid?.() !== 0) {
      const why = '[below sealed] an unprivileged executor under unshare maps its tools to its own user, not root: the refusal is a root executor’s';
      console.warn(why);
      return context.skip(why);
    }
    const { project, workdir } = await harnessProject('harness-unshare');
    const result = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--workdir', workdir, '--task', 'hi'], {
      cwd: project,
      env: { MURMUR_HOME: env.MURMUR_HOME as string, MURMUR_BWRAP: 'none' },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("error[E-CAP-005]: this executor runs as root and has only unshare's namespaces");
    await expect(fs.stat(path.join(workdir, 'harness-cgroup.txt'))).rejects.toThrow(/ENOENT/);
  });

  it('is told, on stderr, in the bootstrap log and in --explain-scope, what its tools are not held to', async () => {
    const project = await probeProject(path.join(scratch.dir, 'told'), 'capabilities:\n  shell:\n    allow: [sh]\n  network:\n    allow: [127.0.0.1:9]\n');
    const result = await runMur(['run', '--json', '--task', '[]'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("warning: this executor contains the capsule's tools at mountns+pivot_root, below sealed; they are not held to:\n");
    for (const gap of [
      '  - network.allow: the tools have no network at all',
      '  - shell.allow past the program a tool starts',
      "  - seccomp: the tools' system calls are not filtered",
    ])
      expect(result.stderr).toContain(gap);
    expect(result.stderr).toContain('hint: declare capabilities.containment: sealed');
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const bootstrap = await fs.readFile(path.join(workdir, 'logs', 'bootstrap.log'), 'utf8');
    expect(bootstrap).toContain('[containment] warning: the tools are not held to network.allow: the tools have no network at all');
    const report = await runMur(['run', '--explain-scope'], { cwd: project, env });
    expect(report.code, report.stderr).toBe(0);
    expect(report.stdout).toContain('Not enforced here for subprocesses (shell and native tools)\n  - network.allow: the tools have no network at all');
    // Sealed, nothing is listed: the same capsule on this machine's own class.
    const sealed = await runMur(['run', '--json', '--task', '[]'], { cwd: project, env: { MURMUR_HOME: env.MURMUR_HOME as string } });
    expect(sealed.code, sealed.stderr).toBe(0);
    expect(sealed.stderr).not.toContain('below sealed');
  });
});

/**
 * `advisory` under unshare, as an unprivileged executor runs there (as root it refuses a capsule
 * with a shell): its tools are its own user, and still held to their ceilings and cgroup. Run as
 * uid 1000 in a cgroup subtree delegated to it, as the container image runs its executor.
 */
describe('a capsule with a shell, contained by an unprivileged executor under unshare', () => {
  const cgroups = delegatedCgroups('murmur-unshare-test');
  let scratch: { dir: string; cleanup: () => Promise<void> };

  beforeAll(async () => {
    scratch = await tempDir('murmur-below-sealed-unshare-');
  });

  afterAll(async () => {
    await cgroups.remove();
    await scratch.cleanup();
  });

  it('holds its tools to cpu_seconds and cgroup_pids_max, and says they see the machine as its user', async (context) => {
    if (cgroups.unavailable) {
      const why = `[below sealed] an executor as uid 1000 under unshare not exercised: ${cgroups.unavailable}`;
      console.warn(why);
      return context.skip(why);
    }
    await cgroups.delegate();
    const project = await probeProject(
      path.join(scratch.dir, 'capsule'),
      'capabilities:\n  shell:\n    allow: [python3]\n  resources:\n    cpu_seconds: 1\n    cgroup_pids_max: 8\n',
    );
    for (const entry of [scratch.dir, project, ...readdirSync(project).map((name) => path.join(project, name))])
      await fs.chown(entry, UNPRIVILEGED.uid, UNPRIVILEGED.gid);
    const ceilings = await fs.readFile(path.join(path.dirname(new URL(import.meta.url).pathname), 'sealed', 'ceilings.py'), 'utf8');
    const task = JSON.stringify([
      { op: 'shell', binary: 'python3', args: ['-c', ceilings, 'cpu'] },
      { op: 'shell', binary: 'python3', args: ['-c', ceilings, 'nproc', '40'] },
    ]);
    const { code, stdout, stderr } = await runMur(['run', '--task', task], {
      cwd: project,
      env: { MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_CGROUP_PARENT: cgroups.parent, MURMUR_BWRAP: 'none' },
      user: UNPRIVILEGED,
      timeoutMs: 60_000,
    });
    expect(code, stderr).toBe(0);
    expect(stderr).toContain("warning: this executor contains the capsule's tools at namespaces, below sealed; they are not held to:");
    expect(stderr).toContain("  - the workdir boundary: there is no composed root, so tools see and write this machine's files as the executor's user");
    const results = probeResults(stdout);
    expect((results[0] as ProbeResult).value).toMatchObject({ exitCode: 152 });
    const forks = JSON.parse(((results[1] as ProbeResult).value as { stdout: string }).stdout) as { forked: number; refusal: string | null };
    expect(forks.refusal).toBe('Resource temporarily unavailable');
    expect(forks.forked).toBeLessThan(8);
  }, 60_000);
});
