import { statSync } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '../errors.js';
import { type SmallTextFile, readSmallTextFile, readSmallTextFileSync } from './small-text-file.js';

/** The largest `murmur.yaml` read, from a project or an archive (it is read and parsed whole before anything else). */
export const MAX_MANIFEST_BYTES = 1024 * 1024;

/**
 * A manifest is read as an archive's is bounded (`MAX_MANIFEST_BYTES`), and must be UTF-8 as the
 * YAML it is: what `mur build` packs, every reader of the archive then takes.
 */
const MANIFEST_FILE: SmallTextFile = { what: 'murmur.yaml', maxBytes: MAX_MANIFEST_BYTES, notUtf8Code: 'E-MAN-002' };

/**
 * The text of the `murmur.yaml` at `manifestPath`: `E-IO-001` when there is none (with `hint`,
 * what the caller can say about where to point), `E-IO-003` when it cannot be read or is no
 * regular file of at most `MAX_MANIFEST_BYTES` (a FIFO is refused, never waited on).
 */
export async function readManifestText(manifestPath: string, hint?: string): Promise<string> {
  try {
    return await readSmallTextFile(manifestPath, MANIFEST_FILE);
  } catch (error) {
    throw unreadableManifest(manifestPath, error, hint);
  }
}

/** `readManifestText`, read at once: for a caller that reads a handful of small files in a row (`project-pack.ts`). */
export function readManifestTextSync(manifestPath: string, hint?: string): string {
  try {
    return readSmallTextFileSync(manifestPath, MANIFEST_FILE);
  } catch (error) {
    throw unreadableManifest(manifestPath, error, hint);
  }
}

function unreadableManifest(manifestPath: string, error: unknown, hint: string | undefined): MurmurError {
  if (error instanceof MurmurError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  // The path given was the manifest itself (or another file) where its directory was wanted.
  const given = path.dirname(manifestPath);
  if (code === 'ENOTDIR' && isFile(given)) {
    return new MurmurError('E-IO-001', `${given} is a file, not a capsule directory`, {
      path: given,
      // Named only when it does hold one: a file of any other directory (mur build /etc/passwd) sent the user to a directory without a manifest.
      hint: isFile(path.join(path.dirname(given), 'murmur.yaml'))
        ? `pass the directory that holds murmur.yaml: ${path.dirname(given)}`
        : `pass a capsule directory, one that holds a murmur.yaml (${path.dirname(given)} holds none)`,
    });
  }
  if (code === 'EISDIR')
    return new MurmurError('E-IO-003', `${manifestPath} is a directory, not a manifest`, {
      path: manifestPath,
      hint: 'a capsule directory holds its manifest as a file named murmur.yaml; move what is in that directory out of the way and write the manifest there',
    });
  const missing = code === 'ENOENT' || code === 'ENOTDIR';
  return new MurmurError(
    missing ? 'E-IO-001' : 'E-IO-003',
    missing ? `murmur.yaml not found at ${manifestPath}` : `failed to read murmur.yaml at ${manifestPath}: ${(error as Error).message}`,
    { path: manifestPath, ...(missing ? (hint ? { hint } : {}) : { hint: 'check that the file exists and that you may read it' }) },
  );
}

function isFile(file: string): boolean {
  try {
    return statSync(file).isFile();
  } catch {
    return false;
  }
}
