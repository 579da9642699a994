import { closeSync, fstatSync, mkdirSync, mkdtempSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pinDirectory } from '../src/host-sandbox.js';
import { assertWorkdirUnmoved } from '../src/workdir.js';

/**
 * A delegated child's directory lies in its parent's workdir, which the parent's guest writes: it
 * can rename the directory away and put a link in its place (to a host directory, here
 * `host-etc`) between the executor making it and the child's sandbox binding it. The launch checks
 * that it still resolves to itself, and a fresh sandbox binds the directory it opened and checked.
 */
describe("a delegated child's workdir, made in its parent's", () => {
  let scratch: string;
  let child: string;

  beforeEach(() => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'murmur-unmoved-'));
    child = path.join(scratch, 'parent', 'children', 'dlg_1');
    mkdirSync(child, { recursive: true });
    mkdirSync(path.join(scratch, 'host-etc'));
  });

  afterEach(() => rmSync(scratch, { recursive: true, force: true }));

  /** The parent's guest puts a link to `host-etc` where the child's directory was. */
  const swapChild = (): void => {
    renameSync(child, `${child}-away`);
    symlinkSync(path.join(scratch, 'host-etc'), child);
  };

  /** …or where `children/` was, with a `dlg_1` waiting behind it. */
  const swapChildren = (): void => {
    rmSync(child, { recursive: true, force: true });
    renameSync(path.join(scratch, 'parent', 'children'), path.join(scratch, 'parent', 'children-away'));
    mkdirSync(path.join(scratch, 'host-etc', 'dlg_1'));
    symlinkSync(path.join(scratch, 'host-etc'), path.join(scratch, 'parent', 'children'));
  };

  describe('checked at its launch', () => {
    it('is taken while it is the directory the executor made', () => {
      expect(() => assertWorkdirUnmoved(child)).not.toThrow();
    });

    it('is refused, naming where it now leads, once a link stands in its place — or once children/ itself is one', () => {
      swapChild();
      expect(() => assertWorkdirUnmoved(child)).toThrow(/now resolves to .*host-etc, so something replaced it with a link/);
      swapChildren();
      expect(() => assertWorkdirUnmoved(child)).toThrow(/now resolves to .*host-etc/);
    });

    it('is refused when it is gone', () => {
      rmSync(child, { recursive: true });
      expect(() => assertWorkdirUnmoved(child)).toThrow(/is gone/);
    });
  });

  describe('pinned for binding', () => {
    it('is the directory named, and stays it when a link is swapped in at its path afterwards', () => {
      const fd = pinDirectory(child);
      try {
        expect(readlinkSync(`/proc/self/fd/${fd}`)).toBe(child);
        const pinned = fstatSync(fd).ino;
        swapChild();
        expect(fstatSync(fd).ino).toBe(pinned);
        expect(fstatSync(fd).ino).not.toBe(statSync(child).ino);
      } finally {
        closeSync(fd);
      }
    });

    it('is refused when the path is a link, or leads through one', () => {
      swapChild();
      expect(() => pinDirectory(child)).toThrow(/is a link or not a directory/);
      rmSync(child);
      renameSync(`${child}-away`, child);
      swapChildren();
      expect(() => pinDirectory(child)).toThrow(/resolves to .*host-etc\/dlg_1, so something replaced a directory on its way with a link/);
    });
  });
});
