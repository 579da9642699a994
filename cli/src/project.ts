import { existsSync } from 'node:fs';
import path from 'node:path';
import { MurmurError, parseYamlSource } from '@murmur/shared';
import { UsageError } from './output.js';
import type { RoostCredentials } from '@murmur/shared/artifacts';
import { readManifestText } from '@murmur/shared/node';

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

/** Where `registry.default: remote` points (upstream's remote registry on this machine). */
export const DEFAULT_REMOTE_REGISTRY = 'http://localhost:7800';

/**
 * What the project's `murmur.yaml` says of its registry, as `--registry` would say it (SPEC §2.5):
 * `registry.remote_url`, else `registry.default` — `local`, or `remote`; undefined when it says
 * neither (or there is no readable manifest). Read by `mur publish` and `mur install` alike, where
 * only publish read it and an install went on to look for what it had just published elsewhere.
 */
export async function manifestRegistry(projectRoot: string | undefined = findProjectRoot()): Promise<string | undefined> {
  if (projectRoot === undefined) return undefined;
  const file = path.join(projectRoot, 'murmur.yaml');
  const text = await readManifestText(file).catch(() => undefined);
  if (text === undefined) return undefined;
  let registry: { remote_url?: unknown; default?: unknown } | undefined;
  try {
    registry = (parseYamlSource(text).value as { registry?: typeof registry } | null)?.registry;
  } catch {
    return undefined;
  }
  const given = (value: unknown): string | undefined => (typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined);
  const remote = given(registry?.remote_url);
  if (remote !== undefined) {
    if (!/^https?:\/\//.test(remote))
      throw new MurmurError('E-IO-003', `${file}: registry.remote_url '${remote.slice(0, 120)}' is not an http(s) URL`, {
        path: 'registry.remote_url',
        hint: 'give the roost URL, e.g. http://127.0.0.1:7700, or pass --registry',
      });
    return remote;
  }
  const choice = given(registry?.default);
  if (choice === undefined) return undefined;
  if (choice === 'local') return 'local';
  if (choice === 'remote') return DEFAULT_REMOTE_REGISTRY;
  throw new MurmurError('E-IO-003', `${file}: registry.default must be 'local' or 'remote', got '${choice.slice(0, 60)}'`, {
    path: 'registry.default',
    hint: 'set registry.default to local or remote, or registry.remote_url to a roost URL',
  });
}

/**
 * What of `MURMUR_ROOST_TOKEN` a publish to `url` carries. The token is the operator's, for the
 * registry the operator names — `--registry`, or the roost `MURMUR_ROOST_URL` names — and never
 * for one a project's `murmur.yaml` names on its own: a cloned project's `registry.remote_url`
 * would collect it with the first publish (npm binds a token to its registry for the same reason).
 */
export function publishCredentials(url: string, namedByFlag: boolean, env: NodeJS.ProcessEnv = process.env): RoostCredentials {
  const token = env.MURMUR_ROOST_TOKEN?.trim() || undefined;
  if (token === undefined || namedByFlag || sameOrigin(url, env.MURMUR_ROOST_URL)) return { token };
  return {
    withheld: `MURMUR_ROOST_TOKEN goes only to a registry you name, and ${url} is named by murmur.yaml's registry settings: publish with --registry ${url}, or set MURMUR_ROOST_URL to it, to send the token there`,
  };
}

function sameOrigin(url: string, other: string | undefined): boolean {
  if (!other?.trim()) return false;
  try {
    return new URL(url).origin === new URL(other.trim()).origin;
  } catch {
    return false;
  }
}
