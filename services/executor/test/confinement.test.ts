import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { confinementSpec, executeOnlyNode, resolveShellBinaries } from '../src/confinement.js';
import { probeHost } from '../src/host-probe.js';
import { mountTmpfs } from '../../../test/support/fs.js';
import { systemReadable, systemReadableUnder } from '../src/sandbox.js';
import { executionClosure, interpreterOf } from '../src/elf.js';
import { planNetwork } from '../src/network-plan.js';

import type { ConfinementInput } from '../src/confinement.js';

const policy: ConfinementInput['policy'] = { interpreter_runtime: [], staged_runtime: [], workdir_exec: false, unix_sockets: false };

function spec(overrides: Partial<ConfinementInput['policy']> = {}): string[] {
  return confinementSpec({
    policy: { ...policy, ...overrides },
    network: planNetwork(['api.example.com:443'], 16),
    workdir: '/work/session',
    tmp: '/work/session/.capsule-tmp',
    workdirMounts: ['/work/session/children', '/work/session/trace.jsonl'],
    readable: ['/usr', '/etc', '/proc'],
    executables: [],
    shellBinaries: [],
    seccompFd: 8,
    keep: [3, 9],
  })
    .trim()
    .split('\n');
}

describe('the confinement spec murmur-confine carries out', () => {
  it('makes the network first, drops capabilities before Landlock, and installs seccomp last', () => {
    const lines = spec().filter((line) => !line.startsWith('#'));
    const kinds = lines.map((line) => line.split(' ')[0]);
    expect(kinds[0]).toBe('net');
    expect(kinds.indexOf('drop')).toBeGreaterThan(kinds.lastIndexOf('listen'));
    expect(kinds.indexOf('landlock')).toBe(kinds.indexOf('drop') + 1);
    expect(lines.at(-1)).toBe('seccomp 8');
    expect(lines).toContain('listen udp 0.0.0.0 53 16');
    expect(lines).toContain('listen tcp 0.0.0.0 53 17');
    expect(lines).toContain('listen tcp 127.77.0.1 443 18');
    expect(lines).toContain('keep 3');
    expect(lines).toContain('keep 9');
  });

  it('grants the workdir and /tmp everything but execute and making devices or sockets, and requires both to exist', () => {
    const lines = spec();
    expect(lines).toContain('require rwdm /work/session');
    expect(lines).toContain('require rwdm /work/session/.capsule-tmp');
  });

  it('remounts the workdir, /tmp and every mount inside the workdir noexec, before it drops: a child’s files are not its parent’s to run', () => {
    const lines = spec();
    const noexec = lines.filter((line) => line.startsWith('noexec '));
    expect(noexec).toEqual(['noexec /work/session', 'noexec /tmp', 'noexec /work/session/children', 'noexec /work/session/trace.jsonl']);
    expect(lines.indexOf('drop')).toBeGreaterThan(lines.indexOf(noexec.at(-1) as string));
    expect(spec({ workdir_exec: true }).filter((line) => line.startsWith('noexec '))).toEqual([]);
  });

  it('adds execute to the workdir only with workdir_exec, and making sockets only with unix_sockets', () => {
    expect(spec({ workdir_exec: true })).toContain('require rwdmx /work/session');
    expect(spec({ unix_sockets: true })).toContain('require rwdms /work/session');
  });

  it('gives read and list, never execute, to what the host reads', () => {
    expect(spec().filter((line) => line.startsWith('allow rd '))).toEqual(['allow rd /usr', 'allow rd /etc', 'allow rd /proc']);
  });

  it('gives the devices upstream gives: /dev/null read-write, /dev/zero and /dev/urandom read-only, nothing else', () => {
    expect(spec().filter((line) => line.includes(' /dev/'))).toEqual(['allow rw /dev/null', 'allow r /dev/zero', 'allow r /dev/urandom']);
  });

  it('gives an interpreter runtime read and execute, and list only where the grant says so', () => {
    const lines = spec({
      interpreter_runtime: [
        {
          binary: 'python3',
          dirs: [
            { path: '/opt/py/lib', list_dir: true },
            { path: '/opt/py/dynload', list_dir: false },
          ],
        },
      ],
    });
    expect(lines).toContain('allow rxd /opt/py/lib');
    expect(lines).toContain('allow rx /opt/py/dynload');
  });

  it('refuses to write a spec naming a path with a line break in it, wherever the path comes from', () => {
    const base = {
      policy,
      network: planNetwork([], 16),
      workdir: '/w',
      tmp: '/w/t',
      readable: ['/usr'],
      executables: [],
      shellBinaries: [],
      seccompFd: 8,
      keep: [],
    };
    const injected = '/opt/none\nallow rwxdm /';
    const cases: ConfinementInput[] = [
      { ...base, readable: ['/usr', '/evil\nseccomp 0'] },
      { ...base, policy: { ...policy, interpreter_runtime: [{ binary: 'python3', dirs: [{ path: injected, list_dir: true }] }] } },
      { ...base, policy: { ...policy, staged_runtime: [{ binary: 'python3', source_path: injected, pin: '3' }] } },
      { ...base, workdir: '/w\nallow rwxdm /' },
    ];
    for (const input of cases)
      expect(() => confinementSpec(input), JSON.stringify(input).slice(0, 200)).toThrow(
        /holds a control character \(a line break, a tab\), and no rule can name it; nothing ran/,
      );
  });
});

describe('what executing a file takes', () => {
  it.skipIf(!existsSync('/usr/bin/python3'))('is the file and its ELF interpreter, followed through symlinks', () => {
    const closure = executionClosure('/usr/bin/python3');
    expect(closure[0]).toBe(realpathSync('/usr/bin/python3'));
    expect(closure[1]).toBe(realpathSync(interpreterOf(closure[0] as string) as string));
    expect(closure).toHaveLength(2);
  });

  it.skipIf(!existsSync('/usr/bin/ldd'))('is a script, its #! interpreter and that one’s loader', () => {
    const closure = executionClosure('/usr/bin/ldd');
    expect(closure[0]).toBe('/usr/bin/ldd');
    expect(closure[1]).toBe(realpathSync('/usr/bin/bash'));
    expect(closure.length).toBe(3);
  });

  it('finds every match of a bare name on PATH, and never looks up a path', () => {
    expect(resolveShellBinaries(['sh', '/bin/sh', 'no-such-binary-here'], '/usr/bin:/bin')).toEqual(['/usr/bin/sh', '/bin/sh']);
  });
});

describe('what a sealed sandbox reads of the system', () => {
  it('leaves out a package’s own directory of executables, and walks a link back up once, without looping', () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'murmur-system-tree-'));
    try {
      for (const dir of ['usr/bin', 'usr/lib/x', 'usr/share', 'usr/local/bin', 'usr/local/lib', 'usr/local/cuda-13/bin', 'usr/local/cuda-13/lib64'])
        mkdirSync(path.join(root, dir), { recursive: true });
      symlinkSync('usr/bin', path.join(root, 'bin'));
      symlinkSync('usr/lib', path.join(root, 'lib'));
      // A link back up to /usr, and one to a directory of executables.
      symlinkSync('..', path.join(root, 'usr/local/up'));
      symlinkSync('cuda-13/bin', path.join(root, 'usr/local/cuda-bin'));
      expect(systemReadableUnder(root).map((dir) => dir.slice(realpathSync(root).length))).toEqual([
        '/usr/lib',
        '/usr/local/cuda-13/lib64',
        '/usr/local/lib',
        '/usr/share',
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('is every system directory but those of executables, which are read file by file as shell.allow names them', () => {
    const readable = systemReadable();
    const covers = (dir: string): boolean => readable.some((given) => dir === given || dir.startsWith(`${given}/`));
    for (const binaries of ['/usr/bin', '/usr/sbin', '/usr/local/bin', '/bin'])
      if (existsSync(binaries)) expect(covers(realpathSync(binaries)), binaries).toBe(false);
    for (const needed of ['/usr/lib', '/usr/share']) if (existsSync(needed)) expect(covers(realpathSync(needed)), needed).toBe(true);
  });
});

/** The helper as `npm run build` makes it (the build says so when no C compiler could). */
const HELPER = fileURLToPath(new URL('../dist/confine/murmur-confine', import.meta.url));
if (!existsSync(HELPER)) console.warn(`[confinement tests] ${HELPER} was not built (no C compiler at npm run build): the helper's own refusals are skipped`);

describe('murmur-confine enter', () => {
  /** Runs the helper on `lines` as its spec; what it said and how it ended. */
  function enter(name: string, lines: string[]): { status: number | null; stderr: string; ran: boolean } {
    const specFile = path.join(os.tmpdir(), `murmur-confine-spec-${process.pid}-${name}`);
    const marker = `${specFile}.ran`;
    writeFileSync(specFile, `${lines.join('\n')}\n`);
    const spec = openSync(specFile, 'r');
    try {
      const result = spawnSync(HELPER, ['enter', '3', '--', '/bin/sh', '-c', `: > '${marker}'`], {
        stdio: ['ignore', 'ignore', 'pipe', spec],
        encoding: 'utf8',
      });
      return { status: result.status, stderr: result.stderr, ran: existsSync(marker) };
    } finally {
      closeSync(spec);
      rmSync(specFile, { force: true });
      rmSync(marker, { force: true });
    }
  }

  it.skipIf(!existsSync(HELPER))('refuses a spec that leaves out Landlock or seccomp, running nothing (the executor always writes both)', () => {
    const withoutLandlock = enter('no-landlock', ['drop', 'seccomp 9']);
    expect(withoutLandlock).toEqual({ status: 125, stderr: 'murmur-confine: the spec never starts Landlock\n', ran: false });
    const withoutSeccomp = enter('no-seccomp', ['drop', 'landlock 1', 'allow rx /']);
    expect(withoutSeccomp).toEqual({ status: 125, stderr: 'murmur-confine: the spec installs no seccomp filter\n', ran: false });
    const withoutDrop = enter('no-drop', ['landlock 1']);
    expect(withoutDrop.status).toBe(125);
    expect(withoutDrop.ran).toBe(false);
  });
});

describe("the capsule host's execute-only node", () => {
  it('is made in directories of this user’s alone, whatever the umask, and is not run from where another user could have replaced it', () => {
    const cache = mkdtempSync(path.join(os.tmpdir(), 'murmur-node-copy-'));
    const previous = process.umask(0);
    try {
      const node = executeOnlyNode(cache);
      for (const dir of [path.join(cache, 'runtime'), path.dirname(node)]) expect(statSync(dir).mode & 0o777, dir).toBe(0o700);
      expect(statSync(node).mode & 0o777).toBe(0o111);
      // A home or cache made writable by every user: whoever could write there could have put their
      // own program in the copy's place, so it is refused, naming the directory.
      chmodSync(path.join(cache, 'runtime'), 0o777);
      expect(() => executeOnlyNode(cache)).toThrow(
        expect.objectContaining({
          code: 'E-IO-002',
          message: expect.stringContaining(`${path.join(cache, 'runtime')} may be written by every user (mode 0777)`),
        }),
      );
      chmodSync(path.join(cache, 'runtime'), 0o700);
      expect(executeOnlyNode(cache)).toBe(node);
      if (process.getuid?.() === 0) {
        // A copy another user owns (planted before the directory was made safe) is not theirs to be run.
        chownSync(node, 65534, 65534);
        expect(() => executeOnlyNode(cache)).toThrow(expect.objectContaining({ code: 'E-IO-002', message: expect.stringContaining('belongs to uid 65534') }));
      } else console.log('[confinement] not root: a copy another user owns cannot be made here, and is not checked');
    } finally {
      process.umask(previous);
      rmSync(cache, { recursive: true, force: true });
    }
  });
});

describe('a cache that cannot take the execute-only node', () => {
  it('refuses the executor (or the run), saying why and what to do, rather than seal nothing for its whole life', async (context) => {
    const home = mkdtempSync(path.join(os.tmpdir(), 'murmur-full-cache-'));
    const mounted = mountTmpfs(home, 'size=64k,nr_inodes=4');
    if ('why' in mounted) {
      const why = `[confinement] a full cache not exercised: ${mounted.why}`;
      console.log(why);
      rmSync(home, { recursive: true, force: true });
      return context.skip(why);
    }
    try {
      for (let index = 0; ; index += 1) {
        try {
          mkdirSync(path.join(home, `filler-${index}`));
        } catch {
          break;
        }
      }
      const env = { PATH: process.env.PATH ?? '', MURMUR_HOME: home };
      const report = probeHost(env, { report: true });
      if (report.namespaces.tool !== 'bubblewrap') {
        const why = `[confinement] this host has no bubblewrap, so sealing is refused before the cache is asked: ${report.namespaces.reason}`;
        console.log(why);
        return context.skip(why);
      }
      expect(() => probeHost(env)).toThrow(
        expect.objectContaining({
          code: 'E-IO-003',
          message: expect.stringContaining(`could not prepare the capsule host's execute-only copy of node under ${path.join(home, 'cache')}`),
          hint: expect.stringContaining('the file system is full: free some space'),
        }),
      );
      // mur doctor is told it as what keeps the host from sealing.
      expect(report.confine.reason).toContain("could not prepare the capsule host's execute-only copy of node");
    } finally {
      mounted.unmount();
      rmSync(home, { recursive: true, force: true });
    }
  });
});
