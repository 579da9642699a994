/**
 * The driver wire: what the agent loop puts in a driver's `tool-input.data` each turn, and how it
 * reads the driver's `tool-result`. It is upstream's format exactly, so drivers built for upstream
 * Murmur run here unchanged:
 *
 * - request: `{"max_tokens","messages","model","params","system","tools"}` (+ `continuation_id`),
 *   keys in that (alphabetical) order, as upstream serialises them;
 * - messages: `user` and `assistant` with content blocks, `tool` with `tool_call_id`, `is_error`
 *   and text blocks; an assistant turn is recorded with the driver's blocks verbatim;
 * - reply: status `passed` and `data` = `{"stop_reason","content":[…],"error"?}`.
 */

import type { WireError } from '@murmur/shared';
import type { EgressFailure } from './contracts.js';

export type ContentBlock = { type: string; [key: string]: unknown };

export type WireMessage =
  | { role: 'user'; content: ContentBlock[] | string }
  | { role: 'assistant'; content: ContentBlock[] | string }
  | { role: 'tool'; tool_call_id: string; is_error: boolean; content: ContentBlock[] };

export interface DriverTool {
  name: string;
  parameters: Record<string, unknown>;
  description?: string;
}

export interface ToolCall {
  id: string;
  name: string;
  input: Record<string, unknown>;
}

/** A driver's reply, read: a turn to act on, or why the turn failed. */
export type DriverReply =
  | { kind: 'end'; stopReason: 'end_turn' | 'max_tokens'; text: string; content: ContentBlock[]; usage?: TokenUsage }
  | { kind: 'tools'; calls: ToolCall[]; content: ContentBlock[]; usage?: TokenUsage }
  | { kind: 'error'; message: string; decision: string | null };

export interface TokenUsage {
  input_tokens?: number;
  output_tokens?: number;
}

export interface DriverRequest {
  model: string;
  maxTokens: number;
  messages: WireMessage[];
  tools: DriverTool[];
  system: string;
  params?: Record<string, unknown>;
  continuationId?: string;
}

export function driverRequestData(request: DriverRequest): string {
  return JSON.stringify({
    ...(request.continuationId !== undefined ? { continuation_id: request.continuationId } : {}),
    max_tokens: request.maxTokens,
    messages: request.messages,
    model: request.model,
    params: request.params ?? {},
    system: request.system,
    tools: request.tools,
  });
}

export function userMessage(text: string): WireMessage {
  return { role: 'user', content: [{ type: 'text', text }] };
}

export function toolResultMessage(callId: string, text: string, isError: boolean): WireMessage {
  return { role: 'tool', tool_call_id: callId, is_error: isError, content: [{ type: 'text', text }] };
}

interface ToolResultLike {
  status: string;
  summary?: string | undefined;
  data?: string | undefined;
}

/**
 * Reads one driver call's result: status, then `data` (or `summary`) as the wire's JSON reply. A
 * failed call says why in its `data`, else its `summary` (upstream's order); `data` that is itself
 * the wire's error reply (`{"error":"…","stop_reason":"error"}`, as a driver that fails its call
 * writes it) gives its `error`, not a line of JSON for a person to read.
 */
export function readDriverReply(result: ToolResultLike): DriverReply {
  if (result.status !== 'passed') {
    return { kind: 'error', message: wireErrorText(result.data) ?? result.data ?? result.summary ?? 'driver returned error', decision: null };
  }
  const raw = result.data ?? result.summary;
  if (raw === undefined) return { kind: 'error', message: 'driver returned no data', decision: null };
  let reply: unknown;
  try {
    reply = JSON.parse(raw);
  } catch (error) {
    return { kind: 'error', message: `failed to parse driver response: ${(error as Error).message}`, decision: null };
  }
  if (reply === null || typeof reply !== 'object' || Array.isArray(reply)) {
    return { kind: 'error', message: 'failed to parse driver response: not a JSON object', decision: null };
  }
  const { stop_reason: stopReason, content, error, usage } = reply as { stop_reason?: unknown; content?: unknown; error?: unknown; usage?: unknown };
  const blocks = Array.isArray(content)
    ? content.filter((block): block is ContentBlock => block !== null && typeof block === 'object' && typeof (block as ContentBlock).type === 'string')
    : [];
  const tokenUsage = readUsage(usage);
  const withUsage = tokenUsage ? { usage: tokenUsage } : {};
  switch (stopReason) {
    case 'end_turn':
    case 'max_tokens':
      return {
        kind: 'end',
        stopReason,
        // Joined as streamed: a reply's text blocks (citations split one sentence into several)
        // are one text, and a newline between them made the answer differ from what was shown.
        text: blocks
          .filter((block) => block.type === 'text' && typeof block.text === 'string')
          .map((block) => block.text as string)
          .join(''),
        // A turn that ends runs no tool: calls it carries (a reply cut at max_tokens keeps those it
        // finished) are not kept, or the history would hold calls no result answers, which a
        // provider refuses on every later turn of the context.
        content: blocks.filter((block) => block.type !== 'tool_call'),
        ...withUsage,
      };
    case 'tool_call': {
      const calls = blocks
        .filter((block) => block.type === 'tool_call')
        .map((block) => ({
          id: typeof block.id === 'string' ? block.id : '',
          name: typeof block.name === 'string' ? block.name : '',
          input: block.input !== null && typeof block.input === 'object' && !Array.isArray(block.input) ? (block.input as Record<string, unknown>) : {},
        }));
      if (calls.length === 0) return { kind: 'error', message: 'response stop_reason=tool_call but no tool_call blocks were present', decision: 'tool_call' };
      return { kind: 'tools', calls, content: blocks, ...withUsage };
    }
    case 'error':
      return { kind: 'error', message: typeof error === 'string' && error !== '' ? error : 'driver returned error', decision: 'text' };
    default:
      return { kind: 'error', message: `unsupported stop_reason '${String(stopReason)}'`, decision: 'text' };
  }
}

/** The `error` of a wire error reply, or undefined when `data` is not one. */
function wireErrorText(data: string | undefined): string | undefined {
  if (data === undefined || !data.startsWith('{')) return undefined;
  try {
    const reply = JSON.parse(data) as { stop_reason?: unknown; error?: unknown };
    return reply.stop_reason === 'error' && typeof reply.error === 'string' && reply.error !== '' ? reply.error : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A driver's failure as the run reports it: the driver's own words, then the URL and the reason of
 * its last request that got no answer, which a driver often cannot give (a JavaScript driver's
 * fetch says `NetworkError` and no more), and a hint at the manifest field that decides it.
 */
export function driverFailure(message: string, egress: EgressFailure | undefined): { message: string; error: WireError } {
  const said = egress ? `${message.trimEnd()} (${egress.url}: ${egress.reason})` : message;
  const [hint, path] = failureHint(message, egress);
  return { message: said, error: { code: 'E-RUN-007', message: `agent loop failed: ${said}`, hint, path } };
}

const OUT_OF_MEMORY_HINT =
  'the driver ran out of the memory capabilities.limits.memory_bytes gives each call (it holds a reply several times over while it reads it): raise that limit in murmur.yaml, or ask the model for a shorter reply (max_tokens)';

/**
 * What to change when a driver's call failed by a limit of the call rather than by what the model
 * said (that comes back as the driver's own error, hinted by `driverFailure`): its deadline, which
 * a model endpoint that keeps its reply open without finishing it runs into, or its memory.
 */
export function overrunHint(overran: 'deadline' | 'memory' | undefined): { hint: string; path: string } {
  switch (overran) {
    case 'deadline':
      return {
        hint: "the model did not finish its reply within the call's deadline: check that inference.endpoint answers and ends its replies (one that keeps a stream open is cut here), or raise capabilities.limits.deadline_seconds in murmur.yaml if replies really take longer",
        path: 'capabilities.limits.deadline_seconds',
      };
    case 'memory':
      return { hint: OUT_OF_MEMORY_HINT, path: 'capabilities.limits.memory_bytes' };
    default:
      return {
        hint: "the driver itself failed, not the model's answer: the session's logs (logs/bootstrap.log, logs/host.log) say more",
        path: 'inference.driver',
      };
  }
}

/** What to do about a driver's failure, and the manifest field it is about. */
function failureHint(message: string, egress: EgressFailure | undefined): [string, string] {
  // A JavaScript driver's engine says this of its own heap, which the call's memory limit bounds.
  if (/out of memory/i.test(message)) return [OUT_OF_MEMORY_HINT, 'capabilities.limits.memory_bytes'];
  // The provider's own answer by its status (a driver says `HTTP <status>: <body>`), where checking
  // the settings would be the wrong advice: the request was right, and it is to be made later.
  const status = /^(?:.*?: )?HTTP (\d{3}):/.exec(message)?.[1];
  if (status === '429')
    return ["the model's provider is limiting this key's rate (HTTP 429): run again once its limit has passed, or ask it less often", 'inference'];
  if (status === '529' || status === '503')
    return [`the model's provider is overloaded or down for now (HTTP ${status}): run again later`, 'inference.endpoint'];
  // The provider's own failure, by its status or by the error it put in the stream: the request was right.
  if (status === '500' || status === '502' || status === '504' || /inference error: (?:overloaded_error|api_error|server_error)\b/.test(message))
    return ["the model's provider failed on its side for now: run again later", 'inference.endpoint'];
  // The model's own ending of its reply (a refusal, a content filter): its answer, not the settings.
  if (/the model ended its reply with (?:stop_reason|finish_reason) /.test(message))
    return ["the model's reply ended the task, not a setting: rephrase the task, or give it another (what it said so far was streamed)", 'inference'];
  // The model server's stream closed before the reply was whole: nothing in the settings made it.
  if (/the stream (?:was cut off inside its last event|ended before)/.test(message))
    return [
      'the model server closed its stream before its reply was whole (a proxy’s timeout, the server going away): run again; if it keeps happening, check what lies between this machine and inference.endpoint',
      'inference.endpoint',
    ];
  if (status === '401' || status === '403')
    return [`the model's provider refused the key (HTTP ${status}): check inference.api_key (or the driver's gateway key) in murmur.yaml`, 'inference.api_key'];
  if (!egress) return ["the driver's message says why: check inference (endpoint, model, api_key) in murmur.yaml", 'inference'];
  switch (egress.code) {
    case 'HTTP-request-denied':
      return ["name the endpoint's host and port in capabilities.network.allow in murmur.yaml", 'capabilities.network.allow'];
    case 'HTTP-redirect':
      return ['point inference.endpoint in murmur.yaml at the URL the server redirects to: a redirect is never followed for a capsule', 'inference.endpoint'];
    case 'HTTP-response-body-size':
      return [
        'the model server sent more than a response may hold: ask it for a shorter reply (max_tokens), or check that inference.endpoint names a model server',
        'inference.endpoint',
      ];
    default:
      return ['check that inference.endpoint in murmur.yaml names a model server that is up and reachable from this machine', 'inference.endpoint'];
  }
}

/**
 * The usage a driver reported, each count only when it is one (a whole number, not negative, and
 * exact as a double): a driver passes through whatever its provider said, and a count that is a
 * string or a fraction added up as text, or broke the hooks' 64-bit fields and the session's end.
 * A count left out is estimated instead, as when none is reported.
 */
function readUsage(usage: unknown): TokenUsage | undefined {
  if (usage === null || typeof usage !== 'object') return undefined;
  const count = (value: unknown): number | undefined => (Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : undefined);
  const input = count((usage as Record<string, unknown>).input_tokens);
  const output = count((usage as Record<string, unknown>).output_tokens);
  if (input === undefined && output === undefined) return undefined;
  return { ...(input !== undefined ? { input_tokens: input } : {}), ...(output !== undefined ? { output_tokens: output } : {}) };
}

/**
 * A token estimate for the trace when the driver reports no usage: upstream counts with
 * cl100k, and falls back to a quarter of the bytes, which is what this runtime does throughout.
 */
export function estimateTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text) / 4);
}
