import { MurmurError } from './errors.js';

/**
 * Validates `capabilities.filesystem.scope`: a path relative to the workdir that cannot climb
 * out of it. `..` is allowed only where it stays inside (`a/../b`), judged by a depth counter over
 * the components, never by resolving against the real filesystem (which a symlink could steer).
 */
export function validateFilesystemScope(scope: string, path = 'capabilities.filesystem.scope'): string {
  const trimmed = scope.trim();
  const refuse = (reason: string): MurmurError => new MurmurError('E-CAP-002', `invalid filesystem capability scope '${scope}': ${reason}`, { path });
  if (trimmed.startsWith('/') || trimmed.startsWith('\\') || /^[A-Za-z]:/.test(trimmed)) {
    throw refuse('scope must be relative to the workdir');
  }
  let depth = 0;
  for (const component of trimmed.split(/[/\\]+/)) {
    if (component === '' || component === '.') continue;
    if (component === '..') {
      if (depth === 0) throw refuse("scope cannot escape the workdir via '..'");
      depth -= 1;
    } else {
      depth += 1;
    }
  }
  return trimmed === '' ? '.' : trimmed;
}
