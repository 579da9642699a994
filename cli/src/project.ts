import { existsSync } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '@murmur/shared';
import { UsageError } from './output.js';

/** The nearest directory at or above `from` that holds a `murmur.yaml`: the project. */
export function findProjectRoot(from: string = process.cwd()): string | undefined {
  let dir = path.resolve(from);
  for (;;) {
    if (existsSync(path.join(dir, 'murmur.yaml'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

export function requireProjectRoot(from: string = process.cwd()): string {
  const root = findProjectRoot(from);
  if (!root) {
    throw new MurmurError('E-IO-001', 'no project root found (no murmur.yaml in current or parent directories)', {
      hint: 'run this inside a capsule project, or pass -g to use the global store',
    });
  }
  return root;
}

/** `--registry`: `local` (the global store), a roost URL, or absent (the default search). */
export type RegistryChoice = { kind: 'local' } | { kind: 'remote'; url: string } | { kind: 'default' };

export function registryChoice(flag: string | undefined): RegistryChoice {
  const value = flag?.trim();
  if (!value) return { kind: 'default' };
  if (value.toLowerCase() === 'local') return { kind: 'local' };
  if (!/^https?:\/\//.test(value)) {
    throw new UsageError(`--registry '${value}' is neither 'local' nor an http(s) URL`, {
      hint: 'use --registry local, or --registry http://127.0.0.1:7700 for a roost',
    });
  }
  return { kind: 'remote', url: value.replace(/\/+$/, '') };
}
