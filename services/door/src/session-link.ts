import { MurmurError, type SessionCall, type SessionEvent, type SessionReply, commands, topics } from '@murmur/shared';
import type { Bus, Subscription } from '@murmur/shared/bus';

/**
 * A door's line to one session over the bus: calls answered by the session's capsule host, and a
 * watch on its feed. Nothing here outlives the HTTP request that opened it — the door keeps no
 * state, which is what lets any door serve any session.
 */

/** Why the door could not reach a session, as the HTTP status and the text a client gets. */
export class SessionUnreachable extends Error {
  constructor(
    readonly status: 404 | 504,
    message: string,
  ) {
    super(message);
  }
}

const CALL_TIMEOUT_MS = 15_000;

export class SessionLink {
  constructor(
    private readonly bus: Bus,
    readonly sessionId: string,
  ) {}

  async call(call: SessionCall): Promise<SessionReply> {
    try {
      return await this.bus.request(commands.sessionRpc.at(this.sessionId), call, { timeoutMs: CALL_TIMEOUT_MS });
    } catch (error) {
      if (error instanceof MurmurError && error.code === 'E-BUS-004') throw new SessionUnreachable(404, `no running session '${this.sessionId}' answers here (E-DOOR-001): it has ended, or never existed`);
      if (error instanceof MurmurError && error.code === 'E-BUS-003') throw new SessionUnreachable(504, `session '${this.sessionId}' did not answer within ${CALL_TIMEOUT_MS / 1000}s`);
      throw error;
    }
  }

  /** Starts watching the feed; resolves once the bus has the subscription, so nothing after this is missed. */
  async watch(): Promise<FeedWatch> {
    const watch = new FeedWatch(this.bus, this.sessionId);
    await this.bus.flush();
    return watch;
  }
}

/**
 * The session's events as they arrive, in id order, each at most once; and the session's end,
 * which closes every stream that was waiting on it.
 */
export class FeedWatch {
  private readonly queue: SessionEvent[] = [];
  /** The id of the last event handed out: anything at or below it is a duplicate. */
  private delivered = 0;
  private wake: (() => void) | undefined;
  private ended = false;
  private readonly subscriptions: Subscription[];

  constructor(bus: Bus, sessionId: string) {
    this.subscriptions = [
      bus.subscribe(topics.sessionEvents.at(sessionId), (event) => this.push(event)),
      bus.subscribe(topics.sessionEnded, (event) => {
        if (event.session_id !== sessionId) return;
        this.ended = true;
        this.wake?.();
      }),
    ];
  }

  /** Adds events (live or replayed); an id already delivered or queued is ignored. */
  push(...events: SessionEvent[]): void {
    for (const event of events) {
      if (event.id <= this.delivered || this.queue.some((queued) => queued.id === event.id)) continue;
      this.queue.push(event);
    }
    this.queue.sort((left, right) => left.id - right.id);
    this.wake?.();
  }

  /** The next event, `ended` once the session is gone, or `timeout` after `waitMs` of quiet. */
  async next(waitMs: number): Promise<SessionEvent | 'ended' | 'timeout'> {
    for (;;) {
      const event = this.queue.shift();
      if (event) {
        this.delivered = event.id;
        return event;
      }
      if (this.ended) return 'ended';
      const woken = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), waitMs);
        this.wake = () => {
          clearTimeout(timer);
          resolve(true);
        };
      });
      this.wake = undefined;
      if (!woken) return 'timeout';
    }
  }

  close(): void {
    for (const subscription of this.subscriptions) subscription.unsubscribe();
    this.wake?.();
  }
}
