import { closeSync, constants, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutsidePreopen, confineOpensTo, openBeneath } from '../src/host/beneath-preopen.js';

/**
 * The last word on a guest's opens (`host/beneath-preopen.ts`): whatever the shim resolved, what is
 * opened lies beneath the preopen when it is opened. The sandbox's own layers hold the same line
 * in the suites that run guests; this holds it without them, where a weakened check would hide.
 */
describe('an open beneath the preopen', () => {
  let scratch: string;
  let preopen: string;

  beforeAll(() => {
    scratch = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'murmur-beneath-preopen-')));
    preopen = path.join(scratch, 'wd');
    mkdirSync(path.join(preopen, 'sub'), { recursive: true });
    writeFileSync(path.join(preopen, 'sub', 'a.txt'), 'inside');
    // A sibling whose name begins with the preopen's: beside it, not beneath it.
    mkdirSync(path.join(scratch, 'wd-evil'));
    writeFileSync(path.join(scratch, 'wd-evil', 'f'), 'outside');
    writeFileSync(path.join(scratch, 'outside.txt'), 'outside');
    symlinkSync(path.join(scratch, 'outside.txt'), path.join(preopen, 'link'));
    confineOpensTo(preopen);
  });

  afterAll(() => {
    confineOpensTo(undefined);
    rmSync(scratch, { recursive: true, force: true });
  });

  const opened = (file: string, flags = constants.O_RDONLY): unknown => {
    try {
      closeSync(openBeneath(file, flags));
      return 'opened';
    } catch (error) {
      return error;
    }
  };

  it('opens what is beneath it, and the preopen itself', () => {
    expect(opened(path.join(preopen, 'sub', 'a.txt'))).toBe('opened');
    expect(opened(preopen, constants.O_RDONLY | constants.O_DIRECTORY)).toBe('opened');
  });

  it('refuses a directory beside it whose name it begins, and anything outside', () => {
    expect(opened(path.join(scratch, 'wd-evil', 'f'))).toBeInstanceOf(OutsidePreopen);
    expect(opened(path.join(scratch, 'outside.txt'))).toBeInstanceOf(OutsidePreopen);
  });

  it('never follows a link in the last component, which was planted after the shim resolved the path', () => {
    expect(opened(path.join(preopen, 'link'))).toMatchObject({ code: 'ELOOP' });
    // Nor creates or truncates through one.
    expect(opened(path.join(preopen, 'link'), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC)).toMatchObject({ code: 'ELOOP' });
  });

  it('opens nothing for a guest given no preopen', () => {
    confineOpensTo(undefined);
    try {
      expect(opened(path.join(preopen, 'sub', 'a.txt'))).toBeInstanceOf(OutsidePreopen);
    } finally {
      confineOpensTo(preopen);
    }
  });
});
