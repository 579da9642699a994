import { type ChildProcess, type StdioNull, type StdioPipe, spawn } from 'node:child_process';
import { closeSync, constants, existsSync, fstatSync, openSync, readdirSync, readlinkSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { type CapabilityPolicy, MurmurError } from '@murmur/shared';
import type { SessionCgroup } from './cgroup.js';
import { type ConfineSupport, confinementSpec, nodeExecutables, resolveShellBinaries, toolClosure, toolExecuteGrants } from './confinement.js';
import { HOST_CHANNEL_FD } from './host/frame-channel.js';
import { shellSearchPath } from './host/shell-path.js';
import { handOverArguments, sandboxSockets } from './host/hand-over-argument.js';
import type { HostComponent, HostTool, SandboxNetworkStart } from './host/protocol.js';
import { type NetworkPlan, planNetwork } from './network-plan.js';
import {
  FIRST_DATA_FD,
  type NamespaceProbe,
  SANDBOX_FILES,
  SECCOMP_FD,
  SPEC_FD,
  bubblewrapArguments,
  bubblewrapIdentity,
  bubblewrapMounts,
  bubblewrapSeal,
  confinedCommand,
  isSystemPath,
  systemReadable,
  unshareArguments,
} from './sandbox.js';
import { nativeSeccompArch, seccompFilterBytes } from './seccomp.js';
import type { RecordBind } from './workdir.js';

/**
 * How one session's capsule host is started: its command line and the descriptors it inherits.
 *
 * Sealed (bubblewrap and `murmur-confine` both work here), the host's descriptors are:
 *
 * | fd | what |
 * |---|---|
 * | 0–2 | nothing, stdout, stderr |
 * | 3 | the channel to the executor: framed messages (`host/frame-channel.ts`) |
 * | 4–7 | `/etc/passwd`, `/etc/group`, `/etc/resolv.conf`, `/etc/hosts` (`SANDBOX_FILES`: read by bubblewrap, then gone) |
 * | 8 | the confinement spec (read by the helper, then gone) |
 * | 9 | the seccomp program (read by the helper, then gone) |
 * | 10… | the tools' cgroup, `cgroup.procs` open for writing (one per v1 controller: memory, pids, cpu and blkio) |
 * | next… | a fresh sandbox's pinned workdir, `/tmp` and records (bound by bubblewrap, then gone; below 29) |
 * | 10 | a pooled sandbox (which has no tools' cgroup): its held helper's commands and answer |
 * | 29 | what bubblewrap mounts, as its options, NUL-separated (`--args`: read before it does anything, then gone) |
 * | 30 | Node's IPC channel, which hands the sandbox's sockets out, then is closed (`HANDOVER_FD`) |
 * | 31… | the sandbox's DNS (UDP, TCP) and one listener per allowlisted destination |
 *
 * The helper keeps 3, 30, the cgroup descriptors and the listeners, and closes everything else, so
 * nothing the executor's own launcher left open (a descriptor without close-on-exec) gets in. A
 * sandbox that is not sealed has no network to hand out, and its host no IPC channel at all.
 */

export const FIRST_CGROUP_FD = SECCOMP_FD + 1;
export const FIRST_LISTENER_FD = 31;
/**
 * Where a sealed sandbox's bubblewrap reads what it mounts (`bubblewrapMounts`): written once that
 * is worked out, after the spawn (`feed`), while the shell before bubblewrap joins the cgroup.
 */
export const BUBBLEWRAP_MOUNTS_FD = 29;
/**
 * Node's IPC channel, in a sealed sandbox only: the one way a descriptor reaches the executor
 * from a child. It carries the sandbox's sockets and nothing else, and is closed by both sides
 * once they are out, before the capsule's code runs (`host-link.ts`).
 */
export const HANDOVER_FD = 30;

export interface HostSandboxInput {
  namespaces: NamespaceProbe;
  confine: ConfineSupport | undefined;
  policy: Pick<CapabilityPolicy, 'interpreter_runtime' | 'staged_runtime' | 'network_allow' | 'shell_allow' | 'unix_sockets' | 'workdir_exec'>;
  /** The accessible workdir: the one writable directory. */
  workdir: string;
  /** The runtime's code root, and directories under it to hide: what of it a sandbox sees is `runtimeCode`'s to say. */
  codeRoot: string;
  hidden: string[];
  components: HostComponent[];
  /** Directories bound read-only beyond the components' (a pooled sandbox's bundles). */
  data?: string[] | undefined;
  /**
   * Paths in the workdir bound over themselves, in order (`recordBinds`): the session's records
   * the executor writes from outside, which the guest may read and must not rewrite. Each must
   * exist: a directory, or a regular file of one link.
   */
  records?: readonly RecordBind[] | undefined;
  tools: HostTool[];
  hostEntry: string;
  /**
   * The node an unsealed host runs: the execute-only copy, which makes the host undumpable, so a
   * tool beside it (the same user, in the same sandbox) cannot read its memory — the inference
   * key, the allowed environment — through `/proc`. Sealed, the helper's own (`confine.node`).
   * Absent: this process's node.
   */
  node?: string | undefined;
  cgroup: SessionCgroup | undefined;
  /** The subprocess PATH, where the shell allowlist is looked up. */
  subprocessPath: string;
  /**
   * `transport: process`: the harness binary (made executable, its directory readable). Its home
   * is the session's own, in the workdir: nothing beyond the workdir is writable.
   */
  harness?: { binary: string } | undefined;
  /**
   * A pooled sandbox (`host-pool.ts`): sealed before its session is known, with `workdir` the
   * directory its session's workdir will be mounted in. The helper holds at `ATTACH_FD` until the
   * executor names the session (`attachCommands`).
   */
  pooled?: boolean | undefined;
  /**
   * A pooled host that will wait for its session (a long-running executor's, refilled behind each
   * launch) rather than be taken as soon as it is up (`mur run`'s one warm host, started while its
   * capsule is staged): it compiles its code as it loads (`POOLED_NODE_FLAGS`).
   */
  compileAhead?: boolean | undefined;
}

/** A pooled sandbox's exchange with its helper (in the tools' cgroup descriptor's place: it has none). */
export const ATTACH_FD = FIRST_CGROUP_FD;
/** Where a pooled sandbox sees its workdir's parent until the session is mounted (then unmounted). */
export const ATTACH_STAGING = '/.murmur-attach';

/**
 * A waiting pooled host's node flags (`compileAhead`): it compiles every function as its modules
 * load, while it waits for a session rather than during the launch, until it is told what it will
 * run (`host/compile-mode.ts`). A host whose start is on a launch's way — a fresh one, `mur run`'s
 * warm one — gets none: compiling everything would make it later (by ~150 ms for `mur run`).
 */
const POOLED_NODE_FLAGS = ['--no-lazy'];

/**
 * What the held helper of a pooled sandbox is told to do when `accessible` (a directory directly
 * in the sandbox's workdir parent) becomes its session's workdir: mount it where a fresh sandbox
 * would have bound it, make the parent read-only again, and take away the staging view (of the
 * directory above the parent: every other session's workdir is in it).
 */
export function attachCommands(parent: string, accessible: string, records: readonly RecordBind[] = []): string {
  const name = path.relative(parent, accessible);
  if (name === '' || name.includes('/') || name.startsWith('..') || /[\t\n]/.test(accessible)) {
    throw new Error(`a pooled sandbox can only take a workdir directly in ${parent}, not ${accessible}`);
  }
  // A pooled sandbox takes only a workdir that is its session's directory, whose records are all read-only.
  const refused = records.find((record) => record.writable || !path.resolve(record.path).startsWith(`${accessible}/`) || /[\t\n]/.test(record.path));
  if (refused !== undefined) throw new Error(`a pooled sandbox binds read-only only paths in its workdir ${accessible}, not ${refused.path}`);
  // The staging view is of the parent's parent: `<staging>/<parent's name>/<session>`. Each record
  // is bound over itself and made read-only once the workdir is in place, before the host runs.
  const source = path.join(ATTACH_STAGING, path.basename(parent), name);
  const binds = records.flatMap((record) => [`bind ${record.path}\t${record.path}`, `readonly ${record.path}`]);
  return [`mkdir ${accessible}`, `bind ${source}\t${accessible}`, ...binds, `readonly ${parent}`, `unmount ${ATTACH_STAGING}`, 'done', ''].join('\n');
}

/**
 * What of the runtime's own code a sandbox sees: `bound` read-only at their own paths, `hidden`
 * beneath them (an empty directory, an empty file), and `readable`, what a sealed sandbox's
 * Landlock rules let it read of them.
 *
 * The capsule host runs from its bundle (`dist/bundle`: the host, its guest worker with the shim
 * inside, their code cache), which needs nothing else of the runtime from disk, so that directory
 * is all a sandbox is given. The code root above it is the repository, or, for a runtime npm
 * installed into a project, the project itself — its sources, and every other session's workdir
 * beneath it — and every sandbox that was given the root's entries read them all.
 *
 * A host that is not the bundle (a build that made none, a test's own host) loads the workspace's
 * packages and node_modules: it is given the code root, listed for each sandbox, less its hidden
 * entries (`.git`, `.cache`, a checkout's `.env` or `.npmrc`), which every such sandbox also
 * covers, since a Landlock grant above the code root (a checkout under `/tmp`) would reach them.
 */
export function runtimeCode(hostEntry: string, codeRoot: string, hidden: readonly string[]): { bound: string[]; readable: string[]; hidden: string[] } {
  const entryDir = path.dirname(hostEntry);
  if (path.basename(hostEntry) === 'host.cjs' && path.basename(entryDir) === 'bundle') return { bound: [entryDir], readable: [entryDir], hidden: [] };
  const entries = readdirSync(codeRoot);
  return {
    bound: [codeRoot],
    readable: entries.filter((name) => !name.startsWith('.')).map((name) => path.join(codeRoot, name)),
    hidden: [...new Set([...hidden, ...entries.filter((name) => name.startsWith('.')).map((name) => path.join(codeRoot, name))])],
  };
}

export interface HostSandbox {
  argv: string[];
  /** The descriptors from 4 on, in order, as `spawn`'s `stdio` takes them. */
  stdio: Array<StdioPipe | StdioNull | number>;
  /**
   * Writes each pipe's content once the host is spawned. A sealed sandbox's contents (bubblewrap's
   * mounts, the helper's spec, the seccomp filter) are worked out here, and may be refused here:
   * the sandbox, still waiting for its mounts, is then ended by `spawnSandboxedHost`.
   */
  feed(pipes: ReadonlyArray<NodeJS.WritableStream | null>): void;
  /** Closes the executor's copies of descriptors passed to the host. */
  release(): void;
  /** The network the sealed sandbox sees; undefined when not sealed. */
  network: NetworkPlan | undefined;
  /** What the host is told about its sandbox (`start.sandbox`). */
  start: SandboxNetworkStart | undefined;
  /**
   * Unsealed: the numbers, in the host, of the tools' cgroup descriptors it inherits
   * (`start.unsealed_tools`); empty without a cgroup. Undefined when sealed.
   */
  unsealedToolCgroupFds?: number[] | undefined;
  sealed: boolean;
}

/** The directory the sandbox sees as `/tmp`: inside the workdir, so it counts as the workdir. */
export function sandboxTmp(workdir: string): string {
  return path.join(workdir, '.capsule-tmp');
}

/**
 * Starts a capsule host in `sandbox` — from a shell that first joins `cgroup`, when there is one, so
 * nothing the session ever starts is outside it — and hands the sandbox what it reads on its
 * descriptors. A fresh session's host and a pooled one are started alike.
 */
export function spawnSandboxedHost(sandbox: HostSandbox, options: { cgroup: SessionCgroup | undefined; cwd: string; env: NodeJS.ProcessEnv }): ChildProcess {
  let child: ChildProcess;
  try {
    const argv = options.cgroup ? options.cgroup.joining(sandbox.argv) : sandbox.argv;
    child = spawn(argv[0] as string, argv.slice(1), {
      cwd: options.cwd,
      env: options.env,
      stdio: hostStdio(sandbox),
      serialization: 'json',
    });
  } finally {
    sandbox.release();
  }
  // A sandbox that ends before it has read what it was handed resets those pipes: that is told by
  // its exit, and must not become an error event nobody hears, which would end the executor.
  for (const stream of (child.stdio as ReadonlyArray<NodeJS.EventEmitter | null | undefined>).slice(FIRST_DATA_FD)) stream?.on('error', () => {});
  try {
    sandbox.feed(child.stdio as ReadonlyArray<NodeJS.WritableStream | null>);
  } catch (error) {
    // Refused as its contents were worked out: the sandbox has run nothing but the cgroup join,
    // and bubblewrap, if it started, waits for its mounts. It goes, and the refusal is the launch's.
    child.on('error', () => {});
    child.kill('SIGKILL');
    for (const stream of child.stdio as ReadonlyArray<{ destroy(): void } | null | undefined>) stream?.destroy();
    throw error;
  }
  return child;
}

/** What a host inherits, in descriptor order: its channel, the sandbox's descriptors, and the hand-over channel when sealed. */
function hostStdio(sandbox: HostSandbox): Array<StdioPipe | StdioNull | number | 'ipc'> {
  const stdio: Array<StdioPipe | StdioNull | number | 'ipc'> = ['ignore', 'pipe', 'pipe', 'pipe', ...sandbox.stdio];
  if (!sandbox.sealed) return stdio;
  while (stdio.length < HANDOVER_FD) stdio.push('ignore');
  if (stdio.length > HANDOVER_FD) throw new Error('the sandbox descriptor layout is out of step: its descriptors reach the hand-over channel');
  stdio.push('ipc');
  return stdio;
}

/**
 * The host's sandbox: its command line and the descriptors it is handed. The descriptors opened on
 * the way (the pinned workdir, /tmp and records, the tools' cgroup files) are closed again when a
 * later step refuses, so a refused launch keeps none of them open in the executor.
 */
export function hostSandbox(input: HostSandboxInput): HostSandbox {
  const opened: number[] = [];
  try {
    return buildHostSandbox(input, opened);
  } catch (error) {
    for (const fd of opened.splice(0)) closeSync(fd);
    throw error;
  }
}

/** `opened`: every descriptor it opens, as it opens them, for `hostSandbox` to close if a later step throws. */
function buildHostSandbox(input: HostSandboxInput, opened: number[]): HostSandbox {
  const { namespaces, confine, policy } = input;
  const unsealedNode = input.node ?? process.execPath;
  // Without the helper to start each tool, the host passes these on to its tools itself (`unsealed_tools`).
  const unsealedCgroupFds = (): number[] => {
    const fds = input.cgroup && !confine ? pinAll(input.cgroup.toolsProcsFiles.map((file) => () => openSync(file, 'w'))) : [];
    opened.push(...fds);
    return fds;
  };
  if (namespaces.tool === 'unshare') {
    const cgroupFds = unsealedCgroupFds();
    return {
      ...pipesOnly([namespaces.binary as string, ...unshareArguments([unsealedNode, input.hostEntry])], [], cgroupFds),
      ...unsealedStart(FIRST_DATA_FD, cgroupFds),
    };
  }
  if (namespaces.tool !== 'bubblewrap') return plain([unsealedNode, input.hostEntry]);

  const pooled = input.pooled === true;
  const tmp = pooled ? '/tmp' : sandboxTmp(input.workdir);
  const harness = input.harness;
  // A fresh sandbox binds its workdir and /tmp by descriptor, opened and checked now (a pooled
  // one is given its workdir by its helper, which mounts what the executor names at attach time).
  const records = pooled ? [] : (input.records ?? []);
  const pinRecord = (record: RecordBind) => () => (record.kind === 'directory' ? pinDirectory(record.path) : pinRecordFile(record.path));
  const pinned = pooled ? [] : pinAll([() => pinDirectory(input.workdir), () => pinDirectory(tmp), ...records.map(pinRecord)]);
  opened.push(...pinned);
  const pinnedFrom = (at: number) => ({
    workdirFd: at,
    tmpFd: at + 1,
    records: records.map((record, index) => ({ fd: at + 2 + index, path: record.path, writable: record.writable })),
  });
  /** What bubblewrap binds, and the runtime's code a sealed sandbox reads: listed from disk, so worked out where needed. */
  const layoutOf = () => {
    const data = new Set<string>();
    // Each component's bundle alone: their parent holds every capsule's transpiled on this machine,
    // which a shell tool read. A pooled sandbox is given that parent (`data`), as it must be before
    // it knows its session; no capsule that can start a process is given one.
    for (const component of input.components) data.add(component.bundle_dir);
    for (const dir of input.data ?? []) data.add(dir);
    // An unsealed host's node copy lies in the cache (a sealed one's is bound with the helper's).
    if (!confine && input.node && !isSystemPath(input.node)) data.add(path.dirname(input.node));
    for (const tool of input.tools) if (tool.kind === 'native' && tool.path) data.add(path.dirname(tool.path));
    // Runtime trees a shell binary needs, wherever they live (under /usr they are bound already).
    for (const grant of policy.interpreter_runtime) for (const dir of grant.dirs) if (!isSystemPath(dir.path)) data.add(dir.path);
    for (const grant of policy.staged_runtime) if (!isSystemPath(grant.source_path)) data.add(grant.source_path);
    if (harness && !isSystemPath(harness.binary)) data.add(path.dirname(harness.binary));
    const code = runtimeCode(input.hostEntry, input.codeRoot, input.hidden);
    const layout = {
      workdir: input.workdir,
      code: code.bound,
      hidden: code.hidden,
      data: [...data],
      tmp,
      ...(pooled ? { attachLater: { source: path.dirname(input.workdir), staging: ATTACH_STAGING } } : {}),
    };
    return { layout, codeReadable: code.readable };
  };
  const files = SANDBOX_FILES.map((file) => file.content);

  if (pooled && !confine) throw new Error('a pooled sandbox is sealed: its session is mounted in by the held helper');
  if (!confine) {
    const pinnedAt = FIRST_DATA_FD + files.length;
    const argv = [namespaces.binary as string, ...bubblewrapArguments({ ...layoutOf().layout, pinned: pinnedFrom(pinnedAt) }, [unsealedNode, input.hostEntry])];
    const cgroupFds = unsealedCgroupFds();
    return { ...pipesOnly(argv, files, [...pinned, ...cgroupFds]), ...unsealedStart(pinnedAt + pinned.length, cgroupFds) };
  }

  // Sealed. What the command line and the descriptors name is decided before the spawn, with the
  // tools' files, which the policy may be refused for. What bubblewrap mounts, the helper's spec
  // (which refuses a path it cannot name) and the seccomp filter are read from disk and the system
  // (~6 ms of `mur run`'s way here), so they are worked out after it (`feed`), while the shell joins
  // the session's cgroup, which waits for the kernel (an RCU grace period, ~10 ms here) before
  // bubblewrap starts. bubblewrap reads the mounts from a pipe (`--args`) before it does anything;
  // its namespaces, its capabilities and the read-only root are on its command line, so what it
  // reads late can only add mounts.
  const arch = nativeSeccompArch();
  if (!arch) throw new Error(`no seccomp filter is built for ${process.arch}`);
  const cgroupFds: number[] = input.cgroup ? pinAll(input.cgroup.toolsProcsFiles.map((file) => () => openSync(file, 'w'))) : [];
  opened.push(...cgroupFds);
  const network = planNetwork(policy.network_allow, FIRST_LISTENER_FD);
  const toolExecutables = [...input.tools.flatMap((tool) => (tool.kind === 'native' && tool.path ? [tool.path] : [])), ...(harness ? [harness.binary] : [])];
  const shellBinaries = resolveShellBinaries(policy.shell_allow, shellSearchPath(input.subprocessPath));
  const toolFiles = toolClosure({ toolExecutables, shellBinaries });
  const keep = [HOST_CHANNEL_FD, HANDOVER_FD, ...cgroupFds.map((_, index) => FIRST_CGROUP_FD + index)];
  if (FIRST_DATA_FD + files.length + 2 !== FIRST_CGROUP_FD) throw new Error('the sandbox descriptor layout is out of step');
  if (pooled && cgroupFds.length > 0) throw new Error('a pooled sandbox starts no subprocess: it is given no tools cgroup');
  // After the cgroup descriptors: the helper closes both before the host runs (they are not in `keep`).
  const pinnedAt = FIRST_CGROUP_FD + cgroupFds.length;
  if (pinnedAt + pinned.length + (pooled ? 1 : 0) > BUBBLEWRAP_MOUNTS_FD)
    throw new Error(`${cgroupFds.length} cgroup and ${pinned.length} pinned descriptors do not fit below bubblewrap's mounts`);
  const start: SandboxNetworkStart = {
    helper: confine.helper,
    tool_cgroup_fds: cgroupFds.map((_, index) => FIRST_CGROUP_FD + index),
    tool_executables: toolExecuteGrants({ policy, toolFiles, workdir: input.workdir, tmp }),
    dns: network.dns,
    listeners: network.listeners.map((listener) => listener.fd),
  };
  const command = confinedCommand(
    [
      confine.node,
      ...(pooled && input.compileAhead ? POOLED_NODE_FLAGS : []),
      input.hostEntry,
      // The sockets `start` names, so the command line and the executor's ask name the same.
      ...handOverArguments(sandboxSockets(start)),
    ],
    { helper: confine.helper, specFd: SPEC_FD },
  );
  const argv = [
    namespaces.binary as string,
    ...bubblewrapIdentity(true),
    '--args',
    String(BUBBLEWRAP_MOUNTS_FD),
    ...bubblewrapSeal(pooled ? '/' : input.workdir),
    '--',
    ...command,
  ];
  const stdio: Array<StdioPipe | StdioNull | number> = [
    ...files.map(() => 'pipe' as const),
    'pipe',
    'pipe',
    ...cgroupFds,
    ...pinned,
    ...(pooled ? ['pipe' as const] : []),
  ];
  while (FIRST_DATA_FD + stdio.length < BUBBLEWRAP_MOUNTS_FD) stdio.push('ignore');
  stdio.push('pipe');
  /** What the sandbox reads on its descriptors, worked out from the layout, the system and the policy. */
  const contents = (): { mounts: string[]; spec: string; seccomp: Buffer } => {
    const { layout: bound, codeReadable } = layoutOf();
    // The helper runs inside, wherever the runtime's code it came with is bound or not.
    bound.data.push(path.dirname(confine.node), path.dirname(confine.helper));
    const nodeRoot = path.dirname(path.dirname(realpathSync(process.execPath)));
    // Node's install root is read where it is not a system directory's, whose readable part is given as such.
    const readable = [...systemReadable(), '/etc', '/proc', ...(isSystemPath(nodeRoot) ? [] : [nodeRoot]), ...codeReadable, ...bound.data].filter((dir) =>
      existsSync(dir),
    );
    const spec = confinementSpec({
      policy,
      network,
      workdir: input.workdir,
      tmp,
      workdirMounts: records.map((record) => record.path),
      readable,
      executables: [...nodeExecutables(confine.node), confine.helper],
      toolExecutables,
      shellBinaries,
      toolFiles,
      seccompFd: SECCOMP_FD,
      keep,
      ...(pooled ? { holdFd: ATTACH_FD } : {}),
    });
    const mounts = bubblewrapMounts({ ...bound, ...(pooled ? {} : { pinned: pinnedFrom(pinnedAt) }) });
    return { mounts, spec, seccomp: seccompFilterBytes({ arch, unixSockets: policy.unix_sockets }) };
  };
  return {
    argv,
    stdio,
    feed: (streams) => {
      // Worked out whole before anything is written: a refusal here leaves the sandbox waiting
      // for mounts it never gets, and the caller ends it (`spawnSandboxedHost`).
      const { mounts, spec, seccomp } = contents();
      writeWhole(streams[BUBBLEWRAP_MOUNTS_FD], mounts.map((option) => `${option}\0`).join(''));
      for (const [index, content] of [...files, spec, seccomp].entries()) writeWhole(streams[FIRST_DATA_FD + index], content);
    },
    release: () => {
      for (const fd of [...cgroupFds.splice(0), ...pinned.splice(0)]) closeSync(fd);
    },
    network,
    start,
    sealed: true,
  };
}

/**
 * Writes `content` into a pipe the sandbox reads to its end (bubblewrap, the helper), and closes
 * this side at once when the pipe took it all, as it does for a few KB: the reader's end of file
 * then does not wait for the executor's event loop to come round to closing the pipe, which the
 * launch's own work around the spawn held up for ~15 ms. What the pipe did not take is written,
 * and the pipe closed, by the stream as it drains.
 */
function writeWhole(stream: NodeJS.WritableStream | null | undefined, content: string | Buffer): void {
  if (!stream) return;
  const pipe = stream as NodeJS.WritableStream & { writableLength: number; destroy(): void };
  pipe.write(content);
  if (pipe.writableLength === 0) pipe.destroy();
  else pipe.end();
}

/** An unsealed sandbox's own fields: the tools' cgroup descriptors the host finds from `at` on. */
function unsealedStart(at: number, cgroupFds: number[]): Pick<HostSandbox, 'network' | 'start' | 'sealed' | 'unsealedToolCgroupFds'> {
  return { network: undefined, start: undefined, sealed: false, unsealedToolCgroupFds: cgroupFds.map((_, index) => at + index) };
}

function plain(argv: string[]): HostSandbox {
  return { argv, stdio: [], feed: () => {}, release: () => {}, network: undefined, start: undefined, sealed: false };
}

function pipesOnly(argv: string[], pipes: Array<string | Buffer>, pinned: number[]): Omit<HostSandbox, 'network' | 'start' | 'sealed'> {
  return {
    argv,
    stdio: [...pipes.map(() => 'pipe' as const), ...pinned],
    feed: (streams) => {
      for (const [index, content] of pipes.entries()) writeWhole(streams[FIRST_DATA_FD + index], content);
    },
    release: () => {
      for (const fd of pinned.splice(0)) closeSync(fd);
    },
  };
}

/** Opens each in turn; when one is refused, closes those already open before passing the refusal on. */
function pinAll(openers: Array<() => number>): number[] {
  const opened: number[] = [];
  try {
    for (const open of openers) opened.push(open());
  } catch (error) {
    for (const fd of opened) closeSync(fd);
    throw error;
  }
  return opened;
}

/**
 * A directory opened for binding by descriptor, refused unless it is the directory named: not a
 * link, and reached through no link (the descriptor's own path is the one asked for). Once open,
 * swapping a link in at the path changes nothing the sandbox is given.
 */
export function pinDirectory(dir: string): number {
  return pinChecked(dir, constants.O_DIRECTORY, 'a link or not a directory', () => undefined);
}

/**
 * A record file opened for binding read-only, checked as a directory is, and a regular file of one
 * link besides (a hard link to a file elsewhere would bind that file).
 */
export function pinRecordFile(file: string): number {
  return pinChecked(file, constants.O_NOCTTY | constants.O_NONBLOCK, 'a link', (fd) => {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return 'it is not a regular file';
    return stat.nlink !== 1 ? 'it has another name (a hard link)' : undefined;
  });
}

/**
 * `target` opened without following a link (`flags` beside), refused unless the descriptor is the
 * file named (reached through no link) and `problem` finds nothing wrong with it.
 */
function pinChecked(target: string, flags: number, refusedKind: string, problem: (fd: number) => string | undefined): number {
  const refused = (why: string): MurmurError => new MurmurError('E-SES-004', `refused to bind ${target} into the sandbox: ${why}`, { path: target });
  let fd: number;
  try {
    fd = openSync(target, constants.O_RDONLY | constants.O_NOFOLLOW | flags);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOTDIR' || code === 'ELOOP') throw refused(`it is ${refusedKind}, which something in a sandbox put there`);
    throw error;
  }
  const opened = readlinkSync(`/proc/self/fd/${fd}`);
  const why = opened !== path.resolve(target) ? `it resolves to ${opened}, so something replaced a directory on its way with a link` : problem(fd);
  if (why !== undefined) {
    closeSync(fd);
    throw refused(why);
  }
  return fd;
}
