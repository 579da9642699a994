import { describe, expect, it } from 'vitest';
import { ENV, driver, fakeFetch, sinks, sse, streamingFetch } from './support.js';

const anthropic = driver('anthropic');

function env(config: Record<string, unknown> = {}, options: { keyless?: boolean } = {}) {
  return { endpoint: 'https://api.example.test', apiKey: options.keyless ? undefined : 'sk-test', config };
}

const basePayload = {
  model: 'claude-test',
  max_tokens: 1024,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
  tools: [],
  params: {},
  system: '',
};

/** A full streamed reply: a text block, a tool call whose input arrives in fragments. */
const STREAM = sse([
  [
    'message_start',
    { type: 'message_start', message: { id: 'msg_1', role: 'assistant', content: [], stop_reason: null, usage: { input_tokens: 42, output_tokens: 1 } } },
  ],
  ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
  ['ping', { type: 'ping' }],
  ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Let me ' } }],
  ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'look.' } }],
  ['content_block_stop', { type: 'content_block_stop', index: 0 }],
  ['content_block_start', { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'read_file', input: {} } }],
  ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '' } }],
  ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"path": "RE' } }],
  ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: 'ADME.md", "lines": 3}' } }],
  ['content_block_stop', { type: 'content_block_stop', index: 1 }],
  ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 57 } }],
  ['message_stop', { type: 'message_stop' }],
]);

describe('the Anthropic request', () => {
  it('posts to /v1/messages under the endpoint with the version, key and beta headers', () => {
    const request = anthropic.buildAnthropicRequest(basePayload, env({ beta_features: ['interleaved-thinking-2025-05-14', 'context-1m'] }));
    expect(request.url).toBe('https://api.example.test/v1/messages');
    // A key in the endpoint's query stays the query's, after the path.
    expect(anthropic.buildAnthropicRequest(basePayload, { ...env(), endpoint: 'https://api.example.test/?key=k' }).url).toBe(
      'https://api.example.test/v1/messages?key=k',
    );
    expect(request.headers).toEqual({
      'content-type': 'application/json',
      'anthropic-version': '2023-06-01',
      'x-api-key': 'sk-test',
      'anthropic-beta': 'interleaved-thinking-2025-05-14,context-1m',
    });
  });

  it('sends no key or beta header when neither is configured', () => {
    const request = anthropic.buildAnthropicRequest(basePayload, env({}, { keyless: true }));
    expect(request.headers).toEqual({ 'content-type': 'application/json', 'anthropic-version': '2023-06-01' });
  });

  it('streams, and leaves out an empty system prompt and an empty tool list', () => {
    const { body } = anthropic.buildAnthropicRequest(basePayload, env());
    expect(body).toEqual({
      model: 'claude-test',
      max_tokens: 1024,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
      stream: true,
    });
  });

  it('trims the system prompt and maps tools to name, input_schema and description', () => {
    const schema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] };
    const { body } = anthropic.buildAnthropicRequest(
      {
        ...basePayload,
        system: '  Be brief.\n',
        tools: [
          { name: 'read_file', parameters: schema, description: 'Reads a file' },
          { name: 'now', parameters: { type: 'object' } },
        ],
      },
      env(),
    );
    expect(body.system).toBe('Be brief.');
    expect(body.tools).toEqual([
      { name: 'read_file', input_schema: schema, description: 'Reads a file' },
      { name: 'now', input_schema: { type: 'object' } },
    ]);
  });

  it('merges params into the body and turns tool_choice "required" into {type: "any"}', () => {
    const { body } = anthropic.buildAnthropicRequest({ ...basePayload, params: { temperature: 0.2, tool_choice: 'required', top_k: 5 } }, env());
    expect(body.temperature).toBe(0.2);
    expect(body.top_k).toBe(5);
    expect(body.tool_choice).toEqual({ type: 'any' });
  });

  it('passes an object tool_choice through as it is', () => {
    const { body } = anthropic.buildAnthropicRequest({ ...basePayload, params: { tool_choice: { type: 'tool', name: 'read_file' } } }, env());
    expect(body.tool_choice).toEqual({ type: 'tool', name: 'read_file' });
  });

  it('maps assistant tool calls to tool_use and merges consecutive tool results into one user message', () => {
    const { body } = anthropic.buildAnthropicRequest(
      {
        ...basePayload,
        messages: [
          { role: 'user', content: 'Read two files' },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Reading both.' },
              { type: 'tool_call', id: 'toolu_a', name: 'read_file', input: { path: 'a' } },
              { type: 'tool_call', id: 'toolu_b', name: 'read_file', input: { path: 'b' } },
            ],
          },
          { role: 'tool', tool_call_id: 'toolu_a', is_error: false, content: [{ type: 'text', text: 'contents of a' }] },
          { role: 'tool', tool_call_id: 'toolu_b', is_error: true, content: [{ type: 'text', text: 'no such file' }] },
          { role: 'user', content: [{ type: 'text', text: 'Thanks' }] },
        ],
      },
      env(),
    );
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Read two files' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Reading both.' },
          { type: 'tool_use', id: 'toolu_a', name: 'read_file', input: { path: 'a' } },
          { type: 'tool_use', id: 'toolu_b', name: 'read_file', input: { path: 'b' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_a', content: [{ type: 'text', text: 'contents of a' }] },
          { type: 'tool_result', tool_use_id: 'toolu_b', content: [{ type: 'text', text: 'no such file' }], is_error: true },
        ],
      },
      { role: 'user', content: [{ type: 'text', text: 'Thanks' }] },
    ]);
  });

  it('sends signed thinking back only when the config enables thinking', () => {
    const messages = [
      { role: 'user', content: 'Think' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', text: 'signed thought', signature: 'sig-1' },
          { type: 'thinking', text: 'unsigned thought' },
          { type: 'text', text: 'Done' },
        ],
      },
    ];
    const enabled = anthropic.buildAnthropicRequest({ ...basePayload, messages }, env({ thinking: 'enabled' }));
    expect(enabled.body.messages[1].content).toEqual([
      { type: 'thinking', thinking: 'signed thought', signature: 'sig-1' },
      { type: 'text', text: 'Done' },
    ]);
    const disabled = anthropic.buildAnthropicRequest({ ...basePayload, messages }, env());
    expect(disabled.body.messages[1].content).toEqual([{ type: 'text', text: 'Done' }]);
  });

  it('refuses a message with an unknown role', () => {
    expect(() => anthropic.buildAnthropicRequest({ ...basePayload, messages: [{ role: 'system', content: 'x' }] }, env())).toThrow(
      "unsupported message role 'system'",
    );
  });
});

describe('the Anthropic response', () => {
  it('reads a streamed reply: text chunks emitted, tool input assembled from fragments, usage', () => {
    const text: string[] = [];
    const thinking: string[] = [];
    const outcome = anthropic.parse(
      200,
      STREAM,
      (t: string) => text.push(t),
      (t: string) => thinking.push(t),
    );
    expect(outcome).toEqual({
      ok: true,
      value: {
        stop_reason: 'tool_call',
        content: [
          { type: 'text', text: 'Let me look.' },
          { type: 'tool_call', id: 'toolu_1', name: 'read_file', input: { path: 'README.md', lines: 3 } },
        ],
        usage: { input_tokens: 42, output_tokens: 57 },
      },
    });
    expect(text).toEqual(['Let me ', 'look.']);
    expect(thinking).toEqual([]);
  });

  it('reads streamed thinking with its signature and emits it as thinking chunks', () => {
    const body = sse([
      ['message_start', { type: 'message_start', message: { usage: { input_tokens: 3 } } }],
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Hmm, ' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'two.' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'EqQBCgIYAhIM' } }],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['content_block_start', { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: '2' } }],
      ['content_block_stop', { type: 'content_block_stop', index: 1 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } }],
      ['message_stop', { type: 'message_stop' }],
    ]);
    const text: string[] = [];
    const thinking: string[] = [];
    const outcome = anthropic.parse(
      200,
      body,
      (t: string) => text.push(t),
      (t: string) => thinking.push(t),
    );
    expect(outcome.value.content).toEqual([
      { type: 'thinking', text: 'Hmm, two.', signature: 'EqQBCgIYAhIM' },
      { type: 'text', text: '2' },
    ]);
    expect(outcome.value.stop_reason).toBe('end_turn');
    expect(thinking).toEqual(['Hmm, ', 'two.']);
    expect(text).toEqual(['2']);
  });

  it('gives a streamed tool call without input fragments an empty object as input', () => {
    const body = sse([
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_2', name: 'now', input: {} } }],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 4 } }],
    ]);
    const outcome = anthropic.parse(200, body);
    expect(outcome.value.content).toEqual([{ type: 'tool_call', id: 'toolu_2', name: 'now', input: {} }]);
  });

  it('reads a non-streaming JSON reply', () => {
    const body = JSON.stringify({
      id: 'msg_2',
      type: 'message',
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'plan', signature: 'sig' },
        { type: 'text', text: 'Calling.' },
        { type: 'tool_use', id: 'toolu_3', name: 'grep', input: { pattern: 'x' } },
      ],
      stop_reason: 'tool_use',
      usage: { input_tokens: 10, output_tokens: 20 },
    });
    const text: string[] = [];
    expect(anthropic.parse(200, body, (t: string) => text.push(t))).toEqual({
      ok: true,
      value: {
        stop_reason: 'tool_call',
        content: [
          { type: 'thinking', text: 'plan', signature: 'sig' },
          { type: 'text', text: 'Calling.' },
          { type: 'tool_call', id: 'toolu_3', name: 'grep', input: { pattern: 'x' } },
        ],
        usage: { input_tokens: 10, output_tokens: 20 },
      },
    });
    expect(text).toEqual([]);
  });

  it('maps end_turn and stop_sequence to end_turn, tool_use to tool_call, max_tokens to max_tokens', () => {
    expect(anthropic.mapAnthropicStopReason('end_turn')).toEqual({ ok: true, value: 'end_turn' });
    expect(anthropic.mapAnthropicStopReason('stop_sequence')).toEqual({ ok: true, value: 'end_turn' });
    expect(anthropic.mapAnthropicStopReason('tool_use')).toEqual({ ok: true, value: 'tool_call' });
    expect(anthropic.mapAnthropicStopReason('max_tokens')).toEqual({ ok: true, value: 'max_tokens' });
  });

  it('ends the task at any other stop reason, said as the model’s own ending and what it means, never as unsupported', () => {
    const body = JSON.stringify({ content: [{ type: 'text', text: 'no' }], stop_reason: 'refusal' });
    expect(anthropic.parse(200, body)).toEqual({
      ok: false,
      error: "the model ended its reply with stop_reason 'refusal' (it refused to answer), which ends the task",
    });
    expect(anthropic.mapAnthropicStopReason('pause_turn').error).toContain('a server tool paused its turn');
    expect(anthropic.mapAnthropicStopReason('model_context_window_exceeded').error).toContain("the conversation fills the model's context window");
    expect(anthropic.mapAnthropicStopReason('novel').error).toBe(
      "the model ended its reply with stop_reason 'novel' (a reason this driver does not know), which ends the task",
    );
  });

  it('holds a JSON reply’s tool input to what a streamed one is held to: one that is no object ends the task, never runs as {}', () => {
    const body = JSON.stringify({ content: [{ type: 'tool_use', id: 't1', name: 'echo', input: ['echo', 'x'] }], stop_reason: 'tool_use' });
    expect(anthropic.parse(200, body)).toMatchObject({ ok: false, error: expect.stringContaining("the input of tool call 'echo' is not a JSON object") });
  });

  it('turns a truncated JSON body into a parse error', () => {
    const outcome = anthropic.parse(200, '{"content":[{"type":"text","text":"hel');
    expect(outcome.ok).toBe(false);
    expect(outcome.error).toMatch(/^failed to parse inference response: /);
  });

  it('turns a stream cut before the stop reason into a parse error', () => {
    const cut = STREAM.slice(0, STREAM.indexOf('event: message_delta'));
    const outcome = anthropic.parse(200, cut);
    expect(outcome).toEqual({ ok: false, error: 'failed to parse inference response: the stream ended before the stop reason' });
  });

  it('says a stream cut inside a data line was cut off inside its last event, not that its JSON is bad', () => {
    const cut = STREAM.slice(0, STREAM.indexOf('"partial_json":"{\\"path') + 20);
    const outcome = anthropic.parse(200, cut);
    expect(outcome.ok).toBe(false);
    expect(outcome.error).toMatch(
      /^failed to parse inference response: the stream was cut off inside its last event \(Unterminated string .*; its last line ended ".*partial_json.*"\)$/,
    );
    // A last event whole but for its newline is read as any other.
    expect(anthropic.parse(200, STREAM.trimEnd())).toMatchObject({ ok: true });
  });

  it('refuses a stream that starts a content block twice, whose first text its readers were already shown', () => {
    const chunks: string[] = [];
    const body = sse([
      ['message_start', { type: 'message_start', message: { usage: { input_tokens: 1 } } }],
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'first ' } }],
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'second' } }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 2 } }],
      ['message_stop', { type: 'message_stop' }],
    ]);
    expect(anthropic.parse(200, body, (chunk: string) => void chunks.push(chunk))).toEqual({
      ok: false,
      error: 'failed to parse inference response: the stream started content block 0 twice',
    });
    expect(chunks.join('')).toBe('first ');
  });

  it('turns an error event in the stream into an error', () => {
    const body = sse([
      ['message_start', { type: 'message_start', message: { usage: { input_tokens: 1 } } }],
      ['error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }],
    ]);
    expect(anthropic.parse(200, body)).toEqual({ ok: false, error: 'inference error: overloaded_error: Overloaded' });
  });

  it('turns an HTTP error status into "HTTP <code>: <body>", the body cut to 2000 characters', () => {
    expect(anthropic.parse(401, '{"type":"error","error":{"type":"authentication_error"}}')).toEqual({
      ok: false,
      error: 'HTTP 401: {"type":"error","error":{"type":"authentication_error"}}',
    });
    const long = anthropic.parse(500, 'x'.repeat(5000));
    expect(long.error).toBe(`HTTP 500: ${'x'.repeat(2000)}`);
  });
});

describe('the Anthropic driver end to end', () => {
  it('posts the mapped request and answers the wire response as a passed result', async () => {
    const { fetch, calls } = fakeFetch(200, STREAM);
    const chunks = sinks();
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...chunks });
    expect(calls).toHaveLength(1);
    expect(calls[0]?.url).toBe('https://api.example.test/v1/messages');
    expect(calls[0]?.init.method).toBe('POST');
    expect(calls[0]?.init.headers['x-api-key']).toBe('sk-test');
    expect(JSON.parse(calls[0]?.init.body ?? '')).toMatchObject({ model: 'claude-test', max_tokens: 1024, stream: true });
    expect(result.status).toBe('passed');
    expect(result.summary).toBeUndefined();
    expect(result.truncated).toBe(false);
    expect(result.metadata).toEqual([]);
    expect(JSON.parse(result.data).stop_reason).toBe('tool_call');
    expect(chunks.text.join('')).toBe('Let me look.');
  });

  it('answers an HTTP 401 with an error result carrying the message in summary and data', async () => {
    const { fetch } = fakeFetch(401, 'invalid x-api-key');
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.status).toBe('error');
    expect(result.summary).toBe('HTTP 401: invalid x-api-key');
    expect(JSON.parse(result.data)).toEqual({ error: 'HTTP 401: invalid x-api-key', stop_reason: 'error' });
  });

  it('answers a missing endpoint with an error and makes no request', async () => {
    const { fetch, calls } = fakeFetch(200, STREAM);
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => [['MURMUR_INFERENCE_API_KEY', 'k']], fetch, ...sinks() });
    expect(result.status).toBe('error');
    expect(result.summary).toBe('driver: missing MURMUR_INFERENCE_ENDPOINT');
    expect(calls).toHaveLength(0);
  });

  it('answers a driver config that is not JSON with an error', async () => {
    const { fetch, calls } = fakeFetch(200, STREAM);
    const environment = [...ENV, ['MURMUR_INFERENCE_DRIVER_CONFIG', '{beta']];
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => environment, fetch, ...sinks() });
    expect(result.status).toBe('error');
    expect(result.summary).toMatch(/^driver: MURMUR_INFERENCE_DRIVER_CONFIG is not valid JSON/);
    expect(calls).toHaveLength(0);
  });

  it('answers input that is not JSON, or absent, with an error', async () => {
    const { fetch } = fakeFetch(200, STREAM);
    const host = { getEnvironment: () => ENV, fetch, ...sinks() };
    expect((await anthropic.run('{"model":', host)).summary).toMatch(/^driver: bad input: /);
    expect((await anthropic.run(undefined, host)).summary).toBe('driver: bad input: no payload');
  });

  it('answers a network failure with an error instead of throwing', async () => {
    const fetch = async () => {
      throw new TypeError('NetworkError when attempting to fetch resource.');
    };
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.status).toBe('error');
    expect(result.summary).toBe('inference request failed: NetworkError when attempting to fetch resource.');
  });

  it('answers an unknown message role with an error and makes no request', async () => {
    const { fetch, calls } = fakeFetch(200, STREAM);
    const payload = { ...basePayload, messages: [{ role: 'narrator', content: 'x' }] };
    const result = await anthropic.run(JSON.stringify(payload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.summary).toBe("driver: unsupported message role 'narrator'");
    expect(calls).toHaveLength(0);
  });

  /** A reply with thinking, then text with characters of two, three and four bytes. */
  const UNICODE_STREAM = sse([
    ['message_start', { type: 'message_start', message: { usage: { input_tokens: 3, output_tokens: 1 } } }],
    ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } }],
    ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'pensée…' } }],
    ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } }],
    ['content_block_start', { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } }],
    ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'héllo ' } }],
    ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'wörld 😀' } }],
    ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } }],
    ['message_stop', { type: 'message_stop' }],
  ]).replaceAll('\n', '\r\n');

  it('reads a streamed body piece by piece, cut anywhere, to the same reply as read whole', async () => {
    const whole = anthropic.parse(200, UNICODE_STREAM);
    expect(whole.ok).toBe(true);
    for (const pieceBytes of [1, 2, 3, 5, 7, 64]) {
      const chunks = sinks();
      const { fetch } = streamingFetch(200, UNICODE_STREAM, pieceBytes);
      const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...chunks });
      expect(JSON.parse(result.data), `pieces of ${pieceBytes}`).toEqual(whole.value);
      expect(chunks.thinking.join(''), `pieces of ${pieceBytes}`).toBe('pensée…');
      expect(chunks.text.join(''), `pieces of ${pieceBytes}`).toBe('héllo wörld 😀');
    }
  });

  it('emits each delta as soon as its line is complete, before the rest of the body is read', async () => {
    const log: string[] = [];
    const { fetch, pieces } = streamingFetch(200, UNICODE_STREAM, 16, log);
    await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks(log) });
    const readsBefore = (entry: string) => log.slice(0, log.indexOf(entry)).filter((line) => line.startsWith('read ')).length;
    expect(readsBefore('thinking pensée…')).toBeLessThan(pieces);
    expect(readsBefore('text héllo ')).toBeLessThan(readsBefore('text wörld 😀'));
    expect(readsBefore('text wörld 😀')).toBeLessThan(pieces);
  });

  it('stops reading a stream at its error event', async () => {
    const body = sse([
      ['message_start', { type: 'message_start', message: { usage: { input_tokens: 1 } } }],
      ['error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }],
      ['ping', { type: 'ping' }],
    ]);
    const { fetch, state } = streamingFetch(200, `${body}${': padding\n'.repeat(50)}`, 8);
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.summary).toBe('inference error: overloaded_error: Overloaded');
    expect(state.cancelled).toBe(true);
  });

  it('answers an HTTP error status read piece by piece with the same message', async () => {
    const { fetch } = streamingFetch(529, '{"type":"error","error":{"type":"overloaded_error"}}', 5);
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.summary).toBe('HTTP 529: {"type":"error","error":{"type":"overloaded_error"}}');
  });

  it('keeps going when a chunk sink throws', async () => {
    const { fetch } = fakeFetch(200, STREAM);
    const failing = () => {
      throw new Error('no task');
    };
    const result = await anthropic.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, emitChunk: failing, emitThinkingChunk: failing });
    expect(result.status).toBe('passed');
  });
});
