import { existsSync, promises as fs, readdirSync, rmdirSync } from 'node:fs';
import path from 'node:path';

/**
 * Removes a cgroup a test made, its child groups first, retrying for a while: a group whose
 * processes were just killed stays busy until the kernel has torn them down.
 */
export async function removeCgroup(dir: string): Promise<void> {
  for (let attempt = 0; attempt < 40; attempt += 1) {
    try {
      for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) await removeCgroup(path.join(dir, entry.name));
      rmdirSync(dir);
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/** The user an executor is run as where a test needs it unprivileged: the container image's. */
export const UNPRIVILEGED = { uid: 1000, gid: 1000 } as const;

/**
 * A cgroup v1 subtree (memory, pids, cpu) delegated to `UNPRIVILEGED`, as the container image's
 * entrypoint gives its executor one: what `MURMUR_CGROUP_PARENT` names for an executor run as that
 * user. `unavailable` says why this host cannot give one (not root, or not cgroup v1).
 */
export function delegatedCgroups(name: string): { parent: string; unavailable: string | undefined; delegate(): Promise<void>; remove(): Promise<void> } {
  const parent = `${name}-${process.pid}`;
  const groups = ['memory', 'pids', 'cpu'].map((controller) => path.join('/sys/fs/cgroup', controller, parent));
  const v1 = existsSync('/sys/fs/cgroup/memory') && !existsSync('/sys/fs/cgroup/cgroup.controllers');
  return {
    parent,
    unavailable:
      process.getuid?.() !== 0 ? 'delegating a cgroup subtree needs root' : !v1 ? 'this host is cgroup v2, and the subtree delegated is v1' : undefined,
    async delegate() {
      for (const group of groups) {
        await fs.mkdir(group, { recursive: true });
        await fs.chown(group, UNPRIVILEGED.uid, UNPRIVILEGED.gid);
        for (const file of readdirSync(group)) await fs.chown(path.join(group, file), UNPRIVILEGED.uid, UNPRIVILEGED.gid);
      }
    },
    // The sessions' own groups are gone already (the executor removes them); a straggler is not.
    async remove() {
      for (const group of groups) await removeCgroup(group);
    },
  };
}
