import { describe, expect, it } from 'vitest';
import { MurmurError, validateFilesystemScope } from '@murmur/shared';

function refusal(scope: string, path?: string): MurmurError {
  try {
    validateFilesystemScope(scope, path);
  } catch (error) {
    if (error instanceof MurmurError) return error;
    throw error;
  }
  throw new Error(`expected the scope '${scope}' to be refused`);
}

const RELATIVE = 'scope must be relative to the workdir';
const ESCAPES = "scope cannot escape the workdir via '..'";

describe('accepting a filesystem scope (§1.5.2)', () => {
  it.each([
    ['.', '.'],
    ['data', 'data'],
    ['data/cache', 'data/cache'],
    ['a/../b', 'a/../b'],
    ['a/..', 'a/..'],
    ['data/', 'data/'],
    ['  data  ', 'data'],
  ])('accepts %j as the scope %j', (scope, accepted) => {
    expect(validateFilesystemScope(scope)).toBe(accepted);
  });

  it('reads a blank scope as the whole workdir', () => {
    expect(validateFilesystemScope('   ')).toBe('.');
  });
});

describe('refusing a filesystem scope', () => {
  it.each([
    ['/etc', RELATIVE],
    ['/', RELATIVE],
    ['\\server\\share', RELATIVE],
    ['C:\\Users\\me', RELATIVE],
    ['c:/data', RELATIVE],
    ['..', ESCAPES],
    ['../sibling', ESCAPES],
    ['./..', ESCAPES],
    ['a/../../b', ESCAPES],
    ['a\\..\\..\\b', ESCAPES],
  ])('refuses %j with E-CAP-002 because %s', (scope, reason) => {
    const error = refusal(scope);
    expect(error.code).toBe('E-CAP-002');
    expect(error.message).toBe(`invalid filesystem capability scope '${scope}': ${reason}`);
  });

  it('names capabilities.filesystem.scope as the path unless told another', () => {
    expect(refusal('..').path).toBe('capabilities.filesystem.scope');
    expect(refusal('/abs', 'artifacts[1].capabilities.filesystem.scope').path).toBe('artifacts[1].capabilities.filesystem.scope');
  });

  it('carries the catalogue hint toward a relative path', () => {
    expect(refusal('/abs').hint).toBe("use a path relative to the workdir, such as 'data' or '.'");
  });
});
