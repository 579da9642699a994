import { promises as fs } from 'node:fs';
import { MurmurError } from '../errors.js';

/**
 * The text of the `murmur.yaml` at `manifestPath`: `E-IO-001` when there is none (with `hint`,
 * what the caller can say about where to point), `E-IO-003` when it cannot be read.
 */
export async function readManifestText(manifestPath: string, hint?: string): Promise<string> {
  try {
    return await fs.readFile(manifestPath, 'utf8');
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
    throw new MurmurError(
      missing ? 'E-IO-001' : 'E-IO-003',
      missing ? `murmur.yaml not found at ${manifestPath}` : `failed to read murmur.yaml at ${manifestPath}: ${(error as Error).message}`,
      { path: manifestPath, ...(missing && hint ? { hint } : {}) },
    );
  }
}
