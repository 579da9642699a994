import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from './support/fs.js';
import { murBin, repositoryRoot, runMur } from './support/processes.js';

/**
 * `cli/bin/mur`, the launcher every `mur` starts through: what it hands the node it starts. A
 * stand-in `node` first on PATH writes down what it was given; the launcher takes it for a node
 * its snapshot was not built by, so it runs the bundle through it, as it would on such a machine.
 * A copy of the launcher beside a snapshot that names the stand-in as its builder starts it from
 * that snapshot instead.
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
      `#!/bin/sh\nprintf 'MALLOC_MMAP_THRESHOLD_=%s\\nMALLOC_ARENA_MAX=%s\\nGLIBC_TUNABLES=%s\\n' "$MALLOC_MMAP_THRESHOLD_" "$MALLOC_ARENA_MAX" "$GLIBC_TUNABLES" > '${said}'\nprintf 'arg=%s\\n' "$@" >> '${said}'\n`,
      { mode: 0o755 },
    );
    // The launcher's copy, and its two snapshots (their content is never read: the stand-in starts from them) built by the stand-in.
    const snapshots = path.join(scratch.dir, 'cli', 'dist', 'snapshot');
    await fs.mkdir(path.join(scratch.dir, 'cli', 'bin'), { recursive: true });
    await fs.mkdir(snapshots, { recursive: true });
    await fs.copyFile(path.join(repositoryRoot, 'cli', 'bin', 'mur'), path.join(scratch.dir, 'cli', 'bin', 'mur'));
    const later = new Date(Date.now() + 60_000);
    for (const blob of ['mur.blob', 'mur-client.blob']) {
      await fs.writeFile(path.join(snapshots, `${blob}.node`), `${await fs.realpath(path.join(bin, 'node'))}\n`);
      await fs.writeFile(path.join(snapshots, blob), 'not read');
      // Newer than the node, as a snapshot built by it is.
      await fs.utimes(path.join(snapshots, blob), later, later);
    }
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  /** What the stand-in node was given by `launcher` (the repository's own unless named) run with `args`. */
  async function launch(
    env: Record<string, string>,
    { launcher = murBin, args = ['--version'] }: { launcher?: string; args?: string[] } = {},
  ): Promise<string[]> {
    await fs.rm(said, { force: true });
    const result = await runMur(args, { launcher, env: { PATH: `${path.join(scratch.dir, 'bin')}:${process.env.PATH ?? ''}`, ...env } });
    expect(result.code, result.stderr).toBe(0);
    return (await fs.readFile(said, 'utf8')).trim().split('\n');
  }

  /** The launcher's copy, which finds the stand-in's snapshots beside it. */
  const fromSnapshot = (env: Record<string, string>, args?: string[]): Promise<string[]> =>
    launch(env, { launcher: path.join(scratch.dir, 'cli', 'bin', 'mur'), ...(args ? { args } : {}) });
  /** `mur run` against a stack: the thin client's snapshot. */
  const thinClient = (env: Record<string, string>): Promise<string[]> => fromSnapshot({ MURMUR_NATS_URL: 'nats://127.0.0.1:4222', ...env }, ['run']);

  it("starts node with glibc's mmap threshold fixed and one malloc arena, beside its small young generation", async () => {
    const lines = await launch({});
    expect(lines).toContain('MALLOC_MMAP_THRESHOLD_=131072');
    expect(lines).toContain('MALLOC_ARENA_MAX=1');
    expect(lines).toContain('arg=--max-semi-space-size=1');
    expect(lines.at(-1)).toBe('arg=--version');
  });

  it("starts the thin client's snapshot with glibc's huge pages for malloc, and the in-process one and the bundle without them", async () => {
    const client = await thinClient({});
    expect(client).toContain(`arg=${scratch.dir}/cli/bin/../dist/snapshot/mur-client.blob`);
    expect(client).toContain('GLIBC_TUNABLES=glibc.malloc.hugetlb=1');
    const inProcess = await fromSnapshot({});
    expect(inProcess).toContain(`arg=${scratch.dir}/cli/bin/../dist/snapshot/mur.blob`);
    expect(inProcess).toContain('GLIBC_TUNABLES=');
    expect(await launch({ MURMUR_NATS_URL: 'nats://127.0.0.1:4222' }, { args: ['run'] })).toContain('GLIBC_TUNABLES=');
  });

  it("adds the huge pages to a user's own glibc tunables, and a hugetlb the user chose wins", async () => {
    expect(await thinClient({ GLIBC_TUNABLES: 'glibc.malloc.check=0' })).toContain('GLIBC_TUNABLES=glibc.malloc.check=0:glibc.malloc.hugetlb=1');
    expect(await thinClient({ GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' })).toContain('GLIBC_TUNABLES=glibc.malloc.hugetlb=0');
    expect(await fromSnapshot({ GLIBC_TUNABLES: 'glibc.malloc.check=0' })).toContain('GLIBC_TUNABLES=glibc.malloc.check=0');
  });

  it('starts from the bundle when NODE_OPTIONS carries a V8 flag, which V8 refuses a snapshot under, and from the snapshot for node options', async () => {
    for (const options of ['--max-old-space-size=100', '--expose_gc --no-warnings', '--stack-trace-limit=50', '--jitless']) {
      const lines = await fromSnapshot({ NODE_OPTIONS: options });
      expect(lines, options).toContain(`arg=${scratch.dir}/cli/bin/mur.js`);
      expect(
        lines.some((line) => line.includes('.blob')),
        options,
      ).toBe(false);
    }
    for (const options of ['--no-warnings', '--enable-source-maps', '--require /dev/null']) {
      expect(await fromSnapshot({ NODE_OPTIONS: options }), options).toContain(`arg=${scratch.dir}/cli/bin/../dist/snapshot/mur.blob`);
    }
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
