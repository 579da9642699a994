import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { type CapabilityPolicy, type Log, newId } from '@murmur/shared';
import { resolvedPath } from '@murmur/shared/node';
import { type CgroupProbe, SessionCgroup } from './cgroup.js';
import type { ConfineProbe } from './confinement.js';
import { HostLink } from './host-link.js';
import { ATTACH_FD, attachCommands, hostSandbox, runtimeCode, spawnSandboxedHost } from './host-sandbox.js';
import type { ExpectMessage, HostComponent, SandboxNetworkStart } from './host/protocol.js';
import type { NetworkPlan } from './network-plan.js';
import { type NamespaceProbe, SYSTEM_DIRECTORIES, pathWithin } from './sandbox.js';
import type { RecordBind } from './workdir.js';

/**
 * The executor's warm pool: capsule hosts already started inside sealed sandboxes — namespaces,
 * composed root, Landlock, seccomp, node loaded and the guest worker up — bound to no session yet.
 * A launch takes one, and the sandbox's held helper mounts the session's workdir where a fresh
 * sandbox would have bound it; then the host is given its session. The pool refills behind it.
 *
 * A pooled host serves exactly one session and is never given back: nothing of a previous
 * session can be left in it. What it has of a generic state is only what every sealed sandbox of
 * a capsule that cannot start a subprocess has anyway, so the pool takes only those launches
 * (`poolRefusal` says why another one starts fresh): a subprocess's sandbox is shaped by its
 * session (listeners for `network.allow`, Landlock rules for `shell.allow` and native tools, the
 * tools' cgroup), and is started for it.
 */

export interface PoolEnvironment {
  namespaces: NamespaceProbe;
  confine: ConfineProbe;
  cgroups: CgroupProbe;
  log: Log;
  /** Where sessions get their workdir when the launcher names none: `<base>/workdir/<session>`. */
  workdirBase: string;
  /** The transpiled bundles a pooled sandbox can read (one transpiler's directory). */
  bundlesDir: string;
  codeRoot: string;
  hidden: string[];
  hostEntry: string;
  /** The host process's environment, the same as a fresh host's. */
  hostEnv: NodeJS.ProcessEnv;
}

/** What a pooled sandbox is sealed with: nothing a session's grants would add. */
const POOLED_POLICY: Pick<CapabilityPolicy, 'interpreter_runtime' | 'staged_runtime' | 'network_allow' | 'shell_allow' | 'unix_sockets' | 'workdir_exec'> = {
  interpreter_runtime: [],
  staged_runtime: [],
  network_allow: [],
  shell_allow: [],
  unix_sockets: false,
  workdir_exec: false,
};

/** A pooled host's group before its session sets the real ceilings: room for the host alone, none for tools. */
const IDLE_CEILINGS = { session: { memoryBytes: 512 * 1024 * 1024, pidsMax: 128 }, tools: { memoryBytes: 0, pidsMax: 0, cpuPercent: 1 } };
const ATTACH_TIMEOUT_MS = 5_000;
/** Hosts in a row that may fail to start before the pool stops refilling. */
const POOL_FAILURES_TOLERATED = 3;
/**
 * How long after a take the pool starts the host that replaces it, while it still has one left.
 * Starting a host costs the executor's thread ~10 ms (the fork of a large process, the sandbox's
 * spec) and a core for ~100 ms (node starting in bubblewrap); paid at once, it lands on the launch
 * that took the host, between its attach and its guest's first instruction (p50 ~40 ms rather
 * than ~27 in `bench/first-instruction.ts`). A pool left empty refills at once: a burst of
 * launches needs hosts more than any one launch needs the core.
 */
const REFILL_DELAY_MS = 250;

export interface PoolRefusalInput {
  canSpawn: boolean;
  harness: boolean;
  policy: Pick<CapabilityPolicy, 'interpreter_runtime' | 'staged_runtime' | 'unix_sockets' | 'workdir_exec'>;
  /** The launcher chose the workdir (`--workdir`, a delegated child's directory). */
  chosenWorkdir: boolean;
  /** The base the session's workdir is made under, and the workdir as made (symlinks resolved). */
  base: string;
  accessible: string;
  components: HostComponent[];
}

/** Why this launch cannot take a pooled host (it starts a fresh one), or undefined when it can. */
export function poolRefusal(pool: Pick<PoolEnvironment, 'workdirBase' | 'bundlesDir'>, input: PoolRefusalInput): string | undefined {
  if (input.canSpawn) return 'the capsule can start subprocesses, whose sandbox is shaped by its grants';
  if (input.harness) return 'a harness runs as a subprocess';
  if (input.policy.workdir_exec || input.policy.unix_sockets) return 'workdir_exec and unix_sockets shape the sandbox';
  if (input.policy.interpreter_runtime.length > 0 || input.policy.staged_runtime.length > 0) return 'runtime trees are bound for this session';
  if (input.chosenWorkdir) return 'the workdir is one the launcher chose';
  if (path.resolve(input.base) !== path.resolve(pool.workdirBase)) return `the workdir base ${input.base} is not the pool's (${pool.workdirBase})`;
  // A `workdir` that is a symlink puts the session's directory elsewhere, outside the mount point.
  if (path.dirname(input.accessible) !== path.join(resolvedPath(pool.workdirBase), 'workdir'))
    return `the workdir ${input.accessible} is not in ${path.join(pool.workdirBase, 'workdir')}`;
  const outside = input.components.find((component) => path.dirname(component.bundle_dir) !== pool.bundlesDir);
  if (outside) return `the component at ${outside.bundle_dir} is outside the bundles a pooled sandbox reads`;
  return undefined;
}

/**
 * Why the sandbox could not make `dir` as a mount point: bubblewrap makes a missing one in its own
 * tmpfs, but not inside a directory it binds read-only (the code, the system's). Undefined when it can.
 */
export function mountPointRefusal(dir: string, readOnly: string[], writableInside: string[]): string | undefined {
  if (existsSync(dir)) return undefined;
  const within = (root: string): boolean => pathWithin(dir, root);
  if (writableInside.some(within)) return undefined;
  const bound = readOnly.find(within);
  return bound ? `${dir} does not exist, and a sandbox cannot make it inside ${bound}, which it binds read-only` : undefined;
}

/** What a session will run first, as a pooled host is told it ahead (`ExpectMessage`). */
export interface Expectation {
  component: HostComponent;
  memoryLimitBytes: number;
  tableElementsLimit: number;
  agent: boolean;
}

/** One host of the pool: started, sealed, its helper holding for a session. */
export class PooledHost {
  /** What the host wrote before it was taken (it should be nothing); the session's log gets it. */
  readonly earlyOutput: Buffer[] = [];
  /** The sandbox's sockets, handed over while the host waited: the session serves them. */
  readonly sockets: Array<{ fd: number; protocol: 'tcp' | 'udp'; handle: unknown }> = [];
  readonly ready: Promise<void>;
  /** Its channel: the session that takes the host takes it too. */
  readonly link: HostLink;
  private isReady = false;
  /** The last `expect` the host was sent, as sent. */
  private expected: string | undefined;
  private readonly discardBroken = (): void => void this.discard();
  private discarding: Promise<void> | undefined;

  constructor(
    readonly child: ChildProcess,
    readonly cgroup: SessionCgroup | undefined,
    readonly network: NetworkPlan,
    private readonly sandboxStart: SandboxNetworkStart,
    private readonly parent: string,
  ) {
    // A host no session holds never keeps the executor's process alive (an in-process `mur run`
    // that is refused exits at once); the session that takes it holds it (`handOver`).
    this.hold(false);
    this.link = new HostLink(child);
    // A host that breaks its channel before a session took it is only thrown away.
    this.link.on('violation', this.discardBroken);
    const keep = (chunk: Buffer): void => void this.earlyOutput.push(chunk);
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    // Ready once it has said so and handed over its sandbox's sockets (asked for at once), so a
    // launch neither waits for the hand-over nor finds a socket still on its way.
    const sockets = 2 + sandboxStart.listeners.length;
    this.ready = new Promise((resolve, reject) => {
      const started = (): void => {
        this.link.off('message', onMessage);
        if (this.sockets.length !== sockets) {
          reject(new Error(`a pooled capsule host handed over ${this.sockets.length} of its sandbox's ${sockets} sockets`));
          return;
        }
        this.isReady = true;
        resolve();
      };
      const onMessage = (raw: unknown, handle: unknown): void => {
        const message = raw as { type?: unknown; fd?: unknown; protocol?: unknown } | null;
        if (message?.type === 'listener' && typeof message.fd === 'number' && (message.protocol === 'tcp' || message.protocol === 'udp')) {
          // Held, not served, until a session takes the host: like the host, it keeps nothing alive.
          (handle as { unref?: () => void } | undefined)?.unref?.();
          this.sockets.push({ fd: message.fd, protocol: message.protocol, handle });
        }
      };
      this.link.on('message', onMessage);
      this.link.once('startable', started);
      this.link.askHandOver(sandboxStart);
      child.once('exit', (code, signal) => reject(new Error(`a pooled capsule host exited before it was used (${signal ?? `exit ${code}`})`)));
    });
    this.ready.catch(() => {});
  }

  /** Started and not gone: it may still be on its way to `ready`. */
  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null && this.link.open;
  }

  /** What the host is told of its sandbox at start: its sockets are handed over already. */
  get start(): SandboxNetworkStart {
    return { ...this.sandboxStart, handed_over: true };
  }

  /** Alive and waiting: it has said `ready` and handed its sockets over. */
  get usable(): boolean {
    return this.isReady && this.alive;
  }

  /**
   * Tells the host what its session will run first (`expect`): the host compiles and loads it (and
   * an agent's task loop). Sent as the host starts, of what the pool anticipates, and again as soon
   * as a launch takes it, of what that launch runs, while the helper attaches the workdir. Returns
   * whether the host had been told exactly this already, and so has it loaded or on its way.
   */
  expect(expectation: Expectation): boolean {
    const message: ExpectMessage = {
      type: 'expect',
      component: expectation.component,
      memory_limit_bytes: expectation.memoryLimitBytes,
      table_elements_limit: expectation.tableElementsLimit,
      ...(expectation.agent ? { agent: true } : {}),
    };
    const key = JSON.stringify(message);
    if (key === this.expected) return true;
    this.expected = key;
    this.link.send(message);
    return false;
  }

  /** Stops listening for the pool: the session takes the host's streams and messages from here. */
  handOver(): void {
    this.link.off('violation', this.discardBroken);
    this.child.stdout?.removeAllListeners('data');
    this.child.stderr?.removeAllListeners('data');
    this.hold(true);
    for (const socket of this.sockets) (socket.handle as { ref?: () => void } | undefined)?.ref?.();
  }

  /** Whether the host, its channel and its pipes keep the event loop alive. */
  private hold(held: boolean): void {
    const handles: Array<{ ref?: () => void; unref?: () => void } | null | undefined> = [
      this.child,
      (this.child as unknown as { channel?: { ref?: () => void; unref?: () => void } }).channel,
      ...(this.child.stdio as ReadonlyArray<unknown> as ReadonlyArray<{ ref?: () => void; unref?: () => void } | null | undefined>),
    ];
    for (const handle of handles) (held ? handle?.ref : handle?.unref)?.call(handle);
  }

  /**
   * Mounts `accessible` (made in the pool's workdir parent) into the sandbox at its own path, with
   * `records` (the session's records in it, `recordBinds`) bound over themselves read-only, and waits for the
   * helper's `ok`: by then the helper has dropped every capability and is exiting.
   */
  attach(accessible: string, records: readonly RecordBind[] = []): Promise<void> {
    const socket = (this.child.stdio as ReadonlyArray<unknown>)[ATTACH_FD] as Duplex | null | undefined;
    if (!socket) return Promise.reject(new Error('the pooled sandbox has no helper to attach with'));
    return new Promise((resolve, reject) => {
      let answer = '';
      const timer = setTimeout(
        () => finish(new Error(`the pooled sandbox's helper did not attach the workdir within ${ATTACH_TIMEOUT_MS / 1000}s`)),
        ATTACH_TIMEOUT_MS,
      );
      const finish = (error?: Error): void => {
        clearTimeout(timer);
        socket.off('data', onData);
        socket.off('close', onClose);
        socket.destroy();
        if (error) reject(error);
        else resolve();
      };
      const onData = (chunk: Buffer): void => {
        answer += chunk.toString();
        const line = answer.split('\n')[0] as string;
        if (!answer.includes('\n')) return;
        if (line === 'ok') finish();
        else finish(new Error(`the pooled sandbox's helper could not attach the workdir: ${line.replace(/^error: /, '')}`));
      };
      const onClose = (): void =>
        finish(new Error(`the pooled sandbox's helper went away before it attached the workdir${answer ? `: ${answer.trim()}` : ''}`));
      socket.on('data', onData);
      socket.once('close', onClose);
      try {
        socket.write(attachCommands(this.parent, accessible, records));
      } catch (error) {
        finish(error as Error);
      }
    });
  }

  /** Kills the host and its sandbox; resolves when its group is gone. Once: a second call waits for the first. */
  discard(): Promise<void> {
    this.discarding ??= (async () => {
      for (const socket of this.sockets.splice(0)) (socket.handle as { close?: () => void } | undefined)?.close?.();
      this.child.kill('SIGKILL');
      this.cgroup?.killAll();
      // This side's ends of the channel and the pipes go now, whatever of the sandbox may linger:
      // a host thrown away must not keep the executor's process alive.
      this.link.close();
      for (const stream of this.child.stdio as ReadonlyArray<Duplex | null | undefined>) stream?.destroy();
      await this.cgroup?.remove();
    })();
    return this.discarding;
  }
}

/**
 * Keeps `size` hosts warm. A host that dies before it is used is replaced (one that died while it
 * waited as soon as it is gone); a pool whose hosts keep failing to start stops trying (a launch
 * still starts a fresh host, which says why).
 */
export class HostPool {
  private readonly hosts: PooledHost[] = [];
  /**
   * What the last launch that took a host runs first: every host started from then on is told to
   * expect it, so an executor that launches one capsule again and again finds its component
   * compiled and loaded before the launch. A host started before it, or one whose launch runs
   * something else, is told at the take instead (the wrong guess let go), as without it.
   */
  private anticipated: Expectation | undefined;
  private failures = 0;
  private closed = false;
  readonly parent: string;

  constructor(
    readonly environment: PoolEnvironment,
    readonly size: number,
    private readonly options: { refill: boolean } = { refill: true },
  ) {
    this.parent = path.join(environment.workdirBase, 'workdir');
    this.fill();
  }

  /** How many hosts are warm and waiting. */
  get idle(): number {
    return this.hosts.filter((host) => host.usable).length;
  }

  /**
   * A warm host, or undefined when the pool has none alive (the launch starts a fresh one). One
   * still starting is taken too when none is ready: it is further along than a fresh one would be.
   */
  take(): PooledHost | undefined {
    for (const host of this.hosts.filter((candidate) => !candidate.alive)) this.drop(host);
    const taken = this.hosts.find((host) => host.usable) ?? this.hosts[0];
    if (taken) this.hosts.splice(this.hosts.indexOf(taken), 1);
    if (this.options.refill) {
      if (this.hosts.length === 0) setImmediate(() => this.fill());
      else setTimeout(() => this.fill(), REFILL_DELAY_MS).unref();
    }
    return taken;
  }

  /** Has hosts started from now on load `expectation` while they wait (see `anticipated`). */
  anticipate(expectation: Expectation): void {
    this.anticipated = expectation;
  }

  private drop(host: PooledHost): void {
    const index = this.hosts.indexOf(host);
    if (index >= 0) this.hosts.splice(index, 1);
    void host.discard();
  }

  /** Stops refilling and throws every waiting host away; resolves when their groups are gone. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.hosts.splice(0).map((host) => host.discard()));
  }

  /** Starts hosts until `size` are warm or starting (a host is in `hosts` from its spawn on). */
  fill(): void {
    while (!this.closed && this.failures < POOL_FAILURES_TOLERATED && this.hosts.length < this.size) {
      let host: PooledHost;
      try {
        host = this.startHost();
      } catch (error) {
        this.failures += 1;
        this.environment.log.warn({ err: error }, 'could not start a pooled capsule host');
        continue;
      }
      this.hosts.push(host);
      if (this.anticipated) host.expect(this.anticipated);
      host.ready.then(
        () => {
          this.failures = 0;
          // Gone while it waited (the OOM killer, someone's kill): thrown away and replaced now,
          // not found dead by the next launch, which then started a fresh host, and its group left
          // empty until then. After a while, so that hosts that die as soon as they are ready are
          // not started again as fast as they die.
          host.child.once('exit', (code, signal) => {
            if (this.closed || !this.hosts.includes(host)) return;
            this.environment.log.warn({ code, signal }, 'a warm capsule host died while it waited; the pool replaces it');
            this.drop(host);
            setTimeout(() => this.fill(), REFILL_DELAY_MS).unref();
          });
        },
        (error: unknown) => {
          // A host a session took is the session's to end: its group may carry the session's name by now.
          if (!this.hosts.includes(host)) return;
          this.failures += 1;
          // What it was told to load ahead may be what killed it (a large module under the idle
          // host's ceilings): the next ones are told nothing, as before any launch.
          if (this.anticipated) {
            this.environment.log.warn(
              { component: this.anticipated.component.bundle_dir },
              'a pooled host told to load a component ahead failed; the pool stops anticipating it',
            );
            this.anticipated = undefined;
          }
          this.environment.log.warn({ err: error, failures: this.failures }, 'a pooled capsule host failed before it was used');
          this.drop(host);
          if (this.failures >= POOL_FAILURES_TOLERATED)
            this.environment.log.warn({}, 'the warm pool stopped refilling: its hosts keep failing to start; launches start fresh hosts');
          else setImmediate(() => this.fill());
        },
      );
    }
  }

  private startHost(): PooledHost {
    const { cgroups } = this.environment;
    // Bound as directories, so made first: a bundle staged after the sandbox started is still
    // seen (a bind is a live view), where a missing directory would not be bound at all. The
    // workdirs' own directory is not made: a launch refused before it starts leaves nothing.
    mkdirSync(this.environment.workdirBase, { recursive: true });
    mkdirSync(this.environment.bundlesDir, { recursive: true });
    const code = runtimeCode(this.environment.hostEntry, this.environment.codeRoot, this.environment.hidden);
    const refusal = mountPointRefusal(this.parent, [...code.bound, ...SYSTEM_DIRECTORIES], code.hidden);
    if (refusal) throw new Error(refusal);
    const cgroup = cgroups.support
      ? SessionCgroup.create(cgroups.support, `murmur-pool-${newId('request').slice(4, 20)}`, IDLE_CEILINGS.session, IDLE_CEILINGS.tools)
      : undefined;
    try {
      return this.startInSandbox(cgroup);
    } catch (error) {
      void cgroup?.discard();
      throw error;
    }
  }

  private startInSandbox(cgroup: SessionCgroup | undefined): PooledHost {
    const { namespaces, confine } = this.environment;
    const sandbox = hostSandbox({
      namespaces,
      confine: confine.support,
      policy: POOLED_POLICY,
      workdir: this.parent,
      codeRoot: this.environment.codeRoot,
      hidden: this.environment.hidden,
      components: [],
      data: [this.environment.bundlesDir],
      tools: [],
      hostEntry: this.environment.hostEntry,
      cgroup: undefined,
      subprocessPath: '/usr/local/bin:/usr/bin:/bin',
      pooled: true,
      compileAhead: this.options.refill,
    });
    const child = spawnSandboxedHost(sandbox, { cgroup, cwd: this.environment.workdirBase, env: this.environment.hostEnv });
    child.on('error', (error) => this.environment.log.warn({ err: error }, 'a pooled capsule host’s channel failed'));
    return new PooledHost(child, cgroup, sandbox.network as NetworkPlan, sandbox.start as SandboxNetworkStart, this.parent);
  }
}
