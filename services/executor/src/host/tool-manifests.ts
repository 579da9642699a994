import { parseArtifactManifest } from '@murmur/shared';
import { writeFileAtomic } from './atomic-file.js';
import path from 'node:path';

/**
 * An on-stage hook's `write-manifests`: each names a shell binary and the manifest the runtime
 * writes for it at `tools/<binary>/murmur.yaml`, overwriting the synthetic one. Upstream writes
 * whatever it is given wherever the name points; here a name must be one of the capsule's
 * `shell.allow` binaries (a hook describes tools, it does not add them, and a name like `../x`
 * would write outside `tools/`), and the content must parse as an artifact manifest. The first
 * refusal names what was refused and nothing is written.
 */
export function writeToolManifests(
  sessionDir: string,
  manifests: ReadonlyArray<{ binaryName: string; content: string }>,
  shellAllow: readonly string[],
): { ok: true; descriptions: Map<string, string> } | { ok: false; reason: string } {
  const descriptions = new Map<string, string>();
  for (const manifest of manifests) {
    const name = manifest.binaryName;
    if (!shellAllow.includes(name)) return { ok: false, reason: `'${name}' is not a binary in capabilities.shell.allow` };
    try {
      const parsed = parseArtifactManifest(manifest.content, `tools/${name}/murmur.yaml`);
      if (parsed.description?.trim()) descriptions.set(name, parsed.description.trim());
    } catch (error) {
      return { ok: false, reason: `the manifest for '${name}' is not a valid artifact manifest: ${error instanceof Error ? error.message : String(error)}` };
    }
  }
  for (const manifest of manifests) writeFileAtomic(path.join(sessionDir, 'tools', manifest.binaryName, 'murmur.yaml'), manifest.content);
  return { ok: true, descriptions };
}
