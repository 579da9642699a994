import type { SessionEvent, TaskState } from '@murmur/shared';

/**
 * A session's A2A feed: every status, artifact and text event, numbered from 1 in the order the
 * host emitted them, and the last `capacity` of them kept for replay (`Last-Event-ID`). The host is
 * the one numbering authority, so every door serving the session gives the same ids, and a client
 * that reconnects to another door resumes where it left off.
 */
export class EventFeed {
  private nextId = 1;
  private readonly buffer: SessionEvent[] = [];

  constructor(
    private readonly publish: (event: SessionEvent) => void,
    private readonly capacity = 512,
  ) {}

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
    this.buffer.push(numbered);
    if (this.buffer.length > this.capacity) this.buffer.shift();
    this.publish(numbered);
    return numbered;
  }

  /**
   * The held events after `afterId` (of one task, or all), and — when events after `afterId` were
   * already evicted — the oldest id still held, so a stream can say there may be a gap. (The feed
   * does not remember what it dropped, so for one task the gap is possible, not certain.)
   */
  replay(afterId: number, taskId?: string): { events: SessionEvent[]; firstAvailableId?: number } {
    const oldest = this.buffer[0]?.id ?? this.nextId;
    const events = this.buffer.filter((event) => event.id > afterId && (taskId === undefined || event.task_id === taskId));
    return afterId + 1 < oldest ? { events, firstAvailableId: oldest } : { events };
  }
}
