import { describe, expect, it } from 'vitest';
import { type SessionEnded, newSessionId, silentLog, topics } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { ExecutorMonitor } from '../src/executors.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A watcher's judgement of executors by their heartbeats, on a real (in-process) bus. */
describe("the watcher's judgement of an executor", () => {
  it('waits three of the intervals an executor says it beats at before it calls it lost, however short its own bound', async () => {
    const bus = createBus(new InProcessTransport(), silentLog);
    const monitor = new ExecutorMonitor({ bus, log: silentLog, lostAfterMs: 200, watcherId: 'watcher-test' });
    const ended: SessionEnded[] = [];
    bus.subscribe(topics.sessionEnded, (event) => void ended.push(event));
    const sessionId = newSessionId();
    const beat = (): void =>
      bus.publish(topics.executorHeartbeat, {
        executor_id: 'executor-slow-beat',
        sent_at: new Date().toISOString(),
        interval_ms: 400,
        sessions: [{ session_id: sessionId, capsule_name: 'c', capsule_version: '1.0.0', pid: 4242, process_start: '1', started_at: new Date().toISOString() }],
      });
    try {
      // Beating every 400 ms: past the watcher's 200 ms each time, within three of its own intervals.
      for (let each = 0; each < 4; each += 1) {
        beat();
        await sleep(400);
      }
      expect(ended).toEqual([]);
      // Silent for good: lost once three intervals have gone by.
      await sleep(1_800);
      expect(ended.map((event) => [event.session_id, event.error?.code])).toEqual([[sessionId, 'E-EXE-001']]);
    } finally {
      monitor.close();
      await bus.close();
    }
  });
});
