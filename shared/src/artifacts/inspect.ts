import { type ArtifactMeta, currentPlatform, parsePlatform, requirePlatform } from '../artifact-meta.js';
import { MurmurError } from '../errors.js';
import {
  type PackagedManifest,
  type PackagingType,
  artifactNameProblem,
  indexEntryRefusal,
  packagingTypeOf,
  parsePackagedManifest,
} from '../manifest/artifact.js';
import { MurZip } from './mur-zip.js';
import { isWasmComponent } from './wasm-component.js';
import { sha256Hex } from './store.js';

export interface InspectedArchive {
  packaged: PackagedManifest;
  meta: ArtifactMeta;
  sha256: string;
  entries: string[];
}

/**
 * What staging reads of an artifact that is not a component, as its refusal when the archive
 * lacks it: a native tool's binary at `bin/<name>`, a skill's `skill.md` at the root. `mur build`
 * packs neither without it; an archive made by other means is refused here, at publish and
 * install, as at staging.
 */
export function missingPayload(zip: MurZip, packaging: PackagingType, name: string, label: string): MurmurError | undefined {
  if (packaging === 'native') {
    const binary = `bin/${name.split('/').pop() as string}`;
    if (zip.has(binary)) return undefined;
    return new MurmurError(
      'E-ART-003',
      `${label}: failed to read native binary at '${binary}' from the archive (ensure the binary is at ${binary} inside the .mur.zip)`,
    );
  }
  if (packaging === 'static' && !zip.has('skill.md'))
    return new MurmurError('E-ART-003', `${label}: skill.md not found at the archive root (ensure skill.md is at the root of the .mur.zip)`);
  return undefined;
}

/**
 * Opens an archive with every guard, reads every entry (each held to its declared size and
 * checksum), reads its manifest, and derives the meta a store keeps for it. What `mur publish`,
 * `mur install <zip>` and roost's publish endpoint all do before storing bytes they were handed,
 * so none of them stores an archive that staging would later refuse: a published version cannot
 * be replaced, so a damaged one stored would stay unusable under its name.
 */
export async function inspectArchive(bytes: Uint8Array, label: string, options: { platform?: string; publishing?: boolean } = {}): Promise<InspectedArchive> {
  const zip = await MurZip.open(bytes, { label });
  try {
    for (const name of zip.names) await zip.verify(name);
    const text = await zip.manifestText();
    let packaged: PackagedManifest;
    try {
      packaged = parsePackagedManifest(text);
    } catch (error) {
      if (error instanceof MurmurError)
        throw new MurmurError(error.code, `${label}: ${error.message}`, {
          ...(error.hint ? { hint: error.hint } : {}),
          ...(error.path ? { path: error.path } : {}),
        });
      throw error;
    }
    // The rule `mur build` packs by: a name no build makes is no name a manifest can declare, and a
    // published version cannot be replaced.
    const nameProblem = artifactNameProblem(packaged.manifest.name);
    if (nameProblem) {
      throw new MurmurError('E-MAN-003', `${label}: invalid artifact name '${packaged.manifest.name.slice(0, 120)}': ${nameProblem}`, {
        path: 'name',
        hint: 'artifact names are lowercase letters, digits and inner hyphens, e.g. my-tool (optionally namespace/my-tool); pack it again with mur build',
      });
    }
    // Held where the archive becomes an index entry; one already stored is read whatever it says.
    const indexRefusal = options.publishing ? indexEntryRefusal(packaged, 'E-MAN-003', label) : undefined;
    if (indexRefusal) throw indexRefusal;
    const runtime = packaged.kind === 'artifact' ? packagingTypeOf(packaged.manifest) : zip.hasRootWasm() ? 'wasm' : 'static';
    // What `mur build` refuses to pack is not stored either: a core module or other bytes under a
    // `.wasm` name were published and installed, passed `mur doctor`, and failed only at a run.
    if (runtime === 'wasm') {
      const wasm = zip.rootWasmName();
      if (!isWasmComponent(await zip.read(wasm))) {
        throw new MurmurError('E-BLD-003', `${label}: ${wasm} is not a WebAssembly component (a core module, or not wasm at all)`, {
          path: wasm,
          hint: 'build it as a component (componentize-js, cargo component, or wasm-tools component new) and pack it with mur build',
        });
      }
    }
    // A capsule without a component is an agent's (its model is its driver); an artifact's payload is what staging reads.
    const missing = packaged.kind === 'artifact' ? missingPayload(zip, runtime, packaged.manifest.name, label) : undefined;
    if (missing) throw missing;
    let platforms: Array<[string, string]> = [];
    if (options.platform !== undefined) {
      // A platform names a native build; any other archive is the same on every platform, and one
      // marked as a platform's build would shadow the generic one there.
      if (runtime !== 'native')
        throw new MurmurError('E-MAN-003', `${label}: a platform build must be a native artifact; this one is ${runtime}`, {
          path: 'platform',
          hint: 'publish it without --platform (a platform is for execution: native artifacts)',
        });
      platforms = [requirePlatform(options.platform, '--platform')];
    } else if (runtime === 'native') {
      const pair = parsePlatform(currentPlatform());
      if (!pair)
        throw new MurmurError('E-IO-003', 'cannot auto-detect the platform for a native artifact on this host', {
          hint: 'pass --platform <os-arch>, e.g. linux-x86_64',
        });
      platforms = [pair];
    }
    const meta: ArtifactMeta = {
      name: packaged.manifest.name,
      version: packaged.manifest.version,
      runtime,
      artifact_runtime: packaged.kind === 'capsule' ? 'capsule' : packaged.manifest.runtime,
      platforms,
      description: packaged.manifest.description ?? null,
      tags: packaged.kind === 'artifact' ? packaged.manifest.tags : [],
    };
    return { packaged, meta, sha256: sha256Hex(bytes), entries: zip.names };
  } finally {
    zip.close();
  }
}
