import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { assertWorkdirUnmoved } from '../src/workdir.js';

/**
 * A delegated child's directory lies in its parent's workdir, which the parent's guest writes: it
 * can rename the directory away and put a link in its place between the executor making it and
 * the child's sandbox binding it. The launch checks that it still resolves to itself.
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

  it('is taken while it is the directory the executor made', () => {
    expect(() => assertWorkdirUnmoved(child)).not.toThrow();
  });

  it('is refused, naming where it now leads, once a link stands in its place — or once children/ itself is one', () => {
    renameSync(child, `${child}-away`);
    symlinkSync(path.join(scratch, 'host-etc'), child);
    expect(() => assertWorkdirUnmoved(child)).toThrow(/E-SES-004|now resolves to .*host-etc, so something replaced it with a link/);
    rmSync(child);
    renameSync(path.join(scratch, 'parent', 'children'), path.join(scratch, 'parent', 'children-away'));
    mkdirSync(path.join(scratch, 'host-etc', 'dlg_1'));
    symlinkSync(path.join(scratch, 'host-etc'), path.join(scratch, 'parent', 'children'));
    expect(() => assertWorkdirUnmoved(child)).toThrow(/now resolves to .*host-etc/);
  });

  it('is refused when it is gone', () => {
    rmSync(child, { recursive: true });
    expect(() => assertWorkdirUnmoved(child)).toThrow(/is gone/);
  });
});
