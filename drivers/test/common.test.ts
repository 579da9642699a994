import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { driverSource } from '../guests.mjs';
import { COMMON_PATH, loadSources, topLevelNames } from '../load-core.mjs';
import { ENV, common, core, coreUrl, fakeFetch, sinks } from './support.js';

const DRIVERS = ['anthropic', 'openai'] as const;

const SHARED = [
  'HTTP_ERROR_BODY_LIMIT',
  'PARSE_ERROR_PREFIX',
  'ok',
  'fail',
  'isObject',
  'describeError',
  'successResult',
  'errorResult',
  'driverResult',
  'parsePayload',
  'readDriverEnv',
  'endpointUrl',
  'httpErrorMessage',
  'emitTo',
  'createSseLineSplitter',
  'sseDataLines',
  'createUtf8Decoder',
  'contentBlocks',
  'textsOf',
  'usageOf',
  'wireResponse',
  'parseToolInput',
  'createResponseReader',
  'parseResponse',
  'readResponse',
  'drive',
];

/** What a dialect holds; common.js documents the contract. */
const DIALECT_PARTS = ['buildRequest', 'jsonToWire', 'streamParser'];

const GUEST_URL = new URL('../guest.js', import.meta.url);

const lib = common();

describe('outcomes', () => {
  it('wrap a value as a success and a message as a failure', () => {
    expect(lib.ok(3)).toEqual({ ok: true, value: 3 });
    expect(lib.ok(undefined)).toStrictEqual({ ok: true, value: undefined });
    expect(lib.fail('boom')).toEqual({ ok: false, error: 'boom' });
  });

  it('count only non-null, non-list objects as objects', () => {
    expect(lib.isObject({})).toBe(true);
    expect(lib.isObject({ a: 1 })).toBe(true);
    expect(lib.isObject(null)).toBe(false);
    expect(lib.isObject([])).toBe(false);
    expect(lib.isObject('x')).toBe(false);
    expect(lib.isObject(1)).toBe(false);
    expect(lib.isObject(undefined)).toBe(false);
  });
});

describe('describing a thrown value', () => {
  it('gives an error’s message, followed by its chain of causes', () => {
    expect(lib.describeError(new Error('plain'))).toBe('plain');
    const error = new Error('outer', { cause: new Error('middle', { cause: 'root' }) });
    expect(lib.describeError(error)).toBe('outer (cause: middle (cause: root))');
  });

  it('falls back to the error’s name when its message is empty', () => {
    expect(lib.describeError(new TypeError(''))).toBe('TypeError');
  });

  it('gives a string as it is and other values as their text', () => {
    expect(lib.describeError('just text')).toBe('just text');
    expect(lib.describeError(42)).toBe('42');
    expect(lib.describeError(undefined)).toBe('undefined');
  });

  it('says "unknown error" for a value that cannot be turned into text', () => {
    expect(lib.describeError(Object.create(null))).toBe('unknown error');
    expect(
      lib.describeError({
        toString() {
          throw new Error('no');
        },
      }),
    ).toBe('unknown error');
  });
});

describe('tool-results', () => {
  it('carry a success’s wire response as JSON data with status passed', () => {
    expect(lib.successResult({ stop_reason: 'end_turn', content: [] })).toStrictEqual({
      status: 'passed',
      summary: undefined,
      data: '{"stop_reason":"end_turn","content":[]}',
      dataPath: undefined,
      truncated: false,
      metadata: [],
    });
  });

  it('carry a failure’s message as the summary and as an error stop in the data', () => {
    expect(lib.errorResult('boom')).toStrictEqual({
      status: 'error',
      summary: 'boom',
      data: '{"error":"boom","stop_reason":"error"}',
      dataPath: undefined,
      truncated: false,
      metadata: [],
    });
  });

  it('are built from an outcome by its ok flag', () => {
    const response = { stop_reason: 'end_turn', content: [{ type: 'text', text: 'hi' }] };
    expect(lib.driverResult(lib.ok(response))).toStrictEqual(lib.successResult(response));
    expect(lib.driverResult(lib.fail('nope'))).toStrictEqual(lib.errorResult('nope'));
  });
});

describe('parsing the payload', () => {
  it('accepts a JSON object with a model and gives it back whole', () => {
    const payload = { model: 'm', messages: [], tools: null, params: { temperature: 0 }, system: 's', max_tokens: 5 };
    expect(lib.parsePayload(JSON.stringify(payload))).toEqual({ ok: true, value: payload });
    expect(lib.parsePayload('{"model":"m"}')).toEqual({ ok: true, value: { model: 'm' } });
  });

  it('refuses a missing payload and one that is not JSON', () => {
    for (const data of [undefined, null, '']) {
      expect(lib.parsePayload(data)).toEqual({ ok: false, error: 'driver: bad input: no payload' });
    }
    const notJson = lib.parsePayload('{model');
    expect(notJson.ok).toBe(false);
    expect(notJson.error).toMatch(/^driver: bad input: \S/);
  });

  it('refuses a payload that is not an object or has no model', () => {
    expect(lib.parsePayload('[1]')).toEqual({ ok: false, error: 'driver: bad input: the payload is not a JSON object' });
    expect(lib.parsePayload('null')).toEqual({ ok: false, error: 'driver: bad input: the payload is not a JSON object' });
    expect(lib.parsePayload('{"messages":[]}')).toEqual({ ok: false, error: 'driver: bad input: no model' });
    expect(lib.parsePayload('{"model":""}')).toEqual({ ok: false, error: 'driver: bad input: no model' });
    expect(lib.parsePayload('{"model":7}')).toEqual({ ok: false, error: 'driver: bad input: no model' });
  });

  it('refuses messages, tools or params of the wrong shape', () => {
    expect(lib.parsePayload('{"model":"m","messages":{}}')).toEqual({ ok: false, error: 'driver: bad input: messages is not a list' });
    expect(lib.parsePayload('{"model":"m","tools":{}}')).toEqual({ ok: false, error: 'driver: bad input: tools is not a list' });
    expect(lib.parsePayload('{"model":"m","params":[]}')).toEqual({ ok: false, error: 'driver: bad input: params is not an object' });
  });
});

describe('reading the driver environment', () => {
  it("adds the API's path to the endpoint's path, before a query or a fragment, which stay as they were", () => {
    expect(lib.endpointUrl('https://x.test/v1', '/chat/completions')).toBe('https://x.test/v1/chat/completions');
    expect(lib.endpointUrl('https://x.test/?key=k', '/v1/messages')).toBe('https://x.test/v1/messages?key=k');
    expect(lib.endpointUrl('https://x.test/openai?api-version=2024-10-21', '/chat/completions')).toBe(
      'https://x.test/openai/chat/completions?api-version=2024-10-21',
    );
    expect(lib.endpointUrl('https://x.test/v1#frag', '/messages')).toBe('https://x.test/v1/messages#frag');
    // A key that ends in a slash keeps it: only the path's trailing slashes go.
    const read = lib.readDriverEnv({ MURMUR_INFERENCE_ENDPOINT: 'https://x.test/v1/?key=a/b/' });
    expect(read).toMatchObject({ ok: true, value: { endpoint: 'https://x.test/v1?key=a/b/' } });
    expect(lib.endpointUrl((read as { value: { endpoint: string } }).value.endpoint, '/messages')).toBe('https://x.test/v1/messages?key=a/b/');
  });

  it('takes the endpoint without trailing slashes, the key and the config from a list of pairs', () => {
    expect(
      lib.readDriverEnv([
        ['MURMUR_INFERENCE_ENDPOINT', ' https://x.test// '],
        ['MURMUR_INFERENCE_API_KEY', ' k '],
        ['MURMUR_INFERENCE_DRIVER_CONFIG', '{"thinking":"enabled"}'],
        ['HOME', '/'],
      ]),
    ).toEqual({ ok: true, value: { endpoint: 'https://x.test', apiKey: 'k', config: { thinking: 'enabled' } } });
  });

  it('takes an object of variables as well, with no key and an empty config when they are unset or blank', () => {
    expect(lib.readDriverEnv({ MURMUR_INFERENCE_ENDPOINT: 'http://h' })).toEqual({ ok: true, value: { endpoint: 'http://h', apiKey: undefined, config: {} } });
    expect(lib.readDriverEnv({ MURMUR_INFERENCE_ENDPOINT: 'http://h', MURMUR_INFERENCE_API_KEY: '  ', MURMUR_INFERENCE_DRIVER_CONFIG: ' ' })).toEqual({
      ok: true,
      value: { endpoint: 'http://h', apiKey: undefined, config: {} },
    });
  });

  it('ignores entries that are not name-value pairs', () => {
    const env = lib.readDriverEnv(['MURMUR_INFERENCE_ENDPOINT=http://bad', [1, 'x'], ['MURMUR_INFERENCE_ENDPOINT', 'http://good']]);
    expect(env).toEqual({ ok: true, value: { endpoint: 'http://good', apiKey: undefined, config: {} } });
  });

  it('refuses a missing or blank endpoint', () => {
    const missing = { ok: false, error: 'driver: missing MURMUR_INFERENCE_ENDPOINT' };
    expect(lib.readDriverEnv([])).toEqual(missing);
    expect(lib.readDriverEnv(undefined)).toEqual(missing);
    expect(lib.readDriverEnv([['MURMUR_INFERENCE_ENDPOINT', ' / ']])).toEqual(missing);
  });

  it('refuses a config that is not valid JSON or not a JSON object', () => {
    const notJson = lib.readDriverEnv([
      ['MURMUR_INFERENCE_ENDPOINT', 'http://h'],
      ['MURMUR_INFERENCE_DRIVER_CONFIG', 'nope'],
    ]);
    expect(notJson.ok).toBe(false);
    expect(notJson.error).toMatch(/^driver: MURMUR_INFERENCE_DRIVER_CONFIG is not valid JSON: /);
    expect(
      lib.readDriverEnv([
        ['MURMUR_INFERENCE_ENDPOINT', 'http://h'],
        ['MURMUR_INFERENCE_DRIVER_CONFIG', '[1]'],
      ]),
    ).toEqual({
      ok: false,
      error: 'driver: MURMUR_INFERENCE_DRIVER_CONFIG is not a JSON object',
    });
  });
});

describe('the HTTP error message', () => {
  it('gives the status and the body', () => {
    expect(lib.httpErrorMessage(429, 'slow down')).toBe('HTTP 429: slow down');
    expect(lib.httpErrorMessage(500, undefined)).toBe('HTTP 500: ');
  });

  it('keeps only the first 2000 characters of a long body', () => {
    const message = lib.httpErrorMessage(502, `${'a'.repeat(2000)}TAIL`);
    expect(message).toBe(`HTTP 502: ${'a'.repeat(2000)}`);
    expect(lib.HTTP_ERROR_BODY_LIMIT).toBe(2000);
  });
});

describe('emitting to a chunk sink', () => {
  it('passes non-empty text to the sink', () => {
    const seen: string[] = [];
    lib.emitTo((text: string) => seen.push(text), 'hello');
    lib.emitTo((text: string) => seen.push(text), '');
    expect(seen).toEqual(['hello']);
  });

  it('does nothing without a sink and swallows the sink’s failures', () => {
    expect(() => lib.emitTo(undefined, 'x')).not.toThrow();
    expect(() =>
      lib.emitTo(() => {
        throw new Error('observer down');
      }, 'x'),
    ).not.toThrow();
  });
});

describe('splitting an SSE body', () => {
  it('yields each data line with the event name in force, across CRLF, CR and LF line ends', () => {
    const body = ': keep-alive\r\nevent: a\r\ndata: {"x":1}\r\n\r\ndata:{"y":2}\n\nevent: b\ndata: 1\rdata: 2\n';
    expect(lib.sseDataLines(body)).toEqual([
      { event: 'a', data: '{"x":1}' },
      { event: '', data: '{"y":2}' },
      { event: 'b', data: '1' },
      { event: 'b', data: '2' },
    ]);
  });

  it('strips one space after the colon, takes a bare field as empty, and skips other fields', () => {
    const body = 'id: 7\nretry: 100\ndata:  two spaces\ndata\nevent\ndata: x\n';
    expect(lib.sseDataLines(body)).toEqual([
      { event: '', data: ' two spaces' },
      { event: '', data: '' },
      { event: '', data: 'x' },
    ]);
  });

  it('yields nothing for an empty body', () => {
    expect(lib.sseDataLines('')).toEqual([]);
    expect(lib.sseDataLines('\n\n: only a comment\n')).toEqual([]);
  });

  it('yields the same lines from a body pushed in pieces cut anywhere, a CRLF cut in two included', () => {
    const body = ': keep-alive\r\nevent: a\r\ndata: {"x":1}\r\n\r\ndata:{"y":2}\n\nevent: b\ndata: 1\rdata: 2\r\n\r\ndata: last';
    const whole = lib.sseDataLines(body);
    // The body ended inside its last line: handed over marked as such.
    expect(whole.at(-1)).toEqual({ event: '', data: 'last', unended: true });
    for (let cut = 0; cut <= body.length; cut += 1) {
      for (const size of [1, 3]) {
        const lines: unknown[] = [];
        const splitter = lib.createSseLineSplitter((line: unknown) => void lines.push(line));
        splitter.push(body.slice(0, cut));
        for (let at = cut; at < body.length; at += size) splitter.push(body.slice(at, at + size));
        splitter.finish();
        expect(lines, `cut at ${cut}, then pieces of ${size}`).toEqual(whole);
      }
    }
  });

  it('hands each line over as soon as it is complete, and stops at the first line answered with a value', () => {
    const lines: string[] = [];
    const splitter = lib.createSseLineSplitter(({ data }: { data: string }) => {
      lines.push(data);
      return data === 'stop' ? 'stopped' : undefined;
    });
    expect(splitter.push('data: one\nda')).toBeUndefined();
    expect(lines).toEqual(['one']);
    expect(splitter.push('ta: stop\ndata: never\n')).toBe('stopped');
    expect(splitter.push('data: after\n')).toBe('stopped');
    expect(splitter.finish()).toBe('stopped');
    expect(lines).toEqual(['one', 'stop']);
  });
});

describe('decoding UTF-8 as it arrives', () => {
  it('holds a character cut in two until its last byte, wherever the pieces are cut', () => {
    const text = 'a é € 😀 z';
    const bytes = new TextEncoder().encode(text);
    for (let first = 0; first <= bytes.length; first += 1) {
      for (let second = first; second <= bytes.length; second += 1) {
        const decoder = lib.createUtf8Decoder();
        const parts = [decoder.push(bytes.slice(0, first)), decoder.push(bytes.slice(first, second)), decoder.push(bytes.slice(second)), decoder.finish()];
        expect(parts.join(''), `cut at ${first} and ${second}`).toBe(text);
        expect(parts.join('')).not.toContain('\uFFFD');
      }
    }
  });

  it('decodes what can never be completed as U+FFFD, as TextDecoder does', () => {
    const decoder = lib.createUtf8Decoder();
    expect(decoder.push(new Uint8Array([0x61, 0xe2, 0x82]))).toBe('a');
    expect(decoder.finish()).toBe(new TextDecoder().decode(new Uint8Array([0xe2, 0x82])));
    expect(lib.createUtf8Decoder().push(new Uint8Array([0xff, 0x62]))).toBe('\uFFFDb');
  });
});

describe('wire message content', () => {
  it('is a list of blocks, a plain string being one text block', () => {
    expect(lib.contentBlocks('hi')).toEqual([{ type: 'text', text: 'hi' }]);
    expect(lib.contentBlocks([{ type: 'text', text: 'a' }, 'stray', null, [1], { type: 'tool_call', id: 'c' }])).toEqual([
      { type: 'text', text: 'a' },
      { type: 'tool_call', id: 'c' },
    ]);
    expect(lib.contentBlocks(undefined)).toEqual([]);
    expect(lib.contentBlocks({ type: 'text', text: 'not a list' })).toEqual([]);
  });

  it('gives the texts of its text blocks only', () => {
    const content = [
      { type: 'text', text: 'one' },
      { type: 'thinking', text: 'hidden' },
      { type: 'text', text: 2 },
      { type: 'text', text: '' },
      { type: 'text', text: 'two' },
    ];
    expect(lib.textsOf(content)).toEqual(['one', '', 'two']);
    expect(lib.textsOf('plain')).toEqual(['plain']);
  });
});

describe('the wire response', () => {
  it('reports usage with a missing count left out, for the host to estimate, and no usage when neither count is a number', () => {
    expect(lib.usageOf(10, 5)).toEqual({ input_tokens: 10, output_tokens: 5 });
    expect(lib.usageOf(10, undefined)).toEqual({ input_tokens: 10 });
    expect(lib.usageOf('10', 5)).toEqual({ output_tokens: 5 });
    expect(lib.usageOf(undefined, null)).toBeUndefined();
  });

  it('carries the stop reason and content, and usage only when there is some', () => {
    const content = [{ type: 'text', text: 'hi' }];
    expect(lib.wireResponse('end_turn', content, { input_tokens: 1, output_tokens: 2 })).toStrictEqual({
      stop_reason: 'end_turn',
      content,
      usage: { input_tokens: 1, output_tokens: 2 },
    });
    expect(lib.wireResponse('max_tokens', [], undefined)).toStrictEqual({ stop_reason: 'max_tokens', content: [] });
  });
});

describe('parsing a tool call’s input', () => {
  it('takes a JSON object, and empty input as {}', () => {
    expect(lib.parseToolInput('{"path":"a.txt"}', 't', 'tool_call')).toEqual({ ok: true, value: { path: 'a.txt' } });
    expect(lib.parseToolInput('  ', 't', 'tool_call')).toEqual({ ok: true, value: {} });
  });

  it('refuses input that is not valid JSON or not a JSON object, naming the tool', () => {
    const broken = lib.parseToolInput('{"a":', 'read_file', 'tool_call');
    expect(broken.ok).toBe(false);
    expect(broken.error).toMatch(/^failed to parse inference response: the input of tool call 'read_file' is not valid JSON: /);
    expect(lib.parseToolInput('[1]', 't', 'tool_call')).toEqual({
      ok: false,
      error: "failed to parse inference response: the input of tool call 't' is not a JSON object",
    });
    expect(lib.PARSE_ERROR_PREFIX).toBe('failed to parse inference response: ');
  });

  it('drops an unparsable input when the reply was cut at max_tokens', () => {
    expect(lib.parseToolInput('{"a":', 't', 'max_tokens')).toEqual({ ok: true, value: undefined });
    expect(lib.parseToolInput('"half', 't', 'max_tokens')).toEqual({ ok: true, value: undefined });
    expect(lib.parseToolInput('[1]', 't', 'max_tokens')).toEqual({ ok: true, value: undefined });
  });
});

describe('parsing a response in a dialect', () => {
  /** A dialect whose converter and stream parser record what they were given. */
  function recording() {
    const seen: unknown[][] = [];
    const dialect = {
      buildRequest: () => {
        throw new Error('not used');
      },
      jsonToWire: (value: unknown) => {
        seen.push(['json', value]);
        return lib.ok({ from: 'json' });
      },
      streamParser: (...sinks: unknown[]) => {
        seen.push(['parser', ...sinks]);
        return {
          line: (line: unknown) => {
            seen.push(['line', line]);
            return undefined;
          },
          finish: () => {
            seen.push(['finish']);
            return lib.ok({ from: 'stream' });
          },
        };
      },
    };
    return { dialect, seen };
  }

  it('hands a JSON object body, parsed, to the dialect’s converter', () => {
    const { dialect, seen } = recording();
    expect(lib.parseResponse(200, '  {"a":1}\n', undefined, undefined, dialect)).toEqual({ ok: true, value: { from: 'json' } });
    expect(seen).toEqual([['json', { a: 1 }]]);
  });

  it('hands any other body’s data lines to a stream parser made with the chunk sinks, then asks it to finish', () => {
    const { dialect, seen } = recording();
    const onText = () => {};
    const onThinking = () => {};
    expect(lib.parseResponse(200, '\nevent: e\ndata: {}\n', onText, onThinking, dialect)).toEqual({ ok: true, value: { from: 'stream' } });
    expect(seen).toEqual([['parser', onText, onThinking], ['line', { event: 'e', data: '{}' }], ['finish']]);
  });

  it('hands a streamed body’s lines over as they arrive, after its first character that is not white space', () => {
    const { dialect, seen } = recording();
    const reader = lib.createResponseReader(200, undefined, undefined, dialect);
    expect(reader.push(' \n')).toBeUndefined();
    expect(seen).toEqual([]);
    expect(reader.push('data: 1\nda')).toBeUndefined();
    expect(seen).toEqual([
      ['parser', undefined, undefined],
      ['line', { event: '', data: '1' }],
    ]);
    expect(reader.push('ta: 2')).toBeUndefined();
    expect(reader.finish()).toEqual({ ok: true, value: { from: 'stream' } });
    expect(seen.slice(2)).toEqual([['line', { event: '', data: '2' }], ['finish']]);
  });

  it('says a body that is neither JSON nor an event stream is that, by how it begins, not a stream cut short', () => {
    const { dialect, seen } = recording();
    // Its first 40 characters: the page's, the bare value, a compressed body's bytes as they decoded.
    for (const [body, head] of [
      ['<html><body>Please log in to the proxy</body></html>', '<html><body>Please log in to the proxy</'],
      ['null', 'null'],
      ['\u001f\ufffd\b\u0000compressed', '\u001f\ufffd\b\u0000compressed'],
    ]) {
      expect(lib.parseResponse(200, body, undefined, undefined, dialect)).toEqual({
        ok: false,
        error: `failed to parse inference response: the body is neither a JSON object nor an event stream: it begins ${JSON.stringify(head)}`,
      });
    }
    // An event stream's comment alone is one: it is read to its end as a stream.
    expect(lib.parseResponse(200, ': keep-alive\n', undefined, undefined, dialect)).toEqual({ ok: true, value: { from: 'stream' } });
    expect(seen.filter(([what]) => what === 'line')).toEqual([]);
  });

  it('answers an HTTP error status, an empty body and a broken JSON body itself', () => {
    const { dialect, seen } = recording();
    expect(lib.parseResponse(429, '{"a":1}', undefined, undefined, dialect)).toEqual({ ok: false, error: 'HTTP 429: {"a":1}' });
    expect(lib.parseResponse(503, undefined, undefined, undefined, dialect)).toEqual({ ok: false, error: 'HTTP 503: ' });
    expect(lib.parseResponse(500, 'data: x\n', undefined, undefined, dialect)).toEqual({ ok: false, error: 'HTTP 500: data: x\n' });
    expect(lib.parseResponse(200, ' \n', undefined, undefined, dialect)).toEqual({ ok: false, error: 'failed to parse inference response: empty body' });
    expect(lib.parseResponse(200, null, undefined, undefined, dialect)).toEqual({ ok: false, error: 'failed to parse inference response: empty body' });
    const broken = lib.parseResponse(200, '{"a":', undefined, undefined, dialect);
    expect(broken.ok).toBe(false);
    expect(broken.error).toMatch(/^failed to parse inference response: \S/);
    expect(seen).toEqual([]);
  });
});

describe('driving a dialect', () => {
  const payload = JSON.stringify({ model: 'm', messages: [] });

  /** A dialect that asks for `<endpoint>/chat` with the model and reads a JSON reply's `text`. */
  const echo = {
    buildRequest: (request: { model: string }, env: { endpoint: string; apiKey?: string }) => ({
      url: `${env.endpoint}/chat`,
      headers: { key: env.apiKey ?? '' },
      body: { model: request.model },
    }),
    jsonToWire: (value: { text: string }) => lib.ok(lib.wireResponse('end_turn', [{ type: 'text', text: value.text }], undefined)),
    streamParser: (onText: (text: string) => void) => ({
      line: ({ data }: { data: string }) => void lib.emitTo(onText, `streamed ${data}`),
      finish: () => lib.ok(lib.wireResponse('end_turn', [], undefined)),
    }),
  };

  it('posts the dialect’s request, serialised, and answers its wire response as a passed result', async () => {
    const { fetch, calls } = fakeFetch(200, '{"text":"hi"}');
    const result = await lib.drive(payload, { getEnvironment: () => ENV, fetch, ...sinks() }, echo);
    expect(calls).toEqual([{ url: 'https://api.example.test/chat', init: { method: 'POST', headers: { key: 'sk-test' }, body: '{"model":"m"}' } }]);
    expect(result).toStrictEqual(lib.successResult({ stop_reason: 'end_turn', content: [{ type: 'text', text: 'hi' }] }));
  });

  it('passes the host’s chunk sinks to the dialect’s stream parser', async () => {
    const { fetch } = fakeFetch(200, 'data: x\n');
    const chunks = sinks();
    expect((await lib.drive(payload, { getEnvironment: () => ENV, fetch, ...chunks }, echo)).status).toBe('passed');
    expect(chunks.text).toEqual(['streamed x']);
  });

  it('answers a bad payload or environment with an error and makes no request', async () => {
    const { fetch, calls } = fakeFetch(200, '{"text":"hi"}');
    expect((await lib.drive(undefined, { getEnvironment: () => ENV, fetch }, echo)).summary).toBe('driver: bad input: no payload');
    expect((await lib.drive(payload, { getEnvironment: () => [], fetch }, echo)).summary).toBe('driver: missing MURMUR_INFERENCE_ENDPOINT');
    expect(calls).toHaveLength(0);
  });

  it('answers a request the dialect cannot build with the thrown message as it is', async () => {
    const { fetch, calls } = fakeFetch(200, '{"text":"hi"}');
    const refusing = {
      ...echo,
      buildRequest: () => {
        throw new Error("driver: unsupported message role 'x'");
      },
    };
    expect((await lib.drive(payload, { getEnvironment: () => ENV, fetch }, refusing)).summary).toBe("driver: unsupported message role 'x'");
    expect(calls).toHaveLength(0);
  });

  it('answers a failed request, an unreadable body and an HTTP error with errors instead of throwing', async () => {
    const host = (fetch: unknown) => ({ getEnvironment: () => ENV, fetch });
    const down = async () => {
      throw new TypeError('offline');
    };
    expect((await lib.drive(payload, host(down), echo)).summary).toBe('inference request failed: offline');
    const unreadable = async () => ({
      status: 200,
      text: async () => {
        throw new Error('reset');
      },
    });
    expect((await lib.drive(payload, host(unreadable), echo)).summary).toBe('failed to read inference response: reset');
    expect((await lib.drive(payload, host(fakeFetch(500, 'oops').fetch), echo)).summary).toBe('HTTP 500: oops');
  });

  it('answers anything else that throws with a driver error', async () => {
    const host = {
      getEnvironment: () => {
        throw new Error('no environment');
      },
    };
    expect((await lib.drive(payload, host, echo)).summary).toBe('driver: no environment');
  });
});

describe('common.js and the drivers', () => {
  const commonSource = readFileSync(COMMON_PATH, 'utf8');
  const coreSource = (driver: (typeof DRIVERS)[number]) => readFileSync(coreUrl(driver), 'utf8');

  it('common.js declares every shared helper, each once', () => {
    const names = topLevelNames(commonSource);
    expect(names).toEqual(expect.arrayContaining(SHARED));
    expect(new Set(names).size).toBe(names.length);
  });

  it('no core.js redeclares a name common.js declares, nor its own names twice', () => {
    const shared = new Set(topLevelNames(commonSource));
    for (const driver of DRIVERS) {
      const names = topLevelNames(coreSource(driver));
      expect(
        names.filter((name) => shared.has(name)),
        driver,
      ).toEqual([]);
      expect(new Set(names).size, driver).toBe(names.length);
    }
  });

  it('neither common.js nor a core.js uses import or export', () => {
    for (const text of [commonSource, ...DRIVERS.map(coreSource)]) expect(text).not.toMatch(/^\s*(import|export)\s/m);
  });

  it('a driver’s core is loaded after common.js, so it has the shared helpers and its own dialect', () => {
    for (const driver of DRIVERS) {
      const loaded = core(driver);
      for (const name of SHARED) expect(loaded[name], `${driver}: ${name}`).toBeDefined();
      expect(Object.keys(loaded.DIALECT), driver).toEqual(DIALECT_PARTS);
      for (const part of DIALECT_PARTS) expect(typeof loaded.DIALECT[part], `${driver}: ${part}`).toBe('function');
      expect(loaded.parsePayload('{"model":"m"}')).toEqual({ ok: true, value: { model: 'm' } });
    }
  });

  it('each core.js declares DIALECT and neither drives nor parses a response itself', () => {
    for (const driver of DRIVERS) {
      const names = topLevelNames(coreSource(driver));
      expect(names, driver).toContain('DIALECT');
      expect(
        names.filter((name) => /^drive|Response$/.test(name)),
        driver,
      ).toEqual([]);
    }
  });

  it('a driver’s component source is common.js, then its core.js, then the one shared guest.js', () => {
    const guest = readFileSync(GUEST_URL, 'utf8');
    for (const driver of DRIVERS) {
      expect(driverSource(driver)).toBe(`${commonSource}\n${coreSource(driver)}\n${guest}`);
      expect(existsSync(new URL(`../murmur-driver-${driver}/guest.js`, import.meta.url)), driver).toBe(false);
    }
  });

  it('the shared guest.js imports the host, exports run and hands drive the driver’s DIALECT', () => {
    const guest = readFileSync(GUEST_URL, 'utf8');
    expect(guest).toMatch(/^import \{ getEnvironment \} from 'wasi:cli\/environment@0\.2\.12';$/m);
    expect(guest).toMatch(/^import \{ emitChunk, emitThinkingChunk \} from 'murmur:text\/chunks@0\.1\.0';$/m);
    expect(guest).toMatch(/^export const run = \{$/m);
    expect(guest).toMatch(/return await drive\(\s*input\?\.data,[\s\S]*DIALECT,\s*\);/);
    expect(topLevelNames(guest)).toEqual([]);
  });

  it('loading refuses sources that declare a name twice, as the one module the build makes would', () => {
    const dir = mkdtempSync(join(tmpdir(), 'murmur-load-core-'));
    try {
      const first = join(dir, 'first.js');
      const second = join(dir, 'second.js');
      writeFileSync(first, 'function ok(value) {\n  return value;\n}\n');
      writeFileSync(second, 'function ok(value) {\n  return !value;\n}\nconst other = 1;\n');
      expect(() => loadSources([first, second])).toThrow('declared more than once at top level: ok');
      expect(Object.keys(loadSources([second]))).toEqual(['ok', 'other']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
