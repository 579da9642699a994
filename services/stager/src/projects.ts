import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { MurmurError, type ProjectListing, ProjectListingSchema, type SetFile, fileSetBytes } from '@murmur/shared';
import { type ArtifactSource, ArtifactStore, storeSource } from '@murmur/shared/artifacts';
import { type BlobCache, type BlobRef, type CreatedEntries, MAX_PROJECT_FILES } from '@murmur/shared/node';

/**
 * An uploaded capsule project, opened for one staging. The listing is fetched and vetted before a
 * single file is: its paths obey the `.mur.zip` entry rules (`E-ART-001` otherwise), its size the
 * staging limit (`E-PRJ-001`). Then every file is fetched into the stager's blob cache, its digest
 * verified, and the whole laid out (hard links into the cache) in a scratch directory that lives
 * as long as the staging: the project store and the lock are read from there with the same code
 * that reads them on any disk.
 */

/** A listing is a few hundred bytes per file; a megabyte is thousands of files. */
const MAX_LISTING_BYTES = 1024 * 1024;

export interface CapsuleFile {
  file: SetFile;
  /** The verified bytes on this machine. */
  local: string;
}

export interface OpenedProject {
  digest: string;
  label: string;
  listing: ProjectListing;
  /** The project laid out on this machine, for the store and the lock. */
  dir: string;
  files: Map<string, CapsuleFile>;
  /** The project store, named for messages as the requester knows it. */
  store(): ArtifactSource;
}

function describeIssues(error: { issues: Array<{ path: PropertyKey[]; message: string }> }): { unsafe: boolean; text: string } {
  const issues = error.issues.slice(0, 3);
  const unsafe = issues.some((issue) => /unsafe path|more than once|both a file and a directory|not normal/.test(issue.message));
  return { unsafe, text: issues.map((issue) => (issue.path.length > 0 ? `${issue.path.map(String).join('.')}: ${issue.message}` : issue.message)).join('; ') };
}

export async function openProject(options: {
  blobs: BlobCache;
  ref: BlobRef;
  scratchRoot: string;
  maxBytes: number;
  created: CreatedEntries;
  onFetch?: (what: string, bytes: number) => void;
}): Promise<OpenedProject> {
  const { blobs, ref } = options;
  if (ref.size > MAX_LISTING_BYTES) {
    throw new MurmurError(
      'E-PRJ-003',
      `the uploaded project listing ${ref.sha256} is ${ref.size} bytes, over the ${MAX_LISTING_BYTES}-byte limit for a listing`,
      { path: ref.sha256 },
    );
  }
  const listingFile = await blobs.fetch(ref, 'the uploaded project listing', options.created);
  let raw: unknown;
  try {
    raw = JSON.parse(await fs.readFile(listingFile, 'utf8'));
  } catch {
    throw new MurmurError('E-PRJ-003', `the uploaded project listing ${ref.sha256} is not JSON`, {
      path: ref.sha256,
      hint: 'pack the project with mur (packProject), which writes the listing this stager reads',
    });
  }
  const parsed = ProjectListingSchema.safeParse(raw);
  if (!parsed.success) {
    const { unsafe, text } = describeIssues(parsed.error);
    const label = typeof (raw as { label?: unknown })?.label === 'string' ? ` '${(raw as { label: string }).label}'` : '';
    throw new MurmurError(unsafe ? 'E-ART-001' : 'E-PRJ-003', `the uploaded project${label} is refused whole: ${text}`, { path: ref.sha256 });
  }
  const listing = parsed.data;
  const total = fileSetBytes(listing.files);
  if (listing.files.length > MAX_PROJECT_FILES || total > options.maxBytes) {
    throw new MurmurError(
      'E-PRJ-001',
      `the uploaded project '${listing.label}' is ${total} bytes in ${listing.files.length} files, over the stager's limit of ${options.maxBytes} bytes and ${MAX_PROJECT_FILES} files`,
      {
        path: listing.label,
      },
    );
  }
  const dir = path.join(options.scratchRoot, `${ref.sha256.slice(0, 16)}-${randomBytes(6).toString('hex')}`);
  const files = new Map<string, CapsuleFile>();
  try {
    await fs.mkdir(dir, { recursive: true });
    for (const file of listing.files) {
      if (!(await blobs.hasLocal(file.sha256))) options.onFetch?.(`${listing.label}: ${file.path}`, file.size);
      const local = await blobs.fetch(file, `the uploaded project '${listing.label}': ${file.path}`, options.created);
      files.set(file.path, { file, local });
    }
    await blobs.materialise(listing.files, dir, `the uploaded project '${listing.label}'`);
  } catch (error) {
    await fs.rm(dir, { recursive: true, force: true });
    throw error;
  }
  const storeRoot = path.join(dir, '.murmur', 'artifacts');
  return {
    digest: ref.sha256,
    label: listing.label,
    listing,
    dir,
    files,
    store() {
      const source = storeSource(new ArtifactStore(storeRoot, 'project'));
      const relative = (location: string): string => (location.startsWith(`${dir}${path.sep}`) ? path.relative(dir, location) : location);
      return {
        ...source,
        location: `.murmur/artifacts of '${listing.label}'`,
        async resolve(name, version) {
          // What the store says of a file names it by the staging's scratch copy: said back to the
          // requester (and on the bus) by the project's own path instead.
          const found = await source.resolve(name, version).catch((error: unknown) => {
            if (!(error instanceof MurmurError)) throw error;
            const shown = (text: string): string => text.split(`${dir}${path.sep}`).join('');
            throw new MurmurError(error.code, shown(error.message), {
              ...(error.hint ? { hint: shown(error.hint) } : {}),
              ...(error.path ? { path: `${relative(error.path)} in '${listing.label}'` } : {}),
            });
          });
          return found ? { ...found, location: `${relative(found.location)} in '${listing.label}'` } : undefined;
        },
      };
    },
  };
}
