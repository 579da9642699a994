import { spawnSync } from 'node:child_process';
import { type Dirent, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** A fresh temporary directory, removed by the returned cleanup. */
export async function tempDir(prefix = 'murmur-test-'): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  return { dir, cleanup: () => fs.rm(dir, { recursive: true, force: true }) };
}

/** Every file and directory under `root`, relative and sorted: for "nothing was written" checks. */
export async function listTree(root: string): Promise<string[]> {
  const found: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    let entries: Dirent[];
    try {
      entries = await fs.readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const full = path.join(dir, entry.name);
      found.push(path.relative(root, full) + (entry.isDirectory() ? '/' : ''));
      if (entry.isDirectory()) await walk(full);
    }
  };
  await walk(root);
  return found.sort();
}

export async function writeFiles(root: string, files: Record<string, string | Uint8Array>): Promise<void> {
  for (const [name, content] of Object.entries(files)) {
    const file = path.join(root, name);
    await fs.mkdir(path.dirname(file), { recursive: true });
    await fs.writeFile(file, content);
  }
}

/**
 * A tmpfs of the test's own mounted at `dir` (`options` as `mount -o` takes them, e.g.
 * `ro,size=1m`), named `murmur-test` so that a leftover is found by name; or why none can be
 * mounted here (not root), for the test to say and skip on. The caller unmounts it.
 */
export function mountTmpfs(dir: string, options: string): { unmount(): void } | { why: string } {
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', options, 'murmur-test', dir], { encoding: 'utf8' });
  if (mounted.status !== 0) return { why: `a tmpfs cannot be mounted here (${mounted.stderr.trim() || mounted.error?.message})` };
  return { unmount: () => void spawnSync('umount', [dir]) };
}

/**
 * `mountTmpfs` for a test that needs the tmpfs: where none can be mounted, the test is skipped,
 * printing `${untested}: <why>` (`[sandbox] a full workdir not exercised`), and this never returns.
 */
export function tmpfsOrSkip(context: { skip(note?: string): never }, dir: string, options: string, untested: string): { unmount(): void } {
  const mounted = mountTmpfs(dir, options);
  if ('why' in mounted) {
    const why = `${untested}: ${mounted.why}`;
    console.warn(why);
    return context.skip(why);
  }
  return mounted;
}
