import { type StdioOptions, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import type { CapabilityPolicy } from '@murmur/shared';
import { subprocessEnvironment } from '@murmur/shared/environment';
import type { EscapeeSweep } from './escapees.js';
import { shellSearchPath } from './shell-path.js';

/**
 * Subprocesses a capsule may start: allowlisted shell binaries and its declared native tools.
 * They run inside the capsule host's sandbox (its namespaces, its read-only system binds, and
 * when sealed its Landlock domain, seccomp filter and network), in the accessible workdir, with
 * an environment rebuilt from scratch (§1.5.3): a few harmless host variables, no credentials,
 * and `HOME` inside the workdir.
 *
 * In a sealed sandbox each one starts through `murmur-confine limits`, which joins the tools'
 * cgroup (`cgroup_memory_bytes`, `cgroup_pids_max`, `cgroup_cpu_percent`), closes every
 * descriptor but the three standard streams, and sets the `capabilities.resources` rlimits hard
 * — so the ceilings bind the tool and everything it starts, never the host. A tool a ceiling
 * ended says which (`resource_limit`), read from its signal or the cgroup's counters.
 */

/** Each stream beyond this is cut in the result; the output is kept in `logs/shell-<ms>-<hex>.log` (its first 8 MiB a stream). */
export const STREAM_LIMIT_BYTES = 16 * 1024;

/** The most a native tool's result (its stdout) may be: more is refused rather than cut, since a cut JSON is not its result. */
export const NATIVE_RESULT_MAX_BYTES = 16 * 1024 * 1024;

/** Shells whose `command` is a script for `-c`; every other binary gets it split into words. */
export const INTERPRETERS: ReadonlySet<string> = new Set(['bash', 'sh', 'zsh', 'fish', 'dash', 'ksh']);

/** What the model is told a shell binary does: upstream's words, so prompts tuned for it still fit. */
export function shellToolDescription(binary: string): string {
  return INTERPRETERS.has(binary)
    ? `Run a shell command via ${binary} in the capsule workdir. The \`command\` field is passed to ${binary} via -c.`
    : `Run ${binary} in the capsule workdir. The \`command\` field is the argument list — omit the binary name itself (pass -s http://example.com, not ${binary} -s http://example.com).`;
}

export interface SubprocessContext {
  policy: CapabilityPolicy;
  accessibleWorkdir: string;
  /** The (already scrubbed) base environment the executor computed from the launch. */
  baseEnv: Record<string, string>;
  /** Runtime identity variables a subprocess also sees (`MURMUR_SESSION_ID`, …). */
  identityEnv: Array<[string, string]>;
  deadlineMs: number;
  /** The sealed sandbox's helper and the descriptors of the tools' cgroup; absent when not sealed. */
  confine?: { helper: string; cgroupFds: number[]; executables: string[] } | undefined;
  /**
   * An unsealed sandbox's tools: the descriptors of the tools' cgroup, which a small shell joins
   * before it execs the tool, and `prlimit`, through which it is exec'd with its rlimits.
   */
  unsealed?: { cgroupFds: number[]; prlimit?: string } | undefined;
  /** A ceiling the session already crossed: every spawn is refused with this text. */
  breached?: () => string | undefined;
  /** The tools' cgroup counters, around each subprocess (absent without a cgroup). */
  counters?: () => Promise<{ oom_kills: number; pids_refusals: number }>;
  /** Aborted when the task a subprocess works for is canceled: it is killed, with all it forked. */
  canceled?: AbortSignal | undefined;
  /** With a pid namespace of the host's own: what left a subprocess's group, ended once none runs (`escapees.ts`). */
  escapees?: EscapeeSweep | undefined;
}

/** The `capabilities.resources` field a subprocess was ended by, when one was. */
export type ResourceLimit = 'cpu_seconds' | 'max_file_size_bytes' | 'cgroup_memory_bytes' | 'cgroup_pids_max';

export interface ShellResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  truncated: boolean;
  fullOutputPath: string | undefined;
  durationMs: number;
  binaryPath: string;
  resourceLimit: ResourceLimit | undefined;
}

export function capsuleHome(accessibleWorkdir: string): string {
  return path.join(accessibleWorkdir, '.capsule-home');
}

/** `binary` on the subprocess PATH, or undefined. Bare names only: a path is never looked up. */
export function resolveOnPath(binary: string, pathVariable: string | undefined): string | undefined {
  if (binary.includes('/')) return undefined;
  for (const dir of (pathVariable ?? '').split(':')) {
    if (!dir) continue;
    const candidate = path.join(dir, binary);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

function environmentFor(context: SubprocessContext, overrides: Array<[string, string]>): Record<string, string> {
  // A name with `=` in it is a second definition of what comes before the `=`, ahead of the
  // runtime's own in the environment a program reads first: `HOME=/` set HOME past §1.5.3's rule
  // that the capsule's home always wins.
  for (const [name, value] of overrides) {
    if (name === '' || name.includes('=') || name.includes('\0'))
      throw new Error(`environment variable name ${JSON.stringify(name.slice(0, 80))} is refused: a name is not empty and holds no '=' or NUL`);
    if (value.includes('\0'))
      throw new Error(`E-RUN-015: environment variable ${name}'s value holds a NUL byte, which no program's environment can hold; nothing was run`);
  }
  const home = capsuleHome(context.accessibleWorkdir);
  mkdirSync(home, { recursive: true });
  return subprocessEnvironment(context.policy, context.baseEnv, [...context.identityEnv, ...overrides], home);
}

/**
 * How an unsealed sandbox starts a tool, as the sealed helper does: `/bin/sh` writes its own pid
 * into each of the tools' `cgroup.procs` descriptors (the kernel reads the pid in the writer's pid
 * namespace), closes them, and execs the tool through `prlimit` with the `capabilities.resources`
 * rlimits, hard — so the ceilings bind the tool and all it starts before it runs a single
 * instruction, and never the host. `max_processes` is left to the tools' cgroup (`cgroup_pids_max`):
 * the helper counts it over the tasks the user already runs, which no shell can. Without `prlimit`
 * only the cgroup holds the tool (the session's bootstrap log says so).
 */
export function unsealedStart(
  unsealed: { cgroupFds: number[]; prlimit?: string },
  resources: CapabilityPolicy['resources'],
  binaryPath: string,
  args: string[],
): { command: string; argv: string[] } {
  // The descriptors are the shell's 3, 4, …: `startSubprocess` hands them over there.
  const fds = unsealed.cgroupFds.map((_, index) => 3 + index);
  const joins = fds.map((fd) => `echo $$ >&${fd} && `).join('');
  const closes = fds.map((fd) => ` ${fd}>&-`).join('');
  const limits = unsealed.prlimit
    ? [
        unsealed.prlimit,
        `--nofile=${resources.max_open_files}:${resources.max_open_files}`,
        `--fsize=${resources.max_file_size_bytes}:${resources.max_file_size_bytes}`,
        // Hard one second above soft, as sealed: SIGXCPU at the soft limit names the ceiling.
        `--cpu=${resources.cpu_seconds}:${resources.cpu_seconds + 1}`,
        `--as=${resources.memory_bytes}:${resources.memory_bytes}`,
        '--core=0:0',
        '--',
      ]
    : [];
  return { command: '/bin/sh', argv: ['-c', `${joins}exec "$@"${closes}`, 'murmur-tool', ...limits, binaryPath, ...args] };
}

interface Collected {
  code: number;
  signal: NodeJS.Signals | null;
  /** What was kept of each stream (`RunOptions.keep`), and how many bytes it wrote in all. */
  stdout: Buffer;
  stderr: Buffer;
  stdoutBytes: number;
  stderrBytes: number;
  timedOut: boolean;
}

/** How much of each stream is kept by default: a tool may write gigabytes, and the host's memory is the session's. */
const KEPT_BYTES = 8 * 1024 * 1024;

/**
 * How long what a command forked may go on holding its output once the command itself has exited:
 * then its process group is killed, and a moment later the streams are closed on whatever still
 * holds them (a process that left the group, `setsid`), so that no call waits on it.
 */
const AFTER_EXIT_GRACE_MS = 250;

/** How one subprocess is run beyond its command: its stdin, how long it may take, who reads its stdout as it comes, who may end it. */
interface RunOptions {
  input?: string | undefined;
  deadlineMs?: number | undefined;
  onStdout?: ((chunk: Buffer) => void) | undefined;
  signal?: AbortSignal | undefined;
  /** The context's cancellation, which ends the subprocess as `signal` does. */
  canceled?: AbortSignal | undefined;
  /** How many bytes of each stream are kept, and which: its first (the default) or its last. */
  keep?: { stdout?: KeptPart; stderr?: KeptPart } | undefined;
}

interface KeptPart {
  bytes: number;
  from: 'start' | 'end';
}

/** A stream's first or last `bytes` bytes, and how many it wrote in all. */
class KeptOutput {
  private chunks: Buffer[] = [];
  private kept = 0;
  total = 0;

  constructor(private readonly part: KeptPart) {}

  add(chunk: Buffer): void {
    this.total += chunk.length;
    const { bytes, from } = this.part;
    if (from === 'start') {
      if (this.kept >= bytes) return;
      const taken = chunk.length <= bytes - this.kept ? chunk : chunk.subarray(0, bytes - this.kept);
      this.chunks.push(taken);
      this.kept += taken.length;
      return;
    }
    this.chunks.push(chunk);
    this.kept += chunk.length;
    while (this.kept > bytes && this.chunks.length > 0) {
      const first = this.chunks[0] as Buffer;
      const over = this.kept - bytes;
      if (first.length <= over) {
        this.chunks.shift();
        this.kept -= first.length;
      } else {
        this.chunks[0] = first.subarray(over);
        this.kept -= over;
      }
    }
  }

  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

function collect(child: ReturnType<typeof spawn>, options: RunOptions, deadlineMs: number): Promise<Collected> {
  return new Promise((resolve, reject) => {
    const stdout = new KeptOutput(options.keep?.stdout ?? { bytes: KEPT_BYTES, from: 'start' });
    const stderr = new KeptOutput(options.keep?.stderr ?? { bytes: KEPT_BYTES, from: 'start' });
    let timedOut = false;
    // The command leads a process group of its own (it was started detached): ending it ends what
    // it forked too, so no grandchild outlives it holding its pipes open.
    const kill = (): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, deadlineMs);
    const afterExit: NodeJS.Timeout[] = [];
    const signals = [options.signal, options.canceled].filter((signal): signal is AbortSignal => signal !== undefined);
    for (const signal of signals) signal.addEventListener('abort', kill, { once: true });
    const settle = (): void => {
      clearTimeout(timer);
      for (const pending of afterExit) clearTimeout(pending);
      for (const signal of signals) signal.removeEventListener('abort', kill);
    };
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout.add(chunk);
      options.onStdout?.(chunk);
    });
    child.stderr?.on('data', (chunk: Buffer) => stderr.add(chunk));
    child.once('error', (error) => {
      settle();
      reject(error);
    });
    // The command is done when it exits, not when the last holder of its pipes lets go: a
    // background job (`sleep 600 &`) would hold the call to its deadline, and one that left the
    // process group (`setsid`) past it, for as long as it liked.
    child.once('exit', () => {
      clearTimeout(timer);
      const closeOutput = (): void => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      };
      afterExit.push(setTimeout(kill, AFTER_EXIT_GRACE_MS), setTimeout(closeOutput, 2 * AFTER_EXIT_GRACE_MS));
    });
    child.once('close', (code, signal) => {
      // Its output may have closed before the grace ran out: what stayed in its group (a
      // background job that let go of its streams) ends with it all the same.
      kill();
      settle();
      resolve({
        code: code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : 1),
        signal,
        stdout: stdout.bytes(),
        stderr: stderr.bytes(),
        stdoutBytes: stdout.total,
        stderrBytes: stderr.total,
        timedOut,
      });
    });
    // A command that exits before it has read its input (a harness refusing at start, one stopped)
    // breaks the pipe: that is its exit to report, never an error that ends the host.
    child.stdin?.on('error', () => {});
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}

/**
 * Starts `binaryPath` as a subprocess of the capsule: through the helper when sealed (its cgroup,
 * its descriptors, its rlimits), else directly. The ceiling it crossed, if any, comes back with it.
 */
async function startSubprocess(
  context: SubprocessContext,
  binaryPath: string,
  args: string[],
  env: Record<string, string>,
  options: RunOptions,
): Promise<Collected & { resourceLimit: ResourceLimit | undefined }> {
  const breach = context.breached?.();
  if (breach) throw new Error(breach);
  const unpassable = unpassableArgument(args);
  if (unpassable) throw new Error(unpassable);
  const before = context.counters ? await context.counters() : undefined;
  const confine = context.confine;
  let command = binaryPath;
  let argv = args;
  const stdio: StdioOptions = [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'];
  if (confine) {
    const resources = context.policy.resources;
    command = confine.helper;
    argv = [
      'limits',
      `NOFILE=${resources.max_open_files}`,
      `FSIZE=${resources.max_file_size_bytes}`,
      // Hard one second above soft: at the soft limit the kernel sends SIGXCPU (what names the
      // ceiling); a tool that ignores it is killed at the hard one.
      `CPU=${resources.cpu_seconds}:${resources.cpu_seconds + 1}`,
      `AS=${resources.memory_bytes}`,
      `NPROC=+${resources.max_processes}`,
      'CORE=0',
      ...confine.cgroupFds.map((fd) => `join=${fd}`),
      // What it may execute (its own layer): never the host's node or the helper.
      ...confine.executables.map((file) => `exec=${file}`),
      '--',
      binaryPath,
      ...args,
    ];
    // The cgroup's descriptors at their own numbers: the helper writes itself into each, then closes them.
    const highest = Math.max(2, ...confine.cgroupFds);
    for (let fd = 3; fd <= highest; fd += 1) stdio.push(confine.cgroupFds.includes(fd) ? fd : 'ignore');
  } else if (context.unsealed) {
    ({ command, argv } = unsealedStart(context.unsealed, context.policy.resources, binaryPath, args));
    // From 3 on in the tool's shell, whatever their numbers in the host: dash names no descriptor past 9.
    stdio.push(...context.unsealed.cgroupFds);
  }
  if (context.canceled?.aborted) throw new Error('its task was canceled');
  context.escapees?.began();
  let collected: Collected;
  try {
    const child = spawn(command, argv, { cwd: context.accessibleWorkdir, env, stdio, detached: true });
    collected = await collect(child, { ...options, canceled: context.canceled }, options.deadlineMs ?? context.deadlineMs);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'E2BIG') throw error;
    const bytes = [...argv, ...Object.entries(env).map(([name, value]) => `${name}=${value}`)].reduce((sum, each) => sum + Buffer.byteLength(each) + 1, 0);
    throw new Error(
      `E-RUN-015: the command's arguments and environment, ${bytes} bytes, are more than the system passes to a program at once (E2BIG); nothing was run: write the long part to a file in the workdir and pass the file's name`,
    );
  } finally {
    context.escapees?.ended();
  }
  let resourceLimit: ResourceLimit | undefined;
  if (collected.signal === 'SIGXCPU') resourceLimit = 'cpu_seconds';
  else if (collected.signal === 'SIGXFSZ') resourceLimit = 'max_file_size_bytes';
  else if (before && context.counters) {
    const after = await context.counters();
    if (after.oom_kills > before.oom_kills) resourceLimit = 'cgroup_memory_bytes';
    else if (after.pids_refusals > before.pids_refusals) resourceLimit = 'cgroup_pids_max';
  }
  return { ...collected, resourceLimit };
}

/**
 * The most bytes one argument may have: Linux refuses a longer one (`MAX_ARG_STRLEN`, 32 pages,
 * its terminating NUL included) with `E2BIG`.
 */
const ARGUMENT_MAX_BYTES = 128 * 1024 - 1;

/**
 * Why `args` cannot reach a program, said before anything starts: what a model or a guest passes
 * is its own to choose, and node's refusals name the argument's index in the sandbox helper's
 * command line (`args[17]`) or say only `spawn E2BIG`.
 */
function unpassableArgument(args: readonly string[]): string | undefined {
  for (const [index, arg] of args.entries()) {
    if (arg.includes('\0')) return `E-RUN-015: argument ${index + 1} holds a NUL byte, which no program's argument can hold; nothing was run`;
    const bytes = Buffer.byteLength(arg);
    if (bytes > ARGUMENT_MAX_BYTES)
      return `E-RUN-015: argument ${index + 1} is ${bytes} bytes, more than the ${ARGUMENT_MAX_BYTES} a program's one argument may hold on Linux; nothing was run: write it to a file in the workdir and pass the file's name`;
  }
  return undefined;
}

/** `murmur:shell/execute#run`: an allowlisted binary with its arguments. */
export async function runShell(context: SubprocessContext, binary: string, args: string[], overrides: Array<[string, string]>): Promise<ShellResult> {
  if (!context.policy.shell_allow.includes(binary)) throw new Error(`shell binary '${binary}' is not in capabilities.shell.allow`);
  const env = environmentFor(context, overrides);
  // Looked up where the sandbox's execute grants were resolved, never on a PATH the guest set: the
  // allowlist names a binary, and the guest does not choose which file it is.
  const binaryPath = resolveOnPath(binary, shellSearchPath(context.baseEnv.PATH));
  if (!binaryPath) throw new Error(`shell binary '${binary}' is allowlisted but not found on PATH inside the sandbox`);
  const started = performance.now();
  const { code, stdout, stderr, stdoutBytes, stderrBytes, timedOut, resourceLimit } = await startSubprocess(context, binaryPath, args, env, {});
  const durationMs = performance.now() - started;
  const truncated = stdoutBytes > STREAM_LIMIT_BYTES || stderrBytes > STREAM_LIMIT_BYTES;
  let fullOutputPath: string | undefined;
  if (truncated) {
    const logs = path.join(context.accessibleWorkdir, 'logs');
    mkdirSync(logs, { recursive: true });
    // Two calls may be cut in the same millisecond (a harness runs tools side by side).
    fullOutputPath = path.join(logs, `shell-${Date.now()}-${randomBytes(3).toString('hex')}.log`);
    const beyond = (kept: Buffer, total: number): string => (total > kept.length ? `\n[${total - kept.length} more bytes, not kept]` : '');
    writeFileSync(
      fullOutputPath,
      `$ ${[binary, ...args].join(' ')}\nExit code: ${code}\nStdout:\n${stdout.toString()}${beyond(stdout, stdoutBytes)}\nStderr:\n${stderr.toString()}${beyond(stderr, stderrBytes)}\n`,
    );
  }
  const cut = (bytes: Buffer): string => bytes.subarray(0, STREAM_LIMIT_BYTES).toString('utf8');
  return {
    exitCode: timedOut ? 124 : code,
    stdout: cut(stdout),
    stderr: timedOut
      ? `${cut(stderr)}\n[killed: the command outlived its ${Math.round(context.deadlineMs / 1000)}s deadline]`
      : resourceLimit
        ? // Upstream's code for it, which the model reads as the trace records it (`resource_limit`).
          `${cut(stderr)}\n[killed: E-RUN-011: the command exceeded capabilities.resources.${resourceLimit}]`
        : cut(stderr),
    truncated,
    fullOutputPath,
    durationMs,
    binaryPath,
    resourceLimit,
  };
}

/** How an agent's `{"command": "..."}` becomes argv: interpreters get `-c`, others are word-split. */
export function shellArguments(binary: string, command: string): string[] {
  return INTERPRETERS.has(binary) ? ['-c', command] : splitWords(command);
}

/** POSIX-ish word splitting: whitespace separates, single and double quotes group, backslash escapes. */
export function splitWords(command: string): string[] {
  const words: string[] = [];
  let current = '';
  let quote: '"' | "'" | undefined;
  let inWord = false;
  for (let index = 0; index < command.length; index += 1) {
    const character = command[index] as string;
    if (quote) {
      if (character === quote) quote = undefined;
      else if (character === '\\' && quote === '"' && index + 1 < command.length) current += command[++index];
      else current += character;
    } else if (character === '"' || character === "'") {
      quote = character;
      inWord = true;
    } else if (character === '\\' && index + 1 < command.length) {
      current += command[++index];
      inWord = true;
    } else if (/\s/.test(character)) {
      if (inWord) words.push(current);
      current = '';
      inWord = false;
    } else {
      current += character;
      inWord = true;
    }
  }
  if (inWord) words.push(current);
  return words;
}

export interface ToolResultShape {
  status: 'passed' | 'failed' | 'error';
  summary: string | undefined;
  data: string | undefined;
  dataPath: string | undefined;
  truncated: boolean;
  metadata: Array<[string, string]>;
}

/**
 * A native tool: JSON `{data, log_path}` on stdin, a tool result as JSON on stdout. Output that is
 * not JSON is passed through as data, as upstream does.
 */
export async function runNativeTool(
  context: SubprocessContext,
  name: string,
  binaryPath: string,
  input: { data?: string | undefined; logPath?: string | undefined },
): Promise<ToolResultShape> {
  const env = environmentFor(context, []);
  const { code, stdout, stderr, stdoutBytes, timedOut, resourceLimit } = await startSubprocess(context, binaryPath, [], env, {
    input: JSON.stringify({ data: input.data ?? null, log_path: input.logPath ?? null }),
    keep: { stdout: { bytes: NATIVE_RESULT_MAX_BYTES, from: 'start' }, stderr: { bytes: STREAM_LIMIT_BYTES, from: 'end' } },
  });
  if (resourceLimit) {
    return {
      status: 'error',
      summary: `E-RUN-011: native tool '${name}' was killed for exceeding capabilities.resources.${resourceLimit}`,
      data: stderr.toString('utf8') || `exit code ${code}`,
      dataPath: undefined,
      truncated: false,
      metadata: [['resource_limit', resourceLimit]],
    };
  }
  const errText = stderr.toString('utf8');
  if (stdoutBytes > stdout.length) {
    return {
      status: 'error',
      summary: `native tool '${name}' wrote ${stdoutBytes} bytes of result, over the ${NATIVE_RESULT_MAX_BYTES} a result may have`,
      data: errText || undefined,
      dataPath: undefined,
      truncated: true,
      metadata: [],
    };
  }
  const out = stdout.toString('utf8').trim();
  if (timedOut)
    return {
      status: 'error',
      summary: `native tool '${name}' outlived its deadline and was killed`,
      data: errText || undefined,
      dataPath: undefined,
      truncated: false,
      metadata: [],
    };
  if (out === '') {
    return {
      status: code === 0 ? 'passed' : 'error',
      // As upstream words it (Rust's ExitStatus prints `exit status: N`).
      summary: `native tool '${name}' exited with exit status: ${code}`,
      data: errText || undefined,
      dataPath: undefined,
      truncated: false,
      metadata: [],
    };
  }
  try {
    const json = JSON.parse(out) as { status?: unknown; summary?: unknown; data?: unknown };
    const status = json.status === 'passed' ? 'passed' : json.status === 'failed' ? 'failed' : 'error';
    const data = typeof json.data === 'string' ? json.data : json.data === undefined || json.data === null ? undefined : JSON.stringify(json.data);
    return { status, summary: typeof json.summary === 'string' ? json.summary : undefined, data, dataPath: undefined, truncated: false, metadata: [] };
  } catch {
    return {
      status: code === 0 ? 'passed' : 'error',
      summary: `native tool '${name}' completed`,
      data: out,
      dataPath: undefined,
      truncated: false,
      metadata: [],
    };
  }
}

/** How a harness run ended: its exit code (124 when its cap ended it), its whole stderr, and the ceiling that ended it, if one did. */
export interface HarnessExit {
  exitCode: number;
  stderr: string;
  timedOut: boolean;
  resourceLimit: ResourceLimit | undefined;
}

/** The longest line of a harness's stream the runtime reads (a message with a large tool result). */
const HARNESS_LINE_MAX_CHARS = 32 * 1024 * 1024;
/** What is kept of a harness's stderr: its end, where it says why it stopped. */
const HARNESS_STDERR_KEPT_BYTES = 1024 * 1024;

/**
 * A harness CLI (`inference.transport: process`), started like every subprocess of the capsule —
 * through the helper when sealed, in the workdir, with its rlimits and the tools' cgroup — and
 * read line by line as it writes, `input` written to its stdin. Its environment is the caller's: the
 * harness needs the grants a shell tool is never given (its model's endpoint and key).
 */
export async function runHarness(
  context: SubprocessContext,
  binaryPath: string,
  args: string[],
  env: Record<string, string>,
  run: { input: string; deadlineMs: number; onLine: (line: string) => void; signal: AbortSignal },
): Promise<HarnessExit> {
  // A character may straddle two chunks: decode across them.
  const decoder = new StringDecoder('utf8');
  // The line so far, in the pieces it came in: each chunk is searched for a newline once, not the
  // whole line again at every chunk (a 30 MiB line held the host's loop for half a minute).
  let pieces: string[] = [];
  let piecesLength = 0;
  // A line longer than any the runtime reads is passed over whole, not held while it grows.
  let overlong = false;
  const onStdout = (chunk: Buffer): void => {
    const text = decoder.write(chunk);
    let from = 0;
    for (let newline = text.indexOf('\n'); newline >= 0; newline = text.indexOf('\n', from)) {
      const line = overlong ? '' : (pieces.join('') + text.slice(from, newline)).trim();
      pieces = [];
      piecesLength = 0;
      if (line !== '') run.onLine(line);
      overlong = false;
      from = newline + 1;
    }
    if (overlong || from === text.length) return;
    pieces.push(text.slice(from));
    piecesLength += text.length - from;
    if (piecesLength > HARNESS_LINE_MAX_CHARS) {
      pieces = [];
      piecesLength = 0;
      overlong = true;
    }
  };
  const collected = await startSubprocess(context, binaryPath, args, env, {
    input: run.input,
    deadlineMs: run.deadlineMs,
    onStdout,
    signal: run.signal,
    // Its stdout is read line by line as it comes; of its stderr, the end says why it stopped.
    keep: { stdout: { bytes: 0, from: 'start' }, stderr: { bytes: HARNESS_STDERR_KEPT_BYTES, from: 'end' } },
  });
  const last = overlong ? '' : pieces.join('').trim();
  if (last !== '') run.onLine(last);
  return {
    exitCode: collected.timedOut ? 124 : collected.code,
    stderr: collected.stderr.toString('utf8'),
    timedOut: collected.timedOut,
    resourceLimit: collected.resourceLimit,
  };
}
