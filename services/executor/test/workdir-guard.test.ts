import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, mkdirSync, readdirSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkdirGuard, type WorkdirUsage, unlinkedUsage, workdirBreach, workdirUsage } from '../src/workdir-guard.js';

const MiB = 1024 * 1024;

/**
 * A process that opens each of `files`, deletes it, writes its MiB into it through the
 * descriptor (as `exec 3>/tmp/big; rm /tmp/big` does, or a guest through WASI) and holds it open;
 * `wrap` runs it inside something (a sandbox). Resolves once all is written, with the pid that
 * holds the files.
 */
async function holdDeleted(files: [string, number][], wrap: string[] = []): Promise<{ child: ChildProcess; holder: number }> {
  const script = `
    const fs = require('node:fs');
    for (const [file, mib] of ${JSON.stringify(files)}) {
      const fd = fs.openSync(file, 'w');
      fs.unlinkSync(file);
      for (let i = 0; i < mib; i++) fs.writeSync(fd, Buffer.alloc(${MiB}, 1));
    }
    console.log('ready ' + process.pid);
    setInterval(() => {}, 60000);`;
  const [command, ...args] = [...wrap, process.execPath, '-e', script];
  const child = spawn(command as string, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const holder = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const ready = /ready (\d+)/.exec(out);
      if (ready) resolve(Number(ready[1]));
    });
    child.on('exit', (code) => reject(new Error(`the holding process exited (${code}) before it was ready`)));
  });
  return { child, holder };
}

const bwrapWorks = spawnSync('bwrap', ['--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', 'true']).status === 0;

describe('the workdir guard', () => {
  const dirs: string[] = [];
  afterEach(() => {
    // rm(1), not rmSync: node's removal goes by whole paths, which the deepest test's outgrow.
    for (const dir of dirs.splice(0)) spawnSync('rm', ['-rf', dir]);
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

  it('counts the delegated children’s workdirs with the parent’s, and says how much of it is theirs', async () => {
    const dir = scratch();
    const children = path.join(dir, '.murmur', 'ses_parent', 'children');
    mkdirSync(path.join(children, 'dlg_one', 'deep'), { recursive: true });
    writeFileSync(path.join(dir, 'own'), Buffer.alloc(4096));
    writeFileSync(path.join(children, 'dlg_one', 'deep', 'theirs'), Buffer.alloc(3 * 4096));
    const usage = await workdirUsage(dir, undefined, undefined, children);
    expect(usage).toMatchObject({ bytes: 4 * 4096, delegatedBytes: 3 * 4096 });
    const { message, hint } = workdirBreach('bytes', usage, { bytes: 8192, entries: 100 });
    expect(message).toBe(
      `session workdir grew to ${4 * 4096} bytes (${3 * 4096} of them in its delegated children's workdirs under children/), past the 8192 byte ceiling (capabilities.resources.workdir_max_bytes)`,
    );
    expect(hint).toContain("what children write counts against the parent's ceiling");
  });

  it('counts disk reserved past a file’s end, which its size does not show', async () => {
    const dir = scratch();
    writeFileSync(path.join(dir, 'reserved'), '');
    const reserve = spawnSync('fallocate', ['--keep-size', '--length', '8MiB', path.join(dir, 'reserved')], { encoding: 'utf8' });
    expect(reserve.status, reserve.stderr).toBe(0);
    expect((await workdirUsage(dir)).bytes).toBeGreaterThanOrEqual(8 * 1024 * 1024);
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

  it('counts as hidden a directory nested past the longest path the kernel takes, and stops there', async () => {
    const dir = scratch();
    const nest = spawnSync('sh', [
      '-c',
      'cd "$1" && for i in $(seq 300); do mkdir dddddddddddddddd && cd -P dddddddddddddddd || exit 1; done; echo beneath > f',
      'sh',
      dir,
    ]);
    expect(nest.status).toBe(0);
    const usage = await workdirUsage(dir);
    expect(usage.hidden).toEqual({ path: expect.stringMatching(/^dddddddddddddddd\//), code: 'ENAMETOOLONG' });
  });

  it('counts as hidden a directory its owner made unreadable, which only root could walk', async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'closed'));
    writeFileSync(path.join(dir, 'closed', 'big'), Buffer.alloc(20_000));
    chmodSync(path.join(dir, 'closed'), 0o000);
    // Root reads any directory; the stack's executor is uid 1000 and holds no capability, so the walk is made as another user.
    const nobody = 65_534;
    const asRoot = process.getuid?.() === 0;
    if (asRoot) {
      chownSync(dir, nobody, nobody);
      chownSync(path.join(dir, 'closed'), nobody, nobody);
    }
    const guard = new URL('../dist/workdir-guard.js', import.meta.url).pathname;
    const walk = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { workdirUsage } from ${JSON.stringify(guard)}; console.log(JSON.stringify(await workdirUsage(${JSON.stringify(dir)})));`,
      ],
      { encoding: 'utf8', ...(asRoot ? { uid: nobody, gid: nobody } : {}) },
    );
    expect(walk.stderr).toBe('');
    expect(JSON.parse(walk.stdout)).toEqual({ bytes: 0, entries: 1, hidden: { path: 'closed', code: 'EACCES' } });
    chmodSync(path.join(dir, 'closed'), 0o700);
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
    // 20 000 bytes, or the blocks they take on disk
    expect(seen).toEqual([['bytes', { bytes: expect.any(Number), entries: 1 }]]);
    expect((seen[0] as [string, { bytes: number }])[1].bytes).toBeGreaterThanOrEqual(20_000);
    expect((seen[0] as [string, { bytes: number }])[1].bytes).toBeLessThan(20_000 + 8192);
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

  describe('with files its processes deleted while holding them open', () => {
    const holders: number[] = [];
    afterEach(() => {
      for (const pid of holders.splice(0)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    });
    const hold = async (files: [string, number][], wrap: string[] = []) => {
      const held = await holdDeleted(files, wrap);
      if (held.child.pid !== undefined) holders.push(held.child.pid);
      if (held.holder !== held.child.pid) holders.push(held.holder);
      return held;
    };
    const watch = async (dir: string, processes?: () => Iterable<number>): Promise<[string, WorkdirUsage][]> => {
      const seen: [string, WorkdirUsage][] = [];
      const guard = new WorkdirGuard(dir, { bytes: MiB, entries: 100 }, (passed, observed) => seen.push([passed, observed]), 20, undefined, processes);
      await new Promise((resolve) => setTimeout(resolve, 200));
      guard.stop();
      return seen;
    };

    it('counts against the ceiling a file deleted in the workdir that a process still holds and writes, and says so', async () => {
      const dir = scratch();
      const { holder } = await hold([[path.join(dir, 'big'), 8]]);
      expect((await workdirUsage(dir)).bytes).toBe(0);
      const seen = await watch(dir, () => [holder]);
      expect(seen).toEqual([['bytes', { bytes: expect.any(Number), entries: 0, unlinkedBytes: expect.any(Number) }]]);
      const observed = (seen[0] as [string, WorkdirUsage])[1];
      expect(observed.bytes).toBeGreaterThanOrEqual(8 * MiB);
      expect(observed.unlinkedBytes).toBe(observed.bytes);
      const { message, hint } = workdirBreach('bytes', observed, { bytes: MiB, entries: 100 });
      expect(message).toBe(
        `session workdir grew to ${observed.bytes} bytes (${observed.bytes} of them in files deleted while still open), past the ${MiB} byte ceiling (capabilities.resources.workdir_max_bytes)`,
      );
      expect(hint).toContain('keeps its disk until the last descriptor on it closes');
    });

    it('cannot see such a file unless told the session’s processes, and never counts one deleted outside the workdir', async () => {
      const dir = scratch();
      const { holder } = await hold([
        [path.join(dir, 'inside'), 2],
        [path.join(scratch(), 'outside'), 16],
      ]);
      // the boundary: a walk goes by names, and these have none
      expect(await watch(dir)).toEqual([]);
      const { bytes } = await unlinkedUsage(dir, [holder]);
      expect(bytes).toBeGreaterThanOrEqual(2 * MiB);
      expect(bytes).toBeLessThan(3 * MiB);
      // a process not the session's is not looked at, nor a pid that names no process
      expect(await unlinkedUsage(dir, [process.pid, 0, -1, 2 ** 40])).toEqual({ bytes: 0, next: 0 });
    });

    it('counts a file once however many descriptors hold it, and resumes past the descriptors a check had no time for', async () => {
      const dir = scratch();
      const { holder } = await hold([[path.join(dir, 'big'), 2]]);
      const descriptors = readdirSync(`/proc/${holder}/fd`).length;
      const twice = await unlinkedUsage(dir, [holder, holder, holder]);
      expect(twice.bytes).toBeGreaterThanOrEqual(2 * MiB);
      expect(twice.bytes).toBeLessThan(3 * MiB);
      expect(await unlinkedUsage(dir, [holder], undefined, descriptors)).toEqual({ bytes: 0, next: 0 });
    });

    it('takes a sandboxed process’s /tmp back to the workdir directory it is, though its link reads /tmp/…', async (context) => {
      if (!bwrapWorks) {
        const why = 'bubblewrap cannot make a sandbox on this host (bwrap --ro-bind / / true failed)';
        console.warn(`[workdir guard] ${why}`);
        context.skip(why);
      }
      const dir = scratch();
      mkdirSync(path.join(dir, 'tmp'));
      const { holder } = await hold(
        [['/tmp/big', 4]],
        ['bwrap', '--die-with-parent', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--bind', path.join(dir, 'tmp'), '/tmp'],
      );
      // the path the kernel writes is the sandbox's, which names no directory of the workdir
      const links = readdirSync(`/proc/${holder}/fd`).map((fd) => readlinkSync(`/proc/${holder}/fd/${fd}`));
      expect(links).toContain('/tmp/big (deleted)');
      const seen = await watch(dir, () => [holder]);
      // over on the deleted file alone, the walk of the names stops before it began: its figures are a lower bound
      expect(seen).toEqual([['bytes', { bytes: expect.any(Number), entries: expect.any(Number), unlinkedBytes: expect.any(Number) }]]);
      expect((seen[0] as [string, WorkdirUsage])[1].unlinkedBytes).toBeGreaterThanOrEqual(4 * MiB);
    });
  });
});
