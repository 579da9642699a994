import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mountTmpfs } from '../../test/support/fs.js';
import { writeFileAtomic } from '../src/node/atomic.js';

describe('a file written whole', () => {
  it('that a full disk refuses names the file it was for, never the temporary one, and leaves neither', async (context) => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-atomic-full-'));
    const mounted = mountTmpfs(dir, 'size=256k');
    if ('why' in mounted) {
      const why = `[atomic-write] a full disk not exercised: ${mounted.why}`;
      console.warn(why);
      await fs.rm(dir, { recursive: true });
      return context.skip(why);
    }
    try {
      const target = path.join(dir, 'capsule.mur.zip');
      const refusal = await writeFileAtomic(target, Buffer.alloc(1024 * 1024, 1)).then(
        () => undefined,
        (error: unknown) => error as NodeJS.ErrnoException,
      );
      expect(refusal?.code).toBe('ENOSPC');
      expect(refusal?.message).toBe(`ENOSPC: no space left on device, write '${target}'`);
      expect(refusal?.path).toBe(target);
      expect(await fs.readdir(dir)).toEqual([]);
    } finally {
      mounted.unmount();
      await fs.rm(dir, { recursive: true });
    }
  });
});
