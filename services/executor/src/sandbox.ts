import { spawnSync } from 'node:child_process';
import { closeSync, constants, existsSync, lstatSync, openSync, readdirSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * How a capsule host is put in its own kernel namespaces.
 *
 * With bubblewrap the host gets new user, pid, net, mount, ipc, uts and cgroup namespaces and a
 * composed root: the system's binaries and libraries and this runtime's code read-only, the
 * transpiled components read-only, its own `/proc`, `/dev` and `/tmp`, and the accessible workdir
 * as the one writable directory. It has no network interface but loopback, no capabilities, and
 * dies with the executor. Without bubblewrap, `unshare` gives the namespaces but not the composed
 * root, and says so. Without either, only pure-WASM capsules run (the WASI import object is then
 * the only boundary), and capsules that can start subprocesses are refused.
 */

export type NamespaceTool = 'bubblewrap' | 'unshare';

export interface NamespaceProbe {
  tool: NamespaceTool | undefined;
  binary: string | undefined;
  /** Why not bubblewrap (with unshare as the tool), or why neither; undefined with bubblewrap. */
  reason: string | undefined;
}

export interface SandboxOptions {
  /** `MURMUR_BWRAP`: the bubblewrap binary, or `none` to refuse to use it. */
  bwrap?: string | undefined;
  /** `MURMUR_UNSHARE`: the unshare binary, or `none`. */
  unshare?: string | undefined;
}

function tryRun(binary: string, args: string[], descriptors: number[] = []): string | undefined {
  const result = spawnSync(binary, args, { stdio: ['ignore', 'ignore', 'pipe', ...descriptors], timeout: 10_000 });
  if (result.error) return result.error.message;
  if (result.status !== 0) return result.stderr.toString().trim() || `exited with ${result.status}`;
  return undefined;
}

/** Asks the kernel, by trying: version strings say nothing about what a host allows. */
export function probeNamespaces(options: SandboxOptions = {}): NamespaceProbe {
  const reasons: string[] = [];
  const bwrap = options.bwrap ?? 'bwrap';
  if (bwrap !== 'none') {
    // What every launch needs: the namespaces, a fresh /proc for the new pid namespace (which a
    // container that still masks its /proc refuses), and a directory bound by descriptor (how the
    // workdir is bound: bubblewrap 0.7 and later), so a probe that passes means launches can.
    const root = openSync('/', constants.O_RDONLY | constants.O_DIRECTORY);
    let failure: string | undefined;
    try {
      failure = tryRun(
        bwrap,
        ['--unshare-all', '--die-with-parent', '--ro-bind', '/', '/', '--proc', '/proc', '--ro-bind-fd', '3', '/mnt', '--', 'true'],
        [root],
      );
    } finally {
      closeSync(root);
    }
    if (failure === undefined) return { tool: 'bubblewrap', binary: bwrap, reason: undefined };
    reasons.push(
      /bind-fd/.test(failure)
        ? `bubblewrap (${bwrap}) cannot bind a directory by descriptor, which it does since 0.7 (--ro-bind-fd: ${failure}); install bubblewrap 0.7 or later`
        : `bubblewrap (${bwrap}): ${failure}`,
    );
  } else reasons.push('bubblewrap is disabled (MURMUR_BWRAP=none)');
  const unshare = options.unshare ?? 'unshare';
  if (unshare !== 'none') {
    const failure = tryRun(unshare, ['--user', '--map-root-user', '--pid', '--fork', '--net', '--mount', '--ipc', '--uts', 'true']);
    // What kept bubblewrap from working stays said: it is why this host gives no composed root.
    if (failure === undefined) return { tool: 'unshare', binary: unshare, reason: reasons.join('; ') };
    reasons.push(`unshare (${unshare}): ${failure}`);
  } else reasons.push('unshare is disabled (MURMUR_UNSHARE=none)');
  return { tool: undefined, binary: undefined, reason: reasons.join('; ') };
}

export interface SandboxLayout {
  /** The writable directory: the accessible workdir. */
  workdir: string;
  /** The runtime's own code, bound read-only. */
  code: string[];
  /** Directories under the code to hide (the repository's caches and history). */
  hidden: string[];
  /** Data the host reads (transpiled components, extracted payloads), bound read-only after `hidden`. */
  data: string[];
  /** The directory the sandbox sees as `/tmp`: inside the workdir, so it counts as the workdir. */
  tmp: string;
  /**
   * Descriptors (as the sandbox's process has them) of the workdir and of `tmp`, opened and checked
   * by the executor: bound by descriptor (`--bind-fd`), not by path, since those paths lie in
   * directories a guest can write — a parent's guest its child's, a session's guest a reused
   * workdir's `.capsule-tmp` — where a link swapped in after the check would be followed by the bind.
   */
  pinned?: { workdirFd: number; tmpFd: number; records?: Array<{ fd: number; path: string; writable: boolean }> };
  /**
   * A pooled sandbox, started before its session is known: `workdir` is then the directory the
   * session's workdir will be mounted in (an empty tmpfs until then); `source`, the real directory
   * above it, is bound at `staging` for the helper to mount from (so the real `workdir` directory
   * need not exist before a session makes it); `/tmp` is a private read-only tmpfs; and the host
   * starts in `/`, moving into its workdir when its session arrives.
   */
  attachLater?: { source: string; staging: string } | undefined;
}

/** Files whose content is handed to bubblewrap on inherited descriptors (`--ro-bind-data`). */
export interface SandboxFile {
  path: string;
  content: string;
}

/** The first descriptor a sandbox file is passed on: after stdin, stdout, stderr and the host's channel. */
export const FIRST_DATA_FD = 4;

/**
 * A user database that names the capsule and nobody else on the machine, a resolver that asks
 * the sandbox's own DNS (every address in its network namespace is local, so any nameserver line
 * would reach it; this one says so), and a hosts file of the sandbox's own names alone. The
 * machine's `/etc/hosts` would answer its names ahead of that DNS, with the machine's addresses:
 * an allowlisted name listed there would never reach its listener, and the file tells a capsule
 * about the machine's network.
 */
export const SANDBOX_FILES: SandboxFile[] = [
  { path: '/etc/passwd', content: 'root:x:0:0:root:/root:/usr/sbin/nologin\ncapsule:x:1000:1000:capsule:/nonexistent:/usr/sbin/nologin\n' },
  { path: '/etc/group', content: 'root:x:0:\ncapsule:x:1000:\n' },
  { path: '/etc/resolv.conf', content: 'nameserver 127.0.0.1\noptions attempts:1 timeout:2\n' },
  // `capsule` is the sandbox's host name (`--hostname`): a tool that looks itself up finds it here, at once.
  { path: '/etc/hosts', content: '127.0.0.1\tlocalhost capsule\n::1\tlocalhost ip6-localhost ip6-loopback\n' },
];

/** After the sandbox files, a sealed sandbox's confinement spec and its seccomp program (read by the helper, then gone). */
export const SPEC_FD = FIRST_DATA_FD + SANDBOX_FILES.length;
export const SECCOMP_FD = SPEC_FD + 1;

/**
 * Sealed containment: `murmur-confine enter` runs first inside bubblewrap, with exactly the
 * capabilities it needs for the network namespace and the sockets it binds (and to drop them
 * all), reading its spec from `specFd`. bubblewrap then makes no network namespace itself: one
 * it made as root would not be the sandbox's to configure.
 */
export interface ConfineStep {
  helper: string;
  specFd: number;
}

const CONFINE_CAPABILITIES = ['CAP_SYS_ADMIN', 'CAP_NET_ADMIN', 'CAP_NET_BIND_SERVICE', 'CAP_SETPCAP'];

/** The system's own directories, bound read-only at the same paths (a usrmerge symlink stays a symlink). */
export const SYSTEM_DIRECTORIES = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];

/**
 * The directories of executables. A sealed sandbox may read none of them as a whole, only the
 * files `shell.allow` and its tools name (Landlock `rx`, file by file): the dynamic loader, which
 * every dynamically linked binary may run, maps whatever file it is handed, execute right or not,
 * so `ld.so /usr/bin/curl` ran a binary shell.allow never named for as long as it could read it.
 * A package installed under `/usr/local` keeps its own (`/usr/local/cuda/bin`, `/usr/local/go/bin`):
 * a directory there named as these are is one too.
 */
const BINARY_DIRECTORIES = ['/bin', '/sbin', '/usr/bin', '/usr/sbin', '/usr/games', '/usr/local/bin', '/usr/local/sbin', '/usr/local/games'];
const BINARY_NAMES = new Set(['bin', 'sbin', 'games']);

let systemReadableCache: string[] | undefined;

/**
 * What of the system directories a sealed sandbox may read and list (Landlock `rd`): all of them
 * but the directories of executables. A directory holding one of those is given child by child;
 * a link is followed to what it names, once (a link back up is not walked again), and nothing that
 * resolves into a directory of executables is given. Read once per process: the system's layout
 * does not change under a running executor.
 */
export function systemReadable(): string[] {
  systemReadableCache ??= systemReadableUnder('');
  return systemReadableCache;
}

/** `systemReadable` of the tree at `root` (`''`: this machine's own; a test's tree otherwise). */
export function systemReadableUnder(root: string): string[] {
  const local = `${root}/usr/local`;
  const binaries = BINARY_DIRECTORIES.flatMap((dir) => {
    try {
      return [realpathSync(`${root}${dir}`)];
    } catch {
      return [];
    }
  });
  const isDirectory = (file: string): boolean => {
    try {
      return statSync(file).isDirectory();
    } catch {
      return false;
    }
  };
  // A package's own directory of executables, one level down in /usr/local.
  const packageBinaries = (real: string): string[] =>
    path.dirname(real) === local
      ? readdirSync(real)
          .filter((entry) => BINARY_NAMES.has(entry))
          .map((entry) => path.join(real, entry))
          .filter(isDirectory)
      : [];
  const readable = new Set<string>();
  const visited = new Set<string>();
  const visit = (dir: string): void => {
    let real: string;
    try {
      real = realpathSync(dir);
    } catch {
      return;
    }
    if (visited.has(real) || !isDirectory(real)) return;
    visited.add(real);
    if (binaries.some((binary) => pathWithin(real, binary))) return;
    const nested = packageBinaries(real);
    binaries.push(...nested);
    if (!binaries.some((binary) => pathWithin(binary, real))) return void readable.add(real);
    for (const entry of readdirSync(real)) visit(path.join(real, entry));
  };
  for (const dir of SYSTEM_DIRECTORIES) visit(`${root}${dir}`);
  // One inside another (`/usr/local/man`, a link into `/usr/local/share`) is given already.
  return [...readable].filter((dir) => ![...readable].some((other) => other !== dir && pathWithin(dir, other))).sort();
}

/** Whether `dir` lies in the system directories (whose readable part `systemReadable` gives). */
export function isSystemPath(dir: string): boolean {
  return SYSTEM_DIRECTORIES.some((system) => pathWithin(dir, system));
}

/** Whether the absolute, normalised path `dir` is `parent` or lies beneath it. */
export function pathWithin(dir: string, parent: string): boolean {
  return dir === parent || dir.startsWith(`${parent}/`);
}
/** What of `/etc` a process needs to load libraries, resolve users and read certificates. */
const ETC_ENTRIES = [
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'alternatives',
  // Certificates and OpenSSL's configuration, never /etc/ssl/private: a sandbox run by a root
  // executor is root's user outside its namespace, and would be the owner of those keys.
  'ssl/certs',
  'ssl/openssl.cnf',
  'pki/tls/certs',
  'ca-certificates',
  'ca-certificates.conf',
  'nsswitch.conf',
  'localtime',
  'timezone',
  'terminfo',
];

/** bubblewrap's arguments for a host whose command is `command`. */
export function bubblewrapArguments(layout: SandboxLayout, command: string[], confine?: ConfineStep): string[] {
  return [
    ...bubblewrapIdentity(confine !== undefined),
    ...bubblewrapMounts(layout),
    ...bubblewrapSeal(layout.attachLater ? '/' : layout.workdir),
    '--',
    ...confinedCommand(command, confine),
  ];
}

/** What bubblewrap runs for `command`: the helper first when the sandbox is sealed, which confines it and then runs it. */
export function confinedCommand(command: string[], confine?: ConfineStep): string[] {
  return confine ? [confine.helper, 'enter', String(confine.specFd), '--', ...command] : command;
}

/** The sandbox's namespaces, capabilities and identity: the same whatever it mounts. */
export function bubblewrapIdentity(confined: boolean): string[] {
  const namespaces = confined ? ['--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try'] : ['--unshare-all'];
  const capabilities = confined ? CONFINE_CAPABILITIES.flatMap((capability) => ['--cap-add', capability]) : [];
  return [...namespaces, '--die-with-parent', '--new-session', '--cap-drop', 'ALL', ...capabilities, '--hostname', 'capsule', '--uid', '1000', '--gid', '1000'];
}

/**
 * What the sandbox's root is composed of, in order: the system, the runtime's code and data, /tmp,
 * the workdir and the session's records. Read from disk, so a sealed sandbox's bubblewrap reads
 * them from a descriptor (`--args`) once they are worked out, after it was started; a short read
 * would only mount less, since its identity and its seal are on its command line.
 */
export function bubblewrapMounts(layout: SandboxLayout): string[] {
  const args: string[] = [];
  for (const dir of SYSTEM_DIRECTORIES) {
    if (!existsSync(dir)) continue;
    const stat = lstatSync(dir);
    if (stat.isSymbolicLink()) args.push('--symlink', readlinkSync(dir), dir);
    else args.push('--ro-bind', dir, dir);
  }
  for (const entry of ETC_ENTRIES) args.push('--ro-bind-try', `/etc/${entry}`, `/etc/${entry}`);
  for (const [index, file] of SANDBOX_FILES.entries()) args.push('--ro-bind-data', String(FIRST_DATA_FD + index), file.path);
  // A private /proc for the new pid namespace, read-only: its kernel settings (/proc/sys,
  // /proc/sysrq-trigger) are the machine's, not the namespace's. bubblewrap covers /proc/sys only
  // when the sandbox's user may write it, and under a root executor the tools' user is root
  // outside: below sealed (Landlock keeps /proc read-only there) a tool wrote the host's
  // kernel.core_pattern, which the kernel runs as root at the next crash. A minimal /dev,
  // read-only but for its device nodes.
  args.push('--proc', '/proc', '--remount-ro', '/proc', '--dev', '/dev', '--remount-ro', '/dev');
  // /tmp before everything that may live under it (the code, the cache, the workdir itself), so
  // those binds land on top of it rather than being hidden by it.
  if (layout.attachLater) args.push('--tmpfs', '/tmp');
  else if (layout.pinned) args.push('--bind-fd', String(layout.pinned.tmpFd), '/tmp');
  else args.push('--bind', layout.tmp, '/tmp');
  // Node itself, wherever it is installed (it may live outside /usr).
  const nodeRoot = path.dirname(path.dirname(realpathSync(process.execPath)));
  if (!isSystemPath(nodeRoot)) args.push('--ro-bind', nodeRoot, nodeRoot);
  for (const dir of layout.code) if (existsSync(dir)) args.push('--ro-bind', dir, dir);
  // A hidden directory is an empty tmpfs, made read-only only after the binds below: data or the
  // workdir may live inside one (a MURMUR_HOME or a project under the repository's .cache), and
  // bubblewrap has to create their mount points there first.
  // A hidden file (a checkout's `.env`) reads as empty: `/dev/null` over it, read-only.
  const hidden: string[] = [];
  for (const entry of layout.hidden) {
    const found = lstatSync(entry, { throwIfNoEntry: false });
    if (found?.isDirectory()) {
      hidden.push(entry);
      args.push('--tmpfs', entry);
    } else if (found?.isFile()) args.push('--ro-bind', '/dev/null', entry);
  }
  for (const dir of layout.data) if (existsSync(dir)) args.push('--ro-bind', dir, dir);
  if (layout.attachLater) args.push('--bind', layout.attachLater.source, layout.attachLater.staging, '--tmpfs', layout.workdir);
  else if (layout.pinned) args.push('--bind-fd', String(layout.pinned.workdirFd), layout.workdir);
  else args.push('--bind', layout.workdir, layout.workdir);
  // The session's records over their own names in the workdir (`recordBinds`), read-only but for
  // a chosen workdir's session directory: the guest reads its trace, and cannot rewrite, cut or
  // remove it, nor move it aside (a mount point is not unlinked or renamed).
  for (const record of layout.pinned?.records ?? []) args.push(record.writable ? '--bind-fd' : '--ro-bind-fd', String(record.fd), record.path);
  for (const dir of hidden) args.push('--remount-ro', dir);
  if (layout.attachLater) args.push('--remount-ro', '/tmp');
  return args;
}

/**
 * Last, so every mount point before it exists: the composed root itself is read-only, and the
 * host starts in `startIn` (its workdir; a pooled host, whose workdir comes later, in `/`). What
 * is writable is the workdir (and /tmp, a directory inside it), nothing else.
 */
export function bubblewrapSeal(startIn: string): string[] {
  return ['--remount-ro', '/', '--chdir', startIn];
}

/** unshare's arguments: the namespaces, without a composed root. */
export function unshareArguments(command: string[]): string[] {
  return ['--user', '--map-root-user', '--pid', '--fork', '--kill-child', '--net', '--mount', '--mount-proc', '--ipc', '--uts', '--', ...command];
}
