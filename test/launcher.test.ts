import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';

/**
 * `cli/bin/mur`, the launcher every `mur` starts through: what it hands the node it starts. A
 * stand-in `node` first on PATH writes down what it was given; the launcher takes it for a node
 * its snapshot was not built by, so it runs the bundle through it, as it would on such a machine.
 */
describe("mur's launcher", () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let said: string;

  beforeAll(async () => {
    scratch = await tempDir('murmur-launcher-');
    const bin = path.join(scratch.dir, 'bin');
    said = path.join(scratch.dir, 'said');
    await fs.mkdir(bin);
    await fs.writeFile(
      path.join(bin, 'node'),
      `#!/bin/sh\nprintf 'MALLOC_MMAP_THRESHOLD_=%s\\nMALLOC_ARENA_MAX=%s\\n' "$MALLOC_MMAP_THRESHOLD_" "$MALLOC_ARENA_MAX" > '${said}'\nprintf 'arg=%s\\n' "$@" >> '${said}'\n`,
      { mode: 0o755 },
    );
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  async function launch(env: Record<string, string>): Promise<string[]> {
    await fs.rm(said, { force: true });
    const result = await runMur(['--version'], { env: { PATH: `${path.join(scratch.dir, 'bin')}:${process.env.PATH ?? ''}`, ...env } });
    expect(result.code, result.stderr).toBe(0);
    return (await fs.readFile(said, 'utf8')).trim().split('\n');
  }

  it("starts node with glibc's mmap threshold fixed and one malloc arena, beside its small young generation", async () => {
    const lines = await launch({});
    expect(lines).toContain('MALLOC_MMAP_THRESHOLD_=131072');
    expect(lines).toContain('MALLOC_ARENA_MAX=1');
    expect(lines).toContain('arg=--max-semi-space-size=1');
    expect(lines.at(-1)).toBe('arg=--version');
  });

  it("keeps a user's own malloc settings", async () => {
    const lines = await launch({ MALLOC_MMAP_THRESHOLD_: '65536', MALLOC_ARENA_MAX: '4' });
    expect(lines).toContain('MALLOC_MMAP_THRESHOLD_=65536');
    expect(lines).toContain('MALLOC_ARENA_MAX=4');
  });

  it('takes an empty malloc setting for an unset one (glibc would read an empty threshold as 0)', async () => {
    const lines = await launch({ MALLOC_MMAP_THRESHOLD_: '', MALLOC_ARENA_MAX: '' });
    expect(lines).toContain('MALLOC_MMAP_THRESHOLD_=131072');
    expect(lines).toContain('MALLOC_ARENA_MAX=1');
  });
});
