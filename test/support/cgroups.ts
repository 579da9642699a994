import { readdirSync, rmdirSync } from 'node:fs';
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
