import * as z from 'zod';
import { MurmurError } from './errors.js';
import { PackagingTypeSchema } from './manifest/artifact.js';

/**
 * `<name>-<version>.meta.json` beside each stored artifact, and one entry of a registry index.
 * `runtime` is the packaging type; `artifact_runtime` the role (`tool`, `driver`, `hook`, `skill`,
 * or `capsule` for a packaged capsule). Upstream's exact shape, so stores are shared between
 * implementations.
 */
export const PlatformPairSchema = z.tuple([z.string(), z.string()]);

export const ArtifactMetaSchema = z.object({
  name: z.string(),
  version: z.string(),
  runtime: PackagingTypeSchema,
  artifact_runtime: z.string(),
  platforms: z.array(PlatformPairSchema).default([]),
  description: z.string().nullable().default(null),
  tags: z.array(z.string()).default([]),
});
export type ArtifactMeta = z.infer<typeof ArtifactMetaSchema>;

export const MetaFileSchema = z.object({ meta: ArtifactMetaSchema });

/** The meta of an artifact stored without one: upstream's fallback. */
export function fallbackMeta(name: string, version: string): ArtifactMeta {
  return { name, version, runtime: 'wasm', artifact_runtime: '', platforms: [], description: null, tags: [] };
}

/** The registry index roost serves: every stored artifact's meta. */
export const RegistryIndexSchema = z.array(ArtifactMetaSchema);

/** This machine's platform as upstream names it (`linux-x86_64`), or `unknown`. */
export function currentPlatform(platform: string = process.platform, arch: string = process.arch): string {
  const os = platform === 'linux' ? 'linux' : platform === 'darwin' ? 'darwin' : undefined;
  const cpu = arch === 'x64' ? 'x86_64' : arch === 'arm64' ? 'aarch64' : undefined;
  return os && cpu ? `${os}-${cpu}` : 'unknown';
}

/**
 * An operating system and an architecture, as upstream names them: lowercase letters, digits and
 * `_` each (`linux-x86_64`). A platform becomes part of a file name in a store, so nothing else is
 * one: a `/` or a `..` in it would climb out of the version's directory.
 */
const PLATFORM = /^([a-z0-9_]{1,32})-([a-z0-9_]{1,32})$/;

export function parsePlatform(value: string): [string, string] | undefined {
  const match = PLATFORM.exec(value);
  return match ? [match[1] as string, match[2] as string] : undefined;
}

/** `value` as a platform, or refused (`E-REG-006`) naming `where` it was given (`--platform`, a query). */
export function requirePlatform(value: string, where: string): [string, string] {
  const pair = parsePlatform(value);
  if (pair) return pair;
  throw new MurmurError('E-REG-006', `'${value.slice(0, 60)}' cannot name a platform: expected os-arch, e.g. linux-x86_64`, {
    path: where,
    hint: 'name an operating system and an architecture of lowercase letters, digits and _, joined by one hyphen: linux-x86_64, linux-aarch64, darwin-aarch64',
  });
}
