import { readlinkSync } from 'node:fs';
import { MurmurError } from '../errors.js';

/**
 * Refuses `file`, which could not be found, when it is a symbolic link to nothing (a dotfiles
 * checkout that is not there): such a file is not absent, and is neither passed over as if it
 * were nor replaced by a file of mur's own.
 */
export function refuseDanglingLink(file: string, doing: 'read' | 'write', hint: string): void {
  let leadsTo: string;
  try {
    leadsTo = readlinkSync(file);
  } catch {
    return;
  }
  throw new MurmurError('E-IO-002', `cannot ${doing} ${file}: it is a link to ${leadsTo}, which does not exist`, { path: file, hint });
}
