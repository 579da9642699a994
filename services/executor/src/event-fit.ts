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
 * whole would have been an exception in the executor, shared by every session on it.
 */
export function fitEventForBus(event: SessionEvent, budget = EVENT_BUS_BUDGET): SessionEvent {
  if (Buffer.byteLength(JSON.stringify(event)) <= budget) return event;
  // Each string gets a share of the budget in characters; a character is at most 4 bytes of UTF-8
  // and 6 of a JSON escape, so a quarter of the budget over the strings leaves room to spare.
  const keep = Math.max(1024, Math.floor(budget / 8));
  const cut = (value: unknown): unknown => {
    if (typeof value === 'string')
      return value.length > keep ? `${value.slice(0, keep)} […${value.length - keep} more characters cut: too long for the bus]` : value;
    if (Array.isArray(value)) return value.map(cut);
    if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, cut(inner)]));
    return value;
  };
  return { ...event, data: cut(event.data) as SessionEvent['data'] };
}
