import { mkdtempSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkdirGuard, workdirUsage } from '../src/workdir-guard.js';

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
    const { bytes, entries } = await workdirUsage(dir);
    expect(bytes).toBeGreaterThanOrEqual(3000);
    expect(bytes).toBeLessThan(3000 + 2 * 4096);
    // one, a, a/b, a/b/two, link, a/loop: the loop is counted once and never walked into
    expect(entries).toBe(6);
  });

  it('counts entries that weigh nothing, and stops walking once past a ceiling', async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'many'));
    for (let index = 0; index < 1_000; index++) writeFileSync(path.join(dir, 'many', String(index)), '');
    expect(await workdirUsage(dir)).toEqual({ bytes: 0, entries: 1_001 });
    const early = await workdirUsage(dir, { bytes: Number.POSITIVE_INFINITY, entries: 10 });
    expect(early.entries).toBeGreaterThan(10);
    expect(early.entries).toBeLessThan(1_001);
  });

  it('abandons a walk in flight once told to, at its next read', async () => {
    const dir = scratch();
    for (let index = 0; index < 1_000; index++) writeFileSync(path.join(dir, String(index)), 'x');
    let reads = 0;
    const usage = await workdirUsage(dir, undefined, () => ++reads > 2);
    expect(usage.entries).toBeLessThan(1_000);
  });

  it('reports the first walk over the ceiling once, with what it saw, and then stops watching', async () => {
    const dir = scratch();
    const seen: unknown[] = [];
    const guard = new WorkdirGuard(dir, { bytes: 10_000, entries: 100 }, (passed, observed) => seen.push([passed, observed]), 20);
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(seen).toEqual([]);
    writeFileSync(path.join(dir, 'big'), Buffer.alloc(20_000));
    await new Promise((resolve) => setTimeout(resolve, 120));
    writeFileSync(path.join(dir, 'bigger'), Buffer.alloc(20_000));
    await new Promise((resolve) => setTimeout(resolve, 120));
    guard.stop();
    expect(seen).toEqual([['bytes', { bytes: 20_000, entries: 1 }]]);
  });

  it('reports a workdir of too many entries as the entries ceiling passed, whatever their bytes', async () => {
    const dir = scratch();
    const seen: unknown[] = [];
    const guard = new WorkdirGuard(dir, { bytes: 10_000, entries: 100 }, (passed, observed) => seen.push([passed, observed]), 20);
    for (let index = 0; index < 150; index++) writeFileSync(path.join(dir, String(index)), '');
    await new Promise((resolve) => setTimeout(resolve, 120));
    guard.stop();
    expect(seen).toEqual([['entries', { bytes: 0, entries: expect.any(Number) }]]);
    expect((seen[0] as [string, { entries: number }])[1].entries).toBeGreaterThan(100);
  });
});
