import { MurmurError } from '../errors.js';
import type { ResolvedArtifact } from './registry.js';
import { sha256Hex } from './store.js';

/**
 * The bytes hash to what their source claimed, or the artifact is refused: checked before the
 * archive is opened, let alone anything in it compiled.
 */
export function verifyResolved(artifact: ResolvedArtifact): string {
  const actual = artifact.bytesSha256 ?? sha256Hex(artifact.bytes);
  if (actual !== artifact.claimedSha256.toLowerCase()) {
    throw new MurmurError(
      'E-REG-002',
      `artifact integrity check failed for ${artifact.name}@${artifact.version}: ${artifact.location} hashes to ${actual}, but its recorded sha256 is ${artifact.claimedSha256}`,
      {
        path: artifact.location,
        hint: 'the stored bytes were changed after publishing; republish or reinstall the artifact',
      },
    );
  }
  return actual;
}
