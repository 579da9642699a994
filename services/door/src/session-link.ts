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
/**
 * How often, and how far apart, a door back on the bus asks a watched session for what it missed
 * while nobody answers: its executor reconnects on its own time (seconds after the door, as seen),
 * and only a session unanswered for all of them is taken to have ended meanwhile.
 */
const CATCH_UP_ATTEMPTS = 20;
const CATCH_UP_RETRY_MS = 500;

export class SessionLink {
  constructor(
    private readonly bus: Bus,
    private readonly feeds: FeedHub,
    readonly sessionId: string,
  ) {}

  async call(call: SessionCall): Promise<SessionReply> {
    try {
      return await this.bus.request(commands.sessionRpc.at(this.sessionId), call, { timeoutMs: CALL_TIMEOUT_MS });
    } catch (error) {
      if (error instanceof MurmurError && error.code === 'E-BUS-004')
        throw new SessionUnreachable(404, `no running session '${this.sessionId}' answers here (E-DOOR-001): it has ended, or never existed`);
      if (error instanceof MurmurError && error.code === 'E-BUS-003')
        throw new SessionUnreachable(504, `session '${this.sessionId}' did not answer within ${CALL_TIMEOUT_MS / 1000}s`);
      throw error;
    }
  }

  /** Starts watching the feed; resolves once the bus has the subscription, so nothing after this is missed. */
  watch(): Promise<FeedWatch> {
    return this.feeds.watch(this.sessionId);
  }
}

/** A door asked for one more stream than it holds (`FeedHub`'s `maxWatches`), or than one session may hold of them. */
export class TooManyStreams extends Error {
  constructor(
    readonly limit: number,
    readonly scope: 'door' | 'session' = 'door',
  ) {
    super(
      scope === 'door'
        ? `this door holds ${limit} open streams, as many as it takes (E-DOOR-004): close one, or reach the session through another door`
        : `this session has ${limit} open streams at this door, as many as one session may hold (E-DOOR-004): close one`,
    );
  }
}

/**
 * The door's live subscriptions: one bus subscription per session being watched, however many
 * requests watch it, so an event is received and checked once and handed to each watcher —
 * rather than once per watcher, which would cost the door (clients × events) under load. It is
 * not task state: a watcher exists only while its HTTP request does.
 */
export class FeedHub {
  private readonly sessions = new Map<string, { watchers: Set<FeedWatch>; subscription: Subscription; ready: Promise<void> }>();
  private readonly ended: Subscription;
  /** Every watch open at this door, whatever its session: each holds a stream, its buffers and its queue. */
  private open = 0;

  constructor(
    private readonly bus: Bus,
    private readonly maxWatches = Number.POSITIVE_INFINITY,
    /**
     * What one session may hold of them: whoever may talk to one session (its token's holder, or
     * anyone at a door without auth) could otherwise take every stream, and every other session's
     * streams and blocking sends would be refused for as long as theirs stayed open.
     */
    private readonly maxWatchesPerSession = maxWatches,
  ) {
    this.ended = bus.subscribe(topics.sessionEnded, (event) => {
      for (const watch of this.sessions.get(event.session_id)?.watchers ?? []) watch.end(event.error?.code);
    });
    bus.onConnectionChange((state) => {
      if (state === 'reconnected') void this.catchUp();
    });
  }

  /**
   * After the bus was away: what each watched session said meanwhile, asked of the session (its
   * replay, from the earliest event a watcher of it has not been handed) and handed to its
   * watchers, which drop what they have had. The bus does not keep what a subscriber missed while
   * it was away, and a stream whose task ended then waited for its end for ever, its heartbeats
   * keeping it open. A session that no longer answers ended meanwhile (its `session.ended` was
   * missed too); one whose replay no longer reaches back far enough, or that cannot be asked, has
   * its streams cut with a word to resubscribe.
   */
  private async catchUp(): Promise<void> {
    await Promise.all([...this.sessions].map(([sessionId, session]) => this.catchUpSession(sessionId, session.watchers)));
  }

  private async catchUpSession(sessionId: string, current: ReadonlySet<FeedWatch>): Promise<void> {
    // The executor comes back to the bus on its own time: no answer at first is not yet an end.
    for (let attempt = 1; ; attempt += 1) {
      const watchers = [...current];
      if (watchers.length === 0) return;
      const after = Math.min(...watchers.map((watch) => watch.deliveredId));
      try {
        const replayed = await this.bus.request(commands.sessionRpc.at(sessionId), { method: 'replay', after_event_id: after }, { timeoutMs: CALL_TIMEOUT_MS });
        if (replayed.first_available_id !== undefined && replayed.first_available_id > after + 1) for (const watch of watchers) watch.missed();
        else for (const watch of watchers) watch.push(...(replayed.events ?? []));
        return;
      } catch (error) {
        const unanswered = error instanceof MurmurError && error.code === 'E-BUS-004';
        if (unanswered && attempt < CATCH_UP_ATTEMPTS) {
          await new Promise((resolve) => setTimeout(resolve, CATCH_UP_RETRY_MS));
          continue;
        }
        for (const watch of watchers) unanswered ? watch.end() : watch.missed();
        return;
      }
    }
  }

  async watch(sessionId: string): Promise<FeedWatch> {
    if (this.open >= this.maxWatches) throw new TooManyStreams(this.maxWatches);
    let session = this.sessions.get(sessionId);
    if ((session?.watchers.size ?? 0) >= this.maxWatchesPerSession) throw new TooManyStreams(this.maxWatchesPerSession, 'session');
    if (!session) {
      const watchers = new Set<FeedWatch>();
      const subscription = this.bus.subscribe(topics.sessionEvents.at(sessionId), (event) => {
        for (const watch of watchers) watch.push(event);
      });
      session = { watchers, subscription, ready: this.bus.flush() };
      this.sessions.set(sessionId, session);
    }
    const watch = new FeedWatch(() => this.release(sessionId, watch));
    this.open += 1;
    session.watchers.add(watch);
    try {
      await session.ready;
    } catch (error) {
      // The bus lost its connection before it confirmed the subscription. Kept, the failed flush
      // would fail every later watch of this session until the door restarted: the entry goes
      // with it, and the next watch subscribes afresh (every watch waiting on it fails alike: none
      // of them ever had the subscription confirmed).
      session.watchers.delete(watch);
      this.open -= 1;
      if (this.sessions.get(sessionId) === session) {
        this.sessions.delete(sessionId);
        session.subscription.unsubscribe();
      }
      throw error;
    }
    return watch;
  }

  private release(sessionId: string, watch: FeedWatch): void {
    const session = this.sessions.get(sessionId);
    if (!session?.watchers.delete(watch)) return;
    this.open -= 1;
    if (session.watchers.size > 0) return;
    session.subscription.unsubscribe();
    this.sessions.delete(sessionId);
  }

  /** The door is stopping: every stream is told so (and can tell its client to resubscribe elsewhere). */
  shutdown(): void {
    for (const session of this.sessions.values()) for (const watch of session.watchers) watch.shutdown();
  }

  close(): void {
    this.shutdown();
    this.ended.unsubscribe();
    for (const session of this.sessions.values()) session.subscription.unsubscribe();
    this.sessions.clear();
  }
}

/**
 * How many events a watch holds for a reader that has not taken them. A client that stops reading
 * its stream would otherwise have the door keep everything its session says; past this, the
 * reader is told it fell behind (its stream ends, and a resubscribe with `Last-Event-ID` replays
 * what the session still keeps).
 */
export const WATCH_QUEUE_LIMIT = 1_024;

/**
 * How many bytes of events (as JSON) a watch holds for a reader that has not taken them: one event
 * may be most of a bus message, so a bound by count alone let one stalled stream hold ~1 024 MiB.
 */
export const WATCH_QUEUE_LIMIT_BYTES = 8 * 1024 * 1024;

/** An event's size as JSON, measured once however many watches hold it (the hub hands each the same object). */
const eventBytes = new WeakMap<SessionEvent, number>();
function bytesOf(event: SessionEvent): number {
  let bytes = eventBytes.get(event);
  if (bytes === undefined) {
    // Bytes, not characters: three to a character of CJK text, which a count of characters let in three times over.
    bytes = Buffer.byteLength(JSON.stringify(event));
    eventBytes.set(event, bytes);
  }
  return bytes;
}

/**
 * The session's events as they arrive, in id order, each at most once; and the session's end,
 * which closes every stream that was waiting on it.
 */
export class FeedWatch {
  /** In id order; `queued` holds the same ids, so a duplicate is found without a scan. */
  private readonly queue: SessionEvent[] = [];
  private readonly queued = new Set<number>();
  private queuedBytes = 0;
  private fellBehind = false;
  /** Events were lost while the bus was away, and cannot be had again: the reader resubscribes. */
  private lost = false;
  /** The id of the last event handed out: anything at or below it is a duplicate. */
  private delivered = 0;
  private wake: (() => void) | undefined;
  private ended = false;
  /** The code the session ended with, when it ended with one: its stream's last status says it. */
  private endedWith: string | undefined;
  private closed = false;
  private stopping = false;

  constructor(private readonly onClose: () => void) {}

  /** Adds events (live or replayed); an id already delivered or queued is ignored. */
  push(...events: SessionEvent[]): void {
    for (const event of events) {
      if (this.fellBehind) break;
      if (event.id <= this.delivered || this.queued.has(event.id)) continue;
      const bytes = bytesOf(event);
      if (this.queue.length >= WATCH_QUEUE_LIMIT || this.queuedBytes + bytes > WATCH_QUEUE_LIMIT_BYTES) {
        // Nothing queued will be handed out now (the reader is told it fell behind, and resubscribes
        // with Last-Event-ID): it is let go at once, not when a reader that stopped reading goes.
        this.fellBehind = true;
        this.queue.length = 0;
        this.queued.clear();
        this.queuedBytes = 0;
        break;
      }
      this.queuedBytes += bytes;
      // Live events come in id order: appended. A replayed one goes where its id puts it.
      const last = this.queue.at(-1);
      if (last === undefined || last.id < event.id) this.queue.push(event);
      else this.queue.splice(this.positionOf(event.id), 0, event);
      this.queued.add(event.id);
    }
    this.wake?.();
  }

  /** The first index whose event's id is above `id`. */
  private positionOf(id: number): number {
    let low = 0;
    let high = this.queue.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if ((this.queue[middle] as SessionEvent).id < id) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  /** The id of the last event handed out (0: none yet). */
  get deliveredId(): number {
    return this.delivered;
  }

  /** What the session said while the bus was away cannot be had: `next` says so at once. */
  missed(): void {
    this.lost = true;
    this.wake?.();
  }

  /** The session ended (with `code`, when its end carried one): once the queue is empty, `next` says so. */
  end(code?: string): void {
    this.ended = true;
    this.endedWith ??= code;
    this.wake?.();
  }

  /** The code the session ended with, if it ended with one. */
  get endCode(): string | undefined {
    return this.endedWith;
  }

  /** The door is stopping: `next` says so at once, whatever is still queued (another door replays it). */
  shutdown(): void {
    this.stopping = true;
    this.wake?.();
  }

  /**
   * The next event, `ended` once the session is gone, `door-stopping`, `fell-behind` once its
   * reader left `WATCH_QUEUE_LIMIT` events untaken, `missed` once events were lost to the bus,
   * `closed` once the watch is (its client went away), or `timeout` after `waitMs` of quiet.
   */
  async next(waitMs: number): Promise<SessionEvent | 'ended' | 'door-stopping' | 'fell-behind' | 'missed' | 'closed' | 'timeout'> {
    for (;;) {
      // A closed watch is told at once: waiting out `waitMs` for a client that is gone held a
      // stopping `mur run` for a whole heartbeat (15 s) after its watcher was killed.
      if (this.closed) return 'closed';
      if (this.stopping) return 'door-stopping';
      if (this.fellBehind) return 'fell-behind';
      if (this.lost) return 'missed';
      const event = this.queue.shift();
      if (event) {
        this.queued.delete(event.id);
        this.queuedBytes -= bytesOf(event);
        this.delivered = event.id;
        return event;
      }
      if (this.ended) return 'ended';
      const woken = await new Promise<boolean>((resolve) => {
        // Waiting for events never keeps a process alive by itself: whatever serves the stream does.
        const timer = setTimeout(() => resolve(false), waitMs).unref();
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
    if (this.closed) return;
    this.closed = true;
    this.onClose();
    this.wake?.();
  }
}
