import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LogFile, TraceWriter } from '../src/records.js';

/**
 * The executor's records of a session, written from outside its sandbox into the workdir the
 * guest writes: what cannot be written is dropped and said once, whatever the reason, and never
 * thrown into the executor's event handlers, where it would end every session on it.
 */
describe("a session's records, written from outside its sandbox", () => {
  let root: string;
  let refusals: Array<{ file: string; message: string }>;
  const outside = () => ({ root, refused: (file: string, error: Error) => void refusals.push({ file, message: error.message }) });

  beforeEach(() => {
    root = mkdtempSync(path.join(os.tmpdir(), 'murmur-records-'));
    refusals = [];
  });

  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('are written beneath the root as the host writes them', () => {
    const log = new LogFile(root, 'host.log', outside());
    log.line('one');
    log.raw('two\n');
    const trace = new TraceWriter(root, 'ses_1', undefined, outside());
    trace.write('egress', { decision: 'allowed' });
    trace.close();
    trace.write('egress', { decision: 'denied' });
    expect(readFileSync(path.join(root, 'logs', 'host.log'), 'utf8')).toBe('one\ntwo\n');
    expect(readFileSync(path.join(root, 'trace.jsonl'), 'utf8').trim().split('\n')).toHaveLength(2);
    expect(refusals).toEqual([]);
  });

  it('a held log keeps the file its first line opened, and once closed follows no link the guest put in its place', () => {
    const log = new LogFile(root, 'bootstrap.log', outside(), { held: true });
    log.line('one');
    const file = path.join(root, 'logs', 'bootstrap.log');
    const planted = path.join(root, '..', `planted-${path.basename(root)}`);
    try {
      // While held, lines go to the file the first line opened: the guest moving it aside does
      // not make the executor open a name it planted.
      renameSync(file, path.join(root, 'logs', 'moved.log'));
      symlinkSync(planted, file);
      log.line('two');
      expect(readFileSync(path.join(root, 'logs', 'moved.log'), 'utf8')).toBe('one\ntwo\n');
      // Closed, the next line opens the name again, and refuses the link there.
      log.close();
      log.line('three');
      expect(refusals).toHaveLength(1);
      expect(refusals[0]?.message).toContain('is a link, a FIFO or a directory');
      expect(existsSync(planted)).toBe(false);
    } finally {
      rmSync(planted, { force: true });
    }
  });

  it('a log that is not held opens its file for every line', () => {
    const log = new LogFile(root, 'host.log', outside());
    log.line('one');
    const file = path.join(root, 'logs', 'host.log');
    renameSync(file, path.join(root, 'logs', 'moved.log'));
    log.line('two');
    expect(readFileSync(file, 'utf8')).toBe('two\n');
  });

  it("read the last session_end's totals for the end the executor writes, taking only whole numbers, never through a link", () => {
    const trace = new TraceWriter(root, 'ses_1', undefined, outside());
    const zeros = { total_turns: 0, total_input_tokens: 0, total_output_tokens: 0, total_tool_calls: 0, total_shell_calls: 0 };
    expect(trace.lastTotals(), 'no trace yet').toEqual(zeros);
    const file = path.join(root, 'trace.jsonl');
    const end = (fields: Record<string, unknown>) => `${JSON.stringify({ event_type: 'session_end', session_id: 'ses_1', timestamp: 1, ...fields })}\n`;
    appendFileSync(file, end({ total_turns: 1, total_input_tokens: 10, total_output_tokens: 5, total_tool_calls: 0, total_shell_calls: 0 }));
    appendFileSync(file, end({ total_turns: 3, total_input_tokens: 40, total_output_tokens: 20, total_tool_calls: 2, total_shell_calls: 1 }));
    appendFileSync(file, '{"event_type":"inference","turn":3}\n{"not json\n');
    expect(trace.lastTotals()).toEqual({ total_turns: 3, total_input_tokens: 40, total_output_tokens: 20, total_tool_calls: 2, total_shell_calls: 1 });
    // What the guest wrote in its own workdir: nothing but a whole, non-negative number is taken.
    appendFileSync(file, end({ total_turns: -4, total_input_tokens: 1.5, total_output_tokens: '9', total_tool_calls: 1e300, total_shell_calls: 2 }));
    expect(trace.lastTotals()).toEqual({ ...zeros, total_shell_calls: 2 });
    // A trace the guest replaced with a link is not followed.
    const elsewhere = path.join(root, '..', `elsewhere-${path.basename(root)}.jsonl`);
    writeFileSync(elsewhere, end({ total_turns: 99, total_input_tokens: 99, total_output_tokens: 99, total_tool_calls: 99, total_shell_calls: 99 }));
    try {
      rmSync(file);
      symlinkSync(elsewhere, file);
      expect(trace.lastTotals()).toEqual(zeros);
    } finally {
      rmSync(elsewhere, { force: true });
    }
  });

  it('drop a record whose file is a link, saying so once, and write nothing where it leads', () => {
    mkdirSync(path.join(root, 'logs'));
    symlinkSync(path.join(root, '..', 'planted-by-the-guest'), path.join(root, 'logs', 'bootstrap.log'));
    const log = new LogFile(root, 'bootstrap.log', outside());
    expect(() => {
      log.line('[bootstrap] session ended: ok');
      log.line('again');
    }).not.toThrow();
    expect(refusals).toHaveLength(1);
    expect(refusals[0]?.message).toContain('is a link, a FIFO or a directory');
    expect(existsSync(path.join(root, '..', 'planted-by-the-guest'))).toBe(false);
  });

  it('drop a record that fails for any other reason too, instead of throwing into the executor', () => {
    const log = new LogFile(root, `${'x'.repeat(300)}.log`, outside());
    expect(() => log.line('a name too long for the filesystem')).not.toThrow();
    expect(refusals).toHaveLength(1);
    expect(refusals[0]?.message).toMatch(/ENAMETOOLONG/);
  });
});
