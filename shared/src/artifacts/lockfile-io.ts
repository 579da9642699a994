import { promises as fs } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify as stringifyYaml } from 'yaml';
import { MurmurError } from '../errors.js';
import { type MurmurLock, MurmurLockSchema } from '../lockfile.js';
import { writeFileAtomic } from '../node/atomic.js';
import { parseYamlSource } from '../manifest/yaml-source.js';

function describe(error: { issues: Array<{ path: PropertyKey[]; message: string }> }): string {
  const issue = error.issues[0];
  if (!issue) return 'it does not match the lock format';
  const where = issue.path.map(String).join('.');
  return where ? `${where}: ${issue.message}` : issue.message;
}

/** `murmur.lock` at `file`, or undefined when there is none. A lock that does not parse is refused. */
export async function readLockfile(file: string): Promise<MurmurLock | undefined> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new MurmurError('E-IO-003', `failed to read murmur.lock at ${file}: ${(error as Error).message}`, { path: file });
  }
  let raw: unknown;
  try {
    // Read like the manifest: `resolved_version: 1.0` stays the text "1.0".
    raw = parseYamlSource(text, 'murmur.lock').value;
  } catch (error) {
    throw new MurmurError('E-RUN-003', `invalid murmur.lock: ${(error as Error).message.replace(/^murmur\.lock: /, '')}`, {
      path: file,
      hint: 'fix or delete murmur.lock; the next run writes a fresh one',
    });
  }
  const parsed = MurmurLockSchema.safeParse(raw);
  if (!parsed.success) {
    throw new MurmurError('E-RUN-003', `invalid murmur.lock: ${describe(parsed.error)}`, {
      path: file,
      hint: 'fix or delete murmur.lock; the next run writes a fresh one',
    });
  }
  return parsed.data;
}

/** Writes the lock through a fsynced temporary file and a rename: never half a lock. */
export async function writeLockfile(file: string, lock: MurmurLock): Promise<void> {
  const parsed = MurmurLockSchema.safeParse(lock);
  if (!parsed.success) throw new MurmurError('E-RUN-003', `refusing to write an invalid murmur.lock: ${describe(parsed.error)}`, { path: file });
  const valid = parsed.data;
  const text = stringifyYaml(valid, { defaultStringType: 'PLAIN', defaultKeyType: 'PLAIN' });
  try {
    await writeFileAtomic(file, text, { fsync: true });
  } catch (error) {
    throw new MurmurError('E-IO-003', `failed to write murmur.lock at ${file}: ${(error as Error).message}`, { path: file });
  }
}

/** How long a writer waits for another to finish with the lock before it gives up. */
const LOCK_TURN_WAIT_MS = 10_000;

/**
 * Runs `change` — read the lock, act, write it — while no other writer of `file` does: without a
 * turn each, two `mur install`s at once both read the same lock and the second write loses the
 * first's entry. The turn is a file beside the lock made with `O_EXCL` and holding the writer's
 * pid; one whose writer is gone (it crashed) is taken over.
 */
export async function withLockfileTurn<T>(file: string, change: () => Promise<T>): Promise<T> {
  const turn = `${file}.writing`;
  const started = Date.now();
  for (;;) {
    try {
      const handle = await fs.open(turn, 'wx', 0o644);
      await handle.writeFile(String(process.pid));
      await handle.close();
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new MurmurError('E-IO-003', `failed to take a turn at writing murmur.lock (${turn}): ${(error as Error).message}`, { path: turn });
      }
    }
    const holder = Number((await fs.readFile(turn, 'utf8').catch(() => '')).trim());
    if (Number.isInteger(holder) && holder > 0 && !processAlive(holder)) {
      await fs.rm(turn, { force: true });
      continue;
    }
    if (Date.now() - started > LOCK_TURN_WAIT_MS) {
      throw new MurmurError(
        'E-IO-003',
        `murmur.lock is being written by another mur (pid ${holder || 'unknown'}) and was not released within ${LOCK_TURN_WAIT_MS / 1000}s`,
        {
          path: turn,
          hint: `wait for the other mur to finish; if none is running, remove ${turn}`,
        },
      );
    }
    await sleep(25);
  }
  try {
    return await change();
  } finally {
    await fs.rm(turn, { force: true });
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
