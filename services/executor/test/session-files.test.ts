import { spawnSync } from 'node:child_process';
import { closeSync, promises as fs, openSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MurmurError, type SessionFileEntry, type SessionFilesReply } from '@murmur/shared';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { tempDir } from '../../../test/support/fs.js';
import { LISTING_ENTRIES_MAX, LISTING_KEPT_MS, LISTINGS_KEPT, type ListingLimits, readSessionFiles } from '../src/session-files.js';

/**
 * `mur files` of a directory a guest filled: one listing reads at most so many entries, and the
 * pages of one listing are served from the listing kept, not from the directory read again.
 */
describe("a session workdir's directory, listed a page at a time", () => {
  let workdir: string;
  let cleanup: () => Promise<void>;
  /** Every read of a directory's names, whichever call made it (`opendir`, or a whole `readdir`). */
  let reads: () => number;

  beforeEach(async () => {
    const made = await tempDir('murmur-session-files-');
    // The listing refuses a workdir that resolves elsewhere than it was named: name it resolved.
    workdir = await fs.realpath(made.dir);
    cleanup = made.cleanup;
    const opendir = vi.spyOn(fs, 'opendir');
    const readdir = vi.spyOn(fs, 'readdir');
    const ofSessions = (calls: unknown[][]): number => calls.filter(([where]) => String(where).startsWith('/proc/self/fd/')).length;
    reads = () => ofSessions(opendir.mock.calls) + ofSessions(readdir.mock.calls);
    vi.useFakeTimers({ toFake: ['Date'] });
  });

  afterEach(async () => {
    vi.restoreAllMocks();
    vi.useRealTimers();
    await cleanup();
  });

  /** `count` empty files in `relative`, named `prefix` and a zero-padded number (so in order). */
  const fill = async (relative: string, count: number, prefix = 'f'): Promise<string[]> => {
    const directory = path.join(workdir, relative);
    await fs.mkdir(directory, { recursive: true });
    const names = Array.from({ length: count }, (_, index) => `${prefix}${String(index).padStart(6, '0')}`);
    for (const name of names) closeSync(openSync(path.join(directory, name), 'w'));
    settle();
    return names;
  };

  /**
   * The clock a few seconds past the directories' last change, as if they had been left alone
   * that long: a listing is kept only of a directory that has settled.
   */
  const settle = (): void => {
    vi.setSystemTime(vi.getRealSystemTime() + 5_000);
  };

  const list = async (relative: string, after?: string, limits?: ListingLimits): Promise<Extract<SessionFilesReply, { type: 'directory' }>> => {
    const reply = await readSessionFiles(workdir, { path: relative, offset: 0, length: 0, after }, limits);
    if (reply.type !== 'directory') throw new Error(`${relative} listed as a ${reply.type}`);
    return reply;
  };

  /** Every page from the first, in order. */
  const listAll = async (relative: string, limits?: ListingLimits): Promise<Extract<SessionFilesReply, { type: 'directory' }>[]> => {
    const pages = [await list(relative, undefined, limits)];
    for (let next = pages[0]?.next; next !== undefined; next = pages.at(-1)?.next) pages.push(await list(relative, next, limits));
    return pages;
  };

  const names = (entries: SessionFileEntry[]): string[] => entries.map((entry) => entry.name);

  it('refuses a directory past the cap on entries with E-SES-002, naming the path and the cap, and lists one at the cap whole', async () => {
    const limits: ListingLimits = { entriesMax: 50, kept: LISTINGS_KEPT, keptMs: LISTING_KEPT_MS };
    await fill('out/crowded', 51);
    const atCap = await fill('out/full', 50);

    const refusal = await readSessionFiles(workdir, { path: 'out/crowded', offset: 0, length: 0 }, limits).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(MurmurError);
    expect(refusal).toMatchObject({ code: 'E-SES-002', path: 'out/crowded' });
    expect((refusal as MurmurError).message).toBe("'out/crowded' holds more than 50 entries, more than one listing reads; nothing was listed");
    expect((refusal as MurmurError).hint).toBe("read a file in it by its name ('out/crowded/<name>'), or list one of its subdirectories");
    expect(names((await list('out/full', undefined, limits)).entries)).toEqual(atCap);
    // The cap a listing keeps to unless told otherwise.
    expect(LISTING_ENTRIES_MAX).toBe(100_000);
  });

  it('pages through a directory of 20 000 files to the end, giving every name exactly once and in order, and reads it once', async () => {
    const made = await fill('many', 20_000);

    const pages = await listAll('many');

    expect(pages.length).toBeGreaterThan(2);
    expect(names(pages.flatMap((page) => page.entries))).toEqual(made);
    expect(reads()).toBe(1);
  });

  it('keeps a listing between pages while its directory is unchanged, and reads the directory anew once it changed', async () => {
    // Long names, so that a few hundred make more than one page.
    const made = await fill('long', 2_000, 'n'.repeat(200));

    const first = await list('long');
    expect(first.next).toBeDefined();
    expect(reads()).toBe(1);
    const second = await list('long', first.next);
    expect(reads()).toBe(1);
    expect(names([...first.entries, ...second.entries])).toEqual(made.slice(0, first.entries.length + second.entries.length));

    closeSync(openSync(path.join(workdir, 'long', 'zz-added'), 'w'));
    settle();
    const rest = (await listAll('long')).flatMap((page) => page.entries);
    expect(reads()).toBe(2);
    expect(names(rest)).toEqual([...made, 'zz-added']);
  });

  it('reads a kept listing anew once its time is up', async () => {
    await fill('out', 10);

    await list('out');
    await list('out');
    expect(reads()).toBe(1);
    vi.setSystemTime(Date.now() + LISTING_KEPT_MS + 1);
    await list('out');
    expect(reads()).toBe(2);
  });

  it('keeps no listing of a directory changed in the last seconds, whose change time a further change in the same tick would not move', async () => {
    await fill('fresh', 10);
    vi.setSystemTime(vi.getRealSystemTime());

    await list('fresh');
    await list('fresh');
    expect(reads()).toBe(2);
    settle();
    await list('fresh');
    await list('fresh');
    expect(reads()).toBe(3);
  });

  it('keeps only the newest listings, as many as it is told', async () => {
    const limits: ListingLimits = { entriesMax: LISTING_ENTRIES_MAX, kept: 2, keptMs: LISTING_KEPT_MS };
    for (const directory of ['a', 'b', 'c']) await fill(directory, 3);

    for (const directory of ['a', 'b', 'c']) await list(directory, undefined, limits);
    expect(reads()).toBe(3);
    await list('c', undefined, limits);
    expect(reads()).toBe(3);
    await list('a', undefined, limits);
    expect(reads()).toBe(4);
  });

  it('shows a name that is not UTF-8 escaped and typed other, with its size, from a kept listing as from a fresh one', async () => {
    await fs.mkdir(path.join(workdir, 'odd'));
    await fs.writeFile(Buffer.concat([Buffer.from(`${workdir}/odd/`), Buffer.from([0x66, 0xff, 0x5c])]), 'four');
    await fs.writeFile(path.join(workdir, 'odd', 'plain'), 'ab');
    settle();

    const expected = [
      expect.objectContaining({ name: 'f\\xff\\x5c', type: 'other', size: 4 }),
      expect.objectContaining({ name: 'plain', type: 'file', size: 2 }),
    ];
    expect((await list('odd')).entries).toEqual(expected);
    expect((await list('odd')).entries).toEqual(expected);
  });
});

describe("a session workdir's file that is not there", () => {
  it('says a link whose target is not there is a link, and a workdir removed after the session is gone, each by what it is', async () => {
    const made = await tempDir('murmur-session-files-gone-');
    try {
      const workdir = await fs.realpath(made.dir);
      await fs.mkdir(path.join(workdir, 'out'));
      // What a guest's link to its own /etc/passwd names on the executor: nothing at all.
      await fs.symlink('../../../../../../../../no-such-place/passwd', path.join(workdir, 'out', 'uplink'));
      const linked = readSessionFiles(workdir, { path: 'out/uplink', offset: 0, length: 100 });
      await expect(linked).rejects.toThrow(MurmurError);
      await expect(linked).rejects.toMatchObject({
        code: 'E-IO-001',
        message: "'out/uplink' is a symbolic link whose target is not there on the session's executor",
      });
      await expect(readSessionFiles(workdir, { path: 'out/absent', offset: 0, length: 100 })).rejects.toMatchObject({
        code: 'E-IO-001',
        message: "'out/absent' does not exist in the session's workdir",
      });
      await fs.rm(workdir, { recursive: true, force: true });
      await expect(readSessionFiles(workdir, { path: '', offset: 0, length: 0 })).rejects.toMatchObject({
        code: 'E-IO-001',
        message: `the session's workdir ${workdir} is no longer there: it was removed after the session`,
      });
    } finally {
      await made.cleanup();
    }
  });
});

describe("a session workdir's entry its permissions keep from the executor", () => {
  /**
   * `readSessionFiles` from the built executor, in a process of its own: as `nobody` when this one
   * is root (to whom no mode refuses anything), else as this user. The built module: a child node
   * runs no TypeScript.
   */
  const readAsExecutor = (workdir: string, relative: string): { code?: string; message?: string; type?: string } => {
    const module = pathToFileURL(path.resolve(import.meta.dirname, '../dist/session-files.js')).href;
    const script = `const { readSessionFiles } = await import(${JSON.stringify(module)});
      try { console.log(JSON.stringify({ type: (await readSessionFiles(process.argv[1], { path: process.argv[2], offset: 0, length: 100 })).type })); }
      catch (error) { console.log(JSON.stringify({ code: error.code, message: error.message })); }`;
    const asNobody = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {};
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', script, workdir, relative], { encoding: 'utf8', ...asNobody });
    expect(result.status, result.stderr).toBe(0);
    return JSON.parse(result.stdout) as { code?: string; message?: string; type?: string };
  };

  it('is refused by its path in the workdir and said as the session’s doing, never by the descriptor it was opened through', async () => {
    const made = await tempDir('murmur-session-files-mode-');
    try {
      const workdir = await fs.realpath(made.dir);
      await fs.chmod(workdir, 0o755);
      await fs.mkdir(path.join(workdir, 'out', 'locked'), { recursive: true });
      await fs.writeFile(path.join(workdir, 'out', 'secret.txt'), 'kept from the executor');
      await fs.writeFile(path.join(workdir, 'out', 'open.txt'), 'readable');
      await fs.chmod(path.join(workdir, 'out', 'secret.txt'), 0o000);
      await fs.chmod(path.join(workdir, 'out', 'locked'), 0o000);
      expect(readAsExecutor(workdir, 'out/open.txt')).toEqual({ type: 'file' });
      expect(readAsExecutor(workdir, 'out/secret.txt')).toEqual({
        code: 'E-IO-002',
        message: "'out/secret.txt' cannot be read on the session's executor: its permissions refuse it (EACCES); nothing was read",
      });
      expect(readAsExecutor(workdir, 'out/locked')).toEqual({
        code: 'E-IO-002',
        message: "'out/locked' cannot be read on the session's executor: its permissions refuse it (EACCES); nothing was read",
      });
    } finally {
      // A directory of mode 000 cannot be emptied by a user other than root.
      await fs.chmod(path.join(made.dir, 'out', 'locked'), 0o755).catch(() => {});
      await made.cleanup();
    }
  });
});
