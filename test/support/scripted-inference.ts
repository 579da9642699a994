import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';

/**
 * A scripted inference endpoint on loopback: the one fake in the suites, standing in for what is
 * outside our system (a model provider). It speaks the Anthropic Messages API (`POST
 * /v1/messages`) or OpenAI chat completions (`POST /chat/completions`), as a plain JSON reply or
 * as the provider's SSE stream, and answers each request with the next reply of its script.
 */

export type ScriptedReply =
  | { text: string; thinking?: string /** Answer only after this long: a slow model. */; delayMs?: number }
  | { toolCalls: Array<{ name: string; input: Record<string, unknown>; id?: string }>; text?: string }
  /** Anything at all, as the body: a provider error, a cut-off reply. */
  | { status?: number; raw: string }
  | HeldStreamReply;

/**
 * A reply streamed (SSE, whatever `stream` says) in pieces the test lets go of one by one: the
 * first piece is written at once, piece `i` only once `release(i)` resolves. Each write is cut
 * a little way into the next piece — inside its first multi-byte character when it has one, else
 * mid-line — so a reader must put lines and characters back together across writes.
 */
export interface HeldStreamReply {
  pieces: Array<{ text?: string; thinking?: string }>;
  release(index: number): Promise<void>;
}

/** One write of a held stream: which request, which piece, when (`Date.now()`). */
export interface PieceWritten {
  request: number;
  piece: number;
  at: number;
}

export interface ScriptedInference {
  /** The endpoint to configure (`inference.endpoint` / `gateway.endpoint`). */
  readonly endpoint: string;
  /** `127.0.0.1:<port>`: the `network.allow` entry that admits it. */
  readonly authority: string;
  /** Each request's JSON body and headers, in order. */
  requests(): Array<{ path: string; body: Record<string, unknown>; headers: http.IncomingHttpHeaders }>;
  /** The writes of held streams so far, in order. */
  piecesWritten(): PieceWritten[];
  close(): Promise<void>;
}

export interface ScriptedInferenceOptions {
  dialect?: 'anthropic' | 'openai';
  /** Answer with the provider's SSE stream rather than one JSON body; `as-asked`: when the request's `stream` is true. */
  stream?: boolean | 'as-asked';
  /** The replies, in order (the last repeats), or a function of the request. */
  script: ScriptedReply[] | ((body: Record<string, unknown>, index: number) => ScriptedReply);
  /** Where to listen: loopback and a free port unless told (a container binds its own network). */
  host?: string;
  port?: number;
  /** Serve HTTPS with this key and certificate (PEM), as a remote provider does. */
  tls?: { key: string; cert: string };
}

let toolIds = 0;
let messageIds = 0;

function anthropicJson(reply: Exclude<ScriptedReply, { raw: string } | HeldStreamReply>, model: string): string {
  const content: unknown[] = [];
  if ('thinking' in reply && reply.thinking) content.push({ type: 'thinking', thinking: reply.thinking, signature: 'sig' });
  if (reply.text) content.push({ type: 'text', text: reply.text });
  const calls = 'toolCalls' in reply ? reply.toolCalls : [];
  for (const call of calls) content.push({ type: 'tool_use', id: call.id ?? `toolu_${++toolIds}`, name: call.name, input: call.input });
  return JSON.stringify({
    id: 'msg_scripted',
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: calls.length > 0 ? 'tool_use' : 'end_turn',
    usage: { input_tokens: 11, output_tokens: 7 },
  });
}

/** The `message_start` event an Anthropic stream opens with, for a new message id. */
function anthropicMessageStart(model: string): Record<string, unknown> {
  return {
    type: 'message_start',
    message: {
      id: `msg_scripted_${++messageIds}`,
      type: 'message',
      role: 'assistant',
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 11, output_tokens: 1 },
    },
  };
}

function anthropicStream(reply: Exclude<ScriptedReply, { raw: string } | HeldStreamReply>, model: string): string {
  const events: Array<[string, unknown]> = [['message_start', anthropicMessageStart(model)]];
  let index = 0;
  const block = (start: unknown, deltas: unknown[]): void => {
    events.push(['content_block_start', { type: 'content_block_start', index, content_block: start }]);
    for (const delta of deltas) events.push(['content_block_delta', { type: 'content_block_delta', index, delta }]);
    events.push(['content_block_stop', { type: 'content_block_stop', index }]);
    index += 1;
  };
  if ('thinking' in reply && reply.thinking)
    block({ type: 'thinking', thinking: '' }, [
      { type: 'thinking_delta', thinking: reply.thinking },
      { type: 'signature_delta', signature: 'sig' },
    ]);
  if (reply.text) {
    // Two deltas per text, so a stream test sees more than one chunk.
    const half = Math.ceil(reply.text.length / 2);
    block({ type: 'text', text: '' }, [
      { type: 'text_delta', text: reply.text.slice(0, half) },
      { type: 'text_delta', text: reply.text.slice(half) },
    ]);
  }
  const calls = 'toolCalls' in reply ? reply.toolCalls : [];
  for (const call of calls) {
    const json = JSON.stringify(call.input);
    block({ type: 'tool_use', id: call.id ?? `toolu_${++toolIds}`, name: call.name, input: {} }, [
      { type: 'input_json_delta', partial_json: json.slice(0, 5) },
      { type: 'input_json_delta', partial_json: json.slice(5) },
    ]);
  }
  events.push(['message_delta', { type: 'message_delta', delta: { stop_reason: calls.length > 0 ? 'tool_use' : 'end_turn' }, usage: { output_tokens: 7 } }]);
  events.push(['message_stop', { type: 'message_stop' }]);
  return events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join('');
}

function openaiJson(reply: Exclude<ScriptedReply, { raw: string } | HeldStreamReply>): string {
  const calls = 'toolCalls' in reply ? reply.toolCalls : [];
  return JSON.stringify({
    id: 'chatcmpl-scripted',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: reply.text ?? null,
          ...(calls.length > 0
            ? {
                tool_calls: calls.map((call) => ({
                  id: call.id ?? `call_${++toolIds}`,
                  type: 'function',
                  function: { name: call.name, arguments: JSON.stringify(call.input) },
                })),
              }
            : {}),
        },
        finish_reason: calls.length > 0 ? 'tool_calls' : 'stop',
      },
    ],
    usage: { prompt_tokens: 11, completion_tokens: 7 },
  });
}

function openaiStream(reply: Exclude<ScriptedReply, { raw: string } | HeldStreamReply>): string {
  const chunks: unknown[] = [];
  if (reply.text) {
    const half = Math.ceil(reply.text.length / 2);
    chunks.push(
      { choices: [{ index: 0, delta: { content: reply.text.slice(0, half) } }] },
      { choices: [{ index: 0, delta: { content: reply.text.slice(half) } }] },
    );
  }
  const calls = 'toolCalls' in reply ? reply.toolCalls : [];
  calls.forEach((call, index) => {
    chunks.push({
      choices: [
        { index: 0, delta: { tool_calls: [{ index, id: call.id ?? `call_${++toolIds}`, type: 'function', function: { name: call.name, arguments: '' } }] } },
      ],
    });
    chunks.push({ choices: [{ index: 0, delta: { tool_calls: [{ index, function: { arguments: JSON.stringify(call.input) } }] } }] });
  });
  chunks.push({ choices: [{ index: 0, delta: {}, finish_reason: calls.length > 0 ? 'tool_calls' : 'stop' }] });
  chunks.push({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 7 } });
  return `${chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join('')}data: [DONE]\n\n`;
}

/** A held reply's pieces as Anthropic SSE text, one string a piece: the preamble with the first, the ending with the last. */
function anthropicPieces(pieces: HeldStreamReply['pieces'], model: string): string[] {
  const frame = (event: string, data: unknown): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
  let open: { type: 'thinking' | 'text'; index: number } | undefined;
  let nextIndex = 0;
  const written = pieces.map((piece, position) => {
    let out = position === 0 ? frame('message_start', anthropicMessageStart(model)) : '';
    for (const type of ['thinking', 'text'] as const) {
      const text = piece[type];
      if (text === undefined) continue;
      if (open?.type !== type) {
        if (open) out += frame('content_block_stop', { type: 'content_block_stop', index: open.index });
        open = { type, index: nextIndex++ };
        out += frame('content_block_start', {
          type: 'content_block_start',
          index: open.index,
          content_block: type === 'text' ? { type, text: '' } : { type, thinking: '' },
        });
      }
      const delta = type === 'text' ? { type: 'text_delta', text } : { type: 'thinking_delta', thinking: text };
      out += frame('content_block_delta', { type: 'content_block_delta', index: open.index, delta });
    }
    return out;
  });
  let ending = open ? frame('content_block_stop', { type: 'content_block_stop', index: open.index }) : '';
  ending += frame('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 7 } });
  ending += frame('message_stop', { type: 'message_stop' });
  written[written.length - 1] += ending;
  return written;
}

/** A held reply's pieces as Chat Completions SSE text (thinking as `reasoning_content`), one string a piece. */
function openaiPieces(pieces: HeldStreamReply['pieces']): string[] {
  const frame = (data: unknown): string => `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
  const written = pieces.map((piece) => {
    let out = '';
    if (piece.thinking !== undefined) out += frame({ choices: [{ index: 0, delta: { reasoning_content: piece.thinking } }] });
    if (piece.text !== undefined) out += frame({ choices: [{ index: 0, delta: { content: piece.text } }] });
    return out;
  });
  written[written.length - 1] +=
    frame({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
    frame({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 7 } }) +
    frame('[DONE]');
  return written;
}

/** The bytes of each write: every piece but the last gives the next one's first bytes, cut inside a character or a line. */
function cutAcross(texts: string[]): Buffer[] {
  const writes: Buffer[] = texts.map((text) => Buffer.from(text));
  for (let index = 0; index + 1 < writes.length; index += 1) {
    const next = writes[index + 1] as Buffer;
    const multiByte = next.findIndex((byte) => byte >= 0x80);
    const cut = Math.min(next.length - 1, multiByte >= 0 ? multiByte + 1 : 10);
    writes[index] = Buffer.concat([writes[index] as Buffer, next.subarray(0, cut)]);
    writes[index + 1] = next.subarray(cut);
  }
  return writes;
}

export async function startScriptedInference(options: ScriptedInferenceOptions): Promise<ScriptedInference> {
  const dialect = options.dialect ?? 'anthropic';
  const seen: Array<{ path: string; body: Record<string, unknown>; headers: http.IncomingHttpHeaders }> = [];
  const piecesWritten: PieceWritten[] = [];
  const handler: http.RequestListener = (request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      let body: Record<string, unknown> = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>;
      } catch {
        // recorded as empty: the test sees the driver sent no JSON
      }
      const index = seen.length;
      seen.push({ path: request.url ?? '', body, headers: request.headers });
      const expected = dialect === 'anthropic' ? '/v1/messages' : '/chat/completions';
      // A client may add a query (Claude Code asks for `?beta=true`): the path is what is served.
      if (request.method !== 'POST' || (request.url ?? '').split('?')[0] !== expected) {
        response.writeHead(404, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ error: { message: `scripted inference serves POST ${expected}, not ${request.method} ${request.url}` } }));
        return;
      }
      const script = options.script;
      let reply: ScriptedReply;
      try {
        reply = typeof script === 'function' ? script(body, index) : (script[Math.min(index, script.length - 1)] as ScriptedReply);
      } catch (error) {
        // A script that cannot answer says so at once, rather than leave the driver waiting.
        response.writeHead(500, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ error: { message: `the test's script failed: ${error instanceof Error ? error.message : String(error)}` } }));
        return;
      }
      if ('raw' in reply) {
        response.writeHead(reply.status ?? 200, { 'content-type': 'application/json' });
        response.end(reply.raw);
        return;
      }
      const model = typeof body.model === 'string' ? body.model : 'scripted';
      if ('pieces' in reply) {
        const held = reply;
        const writes = cutAcross(dialect === 'anthropic' ? anthropicPieces(held.pieces, model) : openaiPieces(held.pieces));
        response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        void (async () => {
          for (const [piece, bytes] of writes.entries()) {
            if (piece > 0) await held.release(piece);
            if (response.destroyed) return;
            piecesWritten.push({ request: index, piece, at: Date.now() });
            response.write(bytes);
          }
          response.end();
        })();
        return;
      }
      const answer = (): void => {
        if (options.stream === true || (options.stream === 'as-asked' && body.stream === true)) {
          response.writeHead(200, { 'content-type': 'text/event-stream' });
          response.end(dialect === 'anthropic' ? anthropicStream(reply, model) : openaiStream(reply));
        } else {
          response.writeHead(200, { 'content-type': 'application/json' });
          response.end(dialect === 'anthropic' ? anthropicJson(reply, model) : openaiJson(reply));
        }
      };
      const delay = 'delayMs' in reply ? reply.delayMs : undefined;
      if (delay) setTimeout(answer, delay);
      else answer();
    });
  };
  const server = options.tls ? https.createServer({ key: options.tls.key, cert: options.tls.cert }, handler) : http.createServer(handler);
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, host, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `${options.tls ? 'https' : 'http'}://${host}:${port}`,
    authority: `${host}:${port}`,
    requests: () => [...seen],
    piecesWritten: () => [...piecesWritten],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
