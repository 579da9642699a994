import { mkdtempSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkdirGuard, workdirBytes } from '../src/workdir-guard.js';

describe('the workdir guard', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  const scratch = (): string => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'murmur-guard-'));
    dirs.push(dir);
    return dir;
  };

  it('counts every file under the workdir, a symlink as itself and never what it points at', async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'a', 'b'), { recursive: true });
    writeFileSync(path.join(dir, 'one'), Buffer.alloc(1000));
    writeFileSync(path.join(dir, 'a', 'b', 'two'), Buffer.alloc(2000));
    const outside = path.join(scratch(), 'huge');
    writeFileSync(outside, Buffer.alloc(100_000));
    symlinkSync(outside, path.join(dir, 'link'));
    symlinkSync(dir, path.join(dir, 'a', 'loop'));
    const bytes = await workdirBytes(dir);
    expect(bytes).toBeGreaterThanOrEqual(3000);
    expect(bytes).toBeLessThan(3000 + 2 * 4096);
  });

  it('reports the first walk over the ceiling once, with what it saw, and then stops watching', async () => {
    const dir = scratch();
    const seen: number[] = [];
    const guard = new WorkdirGuard(dir, 10_000, (observed) => seen.push(observed), 20);
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(seen).toEqual([]);
    writeFileSync(path.join(dir, 'big'), Buffer.alloc(20_000));
    await new Promise((resolve) => setTimeout(resolve, 120));
    writeFileSync(path.join(dir, 'bigger'), Buffer.alloc(20_000));
    await new Promise((resolve) => setTimeout(resolve, 120));
    guard.stop();
    expect(seen).toEqual([20_000]);
  });
});
