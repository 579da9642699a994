import {
  type A2aMessage,
  ListTasksParamsSchema,
  SendParamsV03Schema,
  SendParamsV10Schema,
  a2aVersionOf,
  fromProtoJson,
  isSafeContextId,
  messageText,
  unreadablePart,
} from '@murmur/shared';
import { describe, expect, it } from 'vitest';
import { describeInvalidParams, isJsonMediaType, readJsonRpc, rpcError, rpcResult } from '../src/json-rpc.js';

/** The error response of a body that is not a usable request. */
function refusal(body: string): { id: unknown; code: number; message: string } {
  const read = readJsonRpc(body);
  if (read.ok) throw new Error(`expected a refusal, got ${JSON.stringify(read.call)}`);
  const error = read.response.error as { code: number; message: string };
  expect(read.response.jsonrpc).toBe('2.0');
  return { id: read.response.id, code: error.code, message: error.message };
}

describe('reading a JSON-RPC request', () => {
  it('reads a request’s id, method and params', () => {
    expect(readJsonRpc(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'message/send', params: { message: {} } }))).toEqual({
      ok: true,
      call: { id: 3, method: 'message/send', params: { message: {} } },
    });
  });

  it('reads missing params as an empty object', () => {
    expect(readJsonRpc('{"jsonrpc":"2.0","id":null,"method":"tasks/get"}')).toEqual({ ok: true, call: { id: null, method: 'tasks/get', params: {} } });
  });

  it('refuses a request without an id (a notification) as an invalid request, and runs nothing', () => {
    const { id, code, message } = refusal('{"jsonrpc":"2.0","method":"message/send","params":{"message":{}}}');
    expect({ id, code }).toEqual({ id: null, code: -32600 });
    expect(message).toContain('the request has no "id"');
  });

  it.each([
    ['{"jsonrpc":"2.0","id":{"a":1},"method":"tasks/get"}', '"id" must be a string, a number or null (got object)'],
    ['{"jsonrpc":"2.0","id":true,"method":"tasks/get"}', '"id" must be a string, a number or null (got boolean)'],
    ['{"jsonrpc":"2.0","id":[1],"method":"tasks/get"}', '"id" must be a string, a number or null (got an array)'],
    [`{"jsonrpc":"2.0","id":"${'x'.repeat(300)}","method":"tasks/get"}`, '"id" is a string of 300 characters; at most 256 are read'],
  ])('names the id when it is what makes %s invalid', (body, why) => {
    expect(refusal(body)).toEqual({ id: null, code: -32600, message: `Invalid Request: ${why}` });
  });

  it('names the method, not a good id, when the method is what is too long', () => {
    expect(refusal(`{"jsonrpc":"2.0","id":"abc","method":"${'m'.repeat(200)}"}`)).toEqual({
      id: 'abc',
      code: -32600,
      message: 'Invalid Request: "method" is 200 characters long; no method has more than 128',
    });
  });

  it('keeps a string id', () => {
    const read = readJsonRpc('{"jsonrpc":"2.0","id":"req-1","method":"GetTask","params":{"id":"tsk_1"}}');
    expect(read.ok && read.call.id).toBe('req-1');
  });

  it('refuses an integer id too large to answer with the same number, and keeps the largest that is', () => {
    const { id, code, message } = refusal('{"jsonrpc":"2.0","id":12345678901234567890123,"method":"GetTask","params":{}}');
    expect([id, code]).toEqual([null, -32600]);
    expect(message).toContain('send it as a string');
    const overflowing = refusal('{"jsonrpc":"2.0","id":1e400,"method":"GetTask","params":{}}');
    expect([overflowing.id, overflowing.code, overflowing.message]).toEqual([
      null,
      -32600,
      'Invalid Request: "id" is a number past what a double holds; send it as a string',
    ]);
    const largest = readJsonRpc(`{"jsonrpc":"2.0","id":${Number.MAX_SAFE_INTEGER},"method":"GetTask","params":{}}`);
    expect(largest.ok && largest.call.id).toBe(Number.MAX_SAFE_INTEGER);
  });

  it.each([['not json'], ['{"jsonrpc":"2.0",'], [''], ['{"jsonrpc":"2.0","id":5,"method":"x"']])(
    'answers the body %j with a parse error and id null',
    (body) => {
      const { id, code, message } = refusal(body);
      expect(code).toBe(-32700);
      expect(id).toBeNull();
      expect(message).toContain('Parse error');
    },
  );

  it('refuses a batch as an invalid request with id null', () => {
    const { id, code, message } = refusal(JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'message/send' }]));
    expect(code).toBe(-32600);
    expect(id).toBeNull();
    expect(message).toContain('batch requests are not supported');
  });

  it('refuses a request without jsonrpc, keeping its id', () => {
    const { id, code, message } = refusal('{"id":5,"method":"message/send"}');
    expect(code).toBe(-32600);
    expect(id).toBe(5);
    expect(message).toContain('"jsonrpc": "2.0"');
  });

  it('refuses a request with the wrong jsonrpc version, keeping its id', () => {
    expect(refusal('{"jsonrpc":"1.0","id":"a","method":"message/send"}')).toMatchObject({ code: -32600, id: 'a' });
  });

  it('refuses a request without a method, keeping its id', () => {
    expect(refusal('{"jsonrpc":"2.0","id":"abc"}')).toMatchObject({ code: -32600, id: 'abc' });
    expect(refusal('{"jsonrpc":"2.0","id":9,"method":""}')).toMatchObject({ code: -32600, id: 9 });
    expect(refusal('{"jsonrpc":"2.0","id":9,"method":42}')).toMatchObject({ code: -32600, id: 9 });
  });

  it('answers an invalid request with id null when its id is not usable', () => {
    expect(refusal('{"id":{"nested":true},"method":"x"}')).toMatchObject({ code: -32600, id: null });
    expect(refusal('{"id":[1],"method":"x"}')).toMatchObject({ code: -32600, id: null });
    expect(refusal(JSON.stringify({ id: 'x'.repeat(257), method: 'x' }))).toMatchObject({ code: -32600, id: null });
    expect(refusal('{"method":"x"}')).toMatchObject({ code: -32600, id: null });
  });

  it.each([['null'], ['"message/send"'], ['42'], ['true']])('refuses the JSON value %s as an invalid request with id null', (body) => {
    expect(refusal(body)).toMatchObject({ code: -32600, id: null });
  });

  it('writes results and errors as JSON-RPC 2.0 envelopes', () => {
    expect(rpcResult(1, { ok: true })).toEqual({ jsonrpc: '2.0', id: 1, result: { ok: true } });
    expect(rpcError('x', { code: -32602, message: 'Invalid params' })).toEqual({ jsonrpc: '2.0', id: 'x', error: { code: -32602, message: 'Invalid params' } });
  });

  it('details an A2A error as 1.0 does, an ErrorInfo naming its type, which 0.3 takes as any data', () => {
    expect(rpcError('x', { code: -32001, message: 'Task not found' })).toEqual({
      jsonrpc: '2.0',
      id: 'x',
      error: {
        code: -32001,
        message: 'Task not found',
        data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'TASK_NOT_FOUND', domain: 'a2a-protocol.org' }],
      },
    });
    expect((rpcError(1, { code: -32009, message: 'Unsupported A2A version' }).error as { data: unknown }).data).toEqual([
      { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'VERSION_NOT_SUPPORTED', domain: 'a2a-protocol.org' },
    ]);
  });

  it("details murmur's own code as an ErrorInfo of the murmur domain, keeping the code itself", () => {
    expect(rpcError(null, { code: -32600, message: 'Unauthorized', data: { murmur_code: 'E-DOOR-003' } }).error).toEqual({
      code: -32600,
      message: 'Unauthorized',
      data: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'E_DOOR_003', domain: 'murmur', metadata: { murmur_code: 'E-DOOR-003' } }],
    });
  });
});

describe('the content type of a request', () => {
  it('is JSON when its media type is application/json or a +json type, whatever its parameters and case', () => {
    for (const type of ['application/json', 'Application/JSON; charset=utf-8', ' application/json ;x=y', 'application/a2a+json'])
      expect(isJsonMediaType(type), type).toBe(true);
  });

  it('is not JSON when JSON is only mentioned: a parameter, another type, or nothing', () => {
    for (const type of ['text/plain;charset=application/json', 'text/html; x=application/json', 'application/jsonx', 'text/json', 'application/+json', ''])
      expect(isJsonMediaType(type), type).toBe(false);
  });
});

describe('1.0 params as ProtoJSON writes them', () => {
  it('are read by their proto names as well as their JSON names, nested fields included', () => {
    expect(fromProtoJson({ context_id: 'c', page_size: 2, include_artifacts: true, status_timestamp_after: 't' })).toEqual({
      contextId: 'c',
      pageSize: 2,
      includeArtifacts: true,
      statusTimestampAfter: 't',
    });
    expect(fromProtoJson({ message: { message_id: 'm', parts: [{ text: 'x', media_type: 'text/plain' }] }, configuration: { history_length: 0 } })).toEqual({
      message: { messageId: 'm', parts: [{ text: 'x', mediaType: 'text/plain' }] },
      configuration: { historyLength: 0 },
    });
  });

  it('take an int32 written as a string of digits, and nothing else as one', () => {
    expect(fromProtoJson({ pageSize: '1', history_length: '5' })).toEqual({ pageSize: 1, historyLength: 5 });
    expect(fromProtoJson({ pageSize: 'one', historyLength: '1.5' })).toEqual({ pageSize: 'one', historyLength: '1.5' });
  });

  it('keep the JSON name’s value when a field comes under both names, and a Struct’s keys as the client wrote them', () => {
    expect(fromProtoJson({ contextId: 'json', context_id: 'proto' })).toEqual({ contextId: 'json' });
    expect(fromProtoJson({ metadata: { trace_id: 'a' }, message: { parts: [{ data: { snake_key: 1 } }] } })).toEqual({
      metadata: { trace_id: 'a' },
      message: { parts: [{ data: { snake_key: 1 } }] },
    });
  });
});

describe('describing invalid params', () => {
  it('names where the first issue is and what was wrong', () => {
    expect(
      describeInvalidParams([
        { path: ['message', 'parts', 0, 'text'], message: 'expected string' },
        { path: ['other'], message: 'ignored' },
      ]),
    ).toBe('Invalid params: message.parts.0.text: expected string');
  });

  it('names a top-level field by itself', () => {
    expect(describeInvalidParams([{ path: ['message'], message: 'Required' }])).toBe('Invalid params: message: Required');
  });

  it('says params when the issue is at the top', () => {
    expect(describeInvalidParams([{ path: [], message: 'expected object' }])).toBe('Invalid params: params: expected object');
  });

  it('says only Invalid params when there is no issue', () => {
    expect(describeInvalidParams([])).toBe('Invalid params');
  });

  it('describes a real schema failure by its path', () => {
    const parsed = SendParamsV03Schema.safeParse({ message: { parts: [] } });
    expect(parsed.success).toBe(false);
    expect(describeInvalidParams(parsed.error?.issues ?? [])).toMatch(/^Invalid params: message\.messageId: /);
  });
});

describe('the A2A generation of a request', () => {
  it.each([[undefined], [''], ['   ']])('is 0.3 when the header is %j', (header) => {
    expect(a2aVersionOf(header)).toBe('0.3');
  });

  // Major.Minor is negotiated; a patch number never is (the spec's rule).
  it.each([['0.3'], ['0.3.0'], [' 0.3 '], ['0.3.1'], ['0.3.12']])('is 0.3 for %j', (header) => {
    expect(a2aVersionOf(header)).toBe('0.3');
  });

  it.each([['1.0'], ['1'], ['1.0.0'], [' 1.0\t'], ['1.0.1']])('is 1.0 for %j', (header) => {
    expect(a2aVersionOf(header)).toBe('1.0');
  });

  it.each([['0.2'], ['0.3.1.4'], ['2.0'], ['v1'], ['1.1'], ['1.1.0'], ['latest'], ['1.0,0.3'], ['1.'], ['.3']])('is unsupported for %j', (header) => {
    expect(a2aVersionOf(header)).toBeUndefined();
  });
});

describe('0.3 send params', () => {
  const message = { messageId: 'msg-1', role: 'user', parts: [{ kind: 'text', text: 'hi' }] };

  it('accepts the message under message, with its configuration', () => {
    const parsed = SendParamsV03Schema.parse({ message, configuration: { blocking: false, historyLength: 2 } });
    expect(parsed.message.messageId).toBe('msg-1');
    expect(parsed.configuration).toEqual({ blocking: false, historyLength: 2 });
  });

  it('accepts the message as the params themselves, as upstream does', () => {
    const parsed = SendParamsV03Schema.parse(message);
    expect(parsed.message).toEqual(message);
    expect(messageText(parsed.message)).toBe('hi');
  });

  it('accepts params that are a message with only parts, and then asks for its messageId', () => {
    const parsed = SendParamsV03Schema.safeParse({ parts: [{ kind: 'text', text: 'x' }] });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.path).toEqual(['message', 'messageId']);
  });

  it('keeps unknown fields of the message', () => {
    const parsed = SendParamsV03Schema.parse({ message: { ...message, metadata: { a: 1 }, kind: 'message' } });
    expect((parsed.message as Record<string, unknown>).metadata).toEqual({ a: 1 });
  });

  it('refuses params that carry no message at all', () => {
    expect(SendParamsV03Schema.safeParse({}).success).toBe(false);
    expect(SendParamsV03Schema.safeParse({ configuration: { blocking: true } }).success).toBe(false);
    expect(SendParamsV03Schema.safeParse(null).success).toBe(false);
    expect(SendParamsV03Schema.safeParse('hi').success).toBe(false);
  });

  it('refuses a message with an empty messageId or parts that are not a list', () => {
    expect(SendParamsV03Schema.safeParse({ message: { ...message, messageId: '' } }).success).toBe(false);
    expect(SendParamsV03Schema.safeParse({ message: { messageId: 'm', parts: 'hi' } }).success).toBe(false);
  });

  it('refuses a negative historyLength', () => {
    expect(SendParamsV03Schema.safeParse({ message, configuration: { historyLength: -1 } }).success).toBe(false);
  });

  it("takes the user's role as either generation spells it, or none, and refuses one neither has, naming the field", () => {
    for (const role of ['user', 'ROLE_USER', 'ROLE_UNSPECIFIED', 1, 0, undefined])
      expect(SendParamsV10Schema.safeParse({ message: { ...message, role } }).success, String(role)).toBe(true);
    for (const role of ['ROLE_BOGUS', 'User', '', 3, true]) {
      const parsed = SendParamsV03Schema.safeParse({ message: { ...message, role } });
      expect(parsed.success, String(role)).toBe(false);
      expect(parsed.error?.issues[0]?.path).toEqual(['message', 'role']);
    }
  });

  it("refuses a client's message written as the agent's, which would stand in the history as words the agent never said", () => {
    for (const role of ['agent', 'ROLE_AGENT', 2]) {
      const parsed = SendParamsV10Schema.safeParse({ message: { ...message, role } });
      expect(parsed.success, String(role)).toBe(false);
      expect(parsed.error?.issues[0]?.path).toEqual(['message', 'role']);
      expect(parsed.error?.issues[0]?.message).toBe(
        `a client's message is the user's (role 'user', ROLE_USER); ${JSON.stringify(role)} is the agent's own role`,
      );
    }
  });
});

describe('ListTasks params', () => {
  it("takes the drafts' lastUpdatedAfter in milliseconds since the epoch, as a number or ProtoJSON's string, as well as a time", () => {
    expect(ListTasksParamsSchema.parse({ lastUpdatedAfter: 1_700_000_000_000 }).lastUpdatedAfter).toBe(1_700_000_000_000);
    expect(ListTasksParamsSchema.parse({ lastUpdatedAfter: '1700000000000' }).lastUpdatedAfter).toBe(1_700_000_000_000);
    expect(ListTasksParamsSchema.parse({ lastUpdatedAfter: '2026-01-01T00:00:00Z' }).lastUpdatedAfter).toBe('2026-01-01T00:00:00Z');
    for (const bad of [-1, 1.5, 1e300, 'yesterday', '17000000000000000000'])
      expect(ListTasksParamsSchema.safeParse({ lastUpdatedAfter: bad }).success, String(bad)).toBe(false);
  });
});

describe('the text of a message', () => {
  function messageOf(parts: A2aMessage['parts']): A2aMessage {
    return { messageId: 'm', parts };
  }

  it('joins the text parts with newlines', () => {
    expect(
      messageText(
        messageOf([
          { kind: 'text', text: 'first' },
          { kind: 'text', text: 'second' },
        ]),
      ),
    ).toBe('first\nsecond');
  });

  it('reads 1.0’s bare text parts too', () => {
    expect(messageText(messageOf([{ text: 'one' }, { text: 'two' }]))).toBe('one\ntwo');
  });

  it('skips parts that carry no text', () => {
    const parts = [{ kind: 'file', file: { uri: 'file:///x' } }, { kind: 'text', text: 'only this' }, { kind: 'data', data: { a: 1 } }, { url: 'https://x' }];
    expect(messageText(messageOf(parts))).toBe('only this');
  });

  it('is empty for a message without text', () => {
    expect(messageText(messageOf([]))).toBe('');
    expect(messageText(messageOf([{ kind: 'data', data: {} }]))).toBe('');
  });

  it('names the first part that is not text, in either generation, and nothing when every part is text', () => {
    expect(unreadablePart(messageOf([{ kind: 'text', text: 'a' }, { text: 'b' }, { text: '', metadata: { x: 1 } }]))).toBeUndefined();
    const unsupported = (what: string) => ({ kind: 'unsupported', what });
    expect(
      unreadablePart(
        messageOf([
          { kind: 'text', text: 'a' },
          { kind: 'file', file: { uri: 'file:///x' } },
        ]),
      ),
    ).toEqual(unsupported('message.parts[1] is a file part'));
    expect(unreadablePart(messageOf([{ url: 'https://x', mediaType: 'image/png' }]))).toEqual(unsupported('message.parts[0] is a url part'));
    expect(unreadablePart(messageOf([{ raw: 'AAEC' }]))).toEqual(unsupported('message.parts[0] is a raw part'));
    expect(unreadablePart(messageOf([{ data: { a: 1 } }]))).toEqual(unsupported('message.parts[0] is a data part'));
    // A 0.3 part of another kind that also carries text is still that kind.
    expect(unreadablePart(messageOf([{ kind: 'data', text: 'x', data: {} }]))).toEqual(unsupported('message.parts[0] is a data part'));
  });

  it('calls a part that is no part invalid: no content, a text part without text, or text beside a payload that would be dropped', () => {
    const invalid = (what: string) => ({ kind: 'invalid', what });
    expect(unreadablePart(messageOf([{ metadata: {} }]))).toEqual(invalid('message.parts[0] has no content (text, url, raw, data or file)'));
    expect(unreadablePart(messageOf([{ kind: 'text' }]))).toEqual(invalid('message.parts[0] is a text part without its text'));
    expect(unreadablePart(messageOf([{ text: 'hi', url: 'http://example.com/secret.pdf', mediaType: 'application/pdf' }]))).toEqual(
      invalid('message.parts[0] holds text and a url; a part holds one kind of content'),
    );
    expect(unreadablePart(messageOf([{ text: 'ok' }, { kind: 'text', text: 'hi', raw: 'aGk=' }]))).toEqual(
      invalid('message.parts[1] holds text and a raw; a part holds one kind of content'),
    );
    // A payload written as null is none: a serializer that keeps unset fields sends a text part.
    expect(unreadablePart(messageOf([{ text: 'hi', url: null, raw: null }]))).toBeUndefined();
  });

  it('keeps empty text parts as empty lines', () => {
    expect(messageText(messageOf([{ text: 'a' }, { text: '' }, { text: 'b' }]))).toBe('a\n\nb');
  });
});

describe('a client-chosen context id', () => {
  it.each([['ctx_0192f1c2a3b47c8d9e0f112233445566'], ['thread-1'], ['a.b_c-d'], ['X'], ['9lives'], ['v1.2'], ['a'.repeat(128)]])('accepts %j', (id) => {
    expect(isSafeContextId(id)).toBe(true);
  });

  it.each([
    ['a/b'],
    ['/abs'],
    ['..'],
    ['.'],
    [''],
    ['.hidden'],
    ['a..b'],
    ['a'.repeat(129)],
    ['with space'],
    [' lead'],
    ['trail\n'],
    ['café'],
    ['日本'],
    ['a\\b'],
    ['-flag'],
    ['_under'],
    ['a:b'],
    ['a\0b'],
  ])('refuses %j', (id) => {
    expect(isSafeContextId(id)).toBe(false);
  });
});
