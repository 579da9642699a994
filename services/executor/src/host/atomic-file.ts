import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Written whole or not at all: a reader never sees half a file. Synchronous, for the host's
 * records between turns and the glue cache's producer (`@murmur/shared/node`'s `writeFileAtomic`
 * is the asynchronous one the services use; neither of those processes loads that package, whose
 * load alone is a few hundred milliseconds of their start).
 *
 * Some of these files are in the workdir, where the guest writes too. The temporary name is
 * random and opened exclusively, so nothing the guest put there beforehand (a file, a symbolic
 * link to somewhere else) is written through; a write that fails leaves no temporary behind.
 *
 * The file it replaces is removed just before the rename, so a reader in those microseconds
 * finds none (never half of one). Renamed over an existing file, the new one is flushed to disk
 * first (ext4's replace-by-rename safeguard), which held the host's only thread ~0.6 ms for every
 * task's `out/result.txt`: a fifth of an echo task's time. These are records, not durable state:
 * after a crash the session is over anyway.
 */
export function writeFileAtomic(file: string, text: string | Uint8Array): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    writeFileSync(temporary, text, { flag: 'wx' });
    rmSync(file, { force: true });
    renameSync(temporary, file);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}
