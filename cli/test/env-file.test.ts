import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { environmentWithEnvFile, parseEnvFile } from '../src/env-file.js';

describe('a project’s .env', () => {
  it('takes KEY=VALUE lines, strips surrounding quotes, and skips comments and lines that are not assignments', () => {
    expect(parseEnvFile('# a comment\nA=1\nexport B = two\nC="three"\nD=\'four\'\n=nothing\n1BAD=x\nno equals\n')).toEqual({
      A: '1',
      B: 'two',
      C: 'three',
      D: 'four',
    });
  });

  it('leaves a comment after a value out of the value, but keeps a # inside quotes or inside a word', () => {
    expect(parseEnvFile('A="abc" # why\nB=plain # why\nC=\'x # y\'\nD=pass#word\nE="quoted"#tight\nF="unclosed # still\nG=  # only a comment\n')).toEqual({
      A: 'abc',
      B: 'plain',
      C: 'x # y',
      D: 'pass#word',
      E: 'quoted',
      F: '"unclosed # still',
      G: '',
    });
    // A quote inside a quoted value is the value's: the closing quote is the last one.
    expect(parseEnvFile(`A="say "hi""\nB='it's'\nC="x # y" # z\nD="a" # it's "b"\n`)).toEqual({ A: 'say "hi"', B: "it's", C: 'x # y', D: 'a' });
  });

  it('refuses a .env that is there but cannot be read, naming it, rather than running without its values', () => {
    const project = mkdtempSync(path.join(os.tmpdir(), 'murmur-env-file-'));
    try {
      expect(environmentWithEnvFile(project, { PATH: '/bin' })).toEqual({ PATH: '/bin' });
      // A link to a file that is not there is a .env that is there.
      symlinkSync('secrets/prod.env', path.join(project, '.env'));
      expect(() => environmentWithEnvFile(project, {})).toThrow(
        expect.objectContaining({
          code: 'E-IO-002',
          message: `cannot read ${path.join(project, '.env')}: it is a link to secrets/prod.env, which does not exist`,
        }),
      );
      rmSync(path.join(project, '.env'));
      mkdirSync(path.join(project, '.env'));
      expect(() => environmentWithEnvFile(project, {})).toThrow(
        expect.objectContaining({ code: 'E-IO-002', message: `cannot read ${path.join(project, '.env')}: EISDIR` }),
      );
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });
});
