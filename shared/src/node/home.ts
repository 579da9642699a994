import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * `MURMUR_HOME`, or `~/.murmur`: the machine's global store, caches and running records.
 * Read on every call rather than once, so a test (or the demo) can point a process at its own home.
 */
export function murmurHome(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env.MURMUR_HOME?.trim();
  if (explicit) return path.resolve(explicit);
  const home = env.HOME?.trim() || env.USERPROFILE?.trim() || os.homedir();
  return path.join(home, '.murmur');
}

/** `<home>/artifacts`: the global artifact store. */
export function globalStoreDir(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(murmurHome(env), 'artifacts');
}

/** `<home>/cache`: transpiled components and extracted payloads, content-addressed. */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env.MURMUR_CACHE_DIR?.trim();
  return explicit ? path.resolve(explicit) : path.join(murmurHome(env), 'cache');
}

/** `<project>/.murmur/artifacts`: the project store. */
export function projectStoreDir(projectDir: string): string {
  return path.join(projectDir, '.murmur', 'artifacts');
}

/**
 * The store of artifacts this runtime ships (`drivers/dist/store`, written by `npm run build`):
 * `MURMUR_DEFAULT_ARTIFACTS` when set (`none` turns it off), else the one found above this
 * module. Undefined when there is none, as in a checkout that was never built.
 */
export function defaultArtifactsDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const explicit = env.MURMUR_DEFAULT_ARTIFACTS?.trim();
  if (explicit === 'none') return undefined;
  if (explicit) return path.resolve(explicit);
  return shippedPath('store');
}

/**
 * The cache `npm run build` fills beside the default store (`drivers/dist`, laid out as a cache:
 * `transpiled/<transpiler>/<sha256>/`): the first-party components already transpiled, so no home
 * pays for transpiling a 12 MB driver on its first agent run. Found only beside this runtime's own
 * code and never named by the environment: a transpiled component is code the capsule host runs,
 * and is trusted as the runtime itself is. Undefined when the build made none.
 */
export function shippedCacheDir(): string | undefined {
  const transpiled = shippedPath('transpiled');
  return transpiled === undefined ? undefined : path.dirname(transpiled);
}

/** `drivers/dist/<name>` in the first directory above this module that has one. */
function shippedPath(name: string): string | undefined {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(dir, 'drivers', 'dist', name);
    if (existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}
