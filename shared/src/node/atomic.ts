import { randomBytes } from 'node:crypto';
import { promises as fs, rmSync } from 'node:fs';
import path from 'node:path';

/**
 * A sibling temporary name for `target`: same directory (so the rename is atomic, never a
 * cross-device copy), dot-prefixed (so listings skip it), unique (so two writers never share it).
 * It names the target by its first `TEMPORARY_NAME_STEM` characters only: a target whose own name
 * is near the 255 bytes a name may have (a guest names its files as it likes) left no room for the
 * suffix, and its copy failed with ENAMETOOLONG where the target itself could be written.
 */
export function temporarySibling(target: string): string {
  const stem = Array.from(path.basename(target)).slice(0, TEMPORARY_NAME_STEM).join('');
  return path.join(path.dirname(target), `.${stem}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
}

/** Characters of the target's name a temporary name keeps: at 4 bytes each, with its suffix, still within 255 bytes. */
const TEMPORARY_NAME_STEM = 48;

/**
 * Temporary files (or directories) a long write holds: an interrupt (Ctrl-C, a TERM) while one is
 * written removes it before the process ends, as a failed write would, rather than leaving a hidden
 * `.name.pid.tmp` in the user's directory. Listened for only while one is held, so the process
 * otherwise ends on a signal exactly as it would have.
 */
const interruptible = new Set<string>();
/** A hangup too: node starts every program with it at its default, which ended the process with its temporary files left. */
const INTERRUPTS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

function removeOnInterrupt(signal: NodeJS.Signals): void {
  for (const file of interruptible) rmSync(file, { recursive: true, force: true });
  interruptible.clear();
  for (const each of INTERRUPTS) process.off(each, removeOnInterrupt);
  // With nobody else listening, the signal ends the process as if no one had listened at all.
  if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
}

/** Removes `file` if the process is interrupted before the returned release is called. */
export function removedIfInterrupted(file: string): () => void {
  // First among the signal's listeners: one that ends the process (`mur run`'s) must not run before it.
  if (interruptible.size === 0) for (const signal of INTERRUPTS) process.prependListener(signal, removeOnInterrupt);
  interruptible.add(file);
  return () => {
    if (!interruptible.delete(file) || interruptible.size > 0) return;
    for (const signal of INTERRUPTS) process.off(signal, removeOnInterrupt);
  };
}

export interface AtomicWriteOptions {
  mode?: number;
  /** fsync the file before the rename: for records that must survive a power cut (the lock). */
  fsync?: boolean;
  /**
   * Remove the temporary file if the process is interrupted while it is written
   * (`removedIfInterrupted`): for a command's long write into the user's directory (`mur build`'s
   * archive), not a service's, whose own shutdown finishes what it was writing.
   */
  interruptible?: boolean;
}

/**
 * Writes `data` to `target` through a temporary sibling and a rename, so a reader sees the whole
 * old content or the whole new content and never a half-written file, and a crash leaves at worst
 * a stray temporary file, never a truncated target.
 */
export async function writeFileAtomic(target: string, data: string | Uint8Array, options: AtomicWriteOptions = {}): Promise<void> {
  const temporary = temporarySibling(target);
  const release = options.interruptible ? removedIfInterrupted(temporary) : () => undefined;
  try {
    const handle = await fs.open(temporary, 'wx', options.mode ?? 0o644);
    try {
      await handle.writeFile(data);
      if (options.fsync) await handle.sync();
    } finally {
      await handle.close();
    }
    if (options.mode !== undefined) await fs.chmod(temporary, options.mode);
    await fs.rename(temporary, target);
  } catch (error) {
    await fs.rm(temporary, { force: true });
    throw namedFor(error, temporary, target);
  } finally {
    release();
  }
}

/**
 * A failed write named by the file it was for: a write or a sync names no file at all
 * (`ENOSPC: no space left on device, write`), and an open or a rename the temporary one, which
 * was never the user's.
 */
function namedFor(error: unknown, temporary: string, target: string): unknown {
  if (!(error instanceof Error) || typeof (error as NodeJS.ErrnoException).code !== 'string') return error;
  const failure = error as NodeJS.ErrnoException;
  failure.message = failure.message.includes(temporary) ? failure.message.split(temporary).join(target) : `${failure.message} '${target}'`;
  failure.path = target;
  return failure;
}

/**
 * Moves a fully prepared temporary directory into place as `target`. Returns false, and removes
 * the temporary directory, when `target` already exists: for content-addressed entries whoever
 * got there first wrote the same bytes, so losing the race is not an error.
 */
export async function renameDirectoryIntoPlace(temporary: string, target: string): Promise<boolean> {
  try {
    await fs.rename(temporary, target);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOTEMPTY' || code === 'EEXIST') {
      await fs.rm(temporary, { recursive: true, force: true });
      return false;
    }
    await fs.rm(temporary, { recursive: true, force: true });
    throw error;
  }
}

export async function pathExists(target: string): Promise<boolean> {
  try {
    await fs.lstat(target);
    return true;
  } catch {
    return false;
  }
}

/**
 * Removes `dir` and its parents up to (not including) `stop` while they are empty, so refused work
 * leaves not even an empty directory behind. A parent someone else is using is not empty, and
 * `rmdir` refuses it.
 */
export async function removeEmptyParents(dir: string, stop: string): Promise<void> {
  let current = path.resolve(dir);
  const boundary = path.resolve(stop);
  while (current.startsWith(`${boundary}${path.sep}`)) {
    try {
      await fs.rmdir(current);
    } catch {
      return;
    }
    current = path.dirname(current);
  }
}
