import { lstat, opendir } from 'node:fs/promises';
import path from 'node:path';

/**
 * The workdir's size against `capabilities.resources.workdir_max_bytes`, walked every `intervalMs`
 * (10 s; the executor's `MURMUR_WORKDIR_CHECK_MS`, for tests): the sizes of every entry that is not
 * a directory, symlinks counted as themselves and never followed, unreadable entries skipped.
 * The first walk over the ceiling reports it once and stops watching — the session is ending.
 *
 * The walk is asynchronous and yields between directories, so a workdir of many files slows
 * only the guard, never the executor's other sessions.
 */

export class WorkdirGuard {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private walking = false;

  constructor(
    private readonly workdir: string,
    private readonly maxBytes: number,
    private readonly onBreach: (observedBytes: number) => void,
    intervalMs: number,
  ) {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  private async check(): Promise<void> {
    if (this.walking || this.stopped) return;
    this.walking = true;
    try {
      const observed = await workdirBytes(this.workdir, this.maxBytes);
      if (observed > this.maxBytes && !this.stopped) {
        this.stop();
        this.onBreach(observed);
      }
    } finally {
      this.walking = false;
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/** The bytes under `root`; the walk ends early once past `stopAbove` (the answer is then "over"). */
export async function workdirBytes(root: string, stopAbove = Number.POSITIVE_INFINITY): Promise<number> {
  let total = 0;
  const pending = [root];
  while (pending.length > 0 && total <= stopAbove) {
    const dir = pending.pop() as string;
    let handle: Awaited<ReturnType<typeof opendir>>;
    try {
      handle = await opendir(dir);
    } catch {
      continue;
    }
    try {
      for await (const entry of handle) {
        const full = path.join(dir, entry.name);
        if (entry.isDirectory()) {
          pending.push(full);
          continue;
        }
        try {
          total += (await lstat(full)).size;
        } catch {
          // gone, or unreadable: skipped
        }
      }
    } catch {
      // the directory went away mid-walk
    }
  }
  return total;
}
