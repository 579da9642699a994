import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Written whole or not at all: a reader never sees half a file. Synchronous, for the host's
 * records between turns (`@murmur/shared/node`'s `writeFileAtomic` is the asynchronous one the
 * services use; the host does not load that package's Node helpers).
 */
export function writeFileAtomic(file: string, text: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(temporary, text);
  renameSync(temporary, file);
}
