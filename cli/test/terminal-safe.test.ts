import { describe, expect, it } from 'vitest';
import { TerminalSafeStream, terminalSafe } from '../src/output.js';

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
