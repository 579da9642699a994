import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The file `relative` inside workspace package `name`, found from `from` (an `import.meta.url`)
 * by walking up to the nearest `node_modules/<name>`, or, inside the workspace itself, by
 * `fallback` relative to `from`. Code that starts workers or processes from its own files uses
 * this instead of paths relative to `import.meta.url`, which stop being true once the code is
 * bundled into another package's output.
 */
export function packageFile(name: string, relative: string, from: string, fallback: string): string {
  let dir = path.dirname(fileURLToPath(from));
  for (;;) {
    const candidate = path.join(dir, 'node_modules', ...name.split('/'), relative);
    if (existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return path.resolve(path.dirname(fileURLToPath(from)), fallback);
}
