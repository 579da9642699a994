import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type CapabilityPolicy, MurmurError, hasControlCharacter } from '@murmur/shared';
import { replaceableByOthers, systemFailureCode, systemFailureHint } from '@murmur/shared/node';
import { executionClosure } from './elf.js';
import { type NetworkPlan, planNetwork } from './network-plan.js';
import { type NamespaceProbe, SANDBOX_FILES, SECCOMP_FD, SPEC_FD, bubblewrapArguments, systemReadable } from './sandbox.js';
import { nativeSeccompArch, seccompFilterBytes } from './seccomp.js';

/**
 * What `murmur-confine enter` makes of a sandbox, written as its spec: the network (a namespace
 * of its own, and the sockets the capsule host serves in it), the capabilities dropped, the
 * Landlock ruleset, and the seccomp filter's descriptor. Everything here is decided from the
 * grants; the helper only carries it out.
 *
 * The Landlock ruleset handles every filesystem right the kernel's Landlock knows, up to ABI 3's,
 * so what no rule grants is denied (moving a file between directories is ABI 2's right and given
 * with the right to change a directory; truncating is ABI 3's and given with write):
 * - the system's directories, the `/etc` entries the composed root has, `/proc`, this runtime's
 *   code and the components it runs: read and list, never execute;
 * - execute: the node binary the host runs (and its loader), the helper itself (every subprocess
 *   starts through it, for its rlimits), each `shell.allow` binary with its loader or `#!`
 *   interpreter, each native tool's binary, and the `interpreter_runtime` and `staged_runtime`
 *   trees — of which a subprocess may execute all but the host's node and the helper
 *   (`toolExecuteGrants`);
 * - the workdir and `/tmp` (a directory inside it): everything but execute (unless `workdir_exec`)
 *   and making devices or sockets (sockets only with `unix_sockets`);
 * - devices as upstream: `/dev/null` read-write, `/dev/zero` and `/dev/urandom` read-only,
 *   every other one denied — so reopening a descriptor through `/proc/self/fd` cannot
 *   turn a read-only grant into a writable one.
 */

export interface ConfinementInput {
  policy: Pick<CapabilityPolicy, 'interpreter_runtime' | 'staged_runtime' | 'workdir_exec' | 'unix_sockets'>;
  network: NetworkPlan;
  /** The accessible workdir and the directory the sandbox sees as `/tmp`. */
  workdir: string;
  tmp: string;
  /**
   * Mount points bubblewrap made inside the workdir (the session's records, `recordBinds`): each a
   * mount of its own, which the workdir's `noexec` does not reach.
   */
  workdirMounts?: string[];
  /** Directories and files the host reads: system directories, `/etc` entries, code, components. */
  readable: string[];
  /** Files only the host executes (each with its loader): its node, the helper. */
  executables: string[];
  /** Files the host and its subprocesses execute (each with its loader): native tools, the harness. */
  toolExecutables?: string[] | undefined;
  /** The shell allowlist, resolved to files on the sandbox's PATH. */
  shellBinaries: string[];
  /** `toolClosure` of the tool executables and shell binaries, when the caller needs it too (`toolExecuteGrants`): read once. */
  toolFiles?: string[] | undefined;
  seccompFd: number;
  /** Descriptors the host keeps beyond the listeners (its channel to the executor, the hand-over channel, the tools' cgroup). */
  keep: number[];
  /** A pooled sandbox: the helper holds here, before dropping, for the session's mounts (`hold`). */
  holdFd?: number | undefined;
}

export const DEVICE_RULES: ReadonlyArray<{ path: string; rights: string }> = [
  { path: '/dev/null', rights: 'rw' },
  { path: '/dev/zero', rights: 'r' },
  { path: '/dev/urandom', rights: 'r' },
];

/** Landlock's ABI the spec needs: 1 (Linux 5.13) has every right the ruleset uses. */
export const LANDLOCK_ABI = 1;

export function confinementSpec(input: ConfinementInput): string {
  refuseBrokenPaths(input);
  const { policy, network } = input;
  const lines = ['# murmur-confine enter: the sandbox, as the executor decided it', 'net'];
  lines.push(`listen udp 0.0.0.0 53 ${network.dns.udpFd}`, `listen tcp 0.0.0.0 53 ${network.dns.tcpFd}`);
  for (const listener of network.listeners) lines.push(`listen tcp ${listener.address} ${listener.port} ${listener.fd}`);
  if (input.holdFd !== undefined) lines.push(`hold ${input.holdFd} ${input.holdFd}`);
  // Nothing written in the workdir runs, not even through the dynamic loader, unless the capsule
  // was granted that (`workdir_exec`, which caps its posture at advisory).
  // The mounts themselves: the workdir's, `/tmp` (where its `.capsule-tmp` is bound, or a pooled
  // sandbox's tmpfs), each mount inside the workdir: a delegated child's
  // files are no more the parent's to run than its own.
  if (!policy.workdir_exec) {
    for (const dir of unique([input.workdir, '/tmp', ...(input.workdirMounts ?? [])])) lines.push(`noexec ${dir}`);
  }
  lines.push('drop', `landlock ${LANDLOCK_ABI}`);
  for (const readable of unique(input.readable)) lines.push(`allow rd ${readable}`);
  const executables = unique([...input.executables.flatMap((file) => executionClosure(file)), ...(input.toolFiles ?? toolClosure(input))]);
  for (const file of executables) lines.push(`allow rx ${file}`);
  for (const grant of policy.interpreter_runtime) for (const dir of grant.dirs) lines.push(`allow ${dir.list_dir ? 'rxd' : 'rx'} ${dir.path}`);
  for (const grant of policy.staged_runtime) lines.push(`allow rxd ${grant.source_path}`);
  const workRights = `rwdm${policy.workdir_exec ? 'x' : ''}${policy.unix_sockets ? 's' : ''}`;
  lines.push(`require ${workRights} ${input.workdir}`, `require ${workRights} ${input.tmp}`);
  for (const device of DEVICE_RULES) lines.push(`allow ${device.rights} ${device.path}`);
  for (const fd of input.keep) lines.push(`keep ${fd}`);
  lines.push(`seccomp ${input.seccompFd}`);
  return `${lines.join('\n')}\n`;
}

/**
 * What a subprocess may execute: the spec's execute grants less the host's own (its node and the
 * helper). `murmur-confine limits` puts these in a Landlock layer of the tool's own, so that a
 * tool `shell.allow` admits (`find -exec`, `xargs`, a shell) cannot run the host's node on a
 * script it wrote, which would be any program at all.
 */
export function toolExecuteGrants(input: Pick<ConfinementInput, 'policy' | 'workdir' | 'tmp'> & { toolFiles: string[] }): string[] {
  const { policy } = input;
  return unique([
    ...input.toolFiles,
    ...runtimeTrees(policy),
    // `workdir_exec`: what the capsule builds or brings into its workdir runs (`make && ./a.out`).
    ...(policy.workdir_exec ? [input.workdir, input.tmp] : []),
  ]);
}

/** The files a tool executable or shell binary runs with (each with its loader or `#!` interpreter): read from disk, so worked out once a sandbox. */
export function toolClosure(input: Pick<ConfinementInput, 'toolExecutables' | 'shellBinaries'>): string[] {
  return unique([...(input.toolExecutables ?? []), ...input.shellBinaries].flatMap((file) => executionClosure(file)));
}

/** The trees a capsule's runtime grants name (`interpreter_runtime`, `staged_runtime`), executable beneath. */
function runtimeTrees(policy: ConfinementInput['policy']): string[] {
  return [...policy.interpreter_runtime.flatMap((grant) => grant.dirs.map((dir) => dir.path)), ...policy.staged_runtime.map((grant) => grant.source_path)];
}

function unique(values: string[]): string[] {
  return [...new Set(values.filter((value) => value !== ''))];
}

/**
 * Every path the spec will name, each one line: the helper reads one rule per line, and a path
 * with a line break in it (`/opt/x\nallow rwxdm /`, from a manifest) would be a rule nobody
 * decided. Such a spec is refused, never written with the path dropped or split.
 */
function refuseBrokenPaths(input: ConfinementInput): void {
  const { policy } = input;
  const paths = [
    input.workdir,
    input.tmp,
    ...(input.workdirMounts ?? []),
    ...input.readable,
    ...input.executables,
    ...(input.toolExecutables ?? []),
    ...input.shellBinaries,
    ...runtimeTrees(policy),
  ];
  const broken = paths.find(hasControlCharacter);
  if (broken !== undefined)
    throw new MurmurError(
      'E-IO-003',
      `the sandbox's rules would name the path ${JSON.stringify(broken.slice(0, 120))}, which holds a control character (a line break, a tab), and no rule can name it; nothing ran`,
      {
        path: broken.slice(0, 120),
        hint: "give the runtime's directories paths without control characters: the project or --workdir, MURMUR_HOME (or MURMUR_CACHE_DIR) and TMPDIR, and the directories on PATH",
      },
    );
}

/** The shell allowlist as files on `PATH` (every match, as a shell's lookup could find any of them). */
export function resolveShellBinaries(allow: readonly string[], pathVariable: string): string[] {
  const found: string[] = [];
  for (const binary of allow) {
    for (const dir of pathVariable.split(':')) {
      if (!dir || binary.includes('/')) continue;
      const candidate = path.join(dir, binary);
      try {
        if (existsSync(candidate) && !lstatSync(candidate).isDirectory()) found.push(candidate);
      } catch {
        // unreadable: not a match
      }
    }
  }
  return found;
}

// ── the probe ───────────────────────────────────────────────────────────────────────────────

/**
 * Whether this host can seal a sandbox, found by doing it once: bubblewrap composing a root, the
 * helper making the network namespace and binding a privileged port in it, dropping every
 * capability, entering a Landlock domain and installing the seccomp filter, then the host's own
 * node (the execute-only copy) starting under all of it through the helper's `limits`. A host
 * that cannot is told exactly which step failed, because that is what `E-CAP-003` says.
 */
export interface ConfineProbe {
  support: ConfineSupport | undefined;
  reason: string | undefined;
  /** Forgets a kept answer, so the next start probes again (a launch found the host changed). */
  forget?: () => void;
}

export interface ConfineSupport {
  helper: string;
  node: string;
}

export function probeConfinement(namespaces: NamespaceProbe, options: { helper: string; cacheDir: string }): ConfineProbe {
  const refuse = (reason: string): ConfineProbe => ({ support: undefined, reason });
  if (process.platform !== 'linux') return refuse('sealed needs Linux namespaces, Landlock and seccomp; this platform has none of them');
  if (namespaces.tool !== 'bubblewrap')
    return refuse(`sealed needs bubblewrap's composed root, which this host does not give (${namespaces.reason ?? `only ${namespaces.tool} works here`})`);
  const arch = nativeSeccompArch();
  if (!arch) return refuse(`sealed needs a seccomp filter, which this runtime builds for x86_64 and aarch64 only (this is ${process.arch})`);
  if (!existsSync(options.helper))
    return refuse(
      `the confinement helper ${options.helper} was not built: npm run build compiles it with the system's C compiler (apt-get install gcc libc6-dev, then npm run build)`,
    );
  // Its real path: the sandbox binds real directories, not the symlinks a workspace links them by.
  // Resolved as `keptConfinement` resolves it, so the key this probe keeps is the key it reads.
  const helper = realpathSync.native(options.helper);
  // Not a refusal of sealing but of the run: a cache that cannot take the copy (a full or read-only
  // disk, a directory another user could write) is this machine's to mend, and sealing refused
  // for it left every session of an executor's life below sealed, said only as a lower class.
  let node: string;
  try {
    node = executeOnlyNode(options.cacheDir);
  } catch (error) {
    if (error instanceof MurmurError) throw error;
    throw new MurmurError(
      systemFailureCode(error),
      `could not prepare the capsule host's execute-only copy of node under ${options.cacheDir}: ${(error as Error).message}`,
      {
        path: options.cacheDir,
        hint: `${systemFailureHint(error) ?? 'check that this user can write there'}; the sandbox is sealed once the copy can be made`,
      },
    );
  }
  // A host that sealed a sandbox once since it booted, with this helper, bubblewrap and node, can
  // again: the answer is kept, so an in-process `mur run` does not pay for the probe every time.
  const cacheFile = probeCacheFile(options.cacheDir);
  const key = probeKey(helper, namespaces.binary as string, node);
  const cached = readProbeCache(cacheFile, key);
  if (cached) return keptProbe(cached, cacheFile);
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'murmur-confine-probe-'));
  const opened: number[] = [];
  try {
    const workdir = path.join(scratch, 'work');
    const tmp = path.join(workdir, '.capsule-tmp');
    mkdirSync(tmp, { recursive: true });
    const network = planNetwork(['probe.invalid:443'], 16);
    const readable = [...systemReadable(), '/etc', '/proc', path.dirname(node), path.dirname(helper)].filter((dir) => existsSync(dir));
    const policy = { interpreter_runtime: [], staged_runtime: [], workdir_exec: false, unix_sockets: false };
    const finalCommand = PROBE_COMMAND.find((file) => existsSync(file)) ?? node;
    const spec = confinementSpec({
      policy,
      network,
      workdir,
      tmp,
      readable,
      executables: [...nodeExecutables(node), helper, finalCommand],
      shellBinaries: [],
      seccompFd: SECCOMP_FD,
      keep: [],
    });
    const files: Array<string | Buffer> = [...SANDBOX_FILES.map((file) => file.content), spec, seccompFilterBytes({ arch, unixSockets: false })];
    const fds = files.map((content, index) => {
      const file = path.join(scratch, `fd-${index}`);
      writeFileSync(file, content);
      const fd = openSync(file, 'r');
      opened.push(fd);
      return fd;
    });
    const layout = { workdir, code: [path.dirname(helper)], hidden: [], data: [path.dirname(node)], tmp };
    const command = [helper, 'limits', 'NOFILE=256', 'CORE=0', '--', finalCommand, ...(finalCommand === node ? ['-e', '0'] : [])];
    const result = spawnSync(namespaces.binary as string, bubblewrapArguments(layout, command, { helper, specFd: SPEC_FD }), {
      stdio: ['ignore', 'ignore', 'pipe', 'ignore', ...fds],
      timeout: 20_000,
    });
    if (result.error) return refuse(`the sealed probe could not run: ${result.error.message}`);
    if (result.status !== 0) {
      const said =
        result.stderr
          .toString()
          .trim()
          .split('\n')
          .filter((line) => line.trim() !== '')
          .at(-1) ?? `exit status ${result.status ?? result.signal}`;
      return refuse(`sealing a sandbox failed here: ${said}`);
    }
    writeProbeCache(cacheFile, key, { helper, node });
    return keptProbe({ helper, node }, cacheFile);
  } finally {
    for (const fd of opened) closeSync(fd);
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * The probe's kept answer, when a sandbox was sealed with this helper, bubblewrap and node since the
 * kernel booted; read without probing or copying anything. Such a host's namespaces work and it can
 * seal, so an in-process `mur run` need not start bubblewrap to ask again (~12 ms of every run),
 * nor work out the same key a second time for the sealing half of the probe (`keptProbe`).
 */
export function keptConfinement(options: { helper: string; bwrap: string; cacheDir: string }): ConfineProbe | undefined {
  try {
    const cacheFile = probeCacheFile(options.cacheDir);
    const key = probeKey(realpathSync.native(options.helper), options.bwrap, executeOnlyNodePath(options.cacheDir).target);
    const kept = readProbeCache(cacheFile, key);
    return kept ? keptProbe(kept, cacheFile) : undefined;
  } catch {
    return undefined;
  }
}

/** A kept answer as the probe's, with the way to forget it. */
function keptProbe(support: ConfineSupport, cacheFile: string): ConfineProbe {
  return { support, reason: undefined, forget: () => rmSync(cacheFile, { force: true }) };
}

/** Where the probe's answer is kept, for this boot of the kernel. */
function probeCacheFile(cacheDir: string): string {
  return path.join(cacheDir, 'runtime', 'confine-probe.json');
}

/** What the probe runs last, under every piece of the sandbox: a tiny program, so the probe stays cheap. */
const PROBE_COMMAND = ['/usr/bin/true', '/bin/true'];

/**
 * What the cached answer depends on: this boot of the kernel, and the exact helper, bubblewrap and
 * node. Paths are resolved by libc (`realpathSync.native`): node's own resolver walks the path in
 * JavaScript that a `mur run`, read before its sandbox is started, runs cold (~0.9 ms of its probe).
 */
function probeKey(helper: string, bwrap: string, node: string): string {
  const identity = (file: string): string => {
    try {
      const found = file.includes('/')
        ? file
        : (process.env.PATH ?? '')
            .split(':')
            .map((dir) => path.join(dir || '.', file))
            .find((candidate) => existsSync(candidate));
      const real = realpathSync.native(found ?? file);
      const status = statSync(real);
      return `${real}:${status.size}:${Math.trunc(status.mtimeMs)}`;
    } catch {
      return `${file}:?`;
    }
  };
  let boot = 'unknown';
  try {
    boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    // no boot id: every probe runs
  }
  return JSON.stringify([boot, os.release(), process.getuid?.() ?? -1, identity(helper), identity(bwrap), node]);
}

function readProbeCache(file: string, key: string): ConfineSupport | undefined {
  if (key.includes('"unknown"')) return undefined;
  try {
    const cached = JSON.parse(readFileSync(file, 'utf8')) as { key?: string; support?: ConfineSupport };
    return cached.key === key && cached.support && existsSync(cached.support.node) ? cached.support : undefined;
  } catch {
    return undefined;
  }
}

function writeProbeCache(file: string, key: string, support: ConfineSupport): void {
  const temporary = `${file}.${process.pid}.tmp`;
  try {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(temporary, `${JSON.stringify({ key, support })}\n`);
    renameSync(temporary, file);
  } catch {
    // a cache that cannot be written only costs the next start a probe
    rmSync(temporary, { force: true });
  }
}

/**
 * What executing the host's node takes: the execute-only copy, and the loader of the node it was
 * copied from — read from the original, since nobody (the executor included, unless it is root)
 * can read the copy to find it.
 */
export function nodeExecutables(node: string): string[] {
  return [node, ...executionClosure(realpathSync(process.execPath)).slice(1)];
}

/** Where the execute-only copy of this process's node goes: named by its version, size and time. */
function executeOnlyNodePath(cacheDir: string): { source: string; size: number; target: string } {
  const source = realpathSync.native(process.execPath);
  const status = statSync(source);
  const dir = path.join(cacheDir, 'runtime', `node-${process.version}-${status.size}-${Math.trunc(status.mtimeMs)}`);
  return { source, size: status.size, target: path.join(dir, 'node') };
}

/**
 * A copy of this node that its own processes can execute but not read (mode 0111). A process
 * started from a file it cannot read is not dumpable, so a subprocess of the capsule host — the
 * same user in the same sandbox — cannot read the host's memory, environment or descriptors
 * through `/proc/<pid>/…` (where the inference key lives). Made once per node build, by rename.
 */
export function executeOnlyNode(cacheDir: string): string {
  const { source, size, target } = executeOnlyNodePath(cacheDir);
  const dir = path.dirname(target);
  // What is made here is this user's alone (whatever the umask), and what is found is run only if
  // no other user could have put it there: a copy is trusted by its size and mode, which another
  // local user who could write on its way (a home made under `umask 000`, a cache dir of theirs)
  // gave their own program, and the capsule host ran it.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const unsafe = replaceableByOthers(target);
  if (unsafe)
    throw new MurmurError('E-IO-002', `the capsule host's node is kept at ${target}, which another user could replace: ${unsafe}`, {
      path: target,
      hint: `make every directory on the way this user's and not writable by others (chmod go-w <dir>; remove ${dir} if another user made it), or set MURMUR_CACHE_DIR to a directory of this user's`,
    });
  const existing = statSync(target, { throwIfNoEntry: false });
  if (existing?.isFile() && existing.size === size && (existing.mode & 0o777) === 0o111) return target;
  const temporary = `${target}.${process.pid}.tmp`;
  try {
    copyFileSync(source, temporary);
    chmodSync(temporary, 0o111);
    renameSync(temporary, target);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
  return target;
}
