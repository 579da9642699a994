import { describe, expect, it } from 'vitest';
import { OutputRelay } from '../src/output-relay.js';
import { TerminalSafeStream, oneLine, table, terminalSafe } from '../src/output.js';

describe('a capsule’s output on a terminal', () => {
  it('shows every control a terminal would act on as its escape: OSC 52, a title, conceal, a bell, a lone carriage return, a C1 CSI', () => {
    expect(terminalSafe('\u001b]52;c;aGVsbG8=\u0007')).toBe('\\x1b]52;c;aGVsbG8=\\x07');
    expect(terminalSafe('\u001b[8mhidden')).toBe('\\x1b[8mhidden');
    expect(terminalSafe('status:  failed\rstatus:  ok')).toBe('status:  failed\\x0dstatus:  ok');
    expect(terminalSafe('\u009b31m\u007f')).toBe('\\u009b31m\\u007f');
  });

  it('keeps a line of JSON JSON: what it leaves of DEL and the C1 controls, it shows as JSON escapes', () => {
    const record = { said: 'a\u007fb\u009bc\u001bd\re\u202ef' };
    expect(JSON.parse(terminalSafe(JSON.stringify(record)))).toEqual(record);
  });

  it('shows the bidirectional controls that would make text read backwards as their escapes', () => {
    expect(terminalSafe('safe\u202egnp.exe')).toBe('safe\\u202egnp.exe');
    expect(terminalSafe('\u2066a\u2069\u200f\u061c')).toBe('\\u2066a\\u2069\\u200f\\u061c');
  });

  it('keeps text, tabs, newlines, line endings with a carriage return, and every other character as written', () => {
    const text = 'plain\ttabbed\nnext line\r\nünïcödé → 日本 🙂\n';
    expect(terminalSafe(text)).toBe(text);
  });

  it('keeps a line ending split across chunks, and shows a carriage return that ended nothing once the stream ends', () => {
    const stream = new TerminalSafeStream();
    expect(stream.write('one\r') + stream.write('\ntwo\r') + stream.write('three')).toBe('one\r\ntwo\\x0dthree');
    expect(stream.write('last\r') + stream.end()).toBe('last\\x0d');
    expect(stream.end()).toBe('');
  });
});

describe('strangers’ text on one line', () => {
  it('shows line breaks, tabs and every other control as escapes, to a pipe as to a terminal, and keeps the rest', () => {
    expect(oneLine('echo\n[completed]\r\n  FORGED\tall passed')).toBe('echo\\n[completed]\\r\\n  FORGED\\tall passed');
    expect(oneLine('a\u001b[2Jb\u009bc\u2028d\u202ee')).toBe('a\\x1b[2Jb\\u009bc\\u2028d\\u202ee');
    expect(oneLine('ünïcödé → 日本 🙂')).toBe('ünïcödé → 日本 🙂');
  });

  it('keeps a table a table: a cell with a line break adds no row, and columns are measured as shown', () => {
    const lines = table(
      ['NAME', 'VERSION', 'DESCRIPTION'],
      [
        ['fetch', '1.0.0', 'Fetches.\nofficial-fetch  9.9.9  Official, audited (verified)'],
        ['a\u001bb', '2.0.0', 'x'],
      ],
    );
    expect(lines).toEqual([
      'NAME    VERSION  DESCRIPTION',
      'fetch   1.0.0    Fetches.\\nofficial-fetch  9.9.9  Official, audited (verified)',
      'a\\x1bb  2.0.0    x',
    ]);
  });
});

describe('a session’s output relayed', () => {
  function sink() {
    const written: string[] = [];
    return { written, stream: { write: (text: string) => written.push(text) > 0, writableLength: 0 } };
  }

  it('ends a last line the capsule left open once the session ends, so that what mur says next begins a line', () => {
    const { written, stream } = sink();
    const relay = new OutputRelay(stream, 'stdout', () => {});
    relay.write('status:  ok');
    relay.finish();
    expect(written.join('')).toBe('status:  ok\n');
  });

  it('adds nothing to output that ended its line, or to none', () => {
    for (const chunks of [['one\n', 'two\n'], [], ['']]) {
      const { written, stream } = sink();
      const relay = new OutputRelay(stream, 'stdout', () => {});
      for (const chunk of chunks) relay.write(chunk);
      relay.finish();
      expect(written.join('')).toBe(chunks.join(''));
    }
  });
});
