import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, promises as fs, readFileSync, readdirSync, readlinkSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { throttleDevice } from '../services/executor/src/block-device.js';
import { probeCgroups } from '../services/executor/src/cgroup.js';
import { interpreterOf } from '../services/executor/src/elf.js';
import { ARGUMENT_SYSCALLS, DENIED_SYSCALLS, UNAVAILABLE_SYSCALLS, nativeSeccompArch } from '../services/executor/src/seccomp.js';
import { probeProject, probeResults, type ProbeResult } from './support/capsules.js';
import { UNPRIVILEGED, delegatedCgroups } from './support/cgroups.js';
import { tmpfsOrSkip, tempDir } from './support/fs.js';
import { repositoryRoot, runMur } from './support/processes.js';
import { type CountingServer, startCountingServer, startCountingTlsServer, startCountingUdp } from './support/servers.js';

/**
 * The sealed sandbox, piece by piece, from inside: python3 and curl run as shell tools of a real
 * capsule and report what the kernel told them (`test/sealed/*.py`), and the test checks what
 * reached the servers standing in for the outside. The 28 escape cases are `escape.test.ts`.
 */

const here = path.dirname(new URL(import.meta.url).pathname);
/**
 * A script of `test/sealed/`, as a tool inside reaches it: each run's workdir gets a copy, since a
 * sandbox sees nothing of the repository beyond the capsule host's bundle.
 */
const script = (name: string): string => path.join('sealed-scripts', name);

interface ShellValue {
  exitCode: number;
  stdout: string;
  stderr: string;
}

describe('the sealed sandbox, piece by piece', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;

  beforeAll(async () => {
    // python3 and curl run inside the sandbox as shell tools; a machine without them cannot say anything here.
    for (const tool of ['/usr/bin/python3', '/usr/bin/curl'])
      expect(spawnSync(tool, ['--version']).status, `${tool} is needed (apt-get install python3 curl)`).toBe(0);
    scratch = await tempDir('murmur-sealed-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  async function run(
    name: string,
    capabilities: string,
    actions: unknown[],
    prepare?: (workdir: string) => Promise<void>,
    floor = '  containment: sealed\n',
  ): Promise<{ results: ProbeResult[]; code: number | null; stderr: string; stdout: string; trace: Array<Record<string, unknown>>; workdir: string }> {
    const project = await probeProject(path.join(scratch.dir, name), `capabilities:\n${floor}${capabilities}`);
    const workdir = path.join(scratch.dir, `${name}-wd`);
    await fs.mkdir(workdir);
    await fs.cp(path.join(here, 'sealed'), path.join(workdir, 'sealed-scripts'), { recursive: true });
    await prepare?.(workdir);
    const result = await runMur(['run', '--workdir', workdir, '--task', JSON.stringify(actions)], { cwd: project, env });
    const sessions = readdirSync(path.join(workdir, '.murmur')).filter((entry) => entry.startsWith('ses_'));
    const sessionDir = path.join(workdir, '.murmur', sessions[0] as string);
    const log = await fs.readFile(path.join(sessionDir, 'logs', 'session.log'), 'utf8').catch(() => '');
    const trace = (await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8').catch(() => ''))
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    return { results: probeResults(log.replaceAll('[stdout] ', '')), code: result.code, stderr: result.stderr, stdout: result.stdout, trace, workdir };
  }

  const python = (...args: string[]): { op: 'shell'; binary: string; args: string[] } => ({ op: 'shell', binary: 'python3', args });
  /** python3's dynamic loader, which the sandbox lets run (it is how python3 itself starts). */
  const loader = existsSync('/usr/bin/python3')
    ? (interpreterOf(realpathSync('/usr/bin/python3')) ?? '/lib64/ld-linux-x86-64.so.2')
    : '/lib64/ld-linux-x86-64.so.2';
  const value = (result: ProbeResult | undefined): ShellValue => result?.value as ShellValue;
  const json = (result: ProbeResult | undefined): Record<string, unknown> => JSON.parse(value(result).stdout) as Record<string, unknown>;
  const shellEvents = (trace: Array<Record<string, unknown>>): Array<Record<string, unknown>> => trace.filter((event) => event.event_type === 'shell');
  /** The helper every subprocess of a sealed host starts through. */
  const helperPath = path.join(repositoryRoot, 'services', 'executor', 'dist', 'confine', 'murmur-confine');
  const hostBundle = path.join(repositoryRoot, 'services', 'executor', 'dist', 'bundle', 'host.cjs');

  describe('seccomp', () => {
    const arch = nativeSeccompArch();
    let answers: Record<string, string>;

    beforeAll(async () => {
      if (!arch) return void console.warn(`[sealed] seccomp not exercised: no filter is built for ${process.arch}`);
      const calls: Array<[string, number, number[]]> = [];
      for (const [name, numbers] of Object.entries(DENIED_SYSCALLS))
        if (numbers[arch] !== undefined) calls.push([name, numbers[arch] as number, [0, 0, 0, 0, 0, 0]]);
      const clone = ARGUMENT_SYSCALLS.clone[arch] as number;
      const socket = ARGUMENT_SYSCALLS.socket[arch] as number;
      const SIGCHLD = 17;
      calls.push(
        ['clone:CLONE_NEWUSER', clone, [0x10000000 | SIGCHLD, 0, 0, 0, 0]],
        ['clone:CLONE_NEWNET', clone, [0x40000000 | SIGCHLD, 0, 0, 0, 0]],
        ['clone:CLONE_NEWNS', clone, [0x00020000 | SIGCHLD, 0, 0, 0, 0]],
        ['clone:plain', clone, [SIGCHLD, 0, 0, 0, 0]],
        ['clone3', ARGUMENT_SYSCALLS.clone3[arch] as number, [0, 0]],
        ['memfd_create', UNAVAILABLE_SYSCALLS.memfd_create?.[arch] as number, [0, 0]],
        ['socket:AF_INET', socket, [2, 1, 0]],
        ['socket:AF_INET6', socket, [10, 1, 0]],
        ['socket:AF_UNIX', socket, [1, 1, 0]],
        ['socket:AF_NETLINK', socket, [16, 3, 0]],
        ['socket:AF_PACKET', socket, [17, 3, 0]],
        ['socket:AF_ALG', socket, [38, 5, 0]],
        ['socket:AF_VSOCK', socket, [40, 1, 0]],
        // fallocate(stdin, mode, 0, …): the filter answers a keep-size reservation before the kernel looks at the descriptor.
        ['fallocate:KEEP_SIZE', ARGUMENT_SYSCALLS.fallocate[arch] as number, [0, 1, 0, 2 ** 30]],
        ['fallocate:extend', ARGUMENT_SYSCALLS.fallocate[arch] as number, [0, 0, 0, 4096]],
      );
      const outcome = await run('seccomp', '  shell:\n    allow: [python3]\n', [python(script('syscalls.py'), JSON.stringify(calls))]);
      expect(outcome.code, outcome.stderr).toBe(0);
      answers = json(outcome.results[0]) as Record<string, string>;
    }, 120_000);

    const denied = arch
      ? Object.entries(DENIED_SYSCALLS)
          .filter(([, numbers]) => numbers[arch] !== undefined)
          .map(([name]) => name)
      : [];
    it.skipIf(!arch).each(denied)('refuses %s with EPERM', (name) => {
      expect(answers[name]).toBe('EPERM');
    });

    it.skipIf(!arch)('refuses clone with a namespace flag (EPERM) and allows a plain one; clone3 is ENOSYS so libraries fall back to clone', () => {
      expect(answers['clone:CLONE_NEWUSER']).toBe('EPERM');
      expect(answers['clone:CLONE_NEWNET']).toBe('EPERM');
      expect(answers['clone:CLONE_NEWNS']).toBe('EPERM');
      expect(answers['clone:plain']).toBe('ok');
      expect(answers.clone3).toBe('ENOSYS');
    });

    it.skipIf(!arch)(
      'answers a fallocate that would reserve disk past a file’s end with EOPNOTSUPP, and leaves one that extends the file to the kernel',
      () => {
        // Python names errno 95 ENOTSUP, Linux's other name for EOPNOTSUPP.
        expect(answers['fallocate:KEEP_SIZE']).toMatch(/^(EOPNOTSUPP|ENOTSUP)$/);
        expect(answers['fallocate:extend']).not.toMatch(/^(EOPNOTSUPP|ENOTSUP)$/);
        expect(answers['fallocate:extend']).toMatch(/^E/);
      },
    );

    it.skipIf(!arch)('answers memfd_create with ENOSYS, as a kernel without it would, so libraries fall back to a file on a mount', () => {
      expect(answers.memfd_create).toBe('ENOSYS');
    });

    it.skipIf(!arch)('allows IPv4 and IPv6 sockets, refuses AF_UNIX, netlink and packet sockets with EACCES, and any other family with EPERM', () => {
      expect(answers['socket:AF_INET']).toBe('ok');
      expect(answers['socket:AF_INET6']).toBe('ok');
      expect(answers['socket:AF_UNIX']).toBe('EACCES');
      expect(answers['socket:AF_NETLINK']).toBe('EACCES');
      expect(answers['socket:AF_PACKET']).toBe('EACCES');
      expect(answers['socket:AF_ALG']).toBe('EPERM');
      expect(answers['socket:AF_VSOCK']).toBe('EPERM');
    });

    it.skipIf(!arch)('allows AF_UNIX sockets when network.unix_sockets grants them', async () => {
      const socket = ARGUMENT_SYSCALLS.socket[arch as 'x64'] as number;
      const outcome = await run('unix-granted', '  network:\n    unix_sockets: true\n  shell:\n    allow: [python3]\n', [
        python(script('syscalls.py'), JSON.stringify([['socket:AF_UNIX', socket, [1, 1, 0]]])),
      ]);
      expect(json(outcome.results[0])).toEqual({ 'socket:AF_UNIX': 'ok' });
    });
  });

  describe('Landlock', () => {
    let outcome: Awaited<ReturnType<typeof run>>;

    beforeAll(async () => {
      outcome = await run(
        'landlock',
        '  shell:\n    allow: [python3]\n',
        [
          python(script('devices.py'), '/dev/null', '/dev/zero', '/dev/urandom', '/dev/random', '/dev/full', '/dev/tty'),
          // By path: a binary on the system that shell.allow does not name.
          python('-c', "import subprocess\ntry:\n  subprocess.run(['/usr/bin/ls'])\n  print('ran')\nexcept OSError as e:\n  print(e.strerror)"),
          // By copy: the allowlisted python3 itself, copied into the workdir.
          python(
            '-c',
            "import subprocess\ntry:\n  subprocess.run(['./python-copy', '-c', 'print(1)'])\n  print('ran')\nexcept OSError as e:\n  print(e.strerror)",
          ),
          // The allowlisted binary runs, by its own path too.
          python('-c', "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True, text=True).stdout.strip())"),
          // Through the dynamic loader (which every dynamically linked binary may run): the copy in
          // the workdir, and a copy in /tmp, mapped rather than executed — only the mount refuses it.
          python(
            '-c',
            `import subprocess, shutil\nshutil.copy('./python-copy', '/tmp/python-copy')\nfor target in ['./python-copy', '/tmp/python-copy']:\n  r = subprocess.run(['${loader}', target, '-c', 'print(1)'], capture_output=True, text=True)\n  print(r.returncode, r.stdout.strip() or 'no output')`,
          ),
          // Through the dynamic loader, a system binary shell.allow does not name; and listing its directory.
          python(
            '-c',
            `import subprocess, os\nr = subprocess.run(['${loader}', '/usr/bin/ls', '/'], capture_output=True, text=True)\nprint(r.returncode, r.stdout.strip() or 'no output', 'denied' if 'Permission denied' in r.stderr else r.stderr.strip())\ntry:\n  os.listdir('/usr/bin')\n  print('listed')\nexcept OSError as e:\n  print(e.strerror)`,
          ),
          // Without a file on any mount: the copy's bytes in an anonymous memory file, executed.
          python(script('memfd-exec.py'), './python-copy'),
          // Moving and linking a file from one directory of the workdir to another, as git and
          // editors do; then truncating it, by opening it for writing and by truncate(2).
          python(
            '-c',
            "import ctypes, os\nprint(ctypes.CDLL(None).syscall(444, None, 0, 1))\nos.makedirs('from'); os.makedirs('to')\nopen('from/f', 'w').write('first')\ntry:\n  os.rename('from/f', 'to/f')\n  os.link('to/f', 'from/linked')\n  moved = open('from/linked').read()\n  open('to/f', 'w').write('second')\n  rewritten = open('from/linked').read()\n  os.truncate('to/f', 3)\n  print(moved, rewritten, open('to/f').read())\nexcept OSError as e:\n  print(e.strerror)",
          ),
          // What only the host executes: its own node (on a script the tool wrote, that would be any
          // program at all) and the helper. Both are in the sandbox, and the host runs them.
          python(
            '-c',
            `import glob, subprocess\nopen('brought.js', 'w').write('console.log("brought JS ran")')\nnodes = glob.glob('${path.join(env.MURMUR_HOME as string, 'cache', 'runtime', 'node-*', 'node')}')\nprint(len(nodes))\nfor target in [nodes[0], '${helperPath}']:\n  try:\n    r = subprocess.run([target, 'brought.js'], capture_output=True, text=True)\n    print(r.returncode, r.stdout.strip() or 'no output')\n  except OSError as e:\n    print(e.strerror)`,
          ),
          // The capsule host's bundle is read; nothing else of the repository is there: neither its
          // files, nor its hidden entries (a checkout's .env, .npmrc, .git).
          python(
            '-c',
            `for target in ['${hostBundle}', '${path.join(repositoryRoot, 'package.json')}', '${path.join(repositoryRoot, 'examples')}', '${path.join(repositoryRoot, '.gitignore')}', '${path.join(repositoryRoot, '.ci', 'run')}']:\n  try:\n    print('read' if open(target).read() else 'empty')\n  except OSError as e:\n    print(e.strerror)`,
          ),
          // SIGUSR1 to the capsule host, which shares the sandbox's processes and user with every
          // tool: Node's answer would be its inspector on 127.0.0.1:9229, which runs any code in the host.
          python(script('inspector.py')),
          // The names a tool resolves from files: the sandbox's own, never the machine's /etc/hosts.
          python('-c', "import socket\nprint(open('/etc/hosts').read().split())\nprint(socket.gethostbyname('localhost'), socket.gethostbyname('capsule'))"),
        ],
        async (workdir) => {
          copyFileSync(realpathSync('/usr/bin/python3'), path.join(workdir, 'python-copy'));
          await fs.chmod(path.join(workdir, 'python-copy'), 0o755);
        },
      );
      expect(outcome.code, outcome.stderr).toBe(0);
    }, 120_000);

    it('gives /dev/null read-write, /dev/zero and /dev/urandom read-only, and refuses every other device', () => {
      expect(json(outcome.results[0])).toEqual({
        '/dev/null': { read: 'ok', write: 'ok' },
        '/dev/zero': { read: 'ok', write: 'EACCES' },
        '/dev/urandom': { read: 'ok', write: 'EACCES' },
        '/dev/random': { read: 'EACCES', write: 'EACCES' },
        '/dev/full': { read: 'EACCES', write: 'EACCES' },
        '/dev/tty': { read: 'EACCES', write: 'EACCES' },
      });
    });

    it('refuses to execute a binary shell.allow does not name, by its path', () => {
      expect(value(outcome.results[1]).stdout.trim()).toBe('Permission denied');
    });

    it('refuses to execute a copy of an allowlisted binary in the workdir: the workdir has no execute right', () => {
      expect(value(outcome.results[2]).stdout.trim()).toBe('Permission denied');
    });

    it('runs the allowlisted binary itself', () => {
      expect(value(outcome.results[3]).stdout.trim()).toBe('7');
    });

    it('refuses to run a file of the workdir or /tmp through the dynamic loader: their mounts are noexec', () => {
      const lines = value(outcome.results[4]).stdout.trim().split('\n');
      expect(lines).toHaveLength(2);
      for (const line of lines) expect(line).toMatch(/^127 no output$/);
    });

    it('refuses to run a system binary shell.allow does not name through the dynamic loader: the directories of executables cannot be read', () => {
      expect(value(outcome.results[5]).stdout.trim().split('\n')).toEqual(['127 no output denied', 'Permission denied']);
    });

    it('cannot make an anonymous memory file to run a program brought as bytes from, past the execute rights and the noexec mounts', () => {
      expect(json(outcome.results[6])).toEqual({ 'proc-path': 'memfd_create:ENOSYS', descriptor: 'memfd_create:ENOSYS' });
    });

    it('lets no tool run the host’s own node or the helper, which the host runs itself: a tool runs only what it was granted', () => {
      expect(value(outcome.results[8]).stdout.trim().split('\n')).toEqual(['1', 'Permission denied', 'Permission denied']);
    });

    it('lets a tool read the capsule host’s bundle and nothing else of the runtime’s checkout: neither its files nor its hidden entries', () => {
      // Under the code root of a runtime npm installed into a project lie the project's sources and every other session's workdir.
      expect(value(outcome.results[9]).stdout.trim().split('\n')).toEqual([
        'read',
        'No such file or directory',
        'No such file or directory',
        'No such file or directory',
        'No such file or directory',
      ]);
    });

    it('lets no tool open the capsule host’s inspector with SIGUSR1: the host ignores the signal, says so once, and goes on', async () => {
      expect(value(outcome.results[10]).stdout.trim()).toBe('signalled: inspector closed, host alive');
      const sessions = readdirSync(path.join(outcome.workdir, '.murmur')).filter((entry) => entry.startsWith('ses_'));
      const hostLog = await fs.readFile(path.join(outcome.workdir, '.murmur', sessions[0] as string, 'logs', 'host.log'), 'utf8');
      expect(hostLog).toContain('SIGUSR1 ignored: this host opens no inspector');
      expect(hostLog).not.toContain('Debugger listening');
    });

    it('gives a tool a hosts file of the sandbox’s own names alone: localhost and its host name, nothing of the machine’s', () => {
      expect(value(outcome.results[11]).stdout.trim().split('\n')).toEqual([
        "['127.0.0.1', 'localhost', 'capsule', '::1', 'localhost', 'ip6-localhost', 'ip6-loopback']",
        '127.0.0.1 127.0.0.1',
      ]);
    });

    it('lets a file of the workdir move or be linked into another of its directories, and be truncated', () => {
      const [abi, said] = value(outcome.results[7]).stdout.trim().split('\n');
      // Landlock's ABI 1 (kernels 5.13 to 5.18) refuses every move into another directory.
      expect(said).toBe(Number(abi) >= 2 ? 'first second sec' : 'Invalid cross-device link');
    });
  });

  it('runs what a capsule granted workdir_exec builds in its workdir, through the helper as any tool (at advisory)', async () => {
    const outcome = await run(
      'workdir-exec-runs',
      '  filesystem:\n    workdir_exec: true\n  shell:\n    allow: [python3]\n',
      [python('-c', "import subprocess\nprint(subprocess.run(['./python-copy', '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip())")],
      async (workdir) => {
        copyFileSync(realpathSync('/usr/bin/python3'), path.join(workdir, 'python-copy'));
        await fs.chmod(path.join(workdir, 'python-copy'), 0o755);
      },
      '',
    );
    expect(outcome.code, outcome.stderr).toBe(0);
    expect(value(outcome.results[0]).stdout.trim()).toBe('42');
    // Advisory, as workdir_exec caps it; its tools still start through murmur-confine, in its layer.
    expect(outcome.trace[0]).toMatchObject({ containment_achieved: 'advisory' });
  }, 120_000);

  describe('the network', () => {
    let listed: CountingServer;
    let unlisted: CountingServer;
    let tls: Awaited<ReturnType<typeof startCountingTlsServer>>;
    let udp: Awaited<ReturnType<typeof startCountingUdp>>;
    let outcome: Awaited<ReturnType<typeof run>>;

    beforeAll(async () => {
      listed = await startCountingServer(() => ({ body: 'listed' }));
      unlisted = await startCountingServer(() => ({ body: 'unlisted' }));
      const tlsDir = path.join(scratch.dir, 'tls');
      await fs.mkdir(tlsDir);
      tls = await startCountingTlsServer(tlsDir, () => 'hello from the allowlisted TLS server');
      udp = await startCountingUdp();
      const allow = [`127.0.0.1:${listed.port}`, `localhost:${tls.port}`, `127.0.0.1:${udp.port}`, 'api.murmur-test.invalid'];
      outcome = await run(
        'network',
        `  network:\n    allow: [${allow.map((entry) => `"${entry}"`).join(', ')}]\n  shell:\n    allow: [python3, curl]\n`,
        [
          python(
            script('network.py'),
            `tcp:127.0.0.1:${listed.port}`,
            `tcp:127.0.0.1:${unlisted.port}`,
            `udp:127.0.0.1:${udp.port}`,
            'udp:1.1.1.1:53',
            'dns:api.murmur-test.invalid',
            'dns:unlisted.murmur-test.invalid',
            'dns:localhost',
          ),
          { op: 'shell', binary: 'curl', args: ['-sS', '--max-time', '10', '--cacert', 'ca.pem', `${tls.url}/hello`] },
          { op: 'shell', binary: 'curl', args: ['-sS', '--max-time', '10', `${unlisted.url}/never`] },
          { op: 'shell', binary: 'curl', args: ['-sS', '--max-time', '10', '-o', '/dev/null', '-w', '%{http_code}', `${listed.url}/plain`] },
        ],
        async (workdir) => {
          await fs.copyFile(tls.ca, path.join(workdir, 'ca.pem'));
        },
      );
      expect(outcome.code, outcome.stderr).toBe(0);
    }, 120_000);

    afterAll(async () => {
      for (const server of [listed, unlisted, tls]) await server?.close();
      await udp?.close();
    });

    it('connects to an allowlisted destination through the executor, and refuses an unlisted one at once (ECONNREFUSED)', () => {
      const answers = json(outcome.results[0]);
      expect(answers[`tcp:127.0.0.1:${listed.port}`]).toBe('connected');
      expect(answers[`tcp:127.0.0.1:${unlisted.port}`]).toBe('ECONNREFUSED');
    });

    it('lets no datagram out, allowlisted destination or not', () => {
      const answers = json(outcome.results[0]);
      // The send succeeds — every address is the sandbox's own — and goes nowhere.
      expect(answers[`udp:127.0.0.1:${udp.port}`]).toBe('sent');
      expect(udp.datagrams()).toBe(0);
    });

    it('answers DNS for an allowlisted name with its listener, and refuses every other name', () => {
      const answers = json(outcome.results[0]);
      expect(answers['dns:api.murmur-test.invalid']).toEqual([expect.stringMatching(/^127\.77\.\d+\.\d+$/)]);
      expect(answers['dns:unlisted.murmur-test.invalid']).toBe('EAI_AGAIN');
      expect(answers['dns:localhost']).toEqual(['127.0.0.1']);
      const refusals = outcome.trace.filter((event) => event.event_type === 'egress' && event.kind === 'dns');
      expect(refusals).toContainEqual(expect.objectContaining({ target: 'unlisted.murmur-test.invalid', decision: 'denied' }));
    });

    it('lets an allowlisted curl reach the loopback TLS server, the bytes untouched (the certificate verifies end to end)', () => {
      expect(value(outcome.results[1])).toMatchObject({ exitCode: 0, stdout: 'hello from the allowlisted TLS server' });
      expect(tls.connections()).toBe(1);
      expect(outcome.trace).toContainEqual(
        expect.objectContaining({ event_type: 'egress', kind: 'tcp', target: `localhost:${tls.port}`, decision: 'allowed' }),
      );
    });

    it('never opens a connection to an unlisted server, whichever tool asks', () => {
      expect(value(outcome.results[2]).exitCode).toBe(7);
      expect(value(outcome.results[2]).stderr).toContain("Couldn't connect to server");
      expect(unlisted.connections()).toBe(0);
    });

    it('counts one connection per allowlisted connect: the python connect and the curl request', () => {
      expect(value(outcome.results[3]).stdout).toBe('200');
      expect(listed.connections()).toBe(2);
    });
  });

  describe('resource ceilings', () => {
    const isRoot = process.getuid?.() === 0;
    let outcome: Awaited<ReturnType<typeof run>>;

    beforeAll(async () => {
      outcome = await run(
        'ceilings',
        '  shell:\n    allow: [python3, dd]\n  resources:\n    cpu_seconds: 1\n    max_file_size_bytes: 1048576\n    memory_bytes: 268435456\n    max_processes: 6\n    cgroup_cpu_percent: 20\n    cgroup_io_bytes_per_sec: 262144\n',
        [
          python(script('ceilings.py'), 'cpu'),
          // dd, not python: Python ignores SIGXFSZ (and sees EFBIG instead).
          { op: 'shell', binary: 'dd', args: ['if=/dev/zero', 'of=ceiling-big', 'bs=65536', 'count=64'] },
          python(script('ceilings.py'), 'memory', '512'),
          python(script('ceilings.py'), 'nproc', '40'),
          python(script('ceilings.py'), 'cpu-share', '1.5'),
          // Direct I/O: on cgroup v1 a buffered write reaches the disk through writeback, which no group is charged for.
          { op: 'shell', binary: 'dd', args: ['if=/dev/zero', 'of=io-throttled', 'bs=65536', 'count=8', 'oflag=direct'] },
          { op: 'shell', binary: 'dd', args: ['if=io-throttled', 'of=/dev/null', 'bs=65536', 'iflag=direct'] },
        ],
      );
      expect(outcome.code, outcome.stderr).toBe(0);
    }, 120_000);

    it('kills a tool past cpu_seconds with SIGXCPU: exit 128+24, and the trace names the ceiling', () => {
      expect(value(outcome.results[0]).exitCode).toBe(152);
      expect(shellEvents(outcome.trace)[0]).toMatchObject({ exit_code: 152, resource_limit: 'cpu_seconds' });
      // And whoever called it (a model reading a shell tool's result) is told so, in upstream's code.
      expect(value(outcome.results[0]).stderr).toContain('[killed: E-RUN-011: the command exceeded capabilities.resources.cpu_seconds]');
    });

    it('kills a tool writing past max_file_size_bytes with SIGXFSZ: exit 128+25, the file cut at the ceiling', async () => {
      expect(value(outcome.results[1]).exitCode).toBe(153);
      expect(shellEvents(outcome.trace)[1]).toMatchObject({ exit_code: 153, resource_limit: 'max_file_size_bytes' });
      expect((await fs.stat(path.join(outcome.workdir, 'ceiling-big'))).size).toBe(1048576);
    });

    it('refuses an allocation past memory_bytes (RLIMIT_AS)', () => {
      expect(json(outcome.results[2])).toEqual({ error: 'MemoryError', as_limit: 268435456 });
    });

    it('refuses a fork past max_processes (RLIMIT_NPROC)', (context) => {
      if (isRoot) {
        // The kernel exempts root's own user from RLIMIT_NPROC, and a sandbox a root executor starts
        // is root outside its namespace: the limit is set (checked), and cannot bind here.
        expect((json(outcome.results[3]) as { nproc_limit: number }).nproc_limit).toBeGreaterThanOrEqual(6);
        const why =
          '[sealed] max_processes not exercised: this executor runs as root, which RLIMIT_NPROC never binds (the next test runs an executor as uid 1000 for it)';
        console.warn(why);
        context.skip(why);
      }
      const answer = json(outcome.results[3]) as { forked: number; refusal: string | null };
      expect(answer.refusal).toBe('Resource temporarily unavailable');
      expect(answer.forked).toBeLessThanOrEqual(6);
    });

    it('holds a tool to cgroup_cpu_percent: 20% of a core gets well under its wall time in CPU', () => {
      const answer = json(outcome.results[4]) as { wall: number; cpu: number };
      expect(answer.wall).toBeGreaterThanOrEqual(1.5);
      // 20 ms of every 100 ms: about 0.3 s of CPU in 1.5 s (unthrottled it would be ~1.5 s).
      expect(answer.cpu).toBeLessThan(0.75);
    });

    it('holds a tool’s reads and writes of the workdir’s disk to cgroup_io_bytes_per_sec: 512 KiB at 256 KiB/s takes seconds each way', (context) => {
      const disk = throttleDevice(outcome.workdir);
      const io = probeCgroups().support?.ioUnavailable;
      if (!('device' in disk) || io !== undefined) {
        const why = `[sealed] cgroup_io_bytes_per_sec not exercised: ${'unresolved' in disk ? disk.unresolved : io}`;
        console.warn(why);
        return context.skip(why);
      }
      const seconds = (result: ProbeResult | undefined): number => {
        const copied = / copied, ([\d.]+) s,/.exec(value(result).stderr);
        expect(copied, value(result).stderr).not.toBeNull();
        return Number(copied?.[1]);
      };
      expect(value(outcome.results[5]).exitCode).toBe(0);
      expect(value(outcome.results[6]).exitCode).toBe(0);
      // ~2 s each at the ceiling; unthrottled, a few milliseconds.
      expect(seconds(outcome.results[5])).toBeGreaterThanOrEqual(1);
      expect(seconds(outcome.results[6])).toBeGreaterThanOrEqual(1);
    });

    it('says in the session’s log that cgroup_io_bytes_per_sec does not hold on a workdir with no disk of its own (tmpfs), and runs', async (context) => {
      const project = await probeProject(path.join(scratch.dir, 'io-on-tmpfs'), "capabilities:\n  containment: sealed\n  shell:\n    allow: ['true']\n");
      // A tmpfs of the test's own (the machine's /dev/shm lies where a sandbox mounts its own /dev).
      const workdir = path.join(scratch.dir, 'io-on-tmpfs-wd');
      await fs.mkdir(workdir);
      const mounted = tmpfsOrSkip(context, workdir, 'size=16m', '[sealed] the note of an unthrottled workdir not exercised');
      try {
        const result = await runMur(['run', '--workdir', workdir, '--task', JSON.stringify([{ op: 'shell', binary: 'true', args: [] }])], {
          cwd: project,
          env,
        });
        expect(result.code, result.stderr).toBe(0);
        const [session] = readdirSync(path.join(workdir, '.murmur')).filter((entry) => entry.startsWith('ses_'));
        const bootstrap = await fs.readFile(path.join(workdir, '.murmur', session as string, 'logs', 'bootstrap.log'), 'utf8');
        expect(bootstrap).toMatch(
          /\[sandbox\] note: cgroup_io_bytes_per_sec not applied \(the workdir's filesystem \(device 0:\d+\) lies on no block device of its own.*\); the tools' memory, pids and CPU ceilings still hold/,
        );
      } finally {
        mounted.unmount();
      }
    });
  });

  // Root's own user is exempt from RLIMIT_NPROC, so as root the test runs `mur` as uid 1000 in a
  // cgroup subtree delegated to it, as the container image runs its executor.
  describe('max_processes, with an unprivileged executor', () => {
    const cgroups = delegatedCgroups('murmur-test');

    afterAll(() => cgroups.remove());

    it('refuses a fork past max_processes, counted over the tasks the sandbox’s user already runs', async (context) => {
      if (process.getuid?.() !== 0 || cgroups.unavailable) {
        const why =
          process.getuid?.() !== 0
            ? '[sealed] covered by the resource ceilings above: this run is unprivileged already'
            : `[sealed] max_processes as uid 1000 not exercised: ${cgroups.unavailable}`;
        console.warn(why);
        return context.skip(why);
      }
      await cgroups.delegate();
      // uid 1000 must reach its own directory inside the scratch one.
      await fs.chmod(scratch.dir, 0o755);
      const dir = path.join(scratch.dir, 'unprivileged');
      await fs.mkdir(dir, { recursive: true });
      const project = await probeProject(
        path.join(dir, 'capsule'),
        'capabilities:\n  containment: sealed\n  shell:\n    allow: [python3]\n  resources:\n    max_processes: 6\n',
      );
      for (const entry of [dir, path.join(dir, 'capsule'), path.join(dir, 'capsule', 'murmur.yaml'), path.join(dir, 'capsule', 'capsule.wasm')])
        await fs.chown(entry, UNPRIVILEGED.uid, UNPRIVILEGED.gid);
      // Its workdir is made by the run: the script goes as python's -c (the same argv after it).
      const task = JSON.stringify([python('-c', readFileSync(path.join(here, 'sealed', 'ceilings.py'), 'utf8'), 'nproc', '40')]);
      const { code, stdout, stderr } = await runMur(['run', '--task', task], {
        cwd: project,
        env: { MURMUR_HOME: path.join(dir, 'home'), MURMUR_CGROUP_PARENT: cgroups.parent },
        user: UNPRIVILEGED,
        timeoutMs: 60_000,
      });
      expect(code, stderr).toBe(0);
      const answer = JSON.parse((probeResults(stdout)[0]!.value as ShellValue).stdout) as { forked: number; refusal: string | null; nproc_limit: number };
      expect(answer.refusal).toBe('Resource temporarily unavailable');
      expect(answer.forked).toBeGreaterThan(0);
      expect(answer.forked).toBeLessThanOrEqual(6);
    }, 60_000);
  });

  describe('the workdir ceiling', () => {
    it('refuses the next spawn naming workdir_max_bytes and ends the session with E-RUN-013 — the guard walks every 10 s', async () => {
      const project = await probeProject(
        path.join(scratch.dir, 'workdir-ceiling'),
        'capabilities:\n  containment: sealed\n  shell:\n    allow: [python3]\n  resources:\n    workdir_max_bytes: 1048576\n',
      );
      // Two spawns 11 s apart: the first fills the workdir past its ceiling, the guard's walk (every
      // 10 s) sees it, the second is refused.
      const fill = python('-c', "open('filler', 'wb').write(b'x' * 2097152)");
      const wait = { op: 'waitfor', path: 'never-appears', seconds: 11 };
      const result = await runMur(['run', '--task', JSON.stringify([fill, wait, python('-c', 'print(1)')])], { cwd: project, env });
      expect(result.code).toBe(1);
      const results = probeResults(result.stdout);
      expect(results[0]?.ok).toBe(true);
      expect(results[2]).toMatchObject({
        ok: false,
        error: expect.stringContaining('past the 1048576 byte ceiling (capabilities.resources.workdir_max_bytes)'),
      });
      expect(result.stderr).toContain('error[E-RUN-013]: session workdir grew to');
      expect(result.stderr).toContain('hint: raise capabilities.resources.workdir_max_bytes');
    }, 60_000);
  });
});

describe('containment: declared, achieved, explained', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let project: string;

  beforeAll(async () => {
    scratch = await tempDir('murmur-containment-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    project = await probeProject(
      path.join(scratch.dir, 'capsule'),
      'capabilities:\n  network:\n    allow: [api.example.com]\n  shell:\n    allow: [python3]\n    interpreter_runtime:\n      - binary: python3\n        dirs:\n          - { path: /usr/lib/python3, list_dir: true }\n',
    );
  });

  afterAll(async () => {
    await scratch.cleanup();
  });

  it('--explain-scope prints the containment and the effective grants, exits 0 and starts nothing', async () => {
    const result = await runMur(['run', '--explain-scope', '--containment', 'sealed'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(
      [
        'Containment',
        '  declared:  sealed',
        '  achieved:  sealed',
        '  floor met: yes',
        '  mechanism: mountns+pivot_root+landlock+seccomp',
        '',
        'Effective grants',
        '  filesystem scope: .',
        '  workdir exec:     false',
        '  network allow:',
        '    - api.example.com',
        '  unix sockets:     false',
        '  shell allow:',
        '    - python3',
        '  spawn allow: <none>',
        '  env allow: <none>',
        '  interpreter runtime:',
        '    - python3: /usr/lib/python3 (list_dir)',
        '  staged runtime: <none>',
        '',
      ].join('\n'),
    );
    expect(readdirSync(project)).not.toContain('workdir');
    expect(readdirSync(project)).not.toContain('murmur.lock');
  });

  it('--explain-scope --json gives the trace’s effective_grants object', async () => {
    const result = await runMur(['run', '--explain-scope', '--json'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      declared_containment: 'advisory',
      achieved_containment: 'sealed',
      floor_met: true,
      enforcement_tier: 'mountns+pivot_root+landlock+seccomp',
      filesystem_scope: '.',
      workdir_exec: false,
      network_allow: ['api.example.com'],
      unix_sockets: false,
      shell_allow: ['python3'],
      spawn_allow: [],
      env_allow: [],
      interpreter_runtime_grants: ['python3: /usr/lib/python3 (list_dir)'],
      staged_runtime_grants: [],
    });
  });

  it('refuses an unknown --containment class naming the flag', async () => {
    const result = await runMur(['run', '--containment', 'sealedd'], { cwd: project, env });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("error[E-IO-003]: --containment must be one of: advisory, scoped, sealed; got 'sealedd'");
  });

  it('refuses sealed with E-CAP-003 naming the exact cause on a host that cannot seal, before anything is staged', async () => {
    const unsealed = { ...env, MURMUR_CONFINE: 'none' };
    const result = await runMur(['run', '--containment', 'sealed'], { cwd: project, env: unsealed });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      "error[E-CAP-003]: declared containment class 'sealed' is not achievable on this host (achieved: 'scoped'): sealing is turned off on this executor (MURMUR_CONFINE=none)",
    );
    expect(result.stderr).toContain("hint: lower the declared floor to 'scoped'");
    expect(readdirSync(project)).not.toContain('workdir');
    const missing = await runMur(['run', '--containment', 'sealed'], {
      cwd: project,
      env: { ...env, MURMUR_CONFINE: path.join(scratch.dir, 'no-such-helper') },
    });
    expect(missing.stderr).toContain(`the confinement helper ${path.join(scratch.dir, 'no-such-helper')} was not built`);
    // The report says the same, and still exits 0.
    const report = await runMur(['run', '--explain-scope', '--containment', 'sealed'], { cwd: project, env: unsealed });
    expect(report.code).toBe(0);
    expect(report.stdout).toContain(
      '  floor met: no\n  reason:    sealing is turned off on this executor (MURMUR_CONFINE=none)\n  mechanism: mountns+pivot_root',
    );
    expect(report.stdout).toContain('This is a report only');
  });

  it('holds a run to the strongest floor of the manifest, the global and project config, and the flag', async () => {
    const configured = await probeProject(path.join(scratch.dir, 'configured'), 'capabilities:\n  containment: advisory\n');
    await fs.mkdir(path.join(configured, '.murmur'), { recursive: true });
    await fs.writeFile(path.join(configured, '.murmur', 'config.yaml'), 'containment: scoped\n');
    await fs.mkdir(env.MURMUR_HOME as string, { recursive: true });
    await fs.writeFile(path.join(env.MURMUR_HOME as string, 'config.yaml'), 'containment: sealed\n');
    try {
      const explained = JSON.parse(
        (await runMur(['run', '--explain-scope', '--json', '--containment', 'advisory'], { cwd: configured, env })).stdout,
      ) as Record<string, unknown>;
      expect(explained.declared_containment).toBe('sealed');
      const refused = await runMur(['run'], { cwd: configured, env: { ...env, MURMUR_CONFINE: 'none' } });
      expect(refused.stderr).toContain("error[E-CAP-003]: declared containment class 'sealed'");
      const ran = await runMur(['run', '--json'], { cwd: configured, env });
      expect(ran.code, ran.stderr).toBe(0);
      const { workdir } = JSON.parse(ran.stdout) as { workdir: string };
      const start = JSON.parse((await fs.readFile(path.join(workdir, 'trace.jsonl'), 'utf8')).split('\n')[0] as string) as Record<string, unknown>;
      expect(start).toMatchObject({ containment_achieved: 'sealed', effective_grants: { declared_containment: 'sealed', floor_met: true } });
    } finally {
      await fs.rm(path.join(env.MURMUR_HOME as string, 'config.yaml'), { force: true });
    }
  });

  it('refuses a launch whose sandbox could not be described after its shell was started, and leaves no process or cgroup of it', async () => {
    // A shell binary found in a directory on PATH whose name holds a newline: the helper's spec
    // cannot name it, which is found as the spec is worked out, after the sandbox's shell was
    // spawned to join the session's cgroup. (A workdir so named is refused before anything.)
    const project = await probeProject(path.join(scratch.dir, 'late-refusal'), 'capabilities:\n  containment: sealed\n  shell:\n    allow: [late-tool]\n');
    const bin = path.join(scratch.dir, 'late\nrefusal-bin');
    await fs.mkdir(bin);
    await fs.copyFile('/bin/true', path.join(bin, 'late-tool'));
    await fs.chmod(path.join(bin, 'late-tool'), 0o755);
    const workdir = path.join(scratch.dir, 'late-refusal-wd');
    await fs.mkdir(workdir);
    const result = await runMur(['run', '--workdir', workdir, '--task', '[]'], { cwd: project, env: { ...env, PATH: `${bin}:${process.env.PATH ?? ''}` } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `error[E-IO-003]: the sandbox's rules would name the path ${JSON.stringify(path.join(bin, 'late-tool'))}, which holds a control character (a line break, a tab), and no rule can name it; nothing ran`,
    );
    const session = readdirSync(path.join(workdir, '.murmur')).find((entry) => entry.startsWith('ses_'));
    expect(session).toBeDefined();
    // The session's groups, in each hierarchy this process is in (where the executor made them).
    const groups = readFileSync('/proc/self/cgroup', 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split(':'))
      .map(([, controllers, at]) =>
        path.join('/sys/fs/cgroup', controllers === '' ? '' : (controllers as string).replace(/^name=/, ''), at as string, `murmur-${session}`),
      );
    expect(groups.filter((group) => existsSync(group))).toEqual([]);
    const inWorkdir = readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .filter((pid) => {
        try {
          return readlinkSync(`/proc/${pid}/cwd`) === workdir;
        } catch {
          return false;
        }
      });
    expect(inWorkdir).toEqual([]);
  });

  it('refuses a workspace config whose containment is not a class, naming the file and the line', async () => {
    const configured = await probeProject(path.join(scratch.dir, 'bad-config'), '');
    await fs.mkdir(path.join(configured, '.murmur'), { recursive: true });
    const file = path.join(configured, '.murmur', 'config.yaml');
    await fs.writeFile(file, 'registry:\n  default: official\ncontainment: airtight\n');
    const result = await runMur(['run'], { cwd: configured, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `error[E-CFG-003]: ${file}: invalid configuration value for 'containment': must be one of: advisory, scoped, sealed; got 'airtight' (line 3)`,
    );
  });

  it('refuses workdir_exec under a sealed floor: a binary written into the workdir would run whatever shell.allow says', async () => {
    const exec = await probeProject(
      path.join(scratch.dir, 'workdir-exec'),
      'capabilities:\n  containment: sealed\n  filesystem:\n    workdir_exec: true\n  shell:\n    allow: [python3]\n',
    );
    const result = await runMur(['run'], { cwd: exec, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      "error[E-CAP-003]: declared containment class 'sealed' is not achievable on this host (achieved: 'advisory'): capabilities.filesystem.workdir_exec: true keeps the execute right on the session workdir",
    );
  });
});
