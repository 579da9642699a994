import type { Bus } from './bus.js';

/**
 * A round trip to the bus's server (`flush`): whether it answered, and how long that took. A
 * judge of executors by their heartbeats forgives every executor that much of its silence: a
 * server that hangs (stopped, its host stalled) sends no connection change while no executor can
 * be heard, and a 7 s stall of the server was taken for a healthy executor's death. The first ask
 * of a stall waits it out; on a healthy bus it takes a millisecond.
 */
export async function busRoundTrip(bus: Pick<Bus, 'flush'>): Promise<{ answered: boolean; waitedMs: number }> {
  const asked = performance.now();
  const answered = await bus.flush().then(
    () => true,
    () => false,
  );
  return { answered, waitedMs: performance.now() - asked };
}
