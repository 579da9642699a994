import * as z from 'zod';

/**
 * A set of files named by content: each a relative path, the sha256 of its bytes, its size and
 * whether it is executable. This is how anything bigger than a message crosses the bus — a packed
 * capsule project, a transpiled bundle, an artifact's payload — the bytes themselves living in the
 * bus's object store under their digest. A reader fetches what it lacks, verifies every digest
 * before it uses a byte, and keeps what it fetched: the second time, it is a local hit.
 *
 * Paths obey the `.mur.zip` entry rules, checked when the set is parsed, so a set that names
 * `../x`, an absolute path or one path twice never reaches the code that writes files.
 */

export const Sha256HexSchema = z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex sha256');

/**
 * Whether `text` holds a control character: C0, DEL or C1. No path written one per line may hold
 * one, and C1 counts too: U+009B is a terminal's one-character CSI, as able to move a cursor or
 * retitle a window as ESC [ is.
 */
export function hasControlCharacter(text: string): boolean {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  return /[\u0000-\u001f\u007f-\u009f]/.test(text);
}

/**
 * The safe, normalised name of an entry, or the reason it is unsafe. Separators are `/` only
 * (a backslash is refused rather than guessed at), `.` and empty components are dropped, `..` is
 * refused wherever it appears.
 */
export function normaliseEntryName(raw: string): { ok: true; name: string } | { ok: false; reason: string } {
  if (hasControlCharacter(raw)) return { ok: false, reason: 'contains a control character' };
  if (raw.includes('\\')) return { ok: false, reason: 'contains a backslash' };
  if (raw.startsWith('/') || /^[A-Za-z]:/.test(raw)) return { ok: false, reason: 'is an absolute path' };
  const components = raw.split('/').filter((component) => component !== '' && component !== '.');
  if (components.includes('..')) return { ok: false, reason: "contains a '..' component" };
  if (components.length === 0) return { ok: false, reason: 'is empty' };
  // What a file system takes: a name of at most 255 bytes, a path well inside PATH_MAX once under a workdir.
  if (components.some((component) => utf8Bytes(component) > LONGEST_COMPONENT_BYTES))
    return { ok: false, reason: `has a name longer than ${LONGEST_COMPONENT_BYTES} bytes` };
  const name = components.join('/');
  if (utf8Bytes(name) > LONGEST_PATH_BYTES) return { ok: false, reason: `is longer than ${LONGEST_PATH_BYTES} bytes` };
  return { ok: true, name };
}

const LONGEST_COMPONENT_BYTES = 255;
const utf8 = new TextEncoder();
const utf8Bytes = (text: string): number => utf8.encode(text).length;
const LONGEST_PATH_BYTES = 1024;

/**
 * A path as a file system that folds case or Unicode forms (macOS's, Windows') would see it: two
 * entries with one folded name are one file there, so which is written depends on the order.
 */
export function foldedEntryName(name: string): string {
  // A final sigma lowercases to itself, not to the sigma its capital folds to.
  return name.normalize('NFC').toLowerCase().replaceAll('ς', 'σ');
}

export const SetFileSchema = z.object({
  /** Relative, `/`-separated, already normal: exactly what `normaliseEntryName` returns. */
  path: z.string().superRefine((value, context) => {
    const normal = normaliseEntryName(value);
    if (!normal.ok) context.addIssue({ code: 'custom', message: `unsafe path '${value}': it ${normal.reason}` });
    else if (normal.name !== value) context.addIssue({ code: 'custom', message: `path '${value}' is not normal (write '${normal.name}')` });
  }),
  sha256: Sha256HexSchema,
  size: z.number().int().nonnegative(),
  executable: z.boolean().default(false),
});
export type SetFile = z.infer<typeof SetFileSchema>;

export const FileSetSchema = z.array(SetFileSchema).superRefine((files, context) => {
  const seen = new Set<string>();
  const folded = new Map<string, string>();
  const directories = new Set<string>();
  for (const file of files) {
    if (seen.has(file.path)) context.addIssue({ code: 'custom', message: `path '${file.path}' appears more than once` });
    seen.add(file.path);
    // Held to an archive's rule: laid out on a disk that folds them, the two are one file.
    const name = foldedEntryName(file.path);
    const twin = folded.get(name);
    if (twin !== undefined && twin !== file.path)
      context.addIssue({ code: 'custom', message: `paths '${twin}' and '${file.path}' differ only in case or Unicode form` });
    folded.set(name, file.path);
    const parts = file.path.split('/');
    for (let depth = 1; depth < parts.length; depth += 1) directories.add(parts.slice(0, depth).join('/'));
  }
  // `a` as a file and `a/b` beside it cannot both be written.
  for (const path of seen) if (directories.has(path)) context.addIssue({ code: 'custom', message: `path '${path}' is both a file and a directory` });
});
export type FileSet = z.infer<typeof FileSetSchema>;

/** The total bytes of a set. */
export function fileSetBytes(files: readonly SetFile[]): number {
  return files.reduce((total, file) => total + file.size, 0);
}

/**
 * A capsule project as a client packs it for staging: the manifest directory's `murmur.yaml`, its
 * component, `murmur.lock`, the files the manifest refers to (a system prompt file, local skills)
 * and the project store's entries for the artifacts it declares. Stored in the object store under
 * the sha256 of its JSON, which is what a stage request names.
 */
export const ProjectListingSchema = z.object({
  format: z.literal('murmur-project/1'),
  /** What the client calls it (its directory's name), for messages only. */
  label: z
    .string()
    .max(200)
    // Said back in messages and on the bus: no escape sequence rides in on it.
    .refine((label) => !hasControlCharacter(label), 'must not hold control characters'),
  files: FileSetSchema,
});
export type ProjectListing = z.infer<typeof ProjectListingSchema>;

/** The bucket every blob lives in, named by the sha256 of its bytes. */
export const BLOB_BUCKET = 'murmur-blobs';
