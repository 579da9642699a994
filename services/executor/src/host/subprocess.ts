import { spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { CapabilityPolicy } from '@murmur/shared';
import { subprocessEnvironment } from '@murmur/shared/environment';

/**
 * Subprocesses a capsule may start: allowlisted shell binaries and its declared native tools.
 * They run inside the capsule host's sandbox (its namespaces, its cgroup, its read-only system
 * binds), in the accessible workdir, with an environment rebuilt from scratch (§1.5.3): a few
 * harmless host variables, no credentials, and `HOME` inside the workdir.
 */

/** Each stream beyond this is cut in the result; the whole output is kept in `logs/shell-<ms>.log`. */
export const STREAM_LIMIT_BYTES = 16 * 1024;

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
}

export interface ShellResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  truncated: boolean;
  fullOutputPath: string | undefined;
  durationMs: number;
  binaryPath: string;
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
  const home = capsuleHome(context.accessibleWorkdir);
  mkdirSync(home, { recursive: true });
  return subprocessEnvironment(context.policy, context.baseEnv, [...context.identityEnv, ...overrides], home);
}

function collect(child: ReturnType<typeof spawn>, input: string | undefined, deadlineMs: number): Promise<{ code: number; stdout: Buffer; stderr: Buffer; timedOut: boolean }> {
  return new Promise((resolve, reject) => {
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, deadlineMs);
    child.stdout?.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 128 + (signalNumber(signal) ?? 0) : 1), stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr), timedOut });
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

function signalNumber(signal: NodeJS.Signals): number | undefined {
  const numbers: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGTERM: 15, SIGXCPU: 24, SIGXFSZ: 25 };
  return numbers[signal];
}

/** `murmur:shell/execute#run`: an allowlisted binary with its arguments. */
export async function runShell(context: SubprocessContext, binary: string, args: string[], overrides: Array<[string, string]>): Promise<ShellResult> {
  if (!context.policy.shell_allow.includes(binary)) throw new Error(`shell binary '${binary}' is not in capabilities.shell.allow`);
  const env = environmentFor(context, overrides);
  const binaryPath = resolveOnPath(binary, env.PATH);
  if (!binaryPath) throw new Error(`shell binary '${binary}' is allowlisted but not found on PATH inside the sandbox`);
  const started = performance.now();
  const child = spawn(binaryPath, args, { cwd: context.accessibleWorkdir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const { code, stdout, stderr, timedOut } = await collect(child, undefined, context.deadlineMs);
  const durationMs = performance.now() - started;
  const truncated = stdout.length > STREAM_LIMIT_BYTES || stderr.length > STREAM_LIMIT_BYTES;
  let fullOutputPath: string | undefined;
  if (truncated) {
    const logs = path.join(context.accessibleWorkdir, 'logs');
    mkdirSync(logs, { recursive: true });
    fullOutputPath = path.join(logs, `shell-${Date.now()}.log`);
    writeFileSync(fullOutputPath, `$ ${[binary, ...args].join(' ')}\nExit code: ${code}\nStdout:\n${stdout.toString()}\nStderr:\n${stderr.toString()}\n`);
  }
  const cut = (bytes: Buffer): string => bytes.subarray(0, STREAM_LIMIT_BYTES).toString('utf8');
  return {
    exitCode: timedOut ? 124 : code,
    stdout: cut(stdout),
    stderr: timedOut ? `${cut(stderr)}\n[killed: the command outlived its ${Math.round(context.deadlineMs / 1000)}s deadline]` : cut(stderr),
    truncated,
    fullOutputPath,
    durationMs,
    binaryPath,
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
export async function runNativeTool(context: SubprocessContext, name: string, binaryPath: string, input: { data?: string | undefined; logPath?: string | undefined }): Promise<ToolResultShape> {
  const env = environmentFor(context, []);
  const child = spawn(binaryPath, [], { cwd: context.accessibleWorkdir, env, stdio: ['pipe', 'pipe', 'pipe'] });
  const { code, stdout, stderr, timedOut } = await collect(child, JSON.stringify({ data: input.data ?? null, log_path: input.logPath ?? null }), context.deadlineMs);
  const out = stdout.toString('utf8').trim();
  const errText = stderr.toString('utf8');
  if (timedOut) return { status: 'error', summary: `native tool '${name}' outlived its deadline and was killed`, data: errText || undefined, dataPath: undefined, truncated: false, metadata: [] };
  if (out === '') {
    return { status: code === 0 ? 'passed' : 'error', summary: `native tool '${name}' exited with ${code}`, data: errText || undefined, dataPath: undefined, truncated: false, metadata: [] };
  }
  try {
    const json = JSON.parse(out) as { status?: unknown; summary?: unknown; data?: unknown };
    const status = json.status === 'passed' ? 'passed' : json.status === 'failed' ? 'failed' : 'error';
    const data = typeof json.data === 'string' ? json.data : json.data === undefined || json.data === null ? undefined : JSON.stringify(json.data);
    return { status, summary: typeof json.summary === 'string' ? json.summary : undefined, data, dataPath: undefined, truncated: false, metadata: [] };
  } catch {
    return { status: code === 0 ? 'passed' : 'error', summary: `native tool '${name}' completed`, data: out, dataPath: undefined, truncated: false, metadata: [] };
  }
}
