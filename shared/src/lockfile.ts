import * as z from 'zod';

/**
 * `murmur.lock`, beside `murmur.yaml`: which version and which bytes each declared artifact
 * resolved to. When present it is a promise: staging refuses an artifact whose version or sha256
 * differs from its pin (`E-RUN-003`). The digest key is `wasm` for every payload type, as upstream
 * writes it, so lockfiles move between the two implementations.
 */
export const LOCK_VERSION = 1;
export const LOCKFILE_NAME = 'murmur.lock';
/** The largest `murmur.lock` read: thousands of pins take a few hundred KB. */
export const LOCKFILE_MAX_BYTES = 8 * 1024 * 1024;

const nonBlank = (what: string) => z.string().refine((value) => value.trim() !== '', { message: `${what} must not be empty` });

export const LockedArtifactSchema = z.object({
  name: nonBlank('name'),
  resolved_version: nonBlank('resolved_version'),
  sha256: z.object({ wasm: nonBlank('sha256.wasm') }),
});
export type LockedArtifact = z.infer<typeof LockedArtifactSchema>;

export const MurmurLockSchema = z.object({
  lock_version: z.literal(LOCK_VERSION, { message: `unsupported lock_version (expected ${LOCK_VERSION})` }),
  // One pin a name: with two, which one a reader honoured was their order's to say.
  artifacts: z.array(LockedArtifactSchema).superRefine((artifacts, context) => {
    const first = new Map<string, number>();
    artifacts.forEach((entry, index) => {
      const earlier = first.get(entry.name);
      if (earlier === undefined) first.set(entry.name, index);
      else
        context.addIssue({
          code: 'custom',
          path: [index, 'name'],
          message: `'${entry.name.slice(0, 100)}' is pinned twice (artifacts[${earlier}] and artifacts[${index}]); a lock pins each artifact once`,
        });
    });
  }),
});
export type MurmurLock = z.infer<typeof MurmurLockSchema>;

/** `lock` with `entry` added, or replacing the entry of the same name in place. */
export function upsertLockEntry(lock: MurmurLock | undefined, entry: LockedArtifact): MurmurLock {
  const artifacts = [...(lock?.artifacts ?? [])];
  const index = artifacts.findIndex((existing) => existing.name === entry.name);
  if (index === -1) artifacts.push(entry);
  else artifacts[index] = entry;
  return { lock_version: LOCK_VERSION, artifacts };
}
