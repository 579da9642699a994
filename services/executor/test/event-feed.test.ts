import type { SessionEvent } from '@murmur/shared';
import { describe, expect, it } from 'vitest';
import { BUFFER_KEPT_BYTES, EventFeed, REPLAY_BUDGET_BYTES } from '../src/host/event-feed.js';

/** A feed with a small replay buffer, and everything it published. */
function feedOf(capacity?: number): { feed: EventFeed; published: SessionEvent[] } {
  const published: SessionEvent[] = [];
  const feed = capacity === undefined ? new EventFeed((event) => published.push(event)) : new EventFeed((event) => published.push(event), capacity);
  return { feed, published };
}

function emitText(feed: EventFeed, taskId: string | null, text: string): SessionEvent {
  return feed.emit({ type: 'text', taskId, contextId: taskId === null ? null : `ctx-${taskId}`, data: { text } });
}

describe('an event feed', () => {
  it('numbers events from 1, one more for each event, and says which id comes next', () => {
    const { feed } = feedOf();
    expect(feed.nextEventId).toBe(1);
    const ids = [emitText(feed, 'a', 'one'), emitText(feed, 'b', 'two'), emitText(feed, null, 'three')].map((event) => event.id);
    expect(ids).toEqual([1, 2, 3]);
    expect(feed.nextEventId).toBe(4);
  });

  it('writes the event in the session wire shape, with state only when given and final false unless set', () => {
    const { feed } = feedOf();
    const plain = feed.emit({ type: 'artifact', taskId: 'tsk_1', contextId: 'ctx_1', data: { id: 'tsk_1' } });
    expect(plain).toEqual({ id: 1, type: 'artifact', task_id: 'tsk_1', context_id: 'ctx_1', final: false, time: expect.any(String), data: { id: 'tsk_1' } });
    expect(plain).not.toHaveProperty('state');
    expect(new Date(plain.time).toISOString()).toBe(plain.time);

    const status = feed.emit({ type: 'status', taskId: 'tsk_1', contextId: 'ctx_1', state: 'completed', final: true, data: {} });
    expect(status.state).toBe('completed');
    expect(status.final).toBe(true);
  });

  it('publishes each event once, as it is emitted, in emission order', () => {
    const { feed, published } = feedOf(2);
    const emitted = [emitText(feed, 'a', '1'), emitText(feed, 'a', '2'), emitText(feed, 'b', '3'), emitText(feed, 'a', '4')];
    expect(published).toHaveLength(4);
    expect(published).toEqual(emitted);
    expect(published.map((event) => event.id)).toEqual([1, 2, 3, 4]);
  });

  it('publishes an event before emit returns', () => {
    const { feed, published } = feedOf();
    emitText(feed, 'a', 'now');
    expect(published.map((event) => event.data.text)).toEqual(['now']);
  });

  it('keeps only the last `capacity` events for replay, while ids keep counting', () => {
    const { feed } = feedOf(4);
    for (let index = 1; index <= 6; index++) emitText(feed, 'a', String(index));
    const { events } = feed.replay(0);
    expect(events.map((event) => event.id)).toEqual([3, 4, 5, 6]);
    expect(feed.nextEventId).toBe(7);
  });

  it('replays only the events after the given id', () => {
    const { feed } = feedOf(4);
    for (let index = 1; index <= 4; index++) emitText(feed, 'a', String(index));
    expect(feed.replay(2).events.map((event) => event.id)).toEqual([3, 4]);
    expect(feed.replay(4).events).toEqual([]);
    expect(feed.replay(Number.MAX_SAFE_INTEGER).events).toEqual([]);
  });

  it('replays the events of one task when asked for a task, and of every task otherwise', () => {
    const { feed } = feedOf(8);
    emitText(feed, 'a', '1');
    emitText(feed, 'b', '2');
    emitText(feed, null, '3');
    emitText(feed, 'a', '4');
    expect(feed.replay(0, 'a').events.map((event) => event.id)).toEqual([1, 4]);
    expect(feed.replay(1, 'a').events.map((event) => event.id)).toEqual([4]);
    expect(feed.replay(0, 'b').events.map((event) => event.id)).toEqual([2]);
    expect(feed.replay(0, 'nobody').events).toEqual([]);
    expect(feed.replay(0).events.map((event) => event.id)).toEqual([1, 2, 3, 4]);
  });

  it('reports no gap while every event after the given id is still held', () => {
    const { feed } = feedOf(4);
    for (let index = 1; index <= 6; index++) emitText(feed, 'a', String(index));
    // Held: 3..6. Asking for events after 2 (or later) misses nothing.
    expect(feed.replay(2)).not.toHaveProperty('firstAvailableId');
    expect(feed.replay(5)).not.toHaveProperty('firstAvailableId');
    expect(feed.replay(6)).not.toHaveProperty('firstAvailableId');
  });

  it('reports the oldest id still held when events the caller asked for were evicted', () => {
    const { feed } = feedOf(4);
    for (let index = 1; index <= 6; index++) emitText(feed, 'a', String(index));
    // Events 1 and 2 are gone: after 0 misses both, after 1 misses event 2.
    expect(feed.replay(0)).toEqual({ events: expect.any(Array), firstAvailableId: 3 });
    expect(feed.replay(1).firstAvailableId).toBe(3);
    expect(feed.replay(1).events.map((event) => event.id)).toEqual([3, 4, 5, 6]);
  });

  it('reports no gap on a feed that has evicted nothing, even when asked from the start', () => {
    const { feed } = feedOf(4);
    expect(feed.replay(0)).toEqual({ events: [] });
    for (let index = 1; index <= 4; index++) emitText(feed, 'a', String(index));
    expect(feed.replay(0)).not.toHaveProperty('firstAvailableId');
    expect(feed.replay(0).events).toHaveLength(4);
  });

  it('reports a gap for a task replay too, with the task’s held events', () => {
    const { feed } = feedOf(4);
    emitText(feed, 'a', '1');
    emitText(feed, 'b', '2');
    emitText(feed, 'a', '3');
    emitText(feed, 'b', '4');
    emitText(feed, 'a', '5');
    const replayed = feed.replay(0, 'a');
    expect(replayed.firstAvailableId).toBe(2);
    expect(replayed.events.map((event) => event.id)).toEqual([3, 5]);
  });

  it('keeps 512 events by default', () => {
    const { feed } = feedOf();
    for (let index = 1; index <= 513; index++) emitText(feed, 'a', String(index));
    const replayed = feed.replay(0);
    expect(replayed.events).toHaveLength(512);
    expect(replayed.events[0]?.id).toBe(2);
    expect(replayed.firstAvailableId).toBe(2);
  });
  it('replays only the latest events that fit one reply on the bus, and says where they begin', () => {
    const { feed } = feedOf();
    emitText(feed, 'a', 'small');
    for (let n = 0; n < 10; n += 1) emitText(feed, 'a', 'x'.repeat(100 * 1024));
    const replayed = feed.replay(0);
    const bytes = replayed.events.reduce((sum, event) => sum + Buffer.byteLength(JSON.stringify(event)), 0);
    expect(bytes).toBeLessThanOrEqual(REPLAY_BUDGET_BYTES);
    expect(replayed.events.map((event) => event.id)).toEqual([7, 8, 9, 10, 11]);
    expect(replayed.firstAvailableId).toBe(7);
    // All that was asked for, when it fits: no gap.
    expect(feed.replay(10)).toEqual({ events: [expect.objectContaining({ id: 11 })] });
  });

  it('replays an event too large for a reply with its long strings cut, rather than failing the replay', () => {
    const { feed } = feedOf();
    emitText(feed, 'a', 'y'.repeat(700_000));
    const replayed = feed.replay(0);
    expect(replayed.events).toHaveLength(1);
    expect(Buffer.byteLength(JSON.stringify(replayed.events[0]))).toBeLessThanOrEqual(REPLAY_BUDGET_BYTES);
    expect(JSON.stringify(replayed.events[0]?.data)).toContain('more characters cut: too long for the bus');
    expect(replayed.firstAvailableId).toBeUndefined();
  });
  it('keeps for replays no more than its byte bound, each event as the bus would carry it', () => {
    const { feed, published } = feedOf();
    for (let n = 0; n < 40; n += 1) emitText(feed, 'a', 'z'.repeat(2_000_000));
    // Published whole (the executor fits what it puts on the bus); kept fitted, and only the latest.
    expect(JSON.stringify(published[0]?.data).length).toBeGreaterThan(2_000_000);
    const kept = (feed as unknown as { buffer: SessionEvent[] }).buffer;
    const bytes = kept.reduce((sum, event) => sum + Buffer.byteLength(JSON.stringify(event)), 0);
    expect(bytes).toBeLessThanOrEqual(BUFFER_KEPT_BYTES);
    expect(kept.at(-1)?.id).toBe(40);
    expect(feed.replay(0).firstAvailableId).toBeGreaterThan(1);
  });
});
