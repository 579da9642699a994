import type { SessionEvent } from '@murmur/shared';
import { describe, expect, it } from 'vitest';
import { EVENT_BUS_BUDGET, fitEventForBus } from '../src/event-fit.js';

const event = (data: SessionEvent['data']): SessionEvent =>
  ({ id: 7, type: 'text', task_id: 'tsk_1', context_id: 'ctx_1', time: '2026-12-02T00:00:00.000Z', data }) as SessionEvent;

describe('a feed event put on the bus', () => {
  it('is itself when it fits', () => {
    const small = event({ text: 'hello' });
    expect(fitEventForBus(small)).toBe(small);
  });

  it('has its long strings cut, each saying so, until it fits — escapes and wide characters included', () => {
    for (const piece of ['x', 'é', '😀', '"\\\n']) {
      const big = event({ text: piece.repeat(600_000), status: { response: piece.repeat(300_000), message: 'short' } });
      const fitted = fitEventForBus(big);
      expect(Buffer.byteLength(JSON.stringify(fitted)), piece).toBeLessThanOrEqual(EVENT_BUS_BUDGET);
      const data = fitted.data as { text: string; status: { response: string; message: string } };
      expect(data.text).toMatch(/ \[…\d+ more characters cut: too long for the bus\]$/);
      expect(data.status.message).toBe('short');
      expect({ ...fitted, data: undefined }).toEqual({ ...big, data: undefined });
    }
  });
});
