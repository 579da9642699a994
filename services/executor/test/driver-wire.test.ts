import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type DriverRequest,
  driverFailure,
  driverRequestData,
  estimateTokens,
  readDriverReply,
  toolResultMessage,
  userMessage,
} from '../src/host/driver-wire.js';
import { countTokens } from '../src/host/contracts.js';
import type { HostTool } from '../src/host/protocol.js';
import { shellToolDescription } from '../src/host/subprocess.js';
import { toolInventory } from '../src/host/tool-inventory.js';
import { tempDir } from '../../../test/support/fs.js';

function passed(reply: unknown): { status: string; data: string } {
  return { status: 'passed', data: JSON.stringify(reply) };
}

describe('the request a driver receives', () => {
  const request: DriverRequest = {
    model: 'claude-test',
    maxTokens: 1024,
    messages: [
      userMessage('hi'),
      { role: 'assistant', content: [{ type: 'tool_call', id: 'c1', name: 'ls', input: {} }] },
      toolResultMessage('c1', 'a.txt', false),
    ],
    tools: [{ name: 'ls', parameters: { type: 'object', properties: {} }, description: 'list' }],
    system: 'be brief',
    params: { temperature: 0 },
  };

  it('writes upstream’s keys in alphabetical order', () => {
    const data = driverRequestData(request);
    expect(Object.keys(JSON.parse(data) as object)).toEqual(['max_tokens', 'messages', 'model', 'params', 'system', 'tools']);
    expect(data.startsWith('{"max_tokens":1024,"messages":[')).toBe(true);
  });

  it('carries the request’s values unchanged', () => {
    expect(JSON.parse(driverRequestData(request))).toEqual({
      max_tokens: 1024,
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
        { role: 'assistant', content: [{ type: 'tool_call', id: 'c1', name: 'ls', input: {} }] },
        { role: 'tool', tool_call_id: 'c1', is_error: false, content: [{ type: 'text', text: 'a.txt' }] },
      ],
      model: 'claude-test',
      params: { temperature: 0 },
      system: 'be brief',
      tools: [{ name: 'ls', parameters: { type: 'object', properties: {} }, description: 'list' }],
    });
  });

  it('sends empty params when the request has none', () => {
    const { params: _params, ...withoutParams } = request;
    expect((JSON.parse(driverRequestData(withoutParams)) as { params: unknown }).params).toEqual({});
  });

  it('puts continuation_id first, in alphabetical order, only when there is one', () => {
    const data = driverRequestData({ ...request, continuationId: 'cont-7' });
    expect(Object.keys(JSON.parse(data) as object)).toEqual(['continuation_id', 'max_tokens', 'messages', 'model', 'params', 'system', 'tools']);
    expect((JSON.parse(data) as { continuation_id: string }).continuation_id).toBe('cont-7');
    expect(driverRequestData(request)).not.toContain('continuation_id');
  });

  it('marks a failed tool result as an error in the tool message', () => {
    expect(toolResultMessage('c9', 'denied', true)).toEqual({ role: 'tool', tool_call_id: 'c9', is_error: true, content: [{ type: 'text', text: 'denied' }] });
  });
});

describe('reading a driver’s reply', () => {
  it('reads end_turn as the end, joining its text blocks as they were streamed (citations split one sentence into several)', () => {
    const content = [
      { type: 'thinking', thinking: 'hmm' },
      { type: 'text', text: 'first' },
      { type: 'text', text: 'second' },
    ];
    expect(readDriverReply(passed({ stop_reason: 'end_turn', content }))).toEqual({ kind: 'end', stopReason: 'end_turn', text: 'firstsecond', content });
  });

  it('reads max_tokens as the end too, keeping the stop reason', () => {
    const reply = readDriverReply(passed({ stop_reason: 'max_tokens', content: [{ type: 'text', text: 'cut of' }] }));
    expect(reply).toMatchObject({ kind: 'end', stopReason: 'max_tokens', text: 'cut of' });
  });

  it('drops content entries that are not blocks with a string type', () => {
    const reply = readDriverReply(
      passed({
        stop_reason: 'end_turn',
        content: [null, 'text', 7, { text: 'no type' }, { type: 3 }, { type: 'text', text: 'kept' }, { type: 'text', text: 42 }],
      }),
    );
    expect(reply).toEqual({
      kind: 'end',
      stopReason: 'end_turn',
      text: 'kept',
      content: [
        { type: 'text', text: 'kept' },
        { type: 'text', text: 42 },
      ],
    });
  });

  it('reads an end with no content as empty text', () => {
    expect(readDriverReply(passed({ stop_reason: 'end_turn' }))).toEqual({ kind: 'end', stopReason: 'end_turn', text: '', content: [] });
  });

  it('reads tool_call as the calls to make, in order, with the blocks kept verbatim', () => {
    const content = [
      { type: 'text', text: 'let me look' },
      { type: 'tool_call', id: 'call_1', name: 'read', input: { path: 'a' } },
      { type: 'tool_call', id: 'call_2', name: 'ls', input: {} },
    ];
    expect(readDriverReply(passed({ stop_reason: 'tool_call', content }))).toEqual({
      kind: 'tools',
      calls: [
        { id: 'call_1', name: 'read', input: { path: 'a' } },
        { id: 'call_2', name: 'ls', input: {} },
      ],
      content,
    });
  });

  it('fills a tool call’s missing id and name with empty strings and a non-object input with {}', () => {
    const reply = readDriverReply(
      passed({
        stop_reason: 'tool_call',
        content: [
          { type: 'tool_call', input: [1, 2] },
          { type: 'tool_call', id: 5, name: null, input: 'x' },
        ],
      }),
    );
    expect(reply.kind === 'tools' ? reply.calls : undefined).toEqual([
      { id: '', name: '', input: {} },
      { id: '', name: '', input: {} },
    ]);
  });

  it('fails a tool_call reply that has no tool_call blocks', () => {
    expect(readDriverReply(passed({ stop_reason: 'tool_call', content: [{ type: 'text', text: 'I would call a tool' }] }))).toEqual({
      kind: 'error',
      message: 'response stop_reason=tool_call but no tool_call blocks were present',
      decision: 'tool_call',
    });
  });

  it('reads stop_reason error as a failure with the driver’s message', () => {
    expect(readDriverReply(passed({ stop_reason: 'error', content: [], error: 'rate limited' }))).toEqual({
      kind: 'error',
      message: 'rate limited',
      decision: 'text',
    });
  });

  it('reads stop_reason error without a message as a generic driver error', () => {
    expect(readDriverReply(passed({ stop_reason: 'error' }))).toEqual({ kind: 'error', message: 'driver returned error', decision: 'text' });
    expect(readDriverReply(passed({ stop_reason: 'error', error: '' }))).toEqual({ kind: 'error', message: 'driver returned error', decision: 'text' });
    expect(readDriverReply(passed({ stop_reason: 'error', error: { code: 1 } }))).toEqual({
      kind: 'error',
      message: 'driver returned error',
      decision: 'text',
    });
  });

  it('fails an unsupported or missing stop_reason, naming it', () => {
    expect(readDriverReply(passed({ stop_reason: 'stop_sequence', content: [] }))).toEqual({
      kind: 'error',
      message: "unsupported stop_reason 'stop_sequence'",
      decision: 'text',
    });
    expect(readDriverReply(passed({ content: [] }))).toEqual({ kind: 'error', message: "unsupported stop_reason 'undefined'", decision: 'text' });
  });

  it('fails a reply that is not JSON', () => {
    const reply = readDriverReply({ status: 'passed', data: '{not json' });
    expect(reply.kind).toBe('error');
    expect(reply.kind === 'error' ? reply.message : '').toMatch(/^failed to parse driver response: /);
    expect(reply.kind === 'error' ? reply.decision : 'x').toBeNull();
  });

  it.each([['null'], ['[]'], ['"end_turn"'], ['42'], ['true']])('fails a reply whose JSON %s is not an object', (data) => {
    expect(readDriverReply({ status: 'passed', data })).toEqual({
      kind: 'error',
      message: 'failed to parse driver response: not a JSON object',
      decision: null,
    });
  });

  it('fails a call whose status is not passed, with its data, else its summary, else a generic message', () => {
    expect(readDriverReply({ status: 'failed', data: 'the data says why', summary: 'summary' })).toEqual({
      kind: 'error',
      message: 'the data says why',
      decision: null,
    });
    expect(readDriverReply({ status: 'error', summary: 'only a summary' })).toEqual({ kind: 'error', message: 'only a summary', decision: null });
    expect(readDriverReply({ status: 'failed' })).toEqual({ kind: 'error', message: 'driver returned error', decision: null });
  });

  it('gives the error of a failed call whose data is the wire error reply, not the line of JSON', () => {
    const data = JSON.stringify({ error: 'inference request failed: NetworkError', stop_reason: 'error' });
    expect(readDriverReply({ status: 'error', data, summary: 'inference request failed: NetworkError' })).toEqual({
      kind: 'error',
      message: 'inference request failed: NetworkError',
      decision: null,
    });
    // Data that is JSON of another shape, or an error with no words, is still given as it is.
    const other = JSON.stringify({ stop_reason: 'error', error: '' });
    expect(readDriverReply({ status: 'failed', data: other })).toMatchObject({ kind: 'error', message: other });
  });

  it('does not read a good-looking reply when the status is not passed', () => {
    expect(readDriverReply({ status: 'failed', data: JSON.stringify({ stop_reason: 'end_turn', content: [] }) }).kind).toBe('error');
  });

  it('reads the summary as the reply when data is missing', () => {
    const reply = readDriverReply({
      status: 'passed',
      summary: JSON.stringify({ stop_reason: 'end_turn', content: [{ type: 'text', text: 'from summary' }] }),
    });
    expect(reply).toMatchObject({ kind: 'end', text: 'from summary' });
  });

  it('prefers data over summary when both are present', () => {
    const reply = readDriverReply({
      status: 'passed',
      data: JSON.stringify({ stop_reason: 'end_turn', content: [{ type: 'text', text: 'from data' }] }),
      summary: JSON.stringify({ stop_reason: 'end_turn', content: [{ type: 'text', text: 'from summary' }] }),
    });
    expect(reply).toMatchObject({ kind: 'end', text: 'from data' });
  });

  it('fails a passed call with neither data nor summary', () => {
    expect(readDriverReply({ status: 'passed' })).toEqual({ kind: 'error', message: 'driver returned no data', decision: null });
  });

  it('passes the driver’s token usage through on ends and tool calls', () => {
    const usage = { input_tokens: 120, output_tokens: 7 };
    expect(readDriverReply(passed({ stop_reason: 'end_turn', content: [], usage }))).toMatchObject({ kind: 'end', usage });
    expect(readDriverReply(passed({ stop_reason: 'tool_call', content: [{ type: 'tool_call', id: 'a', name: 'b', input: {} }], usage }))).toMatchObject({
      kind: 'tools',
      usage,
    });
  });

  it('takes only counts that are whole, not negative and exact: any other is left to the estimate', () => {
    const end = (usage: unknown) => readDriverReply(passed({ stop_reason: 'end_turn', content: [], usage }));
    expect(end({ input_tokens: '56', output_tokens: 1.5 })).not.toHaveProperty('usage');
    expect(end({ input_tokens: -1_000, output_tokens: 2 ** 60 })).not.toHaveProperty('usage');
    expect(end({ input_tokens: 12, output_tokens: '7' })).toMatchObject({ usage: { input_tokens: 12 } });
    expect(end({ input_tokens: 12, output_tokens: '7' })).not.toHaveProperty('usage.output_tokens');
  });

  it('keeps no tool call in an ending turn: a reply cut at max_tokens ran none of the calls it carried', () => {
    const reply = readDriverReply(
      passed({
        stop_reason: 'max_tokens',
        content: [
          { type: 'text', text: 'let me check' },
          { type: 'tool_call', id: 'c9', name: 'bash', input: {} },
        ],
      }),
    );
    expect(reply).toMatchObject({ kind: 'end', text: 'let me check', content: [{ type: 'text', text: 'let me check' }] });
    expect(reply.kind === 'end' ? reply.content : undefined).toHaveLength(1);
  });

  it('leaves usage out when the driver reports none or not an object', () => {
    expect(readDriverReply(passed({ stop_reason: 'end_turn', content: [] }))).not.toHaveProperty('usage');
    expect(readDriverReply(passed({ stop_reason: 'end_turn', content: [], usage: null }))).not.toHaveProperty('usage');
    expect(readDriverReply(passed({ stop_reason: 'end_turn', content: [], usage: 12 }))).not.toHaveProperty('usage');
  });
});

describe('estimating tokens', () => {
  it('counts a quarter of the UTF-8 bytes, rounded up', () => {
    expect(estimateTokens('')).toBe(0);
    expect(estimateTokens('abcd')).toBe(1);
    expect(estimateTokens('abcde')).toBe(2);
    expect(estimateTokens('a'.repeat(400))).toBe(100);
  });

  it('counts bytes, not characters', () => {
    expect(estimateTokens('é')).toBe(1);
    expect(estimateTokens('éé')).toBe(1);
    expect(estimateTokens('ééé')).toBe(2);
    expect(estimateTokens('😀😀')).toBe(2);
  });
});

function hostTool(name: string, overrides: Partial<Omit<HostTool, 'info'>> & { info?: Partial<HostTool['info']> } = {}): HostTool {
  const { info, ...rest } = overrides;
  return {
    name,
    version: '1.0.0',
    kind: 'wasm',
    preopen: `/tools/${name}`,
    runtime: 'wasm',
    ...rest,
    info: { description: `${name} does things`, tags: [], ...info },
  };
}

describe('the tools the model is offered', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };

  beforeEach(async () => {
    scratch = await tempDir('murmur-tool-inventory-');
  });

  afterEach(async () => {
    await scratch.cleanup();
  });

  it('lists every tool sorted by name', () => {
    const tools = toolInventory([hostTool('zeta'), hostTool('alpha'), hostTool('Mid'), hostTool('beta')], [], undefined);
    expect(tools.map((tool) => tool.name)).toEqual(['Mid', 'alpha', 'beta', 'zeta']);
  });

  it('leaves out the skill that is the system prompt', () => {
    const tools = toolInventory([hostTool('persona', { kind: 'skill', runtime: 'native' }), hostTool('search')], [], 'persona');
    expect(tools.map((tool) => tool.name)).toEqual(['search']);
  });

  it('offers a tool its manifest’s input_schema, parsed', () => {
    const schema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] };
    const [tool] = toolInventory([hostTool('read', { info: { input_schema: JSON.stringify(schema) } })], [], undefined);
    expect(tool).toEqual({ name: 'read', parameters: schema, description: 'read does things' });
  });

  it.each([['{not json'], ['null'], ['[1,2]'], ['"object"'], ['7']])('offers an empty object schema when input_schema %s is not an object', (inputSchema) => {
    const [tool] = toolInventory([hostTool('broken', { info: { input_schema: inputSchema } })], [], undefined);
    expect(tool?.parameters).toEqual({ type: 'object', properties: {} });
  });

  it('offers an empty object schema when a tool declares none', () => {
    const [tool] = toolInventory([hostTool('plain')], [], undefined);
    expect(tool?.parameters).toEqual({ type: 'object', properties: {} });
  });

  it('offers a skill an empty schema even when it declares one', () => {
    const [tool] = toolInventory(
      [hostTool('guide', { kind: 'skill', runtime: 'native', info: { input_schema: '{"type":"object","properties":{"x":{}}}' } })],
      [],
      undefined,
    );
    expect(tool?.parameters).toEqual({ type: 'object', properties: {} });
  });

  it('trims a declared description', () => {
    const [tool] = toolInventory([hostTool('t', { info: { description: '  spaced out \n' } })], [], undefined);
    expect(tool?.description).toBe('spaced out');
  });

  it('describes a skill without a description by the first non-empty line of its skill.md', () => {
    const skillFile = path.join(scratch.dir, 'skill.md');
    writeFileSync(skillFile, '\n   \n  Summarise a document in three bullet points.  \nMore detail here.\n');
    const [tool] = toolInventory([hostTool('summarise', { kind: 'skill', runtime: 'native', path: skillFile, info: { description: '' } })], [], undefined);
    expect(tool).toEqual({ name: 'summarise', parameters: { type: 'object', properties: {} }, description: 'Summarise a document in three bullet points.' });
  });

  it('prefers a skill’s declared description over its skill.md', () => {
    const skillFile = path.join(scratch.dir, 'skill.md');
    writeFileSync(skillFile, 'From the file\n');
    const [tool] = toolInventory([hostTool('s', { kind: 'skill', runtime: 'native', path: skillFile, info: { description: 'Declared' } })], [], undefined);
    expect(tool?.description).toBe('Declared');
  });

  it('gives no description when a skill has none and its skill.md is missing or blank', () => {
    const blank = path.join(scratch.dir, 'blank.md');
    writeFileSync(blank, '\n  \n\t\n');
    const tools = toolInventory(
      [
        hostTool('missing', { kind: 'skill', runtime: 'native', path: path.join(scratch.dir, 'nope.md'), info: { description: '' } }),
        hostTool('blank', { kind: 'skill', runtime: 'native', path: blank, info: { description: '   ' } }),
      ],
      [],
      undefined,
    );
    expect(tools).toEqual([
      { name: 'blank', parameters: { type: 'object', properties: {} } },
      { name: 'missing', parameters: { type: 'object', properties: {} } },
    ]);
  });

  it('does not read a file for a tool that is not a skill', () => {
    const file = path.join(scratch.dir, 'tool.md');
    writeFileSync(file, 'Not a description\n');
    const [tool] = toolInventory([hostTool('native-tool', { kind: 'native', runtime: 'native', path: file, info: { description: '' } })], [], undefined);
    expect(tool).not.toHaveProperty('description');
  });

  it('adds each shell binary with upstream’s description and a command schema', () => {
    const tools = toolInventory([hostTool('grep_tool')], ['curl', 'bash'], undefined);
    expect(tools.map((tool) => tool.name)).toEqual(['bash', 'curl', 'grep_tool']);
    const command = { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] };
    expect(tools[0]).toEqual({ name: 'bash', parameters: command, description: shellToolDescription('bash') });
    expect(tools[1]).toEqual({ name: 'curl', parameters: command, description: shellToolDescription('curl') });
    expect(tools[0]?.description).toBe('Run a shell command via bash in the capsule workdir. The `command` field is passed to bash via -c.');
    expect(tools[1]?.description).toContain('omit the binary name itself');
  });

  it('keeps an installed tool over a shell binary of the same name, and lists a binary once', () => {
    const tools = toolInventory([hostTool('jq', { info: { description: 'the jq tool' } })], ['jq', 'sed', 'sed'], undefined);
    expect(tools.map((tool) => tool.name)).toEqual(['jq', 'sed']);
    expect(tools[0]?.description).toBe('the jq tool');
  });

  it('offers nothing when there are no tools and no shell', () => {
    expect(toolInventory([], [], undefined)).toEqual([]);
  });
});

describe('a driver failure as the run reports it', () => {
  it('adds the URL and the reason of the request that got no answer, with a hint at inference.endpoint', () => {
    const failed = driverFailure('inference request failed: NetworkError\n', {
      url: 'http://127.0.0.1:9/v1/messages',
      code: 'connection-refused',
      reason: 'connection refused',
    });
    expect(failed.message).toBe('inference request failed: NetworkError (http://127.0.0.1:9/v1/messages: connection refused)');
    expect(failed.error).toEqual({
      code: 'E-RUN-007',
      message: `agent loop failed: ${failed.message}`,
      hint: 'check that inference.endpoint in murmur.yaml names a model server that is up and reachable from this machine',
      path: 'inference.endpoint',
    });
  });

  it.each([
    [
      'the policy refused the request',
      'inference request failed: NetworkError',
      'HTTP-request-denied',
      "network policy: '127.0.0.1:8080' not in capabilities.network.allow",
      'capabilities.network.allow',
      'capabilities.network.allow',
    ],
    [
      'the reply broke off past the size a response may hold',
      'failed to read inference response: IO error reading from incoming response body',
      'HTTP-response-body-size',
      'the response is larger than 67108864 bytes',
      'inference.endpoint',
      'ask it for a shorter reply (max_tokens)',
    ],
    [
      'the endpoint redirected, which is never followed',
      'failed to parse inference response: empty body',
      'HTTP-redirect',
      'answered 307, a redirect to http://127.0.0.1:8080/v2/messages, which is not followed',
      'inference.endpoint',
      'a redirect is never followed for a capsule',
    ],
  ])('says why and what to change when %s', (_when, said, code, reason, path, hint) => {
    const failed = driverFailure(said, { url: 'http://127.0.0.1:8080/v1/messages', code, reason });
    expect(failed.message).toBe(`${said} (http://127.0.0.1:8080/v1/messages: ${reason})`);
    expect(failed.error).toMatchObject({ code: 'E-RUN-007', path, hint: expect.stringContaining(hint) });
  });

  it('points at capabilities.limits.memory_bytes when the driver ran out of memory, not at the endpoint', () => {
    const failed = driverFailure('driver: out of memory', undefined);
    expect(failed.error).toMatchObject({ code: 'E-RUN-007', path: 'capabilities.limits.memory_bytes' });
    expect(failed.error.hint).toContain('raise that limit in murmur.yaml');
  });

  it.each([
    ['HTTP 429: {"type":"error","error":{"type":"rate_limit_error"}}', 'inference', "limiting this key's rate (HTTP 429): run again once its limit has passed"],
    ['HTTP 529: {"type":"error","error":{"type":"overloaded_error"}}', 'inference.endpoint', 'overloaded or down for now (HTTP 529): run again later'],
    ['HTTP 503: Service Unavailable', 'inference.endpoint', 'overloaded or down for now (HTTP 503)'],
    ['HTTP 401: {"error":"invalid x-api-key"}', 'inference.api_key', 'refused the key (HTTP 401): check inference.api_key'],
    ['HTTP 500: {"type":"error","error":{"type":"api_error"}}', 'inference.endpoint', 'failed on its side for now: run again later'],
    ['inference error: overloaded_error: Overloaded', 'inference.endpoint', 'failed on its side for now: run again later'],
    ['inference error: server_error: The server had an error', 'inference.endpoint', 'failed on its side for now: run again later'],
    [
      "the model ended its reply with stop_reason 'refusal' (it refused to answer), which ends the task",
      'inference',
      "the model's reply ended the task, not a setting: rephrase the task",
    ],
    [
      'failed to parse inference response: the stream was cut off inside its last event (Unterminated string in JSON at position 95; its last line ended "…")',
      'inference.endpoint',
      'closed its stream before its reply was whole',
    ],
    ['failed to parse inference response: the stream ended before the stop reason', 'inference.endpoint', 'closed its stream before its reply was whole'],
  ])("says what the provider's status means rather than to check the settings: %s", (said, path, hint) => {
    const failed = driverFailure(said, undefined);
    expect(failed.message).toBe(said);
    expect(failed.error).toMatchObject({ code: 'E-RUN-007', path, hint: expect.stringContaining(hint) });
  });

  it("keeps the driver's words alone when every request was answered (a provider's own refusal)", () => {
    const failed = driverFailure('anthropic: 401 invalid x-api-key', undefined);
    expect(failed.message).toBe('anthropic: 401 invalid x-api-key');
    expect(failed.error).toMatchObject({ code: 'E-RUN-007', message: 'agent loop failed: anthropic: 401 invalid x-api-key', path: 'inference' });
  });
});

describe("a session's token totals", () => {
  it('add up what each turn reported, and stop at the largest safe integer rather than state a sum it cannot hold', () => {
    const totals = { turns: 0, inputTokens: 0, outputTokens: 0, toolCalls: 0, shellCalls: 0 };
    countTokens(totals, 12, 3);
    countTokens(totals, 30, 4);
    expect(totals).toMatchObject({ inputTokens: 42, outputTokens: 7 });
    // What a provider may report for one turn: each a safe integer, their sum not.
    countTokens(totals, Number.MAX_SAFE_INTEGER, 1);
    countTokens(totals, Number.MAX_SAFE_INTEGER, 1);
    expect(totals).toMatchObject({ inputTokens: Number.MAX_SAFE_INTEGER, outputTokens: 9 });
  });
});
