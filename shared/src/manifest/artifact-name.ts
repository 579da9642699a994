/** Artifact names: lowercase letters, digits and inner hyphens, optionally behind one `namespace/`. */
export function artifactNameProblem(name: string): string | undefined {
  if (name === '') return 'must not be empty';
  const segments = name.split('/');
  if (segments.length > 2) return "may have at most one '/' (namespace/name)";
  for (const segment of segments) {
    if (segment === '') return "must not have an empty namespace or name around '/'";
    if ([...segment].length > 100) return 'must be at most 100 characters';
    const bad = [...segment].find((character) => !/[a-z0-9-]/.test(character));
    if (bad !== undefined) return `may contain only lowercase letters, digits and '-' (found '${bad}')`;
    if (segment.startsWith('-') || segment.endsWith('-')) return "must not start or end with '-'";
  }
  return undefined;
}

/** The longest version a store takes: `<name>-<version>-<platform>.meta.json` stays within a file name's 255 bytes. */
export const LONGEST_ARTIFACT_VERSION = 64;

/**
 * Artifact versions: letters, digits, '.', '+', '-' and '_', starting with a letter or digit, no
 * `..`. A version becomes a file and directory name (`<name>-<version>.mur.zip`, the store's
 * `<name>/<version>/`), so it is held to a shape that cannot climb out of where it is written.
 */
export function artifactVersionProblem(version: string): string | undefined {
  if (version === '') return 'must not be empty';
  if (version.length > LONGEST_ARTIFACT_VERSION) return `must be at most ${LONGEST_ARTIFACT_VERSION} characters (this one is ${version.length})`;
  const bad = [...version].find((character) => !/[A-Za-z0-9._+-]/.test(character));
  if (bad !== undefined) return `may contain only letters, digits, '.', '+', '-' and '_' (found ${JSON.stringify(bad)})`;
  if (!/^[A-Za-z0-9]/.test(version)) return 'must start with a letter or a digit';
  if (version.includes('..')) return "must not contain '..'";
  const suffix = STORE_FILE_SUFFIXES.find((ending) => version.toLowerCase().endsWith(ending));
  if (suffix !== undefined) return `must not end in '${suffix}', as a store's files do`;
  return undefined;
}

/**
 * The endings of the files a store keeps in a version's directory. `acme@tool`'s files and
 * `acme/tool@<version>`'s directory share `acme/tool/`: a version ending as one of those files
 * does would make a directory where another publisher's archive or digest is read (or will be
 * written), breaking a version someone else published and listing one nobody did.
 */
const STORE_FILE_SUFFIXES = ['.mur.zip', '.sha256', '.meta.json'];
