import { type CapsuleManifest, MurmurError, type MurmurLock } from '@murmur/shared';
import { ArtifactStore, type StoredArtifact, inspectArchive } from '@murmur/shared/artifacts';
import { defaultArtifactsDir, globalStoreDir, projectStoreDir } from '@murmur/shared/node';

/**
 * One verdict per artifact the manifest declares, decided the way staging decides it, so a green
 * doctor line means `mur run` would take the same artifact: found in the project store, else the
 * global store, else the artifacts this runtime ships (the stores a local run resolves from); its
 * bytes hashing to the digest recorded beside them; and, when `murmur.lock` exists, an entry for
 * it pinning the manifest's version and those bytes' sha256.
 *
 * Checked in upstream's order, first failure wins: a version the lock already contradicts is not
 * hashed as well, so one drifted artifact is one failure.
 */
export type ArtifactVerdict =
  /** A `source:` skill: read from the project at staging, never resolved, never locked. */
  | { kind: 'local-source' }
  | { kind: 'ok'; stored: StoredArtifact }
  | { kind: 'missing' }
  | { kind: 'lock-entry-missing' }
  | { kind: 'lock-version-mismatch'; pinned: string }
  /** The bytes no longer hash to their own `.sha256` sidecar: the store was changed after install. */
  | { kind: 'store-digest-mismatch'; stored: StoredArtifact; actual: string }
  | { kind: 'lock-digest-mismatch'; stored: StoredArtifact; expected: string; actual: string }
  /** The store refused to say (an empty sidecar), or the archive is not what staging could run: its own words. */
  | { kind: 'unreadable'; reason: string };

export interface ArtifactCheck {
  name: string;
  version: string;
  /** What the manifest declares it as (`tool`, `driver`, `hook`, `skill`). */
  role: string;
  /** `name@version`, what every line and fix names. */
  reference: string;
  verdict: ArtifactVerdict;
}

/** The stores a local `mur run` resolves from, in its order. */
export function localStores(projectRoot: string, env: NodeJS.ProcessEnv = process.env): ArtifactStore[] {
  const shipped = defaultArtifactsDir(env);
  return [
    new ArtifactStore(projectStoreDir(projectRoot), 'project'),
    new ArtifactStore(globalStoreDir(env), 'global'),
    ...(shipped ? [new ArtifactStore(shipped, 'default')] : []),
  ];
}

async function firstStored(stores: readonly ArtifactStore[], name: string, version: string): Promise<StoredArtifact | undefined> {
  for (const store of stores) {
    const stored = await store.resolve(name, version);
    if (stored) return stored;
  }
  return undefined;
}

async function verdictFor(
  declaration: CapsuleManifest['artifacts'][number],
  stores: readonly ArtifactStore[],
  lock: MurmurLock | undefined,
): Promise<ArtifactVerdict> {
  if (declaration.source !== undefined) return { kind: 'local-source' };
  const { name, version } = declaration;
  let stored: StoredArtifact | undefined;
  try {
    stored = await firstStored(stores, name, version);
  } catch (error) {
    return { kind: 'unreadable', reason: (error as Error).message };
  }
  // Nothing on disk to hash, so a missing artifact never also gets a lock verdict.
  if (!stored) return { kind: 'missing' };
  const pin = lock?.artifacts.find((entry) => entry.name === name);
  if (lock && !pin) return { kind: 'lock-entry-missing' };
  if (pin && pin.resolved_version !== version) return { kind: 'lock-version-mismatch', pinned: pin.resolved_version };
  const actual = stored.bytesSha256;
  if (actual !== stored.recordedSha256.toLowerCase()) return { kind: 'store-digest-mismatch', stored, actual };
  if (pin && pin.sha256.wasm.toLowerCase() !== actual) return { kind: 'lock-digest-mismatch', stored, expected: pin.sha256.wasm, actual };
  const refusal = await archiveRefusal(stored, name, version);
  if (refusal) return { kind: 'unreadable', reason: refusal };
  return { kind: 'ok', stored };
}

/**
 * What staging would refuse of the archive itself, its digest matching: bytes that are another
 * artifact's (a store whose files were swapped, digests and lock rewritten to match), or an
 * archive staging cannot read (a payload that is no component). A digest alone passed both.
 */
async function archiveRefusal(stored: StoredArtifact, name: string, version: string): Promise<string | undefined> {
  try {
    const { meta } = await inspectArchive(stored.bytes, stored.zipPath);
    if (meta.name !== name || meta.version !== version) return `E-REG-002: ${stored.zipPath} holds ${meta.name}@${meta.version}, not ${name}@${version}`;
    return undefined;
  } catch (error) {
    if (error instanceof MurmurError) return `${error.code}: ${error.message}`;
    throw error;
  }
}

export async function checkArtifacts(manifest: CapsuleManifest, stores: readonly ArtifactStore[], lock: MurmurLock | undefined): Promise<ArtifactCheck[]> {
  const checks: ArtifactCheck[] = [];
  for (const declaration of manifest.artifacts) {
    checks.push({
      name: declaration.name,
      version: declaration.version,
      role: declaration.runtime,
      reference: `${declaration.name}@${declaration.declared_version ?? declaration.version}`,
      verdict: await verdictFor(declaration, stores, lock),
    });
  }
  return checks;
}

/** Lock entries for artifacts the manifest no longer declares: harmless to a run, worth a mention. */
export function undeclaredPins(manifest: CapsuleManifest, lock: MurmurLock): string[] {
  const declared = new Set(manifest.artifacts.map((artifact) => artifact.name));
  return lock.artifacts.filter((entry) => !declared.has(entry.name)).map((entry) => entry.name);
}
