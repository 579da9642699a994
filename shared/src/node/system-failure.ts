import { accessSync, constants, existsSync, statfsSync } from 'node:fs';
import path from 'node:path';

/**
 * What to do about the operating system's refusal of a file operation, by its `code`. These come
 * from the paths a person gave or keeps (a directory where a file belongs, a full disk), and are
 * theirs to mend: a refusal that wraps one says what was refused, and this says what to do.
 */
const SYSTEM_FAILURE_HINTS: Readonly<Record<string, string>> = {
  ENOENT: 'check that the path exists and is spelled as intended',
  EISDIR: 'a directory is where a file is expected: name the file, or move the directory aside',
  ENOTDIR: 'a file is where a directory is expected along that path: move it aside, or name another path',
  EEXIST: 'something is already at that path: move it aside, or name another path',
  EACCES: 'this user may not do that there: check the permissions along the path',
  EPERM: 'this user may not do that there: check the permissions and ownership along the path',
  ENOSPC: 'the file system is full: free some space, then run it again',
  EDQUOT: 'the disk quota is used up: free some space, then run it again',
  EROFS: 'that file system is read-only: name a path on a writable one',
  ENAMETOOLONG: 'the path is longer than the file system takes: use a shorter one',
  ELOOP: 'the path goes round a loop of symbolic links: name the real path',
  EMFILE: 'too many files are open: raise the limit (ulimit -n), or close what holds them',
  ERR_FS_FILE_TOO_LARGE: 'the file is larger than the 2 GiB mur reads at once: leave it out, or make it smaller',
};

/**
 * The code that says what went wrong. Node's recursive `mkdir` answers `ENOENT` wherever it could
 * not make a directory — on a read-only file system (`EROFS`), in a directory this user may not
 * write (`EACCES`), on a full one (`ENOSPC`) too — so such an `ENOENT` is asked again of the
 * nearest directory that exists: its hint had said to check that the path exists.
 */
export function systemFailureOf(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const { code, syscall, path: failed } = error as NodeJS.ErrnoException;
  if (code !== 'ENOENT' || syscall !== 'mkdir' || typeof failed !== 'string') return code;
  let existing = path.dirname(path.resolve(failed));
  while (!existsSync(existing) && existing !== path.dirname(existing)) existing = path.dirname(existing);
  try {
    accessSync(existing, constants.W_OK);
  } catch (cause) {
    return (cause as NodeJS.ErrnoException).code ?? code;
  }
  // Writable, and still nothing could be made in it: no block or no inode left.
  try {
    const space = statfsSync(existing);
    if (space.bavail === 0 || space.ffree === 0) return 'ENOSPC';
  } catch {
    // not asked: the code stands
  }
  return code;
}

/** The next step for an error the operating system raised, when its code has a usual one. */
export function systemFailureHint(error: unknown): string | undefined {
  const code = systemFailureOf(error);
  return code === undefined ? undefined : SYSTEM_FAILURE_HINTS[code];
}

/**
 * The code a refusal that wraps the operating system's is given: `E-IO-002` when this user may not
 * (upstream's "host permission denied"), `E-IO-003` for any other failure of input or output.
 */
export function systemFailureCode(error: unknown): 'E-IO-002' | 'E-IO-003' {
  const code = systemFailureOf(error);
  return code === 'EACCES' || code === 'EPERM' ? 'E-IO-002' : 'E-IO-003';
}
