import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, manifestIdentity, parsePackagedManifest } from '@murmur/shared';
import { ArtifactStore, RoostRegistryClient, inspectArchive } from '@murmur/shared/artifacts';
import { globalStoreDir, readManifestText } from '@murmur/shared/node';
import type { Output } from '../output.js';
import { manifestRegistry, publishCredentials, registryChoice } from '../project.js';

/**
 * `mur publish [zip]`: into the global store (or a roost with `--registry <url>`). Published
 * versions never change: publishing one that exists is `E-REG-003`.
 */
export async function publishCommand(zipArgument: string | undefined, options: { registry?: string; platform?: string }, output: Output): Promise<void> {
  const zipPath = zipArgument ?? (await defaultArtifactPath());
  let bytes: Buffer;
  try {
    bytes = await fs.readFile(zipPath);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new MurmurError(code === 'ENOENT' ? 'E-IO-001' : 'E-IO-003', `failed to read artifact at ${zipPath}: ${(error as Error).message}`, {
      path: zipPath,
      hint:
        code === 'EISDIR'
          ? 'pass the .mur.zip file, not a directory (mur build prints the path of the one it writes)'
          : 'pass the .mur.zip that mur build wrote (it prints its path), or run mur publish with none in the capsule directory',
    });
  }
  const inspected = await inspectArchive(bytes, zipPath, { publishing: true, ...(options.platform === undefined ? {} : { platform: options.platform }) });
  for (const warning of inspected.packaged.warnings) output.warn(warning);
  const { meta } = inspected;
  const choice = registryChoice(options.registry ?? (await manifestRegistry()));
  const namedByFlag = options.registry !== undefined;
  if (meta.runtime === 'native' && options.platform === undefined) output.out(`Platform: ${meta.platforms[0]?.join('-') ?? 'unknown'} (auto-detected)`);
  if (choice.kind === 'remote') {
    await new RoostRegistryClient(choice.url, publishCredentials(choice.url, namedByFlag)).publish(bytes, meta);
  } else {
    await new ArtifactStore(globalStoreDir(), 'global', { interruptible: true }).publish(bytes, meta);
  }
  output.out(`Published ${meta.name}@${meta.version}`);
}

/** `./<name>-<version>.mur.zip` for the project in the current directory, as `mur build` names it. */
async function defaultArtifactPath(): Promise<string> {
  const manifestPath = path.resolve('murmur.yaml');
  const text = await readManifestText(manifestPath, 'pass the .mur.zip to publish, or run this in the directory you built');
  // Read as `mur build` reads it, so a manifest without a name or version is refused here too.
  const { name, version } = manifestIdentity(parsePackagedManifest(text));
  const candidate = path.resolve(`${name.split('/').pop() as string}-${version}.mur.zip`);
  try {
    await fs.access(candidate);
  } catch {
    throw new MurmurError('E-IO-001', `default artifact path ${candidate} not found. Run 'mur build' first or pass an explicit artifact path.`, {
      path: candidate,
    });
  }
  return candidate;
}
