import { afterEach, describe, expect, it } from 'vitest';
import { type ExecutorHeartbeat, type SessionEnded, silentLog, topics } from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { ExecutorMonitor, LOST_EXECUTORS_REMEMBERED } from '@murmur/watcher';
import { heldSession } from './support/heartbeats.js';

/**
 * The watcher's judgement of executors by their heartbeats, on one in-process bus, as `mur run`
 * has it: the executor and the watcher in one event loop.
 */
describe("the watcher's judgement of silent executors", () => {
  const LOST_AFTER_MS = 600;
  const started: Array<{ close(): void }> = [];
  afterEach(() => {
    for (const thing of started.splice(0)) thing.close();
  });

  const SESSION = 'ses_0123456789abcdef0123456789abcdef';
  const OTHER = 'ses_fedcba9876543210fedcba9876543210';

  /** `listed`: the sessions each heartbeat names, read at each beat (a test changes it as its executor would). */
  function setUp(listed: string[] = [SESSION]): { bus: Bus; ended: SessionEnded[]; beating: { close(): void } } {
    const bus = createBus(new InProcessTransport(), silentLog);
    const monitor = new ExecutorMonitor({ bus, log: silentLog, lostAfterMs: LOST_AFTER_MS, watcherId: 'watcher-test' });
    const ended: SessionEnded[] = [];
    const subscription = bus.subscribe(topics.sessionEnded, (event) => void ended.push(event));
    const beat: ExecutorHeartbeat = {
      executor_id: 'executor-test',
      sent_at: new Date().toISOString(),
      interval_ms: 100,
      sessions: [],
    };
    const send = (): void => bus.publish(topics.executorHeartbeat, { ...beat, sent_at: new Date().toISOString(), sessions: listed.map(heldSession) });
    send();
    const timer = setInterval(send, 100);
    const beating = { close: () => clearInterval(timer) };
    started.push(beating, monitor, { close: () => subscription.unsubscribe() });
    return { bus, ended, beating };
  }

  const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

  it('announces the sessions of an executor that falls silent as lost with it (E-EXE-001)', async () => {
    const { ended, beating } = setUp();
    await sleep(300);
    beating.close();
    const deadline = Date.now() + 5_000;
    while (ended.length === 0 && Date.now() < deadline) await sleep(50);
    expect(ended.map((event) => [event.session_id, event.error?.code])).toEqual([[SESSION, 'E-EXE-001']]);
  });

  it('announces lost only the sessions the silent executor still listed, not one whose end it missed', async () => {
    const listed = [SESSION, OTHER];
    const { ended, beating } = setUp(listed);
    await sleep(300);
    // SESSION ended on the executor, and its `session.ended` never reached this watcher.
    listed.splice(0, 1);
    await sleep(300);
    beating.close();
    const deadline = Date.now() + 5_000;
    while (ended.length === 0 && Date.now() < deadline) await sleep(50);
    await sleep(LOST_AFTER_MS);
    expect(ended.map((event) => [event.session_id, event.error?.code])).toEqual([[OTHER, 'E-EXE-001']]);
  });

  it('does not take a stall of its own process for the silence of the executor beating beside it', async () => {
    const { ended } = setUp();
    await sleep(300);
    // The one event loop blocked for well past the allowance: no timer, heartbeat or judgement runs.
    const blockedUntil = performance.now() + LOST_AFTER_MS * 2.5;
    while (performance.now() < blockedUntil) {
      // busy: what a long synchronous task or a paused process does to every timer of the loop
    }
    // Long enough after the stall for several judgements, each of which would announce a loss.
    await sleep(LOST_AFTER_MS * 2);
    expect(ended).toEqual([]);
  });

  it('remembers a bounded number of lost executors, the latest ones, however many come and go', async () => {
    const bus = createBus(new InProcessTransport(), silentLog);
    const monitor = new ExecutorMonitor({ bus, log: silentLog, lostAfterMs: LOST_AFTER_MS, watcherId: 'watcher-test' });
    started.push(monitor);
    // One heartbeat each, then silence: as many executors as a long-lived stack restarts, and some.
    const count = LOST_EXECUTORS_REMEMBERED + 50;
    const idOf = (n: number): string => `executor-${n}`;
    for (let n = 0; n < count; n++)
      bus.publish(topics.executorHeartbeat, { executor_id: idOf(n), sent_at: new Date().toISOString(), interval_ms: 100, sessions: [] });
    const deadline = Date.now() + 5_000;
    while (!monitor.isLost(idOf(count - 1)) && Date.now() < deadline) await sleep(50);
    expect(monitor.isLost(idOf(count - 1))).toBe(true);
    expect(monitor.isLost(idOf(count - LOST_EXECUTORS_REMEMBERED))).toBe(true);
    expect(monitor.isLost(idOf(count - LOST_EXECUTORS_REMEMBERED - 1))).toBe(false);
    expect(monitor.isLost(idOf(0))).toBe(false);
    // One that answers again is no longer lost, and is judged afresh.
    bus.publish(topics.executorHeartbeat, { executor_id: idOf(count - 1), sent_at: new Date().toISOString(), interval_ms: 100, sessions: [] });
    await sleep(50);
    expect(monitor.isLost(idOf(count - 1))).toBe(false);
  });
});
