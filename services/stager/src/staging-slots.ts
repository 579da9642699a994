import { MurmurError } from '@murmur/shared';

/** How many stagings a stager works on at once unless its operator says otherwise (`MURMUR_STAGER_CONCURRENCY`). */
export const DEFAULT_STAGER_CONCURRENCY = 4;
/** How many may wait for a turn (`MURMUR_STAGER_QUEUE`). */
export const DEFAULT_STAGER_QUEUE = 64;

/**
 * How many stagings a stager works on at once, and how many wait for a turn, in the order they
 * came. A staging holds what it reads in memory — an uploaded project, an archive's entries
 * inflated, up to twice the per-entry ceiling — and its transpiles queue behind one worker
 * anyway: with no bound, a burst of large stagings (or of zip bombs, each within its ceiling) took
 * a stager's memory, and every staging in it died with the process.
 *
 * One that comes when the queue is full is refused at once (`E-BUS-007`, naming both bounds), so
 * its requester hears why rather than time out behind work it cannot see. A waiting staging is
 * told how many are ahead of it whenever that changes, which also tells its requester the stager
 * is alive.
 */
export class StagingSlots {
  private running = 0;
  private readonly waiting: Array<{ start: () => void; refuse: (error: MurmurError) => void; queued: (ahead: number) => void }> = [];
  private closedWith: MurmurError | undefined;

  constructor(
    readonly concurrency: number,
    readonly queueLimit: number,
    /** What a refusal calls the stager: `the stager stager-1a2b`. */
    private readonly name: string,
  ) {}

  /** Runs `work` when a slot is free (at once if one is), telling `queued` how many wait ahead until then. */
  async run<T>(work: () => Promise<T>, queued: (ahead: number) => void): Promise<T> {
    await this.take(queued);
    try {
      return await work();
    } finally {
      this.release();
    }
  }

  /** Refuses every staging still waiting with `error`, and every later one; those running finish (or are abandoned by their owner). */
  close(error: MurmurError): void {
    this.closedWith = error;
    for (const waiter of this.waiting.splice(0)) waiter.refuse(error);
  }

  private take(queued: (ahead: number) => void): Promise<void> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (this.running < this.concurrency) {
      this.running += 1;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.queueLimit) {
      return Promise.reject(
        new MurmurError(
          'E-BUS-007',
          `${this.name} is busy: ${this.running} stagings are running (MURMUR_STAGER_CONCURRENCY) and ${this.waiting.length} waiting (MURMUR_STAGER_QUEUE)`,
          { hint: 'stage again in a moment; an operator can run more stagers, or raise their bounds' },
        ),
      );
    }
    return new Promise<void>((start, refuse) => {
      this.waiting.push({ start, refuse, queued });
      queued(this.waiting.length - 1);
    });
  }

  private release(): void {
    const next = this.waiting.shift();
    if (!next) {
      this.running -= 1;
      return;
    }
    // The slot passes straight to the next in line; those behind it are one nearer.
    next.start();
    for (const [ahead, waiter] of this.waiting.entries()) waiter.queued(ahead);
  }
}
