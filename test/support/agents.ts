import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { murBin, repositoryRoot, stopAfterFile } from './processes.js';
import type { ScriptedInference } from './scripted-inference.js';

/**
 * Agent capsules for the suites: a project whose manifest names a first-party driver and a
 * scripted inference endpoint, a running `mur run --json` of it (the launch line parsed, the
 * process stopped by the test), and the JSON-RPC and SSE a client speaks to its door.
 */

export interface AgentManifestOptions {
  name?: string;
  driver?: 'anthropic' | 'openai';
  /** Extra `artifacts:` entries (YAML list items, indented two spaces). */
  artifacts?: string;
  /** Extra `capabilities:` children (indented two spaces). */
  capabilities?: string;
  /** Extra `inference:` children (indented two spaces). */
  inference?: string;
  lifecycle?: string;
  /** Extra top-level YAML. */
  extra?: string;
  /** Put the endpoint on the driver's `gateway` (the seeds' form) instead of `inference.endpoint`. */
  gateway?: boolean;
  network?: string[];
}

export function agentManifest(inference: Pick<ScriptedInference, 'endpoint' | 'authority'>, options: AgentManifestOptions = {}): string {
  const driver = `murmur-driver-${options.driver ?? 'anthropic'}`;
  const network = [inference.authority, ...(options.network ?? [])];
  return [
    `name: ${options.name ?? 'agent'}`,
    'version: 0.1.0',
    'description: an agent capsule under test',
    'artifacts:',
    `  - name: ${driver}`,
    '    version: 0.1.0',
    '    runtime: driver',
    ...(options.gateway ? ['    gateway:', `      endpoint: ${inference.endpoint}`, '      api_key: test-key'] : []),
    ...(options.artifacts ? [options.artifacts.trimEnd()] : []),
    'capabilities:',
    '  network:',
    `    allow: [${network.join(', ')}]`,
    ...(options.capabilities ? [options.capabilities.trimEnd()] : []),
    ...(options.lifecycle ? ['lifecycle:', options.lifecycle.trimEnd()] : []),
    'inference:',
    ...(options.gateway ? [] : [`  endpoint: ${inference.endpoint}`]),
    '  model: test-model',
    '  driver:',
    `    artifact: ${driver}`,
    ...(options.inference ? [options.inference.trimEnd()] : []),
    ...(options.extra ? [options.extra.trimEnd()] : []),
    '',
  ].join('\n');
}

export async function agentProject(dir: string, manifest: string, files: Record<string, string> = {}): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(path.join(dir, 'murmur.yaml'), manifest);
  for (const [name, text] of Object.entries(files)) await fs.writeFile(path.join(dir, name), text);
  return dir;
}

export interface RunningAgent {
  readonly url: string;
  readonly sessionId: string;
  readonly workdir: string;
  readonly pid: number;
  /** The session's own door token, from the launch line. */
  readonly token: string;
  readonly process: ChildProcess;
  /** Resolves when `mur run` exits, with its exit code and what it wrote. */
  readonly exited: Promise<{ code: number | null; stdout: string; stderr: string }>;
  stderr(): string;
  /** Stops the session (SIGTERM to `mur run`) and waits for it to exit. */
  stop(): Promise<void>;
}

/** `mur run --json` of a project, running until the test stops it (or the session ends by itself). */
export async function startAgent(project: string, env: Record<string, string | undefined>, args: string[] = []): Promise<RunningAgent> {
  // `--capsule` names a packaged capsule instead of the project's manifest.
  const manifest = args.includes('--capsule') ? [] : ['--manifest', path.join(project, 'murmur.yaml')];
  const child = stopAfterFile(
    spawn(murBin, ['run', ...manifest, '--json', ...args], {
      cwd: repositoryRoot,
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  let stdout = '';
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(child, 'exit').then(([code]) => ({ code: code as number | null, stdout, stderr }));
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const first = await Promise.race([
    new Promise<string>((resolve) => lines.once('line', resolve)),
    exited.then((result) => {
      throw new Error(`mur run exited (${result.code}) before its launch line:\n${result.stderr}`);
    }),
  ]);
  stdout += `${first}\n`;
  lines.on('line', (line) => (stdout += `${line}\n`));
  const launch = JSON.parse(first) as { url: string; session_id: string; workdir: string; pid: number; token: string };
  return {
    url: launch.url,
    sessionId: launch.session_id,
    workdir: launch.workdir,
    pid: launch.pid,
    token: launch.token,
    process: child,
    exited,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

export interface RpcReply {
  status: number;
  body: { jsonrpc?: string; id?: unknown; result?: Record<string, unknown>; error?: { code: number; message: string; data?: unknown } };
}

let rpcIds = 0;

/** One JSON-RPC call; `version` sets `A2A-Version` (omitted: 0.3). */
export async function rpc(
  url: string,
  method: string,
  params: unknown,
  options: { version?: string; headers?: Record<string, string> } = {},
): Promise<RpcReply> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(options.version ? { 'a2a-version': options.version } : {}), ...options.headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcIds, method, params }),
  });
  return { status: response.status, body: (await response.json()) as RpcReply['body'] };
}

/** A 0.3 `message/send` params object for `text`. */
export function textMessage(text: string, extra: Record<string, unknown> = {}): { message: Record<string, unknown> } {
  return { message: { kind: 'message', messageId: `msg-${++rpcIds}`, role: 'user', parts: [{ kind: 'text', text }], ...extra } };
}

export interface SseFrame {
  id?: string;
  event?: string;
  data: string;
  comment?: string;
}

/** Reads an SSE response to its end (or until `until` says stop), frame by frame, comments included. */
export async function readSse(response: Response, until: (frame: SseFrame, frames: SseFrame[]) => boolean = () => false): Promise<SseFrame[]> {
  const frames: SseFrame[] = [];
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const frame: SseFrame = { data: '' };
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) frame.comment = line.slice(1);
        else if (line.startsWith('id: ')) frame.id = line.slice(4);
        else if (line.startsWith('event: ')) frame.event = line.slice(7);
        else if (line.startsWith('data: ')) data.push(line.slice(6));
      }
      frame.data = data.join('\n');
      frames.push(frame);
      if (until(frame, frames)) {
        await reader.cancel();
        return frames;
      }
      end = buffer.indexOf('\n\n');
    }
  }
  return frames;
}

/** Opens a streaming JSON-RPC call (`message/stream`, `tasks/resubscribe`, `stream/watch`). */
export function openStream(
  url: string,
  method: string,
  params: unknown,
  options: { version?: string; headers?: Record<string, string> } = {},
): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      ...(options.version ? { 'a2a-version': options.version } : {}),
      ...options.headers,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcIds, method, params }),
  });
}

/** The lines of the session's `trace.jsonl`. */
export async function traceOf(sessionDir: string): Promise<Array<Record<string, unknown> & { event_type: string }>> {
  const text = await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown> & { event_type: string });
}
