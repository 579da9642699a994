import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Written whole or not at all: a reader never sees half a file. Synchronous, for the host's
 * records between turns (`@murmur/shared/node`'s `writeFileAtomic` is the asynchronous one the
 * services use; the host does not load that package's Node helpers).
 *
 * Some of these files are in the workdir, where the guest writes too. The temporary name is
 * random and opened exclusively, so nothing the guest put there beforehand (a file, a symbolic
 * link to somewhere else) is written through; a write that fails leaves no temporary behind.
 */
export function writeFileAtomic(file: string, text: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    writeFileSync(temporary, text, { flag: 'wx' });
    renameSync(temporary, file);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}
