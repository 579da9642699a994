import { describe, expect, it } from 'vitest';
import { ENV, driver, fakeFetch, sinks, sse, streamingFetch } from './support.js';

const openai = driver('openai');

function env(options: { keyless?: boolean } = {}) {
  return { endpoint: 'http://localhost:8000/v1', apiKey: options.keyless ? undefined : 'sk-test', config: {} };
}

const basePayload = {
  model: 'gpt-test',
  max_tokens: 512,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
  tools: [],
  params: {},
  system: '',
};

function chunk(delta: Record<string, unknown>, finishReason: string | null = null) {
  return { id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finishReason }] };
}

/** A streamed reply with text and two tool calls whose arguments arrive in fragments. */
const STREAM = sse([
  ['', chunk({ role: 'assistant', content: '' })],
  ['', chunk({ content: 'Checking ' })],
  ['', chunk({ content: 'both.' })],
  ['', chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'read_file', arguments: '' } }] })],
  ['', chunk({ tool_calls: [{ index: 0, function: { arguments: '{"path":' } }] })],
  ['', chunk({ tool_calls: [{ index: 0, function: { arguments: ' "a.txt"}' } }] })],
  ['', chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'now', arguments: '' } }] })],
  ['', chunk({}, 'tool_calls')],
  ['', { id: 'c1', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 } }],
  ['', '[DONE]'],
]);

describe('the OpenAI-compatible request', () => {
  it('posts to /chat/completions under the endpoint with a bearer key', () => {
    const request = openai.buildOpenAIRequest(basePayload, env());
    expect(request.url).toBe('http://localhost:8000/v1/chat/completions');
    expect(openai.buildOpenAIRequest(basePayload, { ...env(), endpoint: 'http://localhost:8000/v1?api-version=1' }).url).toBe(
      'http://localhost:8000/v1/chat/completions?api-version=1',
    );
    expect(request.headers).toEqual({ 'content-type': 'application/json', authorization: 'Bearer sk-test' });
    expect(openai.buildOpenAIRequest(basePayload, env({ keyless: true })).headers).toEqual({ 'content-type': 'application/json' });
  });

  it('streams with usage, caps max_completion_tokens, and leaves out an empty system prompt and tool list', () => {
    const { body } = openai.buildOpenAIRequest(basePayload, env());
    expect(body).toEqual({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'Hello' }],
      max_completion_tokens: 512,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('puts a non-empty system prompt first and maps tools to functions', () => {
    const schema = { type: 'object', properties: { path: { type: 'string' } } };
    const { body } = openai.buildOpenAIRequest(
      {
        ...basePayload,
        system: 'Be brief.',
        tools: [
          { name: 'read_file', parameters: schema, description: 'Reads a file' },
          { name: 'now', parameters: { type: 'object' } },
        ],
      },
      env(),
    );
    expect(body.messages[0]).toEqual({ role: 'system', content: 'Be brief.' });
    expect(body.tools).toEqual([
      { type: 'function', function: { name: 'read_file', parameters: schema, description: 'Reads a file' } },
      { type: 'function', function: { name: 'now', parameters: { type: 'object' } } },
    ]);
  });

  it('maps a tool-calling conversation: joined texts, tool_calls with JSON arguments, tool messages', () => {
    const { body } = openai.buildOpenAIRequest(
      {
        ...basePayload,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Read' },
              { type: 'text', text: 'a.txt' },
            ],
          },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', text: 'I should read it' },
              { type: 'tool_call', id: 'call_a', name: 'read_file', input: { path: 'a.txt' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_a', is_error: false, content: [{ type: 'text', text: 'alpha' }] },
          { role: 'assistant', content: [{ type: 'text', text: 'It says alpha.' }] },
        ],
      },
      env(),
    );
    expect(body.messages).toEqual([
      { role: 'user', content: 'Read\na.txt' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'read_file', arguments: '{"path":"a.txt"}' } }] },
      { role: 'tool', tool_call_id: 'call_a', content: 'alpha' },
      { role: 'assistant', content: 'It says alpha.' },
    ]);
  });

  it('merges params into the body, tool_choice included', () => {
    const { body } = openai.buildOpenAIRequest({ ...basePayload, params: { temperature: 0, tool_choice: 'required' } }, env());
    expect(body.temperature).toBe(0);
    expect(body.tool_choice).toBe('required');
  });

  it('drops stream_options when params turn streaming off', () => {
    const { body } = openai.buildOpenAIRequest({ ...basePayload, params: { stream: false } }, env());
    expect(body.stream).toBe(false);
    expect(body).not.toHaveProperty('stream_options');
  });

  it('refuses a message with an unknown role', () => {
    expect(() => openai.buildOpenAIRequest({ ...basePayload, messages: [{ role: 'developer', content: 'x' }] }, env())).toThrow(
      "unsupported message role 'developer'",
    );
  });
});

describe('the OpenAI-compatible response', () => {
  it('reads a streamed reply: text chunks emitted, tool calls assembled by index, usage', () => {
    const text: string[] = [];
    const outcome = openai.parse(
      200,
      STREAM,
      (t: string) => text.push(t),
      () => {},
    );
    expect(outcome).toEqual({
      ok: true,
      value: {
        stop_reason: 'tool_call',
        content: [
          { type: 'text', text: 'Checking both.' },
          { type: 'tool_call', id: 'call_a', name: 'read_file', input: { path: 'a.txt' } },
          { type: 'tool_call', id: 'call_b', name: 'now', input: {} },
        ],
        usage: { input_tokens: 30, output_tokens: 12 },
      },
    });
    expect(text).toEqual(['Checking ', 'both.']);
  });

  it('reads reasoning_content deltas as thinking and emits them as thinking chunks', () => {
    const body = sse([
      ['', chunk({ reasoning_content: 'Two plus ' })],
      ['', chunk({ reasoning_content: 'two.' })],
      ['', chunk({ content: '4' })],
      ['', chunk({}, 'stop')],
      ['', '[DONE]'],
    ]);
    const chunks = { text: [] as string[], thinking: [] as string[] };
    const outcome = openai.parse(
      200,
      body,
      (t: string) => chunks.text.push(t),
      (t: string) => chunks.thinking.push(t),
    );
    expect(outcome.value).toEqual({
      stop_reason: 'end_turn',
      content: [
        { type: 'thinking', text: 'Two plus two.' },
        { type: 'text', text: '4' },
      ],
    });
    expect(chunks).toEqual({ text: ['4'], thinking: ['Two plus ', 'two.'] });
  });

  it('routes <think> segments of streamed content to thinking, even when a tag is split across deltas', () => {
    const body = sse([
      ['', chunk({ content: '<thi' })],
      ['', chunk({ content: 'nk>weigh' })],
      ['', chunk({ content: 'ing</th' })],
      ['', chunk({ content: 'ink>\n\nAnswer: 4' })],
      ['', chunk({}, 'stop')],
      ['', '[DONE]'],
    ]);
    const chunks = { text: [] as string[], thinking: [] as string[] };
    const outcome = openai.parse(
      200,
      body,
      (t: string) => chunks.text.push(t),
      (t: string) => chunks.thinking.push(t),
    );
    expect(outcome.value.content).toEqual([
      { type: 'thinking', text: 'weighing' },
      { type: 'text', text: '\n\nAnswer: 4' },
    ]);
    expect(chunks.thinking.join('')).toBe('weighing');
    expect(chunks.text.join('')).toBe('\n\nAnswer: 4');
    expect(chunks.text.join('')).not.toContain('<');
  });

  it('keeps a lone "<" that opens no tag as text', () => {
    expect(openai.splitThinkTags('a < b and <b>bold</b>')).toEqual({ text: 'a < b and <b>bold</b>', thinking: '' });
  });

  it('reads a non-streaming JSON completion, think tags included', () => {
    const body = JSON.stringify({
      id: 'x',
      object: 'chat.completion',
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: '<think>plan</think>Calling.',
            tool_calls: [{ id: 'call_z', type: 'function', function: { name: 'grep', arguments: '{"pattern":"x"}' } }],
          },
          finish_reason: 'tool_calls',
        },
      ],
      usage: { prompt_tokens: 5, completion_tokens: 7 },
    });
    expect(openai.parse(200, body)).toEqual({
      ok: true,
      value: {
        stop_reason: 'tool_call',
        content: [
          { type: 'thinking', text: 'plan' },
          { type: 'text', text: 'Calling.' },
          { type: 'tool_call', id: 'call_z', name: 'grep', input: { pattern: 'x' } },
        ],
        usage: { input_tokens: 5, output_tokens: 7 },
      },
    });
  });

  it('maps stop to end_turn, tool_calls to tool_call, length to max_tokens', () => {
    expect(openai.mapOpenAIFinishReason('stop', false)).toEqual({ ok: true, value: 'end_turn' });
    expect(openai.mapOpenAIFinishReason('tool_calls', true)).toEqual({ ok: true, value: 'tool_call' });
    expect(openai.mapOpenAIFinishReason('length', false)).toEqual({ ok: true, value: 'max_tokens' });
  });

  it('takes "stop" with tool calls as a tool call, as some servers answer', () => {
    const body = sse([
      ['', chunk({ tool_calls: [{ index: 0, id: 'call_1', function: { name: 'now', arguments: '{}' } }] })],
      ['', chunk({}, 'stop')],
      ['', '[DONE]'],
    ]);
    expect(openai.parse(200, body).value.stop_reason).toBe('tool_call');
  });

  it('ends the task at content_filter and other finish reasons, said as the model’s own ending and what it means', () => {
    const body = sse([
      ['', chunk({ content: 'Sor' })],
      ['', chunk({}, 'content_filter')],
      ['', '[DONE]'],
    ]);
    expect(openai.parse(200, body)).toEqual({
      ok: false,
      error: "the model ended its reply with finish_reason 'content_filter' (the provider's content filter withheld the reply), which ends the task",
    });
    expect(openai.mapOpenAIFinishReason('weird', false).ok).toBe(false);
  });

  it('sends an earlier empty answer back as empty content, never null without tool calls, which the API refuses', () => {
    const request = openai.buildOpenAIRequest(
      {
        model: 'm',
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'hi' }] },
          { role: 'assistant', content: [] },
          { role: 'user', content: [{ type: 'text', text: 'again' }] },
        ],
      },
      env(),
    );
    expect(request.body.messages[1]).toEqual({ role: 'assistant', content: '' });
  });

  it('takes a refusal as the model’s answer, where the task ended ok with none', () => {
    const json = JSON.stringify({
      choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: 'I cannot help with that.' }, finish_reason: 'stop' }],
    });
    expect(openai.parse(200, json).value.content).toEqual([{ type: 'text', text: 'I cannot help with that.' }]);
    const streamed = sse([
      ['', chunk({ refusal: 'I cannot ' })],
      ['', chunk({ refusal: 'help.' })],
      ['', chunk({}, 'stop')],
      ['', '[DONE]'],
    ]);
    expect(openai.parse(200, streamed).value.content).toEqual([{ type: 'text', text: 'I cannot help.' }]);
  });

  it('reads only a <think> that opens the content as reasoning: the same characters later are the answer', () => {
    expect(openai.splitThinkTags('  <think>plan</think>The answer.')).toEqual({ text: 'The answer.', thinking: 'plan' });
    const mentioned = 'Models put reasoning inside a <think> element, then answer. The answer is 42.';
    expect(openai.splitThinkTags(mentioned)).toEqual({ text: mentioned, thinking: '' });
    expect(openai.splitThinkTags('<think>a</think>b<think>c</think>')).toEqual({ text: 'b<think>c</think>', thinking: 'a' });
  });

  it('turns a truncated JSON body into a parse error', () => {
    const outcome = openai.parse(200, '{"choices":[{"message":{"content":"hel');
    expect(outcome.ok).toBe(false);
    expect(outcome.error).toMatch(/^failed to parse inference response: /);
  });

  it('turns a stream cut before the finish reason into a parse error that says the stream was cut off, inside a line or between two', () => {
    const cut = STREAM.slice(0, STREAM.indexOf('"finish_reason":"tool_calls"') - 40);
    const outcome = openai.parse(200, cut);
    expect(outcome.ok).toBe(false);
    expect(outcome.error).toMatch(/^failed to parse inference response: the stream was cut off inside its last event \(/);
    const betweenLines = STREAM.slice(0, STREAM.lastIndexOf('data: ', STREAM.indexOf('"finish_reason":"tool_calls"')));
    expect(openai.parse(200, betweenLines)).toEqual({ ok: false, error: 'failed to parse inference response: the stream ended before a finish_reason' });
  });

  it('turns tool call arguments that are not JSON into an error', () => {
    const body = sse([
      ['', chunk({ tool_calls: [{ index: 0, id: 'call_1', function: { name: 'grep', arguments: '{"pattern": ' } }] })],
      ['', chunk({}, 'tool_calls')],
      ['', '[DONE]'],
    ]);
    const outcome = openai.parse(200, body);
    expect(outcome.ok).toBe(false);
    expect(outcome.error).toMatch(/^failed to parse inference response: the input of tool call 'grep' is not valid JSON/);
  });

  it('turns an error object in the stream into an error', () => {
    const body = sse([['', { error: { message: 'model overloaded', type: 'server_error' } }]]);
    expect(openai.parse(200, body)).toEqual({ ok: false, error: 'inference error: server_error: model overloaded' });
  });

  it('turns an HTTP error status into "HTTP <code>: <body>"', () => {
    expect(openai.parse(401, '{"error":{"message":"Incorrect API key"}}')).toEqual({ ok: false, error: 'HTTP 401: {"error":{"message":"Incorrect API key"}}' });
    expect(openai.parse(429, 'y'.repeat(3000)).error).toBe(`HTTP 429: ${'y'.repeat(2000)}`);
  });
});

describe('the OpenAI-compatible driver end to end', () => {
  it('posts the mapped request and answers the wire response as a passed result', async () => {
    const { fetch, calls } = fakeFetch(200, STREAM);
    const chunks = sinks();
    const result = await openai.run(JSON.stringify({ ...basePayload, system: 'Sys' }), { getEnvironment: () => ENV, fetch, ...chunks });
    expect(calls).toHaveLength(1);
    expect(calls[0]?.url).toBe('https://api.example.test/chat/completions');
    expect(calls[0]?.init.headers.authorization).toBe('Bearer sk-test');
    expect(JSON.parse(calls[0]?.init.body ?? '').messages[0]).toEqual({ role: 'system', content: 'Sys' });
    expect(result.status).toBe('passed');
    expect(result.summary).toBeUndefined();
    expect(JSON.parse(result.data)).toMatchObject({ stop_reason: 'tool_call', usage: { input_tokens: 30, output_tokens: 12 } });
    expect(chunks.text.join('')).toBe('Checking both.');
  });

  it('answers an HTTP 401 with an error result', async () => {
    const { fetch } = fakeFetch(401, 'unauthorized');
    const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result).toEqual({
      status: 'error',
      summary: 'HTTP 401: unauthorized',
      data: JSON.stringify({ error: 'HTTP 401: unauthorized', stop_reason: 'error' }),
      dataPath: undefined,
      truncated: false,
      metadata: [],
    });
  });

  it('answers a missing endpoint with an error and makes no request', async () => {
    const { fetch, calls } = fakeFetch(200, STREAM);
    const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => [['MURMUR_INFERENCE_ENDPOINT', '  ']], fetch, ...sinks() });
    expect(result.summary).toBe('driver: missing MURMUR_INFERENCE_ENDPOINT');
    expect(calls).toHaveLength(0);
  });

  it('answers a truncated body with an error result', async () => {
    const { fetch } = fakeFetch(200, '{"content":[{"type":"text","text":"hel');
    const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.status).toBe('error');
    expect(result.summary).toMatch(/^failed to parse inference response: /);
    expect(JSON.parse(result.data).stop_reason).toBe('error');
  });

  it('answers a body that fails to arrive with an error instead of throwing', async () => {
    const fetch = async () => ({
      status: 200,
      text: async () => {
        throw new TypeError('stream reset');
      },
    });
    const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.status).toBe('error');
    expect(result.summary).toBe('failed to read inference response: stream reset');
  });

  /** Reasoning, then content that opens with a `<think>` segment, characters of two, three and four bytes. */
  const UNICODE_STREAM = sse([
    ['', chunk({ reasoning_content: 'réfléchir…' })],
    ['', chunk({ content: '<think>h€m</think>ça ' })],
    ['', chunk({ content: 'va 🚀' })],
    ['', chunk({}, 'stop')],
    ['', '[DONE]'],
  ]);

  it('reads a streamed body piece by piece, cut anywhere, to the same reply as read whole', async () => {
    const whole = openai.parse(200, UNICODE_STREAM);
    expect(whole.ok).toBe(true);
    for (const pieceBytes of [1, 2, 3, 5, 7, 64]) {
      const chunks = sinks();
      const { fetch } = streamingFetch(200, UNICODE_STREAM, pieceBytes);
      const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...chunks });
      expect(JSON.parse(result.data), `pieces of ${pieceBytes}`).toEqual(whole.value);
      expect(chunks.text.join(''), `pieces of ${pieceBytes}`).toBe('ça va 🚀');
      expect(chunks.thinking.join(''), `pieces of ${pieceBytes}`).toBe('réfléchir…h€m');
    }
  });

  it('emits content as soon as its line is complete, before the rest of the body is read', async () => {
    const log: string[] = [];
    const { fetch, pieces } = streamingFetch(200, UNICODE_STREAM, 16, log);
    await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks(log) });
    const readsBefore = (entry: string) => log.slice(0, log.indexOf(entry)).filter((line) => line.startsWith('read ')).length;
    expect(readsBefore('thinking réfléchir…')).toBeLessThan(readsBefore('text ça '));
    expect(readsBefore('text ça ')).toBeLessThan(pieces);
  });

  it('answers a non-streaming JSON reply read piece by piece as read whole', async () => {
    const body = JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'entier' }, finish_reason: 'stop' }] });
    const { fetch } = streamingFetch(200, `  ${body}`, 3);
    const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(JSON.parse(result.data)).toEqual(openai.parse(200, body).value);
  });

  it('answers a body whose read fails midway with an error instead of throwing', async () => {
    let reads = 0;
    const fetch = async () => ({
      status: 200,
      body: {
        getReader: () => ({
          read: async () => {
            if (++reads > 1) throw new TypeError('stream reset');
            return { done: false, value: new TextEncoder().encode('data: {"choices":[]}\n') };
          },
          cancel: async () => {},
        }),
      },
    });
    const result = await openai.run(JSON.stringify(basePayload), { getEnvironment: () => ENV, fetch, ...sinks() });
    expect(result.summary).toBe('failed to read inference response: stream reset');
  });
});
