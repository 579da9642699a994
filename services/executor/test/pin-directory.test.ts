import { closeSync, fstatSync, mkdirSync, mkdtempSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pinDirectory } from '../src/host-sandbox.js';

/**
 * A fresh sandbox's workdir and /tmp are bound by descriptor: the directory is opened and checked
 * first, so a link swapped in at its path afterwards — by a parent's guest in its child's
 * directory, by a session's guest in a reused workdir's .capsule-tmp — binds nothing else.
 */
describe('a directory pinned for binding', () => {
  let scratch: string;
  let workdir: string;

  beforeEach(() => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'murmur-pin-'));
    workdir = path.join(scratch, 'parent', 'children', 'dlg_1');
    mkdirSync(workdir, { recursive: true });
    mkdirSync(path.join(scratch, 'host-etc'));
  });

  afterEach(() => rmSync(scratch, { recursive: true, force: true }));

  it('is the directory named, and stays it when a link is swapped in at its path afterwards', () => {
    const fd = pinDirectory(workdir);
    try {
      expect(readlinkSync(`/proc/self/fd/${fd}`)).toBe(workdir);
      const pinned = fstatSync(fd).ino;
      renameSync(workdir, `${workdir}-away`);
      symlinkSync(path.join(scratch, 'host-etc'), workdir);
      expect(fstatSync(fd).ino).toBe(pinned);
      expect(fstatSync(fd).ino).not.toBe(statSync(workdir).ino);
    } finally {
      closeSync(fd);
    }
  });

  it('is refused when the path is a link, or leads through one', () => {
    renameSync(workdir, `${workdir}-away`);
    symlinkSync(path.join(scratch, 'host-etc'), workdir);
    expect(() => pinDirectory(workdir)).toThrow(/E-SES-004|is a link or not a directory/);
    rmSync(workdir);
    renameSync(path.join(scratch, 'parent', 'children'), path.join(scratch, 'parent', 'children-away'));
    mkdirSync(path.join(scratch, 'host-etc', 'dlg_1'));
    symlinkSync(path.join(scratch, 'host-etc'), path.join(scratch, 'parent', 'children'));
    expect(() => pinDirectory(workdir)).toThrow(/resolves to .*host-etc\/dlg_1, so something replaced a directory on its way with a link/);
  });
});
