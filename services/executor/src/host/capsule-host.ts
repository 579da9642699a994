import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker } from 'node:worker_threads';
import type { WireError } from '@murmur/shared';
import { LogFile, TraceWriter } from '../records.js';
import { createSignal, serveBridge } from './bridge.js';
import type { GuestJob, GuestMessage, GuestOutcome } from './guest-worker.js';
import type { EgressResult, HostRequest, HostTool, StartMessage } from './protocol.js';
import { type SubprocessContext, type ToolResultShape, runNativeTool, runShell, shellArguments } from './subprocess.js';

/**
 * The capsule host: one per session, inside the session's sandbox. It runs the capsule's
 * component in a worker, answers the component's host calls (tools, shell, artifact manager,
 * outgoing HTTP and messages — the last three relayed to the executor, the only way out), enforces
 * the deadline by terminating the worker, and writes the session's trace.
 */

/** A guest worker with no job yet: it loads the runtime's WASI pieces while the host waits for `start`. */
export function prewarmGuestWorker(): Worker {
  return new Worker(GUEST_WORKER, { stdout: true, stderr: true });
}

export interface HostChannel {
  /** Asks the executor something and waits for its answer. */
  request(request: HostRequest): Promise<unknown>;
  output(stream: 'stdout' | 'stderr', text: string): void;
}

export interface SessionResult {
  status: 'ok' | 'failed' | 'trapped';
  exitCode: number;
  error?: WireError;
}

const here = path.dirname(fileURLToPath(import.meta.url));
/** Beside this file: the bundled worker next to the bundled host, or the module next to the module. */
const GUEST_WORKER = existsSync(path.join(here, 'guest-worker.mjs')) ? path.join(here, 'guest-worker.mjs') : path.join(here, '..', '..', 'dist', 'host', 'guest-worker.js');
const decoder = new TextDecoder();

type Fallible<T> = { ok: true; value: T } | { ok: false; error: string };

function ok<T>(value: T): Fallible<T> {
  return { ok: true, value };
}

function refused(error: string): Fallible<never> {
  return { ok: false, error };
}

export class CapsuleHost {
  private readonly trace: TraceWriter;
  private readonly sessionLog: LogFile;
  private readonly tools = new Map<string, HostTool>();
  private readonly allowlist: Set<string>;
  private toolCalls = 0;
  private shellCalls = 0;
  private readonly startedAt = Date.now();

  constructor(
    private readonly start: StartMessage,
    private readonly channel: HostChannel,
    /** A guest worker started before `start` arrived, for the capsule's own instance. */
    private prewarmed?: Worker,
  ) {
    this.trace = new TraceWriter(start.session_dir, start.session_id);
    this.sessionLog = new LogFile(start.session_dir, 'session.log');
    for (const tool of start.tools) this.tools.set(tool.name, tool);
    this.allowlist = new Set(start.allowlist);
  }

  private subprocessContext(): SubprocessContext {
    return {
      policy: this.start.policy,
      accessibleWorkdir: this.start.accessible_workdir,
      baseEnv: this.start.subprocess_env,
      identityEnv: this.start.guest_env.filter(([name]) => name.startsWith('MURMUR_')),
      deadlineMs: this.start.policy.limits.deadline_seconds * 1000,
    };
  }

  async run(): Promise<SessionResult> {
    const policy = this.start.policy;
    this.trace.write('session_start', {
      capsule_name: this.start.capsule_name,
      capsule_version: this.start.capsule_version,
      model: null,
      max_turns: null,
      capabilities: [...(policy.network_allow.length > 0 ? ['network'] : []), ...(policy.filesystem_scope !== '.' ? ['filesystem'] : []), ...(policy.shell_allow.length > 0 ? ['shell'] : [])],
      tools_declared: [...this.allowlist],
      containment_declared: policy.containment,
      containment_achieved: this.start.effective_grants.achieved_containment ?? null,
      workdir_exec: policy.workdir_exec,
      system_prompt_source: 'none',
      system_prompt_sha256: null,
      effective_grants: this.start.effective_grants,
    });
    const outcome = await this.runGuest({
      role: 'capsule',
      label: `${this.start.capsule_name}@${this.start.capsule_version}`,
      bundleDir: this.start.component.bundle_dir,
      entry: this.start.component.entry,
      imports: this.start.component.imports,
      preopen: this.start.preopen,
      env: this.start.guest_env,
      grant: 'capsule',
    });
    const result = this.classify(outcome);
    this.trace.write('session_end', {
      total_turns: 0,
      total_input_tokens: 0,
      total_output_tokens: 0,
      total_tool_calls: this.toolCalls,
      total_shell_calls: this.shellCalls,
      duration_ms: Date.now() - this.startedAt,
      exit_status: result.status === 'ok' ? 'ok' : 'failed',
    });
    return result;
  }

  private classify(outcome: GuestOutcome | { kind: 'deadline' }): SessionResult {
    const limits = this.start.policy.limits;
    switch (outcome.kind) {
      case 'returned':
        return { status: 'ok', exitCode: 0 };
      case 'exit':
        return outcome.code === 0
          ? { status: 'ok', exitCode: 0 }
          : { status: 'failed', exitCode: outcome.code, error: { code: 'E-RUN-001', message: `capsule exited with code ${outcome.code}` } };
      case 'deadline':
        return {
          status: 'trapped',
          exitCode: 1,
          error: {
            code: 'E-RUN-001',
            message: `capsule execution exceeded its ${limits.deadline_seconds}s deadline and was interrupted`,
            hint: 'the capsule ran longer than capabilities.limits.deadline_seconds — check for an unbounded loop, or raise that limit in murmur.yaml if the work genuinely needs longer',
            path: 'capabilities.limits.deadline_seconds',
          },
        };
      case 'too-small':
        return {
          status: 'trapped',
          exitCode: 1,
          error: {
            code: 'E-RUN-001',
            message: `capsule execution exceeded its configured resource limits: ${outcome.message} (capabilities.limits.memory_bytes = ${limits.memory_bytes})`,
            hint: 'raise capabilities.limits.memory_bytes in murmur.yaml to at least the memory the component starts with',
            path: 'capabilities.limits.memory_bytes',
          },
        };
      case 'link-error':
        return {
          status: 'failed',
          exitCode: 1,
          error: {
            code: 'E-RUN-002',
            message: `capsule requires an interface the runtime has not linked; check that the required capability is declared in murmur.yaml${outcome.missing ? ` (missing interface: ${outcome.missing})` : ` (${outcome.message})`}`,
          },
        };
      case 'trap':
        if (outcome.memoryExhausted) {
          return {
            status: 'trapped',
            exitCode: 1,
            error: {
              code: 'E-RUN-001',
              message: `capsule execution exceeded its configured resource limits: memory reached capabilities.limits.memory_bytes (${limits.memory_bytes} bytes) (${outcome.message})`,
              hint: 'the capsule requested more memory than capabilities.limits.memory_bytes allows — check for a runaway allocation, or raise the limit in murmur.yaml',
              path: 'capabilities.limits.memory_bytes',
            },
          };
        }
        return { status: 'trapped', exitCode: 1, error: { code: 'E-RUN-001', message: `capsule execution trapped: ${outcome.message}` } };
    }
  }

  /** Runs one instance in its own worker until it finishes or its deadline passes. */
  private runGuest(job: Omit<GuestJob, 'bridgePort' | 'signal' | 'memoryLimitBytes'> & { toolInput?: GuestJob['toolInput'] }): Promise<GuestOutcome | { kind: 'deadline' }> {
    const { port1, port2 } = new MessageChannel();
    const signal = createSignal();
    serveBridge(port1, signal, (op, payload) => this.answer(op, payload, job.grant));
    const guestJob: GuestJob = { ...job, memoryLimitBytes: this.start.policy.limits.memory_bytes, bridgePort: port2, signal };
    let worker: Worker;
    if (this.prewarmed && job.role === 'capsule') {
      worker = this.prewarmed;
      this.prewarmed = undefined;
      worker.postMessage(guestJob, [port2]);
    } else {
      worker = new Worker(GUEST_WORKER, { workerData: guestJob, transferList: [port2], stdout: true, stderr: true });
    }
    const lines = new LineBuffers();
    return new Promise((resolve) => {
      let settled = false;
      const finish = (outcome: GuestOutcome | { kind: 'deadline' }): void => {
        if (settled) return;
        settled = true;
        for (const [prefix, rest] of lines.drain()) this.sessionLog.line(`[${prefix}] ${rest}`);
        clearTimeout(timer);
        port1.close();
        void worker.terminate();
        resolve(outcome);
      };
      const timer = setTimeout(() => finish({ kind: 'deadline' }), this.start.policy.limits.deadline_seconds * 1000);
      worker.on('message', (message: GuestMessage) => {
        if (message.type === 'output') {
          const text = decoder.decode(message.bytes);
          const prefix = job.role === 'capsule' ? message.stream : `${job.label} ${message.stream}`;
          for (const line of lines.push(prefix, text)) this.sessionLog.line(`[${prefix}] ${line}`);
          if (job.role === 'capsule') this.channel.output(message.stream, text);
        } else finish(message.outcome);
      });
      worker.on('error', (error) => finish({ kind: 'trap', message: error.message, memoryExhausted: false }));
      worker.on('exit', () => finish({ kind: 'trap', message: 'the guest worker exited without a result', memoryExhausted: false }));
    });
  }

  /** A guest's host call, answered on the main thread. */
  private async answer(op: string, payload: unknown, grant: string): Promise<unknown> {
    switch (op) {
      case 'http':
        return this.channel.request({ op: 'http', request: payload as never }) as Promise<EgressResult>;
      case 'invoke': {
        const { name, input } = payload as { name: string; input: { data?: string; logPath?: string } };
        return this.invoke(name, input);
      }
      case 'shell': {
        const { binary, args, env } = payload as { binary: string; args: string[]; env: Array<[string, string]> };
        return this.shell(binary, args, env);
      }
      case 'send': {
        const { peer_url, message } = payload as { peer_url: string; message: { messageId: string; contextId?: string; text: string } };
        return this.send(peer_url, message);
      }
      case 'manage-list':
        return this.listArtifacts();
      case 'manage-describe':
        return this.describe((payload as { name: string }).name);
      case 'manage-pull':
        return this.pull(payload as { name: string; version: string });
      case 'manage-diagnostics':
        return ok({ capsuleId: this.start.session_id, installed: this.listArtifacts(), capabilities: 'artifact-manager/search and remove are not implemented' });
      case 'manage-search':
        return refused(`not implemented (query: ${(payload as { query: string }).query})`);
      case 'manage-remove':
        return refused(`not implemented (name: ${(payload as { name: string }).name})`);
      default:
        throw new Error(`unknown host call '${op}' from ${grant}`);
    }
  }

  /** `murmur:tool-registry/invoke`: native binary, shell binary, skill, WASM tool — upstream's order. */
  private async invoke(name: string, input: { data?: string; logPath?: string }): Promise<Fallible<ToolResultShape>> {
    if (!this.allowlist.has(name) && !this.start.policy.shell_allow.includes(name)) {
      return refused(`tool '${name}' is not declared in manifest allowlist`);
    }
    const started = Date.now();
    const tool = this.tools.get(name);
    let result: Fallible<ToolResultShape>;
    if (tool?.kind === 'native' && tool.path) {
      result = ok(await runNativeTool(this.subprocessContext(), name, tool.path, input));
    } else if (this.start.policy.shell_allow.includes(name)) {
      result = await this.shellTool(name, input);
    } else if (tool?.kind === 'skill' && tool.path) {
      result = ok({ status: 'passed', summary: `Skill ${name} guidance`, data: readFileSync(tool.path, 'utf8'), dataPath: undefined, truncated: false, metadata: [] });
    } else if (tool?.kind === 'wasm' && tool.component) {
      const outcome = await this.runGuest({
        role: 'tool',
        label: `tool '${name}'`,
        bundleDir: tool.component.bundle_dir,
        entry: tool.component.entry,
        imports: tool.component.imports,
        preopen: tool.preopen,
        env: this.start.guest_env,
        grant: `tool:${name}`,
        toolInput: input,
      });
      result = this.toolOutcome(name, outcome);
    } else {
      result = refused(`tool '${name}' is not available in this session`);
    }
    this.toolCalls += 1;
    const output = result.ok ? (result.value.data ?? '') : result.error;
    this.trace.write('tool_call', {
      turn: 0,
      tool_name: name,
      input: parseInput(input.data),
      input_bytes: Buffer.byteLength(input.data ?? ''),
      ...(this.start.trace_include_tool_output ? { output } : {}),
      output_bytes: Buffer.byteLength(output),
      duration_ms: Date.now() - started,
      status: result.ok && result.value.status !== 'error' ? 'ok' : 'error',
    });
    return result;
  }

  private toolOutcome(name: string, outcome: GuestOutcome | { kind: 'deadline' }): Fallible<ToolResultShape> {
    switch (outcome.kind) {
      case 'returned':
        return ok(outcome.value as ToolResultShape);
      case 'deadline':
        return refused(`tool '${name}' exceeded its ${this.start.policy.limits.deadline_seconds}s deadline and was interrupted`);
      case 'exit':
        return refused(`tool '${name}' exited with code ${outcome.code}`);
      case 'link-error':
        return refused(`failed to instantiate tool '${name}': ${outcome.message}`);
      case 'too-small':
        return refused(`tool '${name}' exceeded its configured resource limits: ${outcome.message}`);
      case 'trap':
        return refused(outcome.memoryExhausted ? `tool '${name}' exceeded its configured resource limits: ${outcome.message}` : `tool '${name}' trapped: ${outcome.message}`);
    }
  }

  /** A shell binary called as a tool: `{"command": "..."}` in, upstream's text report out. */
  private async shellTool(binary: string, input: { data?: string }): Promise<Fallible<ToolResultShape>> {
    let command: string;
    try {
      const parsed = JSON.parse(input.data ?? '') as { command?: unknown };
      if (typeof parsed.command !== 'string' || parsed.command.trim() === '') throw new Error('missing command');
      command = parsed.command.trim();
    } catch {
      return ok({ status: 'error', summary: 'shell command parsing failed', data: "shell tool input must be JSON with a non-empty 'command' string", dataPath: undefined, truncated: false, metadata: [] });
    }
    const shell = await this.shell(binary, shellArguments(binary, command), []);
    if (!shell.ok) return ok({ status: 'error', summary: 'shell execution failed', data: shell.error, dataPath: undefined, truncated: false, metadata: [] });
    const value = shell.value;
    let data = `$ ${command}\nExit code: ${value.exitCode}\nStdout:\n${value.stdout}\nStderr:\n${value.stderr}`;
    const metadata: Array<[string, string]> = [];
    if (value.truncated) {
      data += value.fullOutputPath ? `\n\nOutput truncated. Full output written to ${value.fullOutputPath}` : '\n\nOutput truncated.';
      if (value.fullOutputPath) metadata.push(['full_output_path', value.fullOutputPath]);
    }
    return ok({ status: 'passed', summary: `Shell command exited with code ${value.exitCode}`, data, dataPath: undefined, truncated: value.truncated, metadata });
  }

  private async shell(binary: string, args: string[], env: Array<[string, string]>): Promise<Fallible<{ exitCode: number; stdout: string; stderr: string; truncated: boolean; fullOutputPath: string | undefined }>> {
    try {
      const result = await runShell(this.subprocessContext(), binary, args, env);
      this.shellCalls += 1;
      this.trace.write('shell', {
        turn: 0,
        binary: result.binaryPath,
        command: args.join(' '),
        exit_code: result.exitCode,
        stdout_bytes: Buffer.byteLength(result.stdout),
        stderr_bytes: Buffer.byteLength(result.stderr),
        duration_ms: Math.round(result.durationMs),
      });
      return ok({ exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr, truncated: result.truncated, fullOutputPath: result.fullOutputPath });
    } catch (error) {
      return refused(error instanceof Error ? error.message : String(error));
    }
  }

  private async send(peerUrl: string, message: { messageId: string; contextId?: string; text: string }): Promise<Fallible<{ taskId: string; contextId: string; state: string }>> {
    const result = (await this.channel.request({
      op: 'send',
      request: { peer_url: peerUrl, message_id: message.messageId, ...(message.contextId ? { context_id: message.contextId } : {}), text: message.text },
    })) as Fallible<{ task_id: string; context_id: string; state: string }>;
    if (!result.ok) return result;
    this.trace.write('a2a_send', { peer_url: peerUrl, message_id: message.messageId, task_id: result.value.task_id, context_id: result.value.context_id, traceparent: null });
    return ok({ taskId: result.value.task_id, contextId: result.value.context_id, state: result.value.state });
  }

  /** Model-visible artifacts (tools and skills) and the shell binaries, as upstream lists them. */
  private listArtifacts(): Array<{ name: string; version: string; runtime: 'wasm' | 'native' }> {
    const listed = [...this.tools.values()].map((tool) => ({ name: tool.name, version: tool.version, runtime: tool.runtime }));
    for (const binary of this.start.policy.shell_allow) {
      if (!this.tools.has(binary)) listed.push({ name: binary, version: '0.0.0', runtime: 'native' });
    }
    return listed;
  }

  private describe(name: string): Fallible<unknown> {
    const tool = this.tools.get(name);
    const isShell = this.start.policy.shell_allow.includes(name);
    if (!tool && !isShell) return refused(`artifact '${name}' is not installed`);
    const info = tool?.info ?? SHELL_TOOL_INFO;
    return ok({
      name,
      version: tool?.version ?? '0.0.0',
      description: tool ? info.description : `Run the ${name} command (allowlisted by capabilities.shell.allow)`,
      tags: info.tags,
      runtime: tool?.runtime ?? 'native',
      inputSchema: info.input_schema,
      outputSchema: info.output_schema,
    });
  }

  private async pull(request: { name: string; version: string }): Promise<Fallible<unknown>> {
    const result = (await this.channel.request({ op: 'pull', request })) as Fallible<{ tool: HostTool }>;
    if (!result.ok) return result;
    const tool = result.value.tool;
    this.tools.set(tool.name, tool);
    this.allowlist.add(tool.name);
    return ok({ name: tool.name, version: tool.version, runtime: tool.runtime });
  }
}

/** Whole lines per stream, so the session log never interleaves half-lines of stdout and stderr. */
class LineBuffers {
  private readonly partial = new Map<string, string>();

  push(stream: string, text: string): string[] {
    const combined = (this.partial.get(stream) ?? '') + text;
    const lines = combined.split('\n');
    this.partial.set(stream, lines.pop() ?? '');
    return lines;
  }

  drain(): Array<[string, string]> {
    const rest = [...this.partial.entries()].filter(([, text]) => text !== '');
    this.partial.clear();
    return rest;
  }
}

/** What a shell binary is described as: upstream's synthetic manifest. */
const SHELL_TOOL_INFO: HostTool['info'] = {
  description: '',
  tags: [],
  input_schema: JSON.stringify({ type: 'object', properties: { command: { type: 'string' } }, required: ['command'] }),
};

function parseInput(data: string | undefined): unknown {
  if (data === undefined) return {};
  try {
    const parsed: unknown = JSON.parse(data);
    return parsed !== null && typeof parsed === 'object' ? parsed : { data };
  } catch {
    return { data };
  }
}
