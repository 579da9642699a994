import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChannelTrace, TRACE_LINE_MAX_CHARS } from '../src/host/channel-trace.js';
import { TraceWriter } from '../src/records.js';
import { tempDir } from '../../../test/support/fs.js';

let dir: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('murmur-channel-trace-'));
});

afterEach(async () => {
  await cleanup();
});

async function lines(): Promise<Array<Record<string, unknown>>> {
  const text = await fs.readFile(path.join(dir, 'trace.jsonl'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('the host’s trace, written by the executor alone', () => {
  it('reaches trace.jsonl as the record the host made, in order, one line each', async () => {
    const writer = new TraceWriter(dir, 'ses_1');
    const trace = new ChannelTrace('ses_1', (line) => writer.appendHostLine(line));
    trace.write('tool_call', { tool_name: 'read', status: 'ok' });
    trace.write('inference', { turn: 1, text: 'two\nlines' });
    expect((await lines()).map((record) => [record.event_type, record.session_id])).toEqual([
      ['tool_call', 'ses_1'],
      ['inference', 'ses_1'],
    ]);
    expect((await lines())[1]?.text).toBe('two\nlines');
  });

  it('writes no line that is not one whole record, nor one only the executor writes: an array, no event type, a time that is no time, two lines, an egress decision, another session’s start', async () => {
    const writer = new TraceWriter(dir, 'ses_1');
    for (const line of [
      JSON.stringify([{ event_type: 'x', session_id: 'ses_1', timestamp: 1 }]),
      JSON.stringify({ session_id: 'ses_1', timestamp: 1 }),
      JSON.stringify({ event_type: 'x', session_id: 'ses_1', timestamp: 'now' }),
      // A time no clock reads: JSON's 1e309 is Infinity once parsed.
      '{"event_type":"x","session_id":"ses_1","timestamp":1e309}',
      // One object whose tokens a raw newline separates: valid JSON, and two lines in the file.
      '{"event_type":"a","session_id":"ses_1",\n"timestamp":1}',
      // What only the executor decides, and another session's start.
      JSON.stringify({ event_type: 'egress', session_id: 'ses_1', timestamp: 1, decision: 'allowed' }),
      JSON.stringify({ event_type: 'resource_limit', session_id: 'ses_1', timestamp: 1 }),
      JSON.stringify({ event_type: 'session_start', session_id: 'ses_other', timestamp: 1 }),
      'not json',
    ]) {
      expect(writer.appendHostLine(line), line).toBeUndefined();
    }
    expect(await lines()).toEqual([]);
  });

  it('sends a record too long for one message with its long strings cut, every other field kept', () => {
    const sent: string[] = [];
    new ChannelTrace('ses_1', (line) => sent.push(line)).write('tool_call', {
      tool_name: 'read',
      status: 'ok',
      duration_ms: 4,
      input: 'x'.repeat(TRACE_LINE_MAX_CHARS),
    });
    expect(sent[0]?.length).toBeLessThanOrEqual(TRACE_LINE_MAX_CHARS);
    const record = JSON.parse(sent[0] as string) as Record<string, unknown>;
    expect(record).toMatchObject({ event_type: 'tool_call', session_id: 'ses_1', tool_name: 'read', status: 'ok', duration_ms: 4 });
    expect(record.input).toMatch(/more characters cut: too long for the trace\]$/);
  });

  it('fits a record of many long strings, each under the first cut, and keeps a record even when its strings are all short', () => {
    const sent: string[] = [];
    const trace = new ChannelTrace('ses_1', (line) => sent.push(line));
    trace.write('tool_call', { tool_name: 'read', status: 'ok', input: { parts: Array.from({ length: 40 }, () => 'y'.repeat(250_000)) } });
    trace.write('tool_call', { tool_name: 'list', status: 'ok', input: { names: Array.from({ length: 400_000 }, (_, n) => `name-${n}`) } });
    expect(sent).toHaveLength(2);
    for (const line of sent) expect(line.length).toBeLessThanOrEqual(TRACE_LINE_MAX_CHARS);
    const [many, short] = sent.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(many).toMatchObject({ event_type: 'tool_call', tool_name: 'read', status: 'ok' });
    expect(JSON.stringify(many?.input)).toContain('more characters cut: too long for the trace');
    expect(short).toEqual({
      event_type: 'tool_call',
      session_id: 'ses_1',
      timestamp: expect.any(Number),
      tool_name: 'list',
      status: 'ok',
      trace_cut: 'fields left out, too large for the trace: input',
    });
  });

  it('keeps the harness’s session id a harness record names, which is not the session’s', async () => {
    const writer = new TraceWriter(dir, 'ses_1');
    new ChannelTrace('ses_1', (line) => writer.appendHostLine(line)).write('harness_session_forgotten', { session_id: 'harness-uuid' });
    expect((await lines())[0]).toMatchObject({ event_type: 'harness_session_forgotten', session_id: 'harness-uuid' });
  });
});
