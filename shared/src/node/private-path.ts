import { statSync } from 'node:fs';
import path from 'node:path';

/**
 * Whether someone other than this user (and root) could replace `file`: the file itself not
 * theirs or root's, or a directory on its way from `/` that another user owns or may write. A
 * sticky directory (`/tmp`) lets nobody rename another's entry, and is safe to pass through. What
 * this process runs from a cache — the capsule host's node — must pass, or another local user
 * could put their program in its place (a home made under `umask 000`, a cache another user made).
 *
 * Returns why not, naming the path, or undefined when only this user and root can replace it.
 */
export function replaceableByOthers(file: string): string | undefined {
  const uid = process.getuid?.();
  // No uids to compare (not POSIX): nothing to judge by.
  if (uid === undefined) return undefined;
  const ownedSafely = (owner: number): boolean => owner === uid || owner === 0;
  const resolved = path.resolve(file);
  const stat = statSync(resolved, { throwIfNoEntry: false });
  if (stat && !ownedSafely(stat.uid)) return `${resolved} belongs to uid ${stat.uid}, not to this user (uid ${uid}) or root`;
  for (let dir = path.dirname(resolved); ; dir = path.dirname(dir)) {
    const each = statSync(dir, { throwIfNoEntry: false });
    if (each) {
      const mode = each.mode & 0o7777;
      if (!ownedSafely(each.uid)) return `${dir} belongs to uid ${each.uid}, not to this user (uid ${uid}) or root`;
      if (mode & 0o022 && !(mode & 0o1000))
        return `${dir} may be written by ${mode & 0o002 ? 'every user' : 'its group'} (mode ${mode.toString(8).padStart(4, '0')})`;
    }
    if (dir === path.dirname(dir)) return undefined;
  }
}
