import { promises as fs, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { MurmurError } from '../errors.js';

/**
 * The text of the `murmur.yaml` at `manifestPath`: `E-IO-001` when there is none (with `hint`,
 * what the caller can say about where to point), `E-IO-003` when it cannot be read.
 */
export async function readManifestText(manifestPath: string, hint?: string): Promise<string> {
  try {
    return await fs.readFile(manifestPath, 'utf8');
  } catch (error) {
    throw unreadableManifest(manifestPath, error, hint);
  }
}

/** `readManifestText`, read at once: for a caller that reads a handful of small files in a row (`project-pack.ts`). */
export function readManifestTextSync(manifestPath: string, hint?: string): string {
  try {
    return readFileSync(manifestPath, 'utf8');
  } catch (error) {
    throw unreadableManifest(manifestPath, error, hint);
  }
}

function unreadableManifest(manifestPath: string, error: unknown, hint: string | undefined): MurmurError {
  const code = (error as NodeJS.ErrnoException).code;
  // The path given was the manifest itself (or another file) where its directory was wanted.
  const given = path.dirname(manifestPath);
  if (code === 'ENOTDIR' && isFile(given)) {
    return new MurmurError('E-IO-001', `${given} is a file, not a capsule directory`, {
      path: given,
      hint: `pass the directory that holds murmur.yaml: ${path.dirname(given)}`,
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
