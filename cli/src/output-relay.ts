/**
 * A session's output, relayed to one of `mur`'s own streams holding at most a bound of it.
 *
 * The output comes off the bus as fast as the capsule writes it, and the bus cannot be told to
 * wait. Written on regardless to a stdout read slowly (a pipe into a pager, `| (sleep; wc)`),
 * every chunk was queued in `mur`'s memory: a capsule printing for its whole deadline took `mur`
 * past a gigabyte, and the kernel's refusal of the queue (`ENOBUFS`) then killed it with a stack.
 * So while more than `maxPendingBytes` waits for the stream, what arrives is dropped, counted,
 * and said once on stderr as it begins; what was dropped in all is said when the session ends.
 * A reader that keeps up loses nothing.
 */
export class OutputRelay {
  private droppedBytes = 0;
  private dropping = false;
  /** Whether what the stream was last given left its line open: mur's own next line must not continue it. */
  private midLine = false;

  constructor(
    private readonly stream: Pick<NodeJS.WriteStream, 'write' | 'writableLength'>,
    private readonly name: 'stdout' | 'stderr',
    private readonly warn: (line: string) => void,
    private readonly maxPendingBytes = OUTPUT_PENDING_MAX_BYTES,
    /** What is relayed, for the warnings: a session's output, or a bus's messages (`mur events`). */
    private readonly what = "the capsule's output",
  ) {}

  write(text: string): void {
    if (this.stream.writableLength > this.maxPendingBytes) {
      this.droppedBytes += Buffer.byteLength(text);
      if (!this.dropping)
        this.warn(
          `warning: ${this.name} is not being read as fast as ${this.what} comes; ${this.what} is dropped until ${this.name} catches up (${this.maxPendingBytes} bytes wait there)`,
        );
      this.dropping = true;
      return;
    }
    this.dropping = false;
    if (text === '') return;
    this.stream.write(text);
    this.midLine = !text.endsWith('\n');
  }

  /**
   * Once the session has ended: its last line is ended if it left it open, so that what mur says
   * next (`status:`, an error) begins a line of its own rather than finishing the capsule's — a
   * capsule printing `status:  ok` without a newline made the real status line read as its tail,
   * and `grep '^status:'` found only the capsule's. Then what was dropped in all is said (nothing
   * when none was).
   */
  finish(): void {
    if (this.midLine) this.stream.write('\n');
    this.midLine = false;
    if (this.droppedBytes > 0) this.warn(`warning: ${this.droppedBytes} bytes of ${this.what} were dropped: ${this.name} was not read as fast as it came`);
    this.droppedBytes = 0;
  }
}

/** How much of a session's output may wait for a slow reader: far more than a terminal or a pipe holds at once. */
export const OUTPUT_PENDING_MAX_BYTES = 8 * 1024 * 1024;
