import { spawnSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readSmallTextFile, readSmallTextFileSync } from '@murmur/shared/node';
import { tempDir } from '../../test/support/fs.js';

let scratch: { dir: string; cleanup: () => Promise<void> };

beforeEach(async () => {
  scratch = await tempDir('murmur-small-text-');
});

afterEach(async () => {
  await scratch.cleanup();
});

const readers = [
  ['at once', async (file: string, maxBytes: number) => readSmallTextFileSync(file, { what: 'the file', maxBytes })],
  ['through the thread pool', (file: string, maxBytes: number) => readSmallTextFile(file, { what: 'the file', maxBytes })],
] as const;

describe.each(readers)('a small text file read %s', (_, read) => {
  it('reads a file larger than its first read whole, growing as it goes', async () => {
    const file = path.join(scratch.dir, 'long.txt');
    const text = 'ünïcode and more\n'.repeat(20_000);
    await fs.writeFile(file, text);
    expect(await read(file, 1024 * 1024)).toBe(text);
  });

  it('refuses a file that says it is empty and reads past its bound, by what it gave', async () => {
    // /proc's files claim a size of 0 and give more.
    await expect(read('/proc/self/status', 100)).rejects.toMatchObject({ code: 'E-IO-003', message: 'the file at /proc/self/status is over 100 bytes' });
  });

  it('refuses a FIFO at once, naming it, and passes what its open reports on as it came', async () => {
    const fifo = path.join(scratch.dir, 'fifo');
    spawnSync('mkfifo', [fifo]);
    await expect(read(fifo, 100)).rejects.toMatchObject({
      code: 'E-IO-003',
      message: `the file at ${fifo} is a FIFO, not a regular file: nothing was read from it`,
    });
    await expect(read(path.join(scratch.dir, 'missing'), 100)).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(read(scratch.dir, 100)).rejects.toMatchObject({ code: 'EISDIR' });
  });
});
