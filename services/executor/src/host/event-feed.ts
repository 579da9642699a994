import type { SessionEvent, TaskState } from '@murmur/shared';
import { fitEventForBus } from '../event-fit.js';

/**
 * The most bytes of events (as JSON) one replay carries: with the task it names (fitted to the
 * rest), a replay is one reply on the bus, which refuses a message over 1 MiB. Kept whole, 512
 * events of a few KiB each — or one answer of 700 KB — made every replay of the session fail.
 */
export const REPLAY_BUDGET_BYTES = 512 * 1024;
/** The most bytes of events (as JSON) the feed keeps for replays: many replays' worth. */
export const BUFFER_KEPT_BYTES = 16 * 1024 * 1024;

/** How many tasks' first streamed events the feed remembers: a session's tasks of many hours. */
const STREAMED_TASKS_KEPT = 4096;
const STREAMED_TYPES = ['text', 'thinking'] as const;
type StreamedType = (typeof STREAMED_TYPES)[number];
const isStreamed = (type: string): type is StreamedType => (STREAMED_TYPES as readonly string[]).includes(type);

/**
 * A session's A2A feed: every status, artifact and text event, numbered from 1 in the order the
 * host emitted them, and the last `capacity` of them kept for replay (`Last-Event-ID`). The host is
 * the one numbering authority, so every door serving the session gives the same ids, and a client
 * that reconnects to another door resumes where it left off.
 */
export class EventFeed {
  private nextId = 1;
  private readonly buffer: SessionEvent[] = [];
  /** Each kept event's size as JSON, in the buffer's order. */
  private readonly sizes: number[] = [];
  private bufferBytes = 0;
  /** The id of each task's first event of each streamed type, for the last `STREAMED_TASKS_KEPT` tasks that streamed. */
  private readonly firstStreamed = new Map<string, Partial<Record<StreamedType, number>>>();

  constructor(
    private readonly publish: (event: SessionEvent) => void,
    private readonly capacity = 512,
  ) {}

  private noteStreamed(taskId: string, type: StreamedType, id: number): void {
    const first = this.firstStreamed.get(taskId);
    if (first?.[type] !== undefined) return;
    this.firstStreamed.set(taskId, { ...first, [type]: id });
    if (this.firstStreamed.size > STREAMED_TASKS_KEPT) this.firstStreamed.delete(this.firstStreamed.keys().next().value as string);
  }

  get nextEventId(): number {
    return this.nextId;
  }

  emit(event: {
    type: SessionEvent['type'];
    taskId: string | null;
    contextId: string | null;
    data: Record<string, unknown>;
    state?: TaskState;
    final?: boolean;
  }): SessionEvent {
    const numbered: SessionEvent = {
      id: this.nextId++,
      type: event.type,
      task_id: event.taskId,
      context_id: event.contextId,
      ...(event.state ? { state: event.state } : {}),
      final: event.final ?? false,
      time: new Date().toISOString(),
      data: event.data,
    };
    // Kept as the bus will carry it, and no more of them than `BUFFER_KEPT_BYTES`: a replay gives
    // at most `REPLAY_BUDGET_BYTES`, and 512 whole tool outputs would be the host's memory for good.
    const kept = fitEventForBus(numbered);
    const size = Buffer.byteLength(JSON.stringify(kept));
    this.buffer.push(kept);
    this.sizes.push(size);
    this.bufferBytes += size;
    while (this.buffer.length > this.capacity || (this.bufferBytes > BUFFER_KEPT_BYTES && this.buffer.length > 1)) {
      this.buffer.shift();
      this.bufferBytes -= this.sizes.shift() ?? 0;
    }
    if (numbered.task_id !== null && isStreamed(numbered.type)) this.noteStreamed(numbered.task_id, numbered.type, numbered.id);
    this.publish(numbered);
    return numbered;
  }

  /**
   * Which of a task's streamed artifacts (its reply's `text`, its `thinking`) a client that holds
   * every event up to `throughId` has begun: a stream it resumes goes on appending to them, where
   * a chunk that began one again replaced what the client had.
   */
  streamsBegun(taskId: string, throughId: number): StreamedType[] {
    const first = this.firstStreamed.get(taskId) ?? {};
    return STREAMED_TYPES.filter((type) => (first[type] ?? Number.POSITIVE_INFINITY) <= throughId);
  }

  /**
   * The held events after `afterId` (of one task, or all), as many of the latest as fit
   * `REPLAY_BUDGET_BYTES` (the latest one alone, with its long strings cut, when even it does not),
   * and — when events after `afterId` were already evicted or left out — the oldest id it gives, so
   * a stream can say there may be a gap. (The feed does not remember what it dropped, so for one
   * task the gap is possible, not certain.)
   */
  replay(afterId: number, taskId?: string): { events: SessionEvent[]; firstAvailableId?: number } {
    // The wanted events' places in the buffer, whose sizes were measured as they were kept.
    const wanted = this.buffer.flatMap((event, at) => (event.id > afterId && (taskId === undefined || event.task_id === taskId) ? [at] : []));
    // The latest that fit, counted back from the newest.
    let first = wanted.length;
    let bytes = 0;
    while (first > 0 && bytes + (this.sizes[wanted[first - 1] as number] as number) <= REPLAY_BUDGET_BYTES) {
      bytes += this.sizes[wanted[first - 1] as number] as number;
      first -= 1;
    }
    let events = wanted.slice(first).map((at) => this.buffer[at] as SessionEvent);
    if (events.length === 0 && wanted.length > 0) {
      first = wanted.length - 1;
      events = [fitEventForBus(this.buffer[wanted[first] as number] as SessionEvent, REPLAY_BUDGET_BYTES)];
    }
    const heldFrom = this.buffer[0]?.id ?? this.nextId;
    // A gap: events after `afterId` evicted from the feed, or left out of this replay.
    if (first > 0) return { events, firstAvailableId: (events[0] as SessionEvent).id };
    return afterId + 1 < heldFrom ? { events, firstAvailableId: heldFrom } : { events };
  }
}
