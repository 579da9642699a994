import { type SessionEvent, silentLog } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { describe, expect, it } from 'vitest';
import { FeedHub, FeedWatch, TooManyStreams, WATCH_QUEUE_LIMIT, WATCH_QUEUE_LIMIT_BYTES } from '../src/session-link.js';

function event(id: number): SessionEvent {
  return { id, type: 'status', task_id: 'tsk_1', context_id: 'ctx_1', state: 'working', final: false, time: '2026-01-01T00:00:00.000Z', data: {} };
}

/** A stream's view of its session's events (`FeedWatch`): what its loop is told, and when. */
describe('a feed watch', () => {
  it('tells a waiting stream at once that its watch was closed, rather than after its wait', async () => {
    const watch = new FeedWatch(() => {});
    const waiting = watch.next(60_000);
    watch.close();
    // The loop's turn that follows the close: a next that waited out its minute would not be here.
    const first = await Promise.race([waiting, new Promise((resolve) => setImmediate(() => resolve('still waiting')))]);
    expect(first).toBe('closed');
    expect(await watch.next(60_000)).toBe('closed');
  });

  it('hands out events in id order, each once, then says the session ended', async () => {
    const watch = new FeedWatch(() => {});
    watch.push(event(2), event(1));
    watch.push(event(1));
    watch.end();
    expect(((await watch.next(10)) as SessionEvent).id).toBe(1);
    expect(((await watch.next(10)) as SessionEvent).id).toBe(2);
    expect(await watch.next(10)).toBe('ended');
  });

  it('places a replayed event among live ones by its id, each id once', async () => {
    const watch = new FeedWatch(() => {});
    watch.push(event(5), event(9));
    watch.push(event(7), event(1), event(9), event(7));
    watch.end();
    const ids: number[] = [];
    for (let next = await watch.next(10); next !== 'ended'; next = await watch.next(10)) ids.push((next as SessionEvent).id);
    expect(ids).toEqual([1, 5, 7, 9]);
  });

  it('tells a reader that left too many events untaken that it fell behind, holding no more than the bound', async () => {
    const watch = new FeedWatch(() => {});
    for (let id = 1; id <= WATCH_QUEUE_LIMIT + 500; id += 1) watch.push(event(id));
    expect(await watch.next(10)).toBe('fell-behind');
    // Whatever came after is not kept for it.
    expect((watch as unknown as { queue: unknown[] }).queue.length).toBeLessThanOrEqual(WATCH_QUEUE_LIMIT);
  });

  it('tells a reader that left too many bytes of events untaken that it fell behind, and lets go of all it held', async () => {
    const watch = new FeedWatch(() => {});
    const big = (id: number): SessionEvent => ({ ...event(id), type: 'text', data: { text: 'x'.repeat(512 * 1024) } });
    const fits = Math.floor(WATCH_QUEUE_LIMIT_BYTES / (512 * 1024 + 200));
    for (let id = 1; id <= fits; id += 1) watch.push(big(id));
    expect((watch as unknown as { queue: unknown[] }).queue.length).toBe(fits);
    watch.push(big(fits + 1), big(fits + 2));
    expect(await watch.next(10)).toBe('fell-behind');
    // Nothing it held will be handed out: none of it is kept for a reader that may never read again.
    expect((watch as unknown as { queue: unknown[] }).queue.length).toBe(0);
  });

  it('counts the bytes of what it holds, not its characters: text of three bytes a character falls behind at the same bound', async () => {
    const watch = new FeedWatch(() => {});
    // A third of the bound in characters, the whole bound and more in UTF-8.
    const characters = Math.ceil(WATCH_QUEUE_LIMIT_BYTES / 3) + 1024;
    watch.push({ ...event(1), type: 'text', data: { text: '\u6f22'.repeat(characters) } });
    watch.push(event(2));
    expect(await watch.next(10)).toBe('fell-behind');
  });

  it('says the door is stopping before anything still queued', async () => {
    const watch = new FeedWatch(() => {});
    watch.push(event(1));
    watch.shutdown();
    expect(await watch.next(10)).toBe('door-stopping');
  });
});

/** The door's streams over all its sessions (`FeedHub`), on a real in-process bus. */
describe('a feed hub', () => {
  it('holds a session to its share of the streams, so one session’s clients cannot take every other session’s, and gives a slot back once closed', async () => {
    const bus = createBus(new InProcessTransport(), silentLog);
    const hub = new FeedHub(bus, 4, 2);
    try {
      const first = [await hub.watch('ses_a'), await hub.watch('ses_a')];
      const refused = await hub.watch('ses_a').catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(TooManyStreams);
      expect((refused as TooManyStreams).message).toBe('this session has 2 open streams at this door, as many as one session may hold (E-DOOR-004): close one');
      // Another session still has its own.
      const other = [await hub.watch('ses_b'), await hub.watch('ses_b')];
      // The door's whole bound holds over both.
      expect(((await hub.watch('ses_c').catch((error: unknown) => error)) as TooManyStreams).scope).toBe('door');
      first[0]?.close();
      const again = await hub.watch('ses_a');
      for (const watch of [...first, ...other, again]) watch.close();
    } finally {
      hub.close();
      await bus.close();
    }
  });
});
