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
