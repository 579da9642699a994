import { promises as fs, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileAtomic } from '../src/host/atomic-file.js';
import { tempDir } from '../../../test/support/fs.js';

let scratch: { dir: string; cleanup: () => Promise<void> };

beforeEach(async () => {
  scratch = await tempDir('murmur-atomic-');
});

afterEach(async () => {
  await scratch.cleanup();
});

describe("the host's atomic write", () => {
  it('replaces a file whole, making its directory, and leaves nothing else beside it', async () => {
    const file = path.join(scratch.dir, 'out', 'result.txt');
    writeFileAtomic(file, 'first');
    writeFileAtomic(file, 'second answer');
    expect(readFileSync(file, 'utf8')).toBe('second answer');
    expect(await fs.readdir(path.dirname(file))).toEqual(['result.txt']);
  });

  it('a write that cannot land leaves no temporary file behind, and says why', async () => {
    // The target is a directory with something in it: the rename is refused.
    const file = path.join(scratch.dir, 'out', 'result.txt');
    await fs.mkdir(path.join(file, 'inside'), { recursive: true });
    expect(() => writeFileAtomic(file, 'an answer')).toThrow(/EISDIR|ENOTEMPTY|EEXIST/);
    expect(await fs.readdir(path.dirname(file))).toEqual(['result.txt']);
  });
});
