import { describe, expect, it } from 'vitest';
import { traceRecordLines } from '@murmur/shared/node';

describe('a trace read line by line', () => {
  const line = (index: number) => JSON.stringify({ event_type: 'turn', timestamp: index });

  it('reads every record, and says which lines are none and why', () => {
    const { records, skipped } = traceRecordLines(`${line(1)}\nnot json\n[1]\n{"timestamp":2}\n${line(3)}\n{"event_type":"cut`);
    expect(records.map((record) => record.line)).toEqual([1, 5]);
    expect(skipped).toEqual([
      { line: 2, reason: 'not JSON' },
      { line: 3, reason: 'not a JSON object' },
      { line: 4, reason: 'no event_type' },
      { line: 6, reason: 'cut off (no newline at its end)' },
    ]);
  });

  it('parses no line past the record after the most it is asked for: that one says there are more', () => {
    const text = [...Array.from({ length: 5 }, (_, index) => line(index)), 'not json'].join('\n');
    const { records, skipped } = traceRecordLines(text, { most: 2 });
    expect(records.map((record) => record.record.timestamp)).toEqual([0, 1, 2]);
    expect(skipped).toEqual([]);
  });
});
