import { mkdirSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mountTmpfs } from '../../test/support/fs.js';
import { systemFailureCode, systemFailureHint } from '../src/node/system-failure.js';

describe("the operating system's refusal, said as what to do", () => {
  it('says a directory that could not be made on a read-only file system is on one, where Node reports it missing', async (context) => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-ro-'));
    const mounted = mountTmpfs(dir, 'ro,size=1m');
    if ('why' in mounted) {
      const why = `[system-failure] a read-only file system not exercised: ${mounted.why}`;
      console.warn(why);
      await fs.rm(dir, { recursive: true });
      return context.skip(why);
    }
    try {
      let refusal: unknown;
      try {
        mkdirSync(path.join(dir, 'cache', 'blobs'), { recursive: true });
      } catch (error) {
        refusal = error;
      }
      // What Node itself says: the reason this check exists.
      expect((refusal as NodeJS.ErrnoException).code).toBe('ENOENT');
      expect(systemFailureHint(refusal)).toBe('that file system is read-only: name a path on a writable one');
      expect(systemFailureCode(refusal)).toBe('E-IO-003');
    } finally {
      mounted.unmount();
      await fs.rm(dir, { recursive: true });
    }
  });

  it('says a directory that could not be made on a full file system is on one, where Node reports it missing', async (context) => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-full-'));
    const mounted = mountTmpfs(dir, 'size=1m,nr_inodes=3');
    if ('why' in mounted) {
      const why = `[system-failure] a full file system not exercised: ${mounted.why}`;
      console.warn(why);
      await fs.rm(dir, { recursive: true });
      return context.skip(why);
    }
    try {
      // The inodes used up: the directory's own, and these.
      for (let index = 0; ; index += 1) {
        try {
          mkdirSync(path.join(dir, `d${index}`));
        } catch {
          break;
        }
      }
      // Node's promised recursive mkdir (its synchronous one says ENOSPC).
      const refusal = await fs.mkdir(path.join(dir, 'p', '.murmur'), { recursive: true }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect((refusal as NodeJS.ErrnoException).code).toBe('ENOENT');
      expect(systemFailureHint(refusal)).toBe('the file system is full: free some space, then run it again');
    } finally {
      mounted.unmount();
      await fs.rm(dir, { recursive: true });
    }
  });

  it('keeps a path that is missing for a read or an open as missing', () => {
    const missing = Object.assign(new Error('ENOENT: no such file or directory'), { code: 'ENOENT', syscall: 'open', path: '/nonexistent/x' });
    expect(systemFailureHint(missing)).toBe('check that the path exists and is spelled as intended');
  });
});
