import type { SessionEvent } from '@murmur/shared';

/**
 * The most bytes of one feed event the executor puts on the bus. Both buses refuse a message over
 * 1 MiB (NATS's default `max_payload`, and the in-process bus's), and an event is the task's words
 * — a model's reply, a tool's output, a streamed chunk — whose size the guest decides.
 */
export const EVENT_BUS_BUDGET = 768 * 1024;

/**
 * `event` as it can cross the bus: itself when it fits, else a copy whose long strings are cut,
 * each saying how much was cut. What a streaming client then misses of a chunk or an answer, the
 * task's own record (the workdir's result, `GetTask` where it fits) still holds; an event refused
 * whole would have been an exception in the executor, shared by every session on it. The capsule
 * host fits each event before it sends it; the executor fits it again, since a host is not trusted.
 */
export function fitEventForBus(event: SessionEvent, budget = EVENT_BUS_BUDGET): SessionEvent {
  if (Buffer.byteLength(JSON.stringify(event)) <= budget) return event;
  return { ...event, data: cutLongStrings(event.data, budget, 'too long for the bus') as SessionEvent['data'] };
}

/**
 * A copy of `value` whose strings are cut so that its JSON fits `budget` bytes, each cut saying so
 * and `why`. Each string gets a share of the budget in characters; a character is at most 4 bytes of
 * UTF-8 and 6 of a JSON escape, so an eighth of the budget per string leaves room for its neighbours.
 */
export function cutLongStrings(value: unknown, budget: number, why: string): unknown {
  const keep = Math.max(1024, Math.floor(budget / 8));
  const cut = (inner: unknown): unknown => {
    if (typeof inner === 'string') return inner.length > keep ? `${inner.slice(0, keep)} […${inner.length - keep} more characters cut: ${why}]` : inner;
    if (Array.isArray(inner)) return inner.map(cut);
    if (inner !== null && typeof inner === 'object') return Object.fromEntries(Object.entries(inner).map(([key, field]) => [key, cut(field)]));
    return inner;
  };
  return cut(value);
}
