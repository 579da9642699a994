import type { SessionEvent, SessionReply } from '@murmur/shared';
import { describe, expect, it } from 'vitest';
import { EVENT_BUS_BUDGET } from '../src/event-fit.js';
import { fitForExecutor } from '../src/host/message-fit.js';
import type { HostToExecutor } from '../src/host/protocol.js';

/**
 * What a capsule host sends the executor is bounded before it is sent: much of it is the guest's
 * to size, and the executor reads each message whole on the event loop every session shares.
 */
describe('fitting a capsule host’s messages to its channel', () => {
  const limit = 64 * 1024;
  const sizeOf = (message: HostToExecutor): number => JSON.stringify(message).length;

  it('sends a message that fits as it is', () => {
    const message: HostToExecutor = { type: 'output', stream: 'stdout', text: 'hello' };
    expect(fitForExecutor(message, limit)).toEqual({ message });
  });

  it('refuses a request too large to send, naming it and its size, so its caller is told', () => {
    const message: HostToExecutor = {
      type: 'request',
      id: 3,
      request: { op: 'send', request: { peer_url: 'peer.example', message_id: 'm', text: 'x'.repeat(limit) } },
    };
    expect(fitForExecutor(message, limit)).toEqual({
      refused: `the 'send' request is ${sizeOf(message)} characters of JSON, more than the ${limit} a capsule host may send the executor at once`,
    });
  });

  it('answers a door’s call with an error when the reply is too large, rather than not at all', () => {
    const reply = { task: { id: 't', context_id: 'c', state: 'completed', response: 'x'.repeat(limit) } } as SessionReply;
    const message: HostToExecutor = { type: 'rpc-reply', id: 9, reply };
    const fitted = fitForExecutor(message, limit);
    expect(fitted).toEqual({
      message: {
        type: 'rpc-reply',
        id: 9,
        reply: {
          error: {
            code: -32603,
            message: `Internal error: the reply is ${sizeOf(message)} characters of JSON, more than the ${limit} a capsule host may send the executor at once; ask for less of it (a smaller historyLength or pageSize)`,
          },
        },
      },
    });
  });

  it('cuts a feed event to what the bus carries, whatever the channel would take', () => {
    const event = { kind: 'text', task_id: 't', data: { text: 'y'.repeat(2 * EVENT_BUS_BUDGET) } } as unknown as SessionEvent;
    const fitted = fitForExecutor({ type: 'event', event });
    expect('message' in fitted && fitted.message.type === 'event').toBe(true);
    const sent = (fitted as { message: HostToExecutor & { type: 'event' } }).message;
    expect(Buffer.byteLength(JSON.stringify(sent.event))).toBeLessThanOrEqual(EVENT_BUS_BUDGET);
    expect(JSON.stringify(sent.event)).toContain('more characters cut: too long for the bus');
  });

  it('cuts the long strings of other messages, each saying so', () => {
    const message: HostToExecutor = { type: 'output', stream: 'stderr', text: 'z'.repeat(4 * limit) };
    const fitted = fitForExecutor(message, limit);
    const sent = (fitted as { message: HostToExecutor & { type: 'output' } }).message;
    expect(sizeOf(sent)).toBeLessThanOrEqual(limit);
    expect(sent.text).toMatch(/more characters cut: too long for the capsule host’s channel\]$/);
  });

  it('refuses a trace line too large rather than cut it: a cut line is no record', () => {
    const line = JSON.stringify({ event_type: 'tool_call', session_id: 's', timestamp: 1, output: 'w'.repeat(limit) });
    const fitted = fitForExecutor({ type: 'trace', line }, limit);
    expect(fitted).toEqual({ refused: expect.stringMatching(/^the trace record of \d+ characters is \d+ characters of JSON/) });
  });
});
