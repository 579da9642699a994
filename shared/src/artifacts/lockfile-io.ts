import { promises as fs } from 'node:fs';
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
