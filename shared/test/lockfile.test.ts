import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { type LockedArtifact, type MurmurLock, LOCKFILE_NAME, upsertLockEntry } from '@murmur/shared';
import { readLockfile, withLockfileTurn, writeLockfile } from '@murmur/shared/artifacts';
import { processStartToken } from '@murmur/shared/node';
import { listTree, tmpfsOrSkip, tempDir } from '../../test/support/fs.js';
import { rejectionOf as rejection } from '../../test/support/refusals.js';

const SHA_A = 'a'.repeat(64);
const SHA_B = '0123456789abcdef'.repeat(4);

let dir: string;
let lockPath: string;
let cleanup: () => Promise<void>;

beforeEach(async () => {
  ({ dir, cleanup } = await tempDir('murmur-lock-'));
  lockPath = path.join(dir, LOCKFILE_NAME);
});

afterEach(async () => {
  await cleanup();
});

describe('readLockfile', () => {
  it('gives undefined when there is no lock', async () => {
    expect(LOCKFILE_NAME).toBe('murmur.lock');
    expect(await readLockfile(lockPath)).toBeUndefined();
  });

  it('parses a valid lock', async () => {
    await fs.writeFile(
      lockPath,
      `lock_version: 1
artifacts:
  - name: some-tool
    resolved_version: "1.2.3"
    sha256:
      wasm: "${SHA_A}"
  - name: local/worker
    resolved_version: 0.2.0
    sha256:
      wasm: ${SHA_B}
`,
    );
    expect(await readLockfile(lockPath)).toEqual({
      lock_version: 1,
      artifacts: [
        { name: 'some-tool', resolved_version: '1.2.3', sha256: { wasm: SHA_A } },
        { name: 'local/worker', resolved_version: '0.2.0', sha256: { wasm: SHA_B } },
      ],
    });
  });

  it('parses a lock with no artifacts', async () => {
    await fs.writeFile(lockPath, 'lock_version: 1\nartifacts: []\n');
    expect(await readLockfile(lockPath)).toEqual({ lock_version: 1, artifacts: [] });
  });

  it('keeps an unquoted number-like resolved_version as its text', async () => {
    await fs.writeFile(
      lockPath,
      `lock_version: 1\nartifacts:\n  - name: t\n    resolved_version: 1.0\n    sha256:\n      wasm: ${SHA_A}\n  - name: u\n    resolved_version: 2.10\n    sha256:\n      wasm: ${SHA_A}\n`,
    );
    const lock = await readLockfile(lockPath);
    expect(lock?.artifacts.map((entry) => entry.resolved_version)).toEqual(['1.0', '2.10']);
  });

  it('refuses a lock that is not valid YAML', async () => {
    await fs.writeFile(lockPath, 'lock_version: 1\nartifacts: [\n  - name: broken\n');
    const error = await rejection(readLockfile(lockPath));
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toMatch(/^invalid murmur\.lock: /);
    expect(error.path).toBe(lockPath);
  });

  it('refuses a lock_version other than 1', async () => {
    await fs.writeFile(lockPath, `lock_version: 2\nartifacts:\n  - name: t\n    resolved_version: "1.0.0"\n    sha256:\n      wasm: ${SHA_A}\n`);
    const error = await rejection(readLockfile(lockPath));
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toContain('invalid murmur.lock');
    expect(error.message).toContain('lock_version');
  });

  it('refuses a blank sha256', async () => {
    await fs.writeFile(lockPath, 'lock_version: 1\nartifacts:\n  - name: t\n    resolved_version: "1.0.0"\n    sha256:\n      wasm: "   "\n');
    const error = await rejection(readLockfile(lockPath));
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toContain('invalid murmur.lock');
    expect(error.message).toContain('sha256.wasm');
  });

  it('refuses an entry without a name or a resolved_version', async () => {
    await fs.writeFile(lockPath, `lock_version: 1\nartifacts:\n  - resolved_version: "1.0.0"\n    sha256:\n      wasm: ${SHA_A}\n`);
    expect((await rejection(readLockfile(lockPath))).code).toBe('E-RUN-003');
    await fs.writeFile(lockPath, `lock_version: 1\nartifacts:\n  - name: t\n    resolved_version: ""\n    sha256:\n      wasm: ${SHA_A}\n`);
    const error = await rejection(readLockfile(lockPath));
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toContain('resolved_version');
  });

  it('refuses a lock that pins one name twice, whichever order its pins are in', async () => {
    const pin = (version: string, sha: string) => `  - name: sk\n    resolved_version: "${version}"\n    sha256:\n      wasm: ${sha}\n`;
    for (const pins of [pin('0.1.0', SHA_A) + pin('9.9.9', SHA_B), pin('9.9.9', SHA_B) + pin('0.1.0', SHA_A)]) {
      await fs.writeFile(lockPath, `lock_version: 1\nartifacts:\n${pins}`);
      const error = await rejection(readLockfile(lockPath));
      expect(error.code).toBe('E-RUN-003');
      expect(error.message).toContain("'sk' is pinned twice (artifacts[0] and artifacts[1]); a lock pins each artifact once");
      expect(error.hint).toBe('fix or delete murmur.lock; the next run writes a fresh one');
    }
  });

  it('refuses an empty file', async () => {
    await fs.writeFile(lockPath, '');
    const error = await rejection(readLockfile(lockPath));
    expect(error.code).toBe('E-RUN-003');
    expect(error.message).toContain('invalid murmur.lock');
  });

  it('refuses a lock that is a directory, naming it and saying what to do', async () => {
    await fs.mkdir(lockPath);
    const error = await rejection(readLockfile(lockPath));
    expect(error.code).toBe('E-IO-003');
    expect(error.message).toContain(`failed to read murmur.lock at ${lockPath}: EISDIR`);
    expect(error.hint).toBe('a directory is where a file is expected: name the file, or move the directory aside');
  });
});

describe('writeLockfile', () => {
  const lock: MurmurLock = {
    lock_version: 1,
    artifacts: [
      { name: 'some-tool', resolved_version: '1.0', sha256: { wasm: SHA_A } },
      { name: 'local/worker', resolved_version: '0.2.0', sha256: { wasm: SHA_B } },
    ],
  };

  it('writes a lock that reads back the same', async () => {
    await writeLockfile(lockPath, lock);
    expect(await readLockfile(lockPath)).toEqual(lock);
  });

  it('writes through a symbolic link to the file it points to, and the link stays one', async () => {
    const shared = path.join(dir, 'shared', 'murmur.lock');
    await fs.mkdir(path.dirname(shared));
    await fs.writeFile(shared, 'lock_version: 1\nartifacts: []\n');
    await fs.symlink(shared, lockPath);
    await writeLockfile(lockPath, lock);
    expect((await fs.lstat(lockPath)).isSymbolicLink()).toBe(true);
    expect(await readLockfile(shared)).toEqual(lock);
  });

  it("writes upstream's shape: lock_version 1 and a list of name, resolved_version, sha256.wasm", async () => {
    await writeLockfile(lockPath, lock);
    const text = await fs.readFile(lockPath, 'utf8');
    expect(text.startsWith('lock_version: 1\nartifacts:\n')).toBe(true);
    expect(parseYaml(text)).toEqual({
      lock_version: 1,
      artifacts: [
        { name: 'some-tool', resolved_version: '1.0', sha256: { wasm: SHA_A } },
        { name: 'local/worker', resolved_version: '0.2.0', sha256: { wasm: SHA_B } },
      ],
    });
  });

  it('leaves no temporary file beside the lock', async () => {
    await writeLockfile(lockPath, lock);
    await writeLockfile(lockPath, upsertLockEntry(lock, { name: 'another', resolved_version: '3.0.0', sha256: { wasm: SHA_A } }));
    expect(await listTree(dir)).toEqual(['murmur.lock']);
    expect((await readLockfile(lockPath))?.artifacts.map((entry) => entry.name)).toEqual(['some-tool', 'local/worker', 'another']);
  });

  it('refuses to write an invalid lock and leaves the old one in place', async () => {
    await writeLockfile(lockPath, lock);
    const before = await fs.readFile(lockPath, 'utf8');
    const invalid: MurmurLock = { lock_version: 1, artifacts: [{ name: 't', resolved_version: '1.0.0', sha256: { wasm: ' ' } }] };
    await expect(writeLockfile(lockPath, invalid)).rejects.toThrow();
    expect(await fs.readFile(lockPath, 'utf8')).toBe(before);
    expect(await listTree(dir)).toEqual(['murmur.lock']);
  });
});

describe('upsertLockEntry', () => {
  const first: LockedArtifact = { name: 'first', resolved_version: '1.0.0', sha256: { wasm: SHA_A } };
  const second: LockedArtifact = { name: 'second', resolved_version: '2.0.0', sha256: { wasm: SHA_B } };

  it('starts a version 1 lock when there is none', () => {
    expect(upsertLockEntry(undefined, first)).toEqual({ lock_version: 1, artifacts: [first] });
  });

  it('appends an artifact the lock does not have', () => {
    expect(upsertLockEntry({ lock_version: 1, artifacts: [first] }, second)).toEqual({ lock_version: 1, artifacts: [first, second] });
  });

  it('replaces the entry of the same name in place and leaves the input untouched', () => {
    const original: MurmurLock = { lock_version: 1, artifacts: [first, second] };
    const updated = { name: 'first', resolved_version: '1.1.0', sha256: { wasm: SHA_B } };
    const result = upsertLockEntry(original, updated);
    expect(result).toEqual({ lock_version: 1, artifacts: [updated, second] });
    expect(original.artifacts).toEqual([first, second]);
  });
});

describe('withLockfileTurn', () => {
  const turnPath = () => `${lockPath}.writing`;

  /** The pid of a process that has ended: a writer that crashed holding its turn. */
  async function deadPid(): Promise<number> {
    const child = spawn(process.execPath, ['-e', '']);
    await once(child, 'exit');
    return child.pid as number;
  }

  /** Runs `writers` turns at once, each holding it a little; gives the most that held it together. */
  async function mostHoldingAtOnce(writers: number): Promise<number> {
    let holding = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: writers }, () =>
        withLockfileTurn(lockPath, async () => {
          holding += 1;
          most = Math.max(most, holding);
          await sleep(5);
          holding -= 1;
        }),
      ),
    );
    return most;
  }

  it('gives writers the turn one at a time and leaves no turn behind', async () => {
    expect(await mostHoldingAtOnce(6)).toBe(1);
    expect(await listTree(dir)).toEqual([]);
  });

  it('takes over a crashed writer’s turn once, however many waiters find it dead together', async () => {
    for (const pid of [await deadPid(), await deadPid(), await deadPid()]) {
      // With the old bare-pid format as well as the current one.
      await fs.writeFile(turnPath(), pid % 2 ? `${pid}\n` : `${pid} ${hostname()} crashed-writer\n`);
      expect(await mostHoldingAtOnce(8)).toBe(1);
      expect(await listTree(dir)).toEqual([]);
    }
  });

  it('does not remove a turn that is no longer its own when it ends', async () => {
    await withLockfileTurn(lockPath, async () => {
      // Another writer's turn in its place (as if this one had been judged dead and taken over).
      await fs.writeFile(turnPath(), `${process.pid} ${hostname()} someone-else\n`);
    });
    expect(await fs.readFile(turnPath(), 'utf8')).toContain('someone-else');
  });

  it('waits for a live writer and, when it never finishes, says who holds the turn and what to do', async () => {
    await fs.writeFile(turnPath(), `${process.pid} ${hostname()} live-writer\n`);
    const error = await rejection(withLockfileTurn(lockPath, async () => 'written', { waitMs: 300 }));
    expect(error.code).toBe('E-IO-003');
    expect(error.message).toContain(`pid ${process.pid}`);
    expect(error.hint).toContain(`remove ${turnPath()}`);
  });

  it('takes over a turn whose pid is held by a process that started at another time, its own included: a service restarted in a container gets the pid of the one that died', async () => {
    await fs.writeFile(turnPath(), `${process.pid} ${hostname()} died-before-restart 1\n`);
    expect(await withLockfileTurn(lockPath, async () => 'written', { waitMs: 300 })).toBe('written');
    expect(await listTree(dir)).toEqual([]);
    // The same pid with its own start time is the live writer it says: waited for.
    await fs.writeFile(turnPath(), `${process.pid} ${hostname()} live-writer ${processStartToken(process.pid)}\n`);
    expect((await rejection(withLockfileTurn(lockPath, async () => 'written', { waitMs: 300 }))).code).toBe('E-IO-003');
  });

  it('never judges a turn written on another host by its pid', async () => {
    const pid = await deadPid();
    await fs.writeFile(turnPath(), `${pid} some-other-host its-token\n`);
    const error = await rejection(withLockfileTurn(lockPath, async () => 'written', { waitMs: 300 }));
    expect(error.message).toContain(`pid ${pid} on some-other-host`);
    expect(await fs.readFile(turnPath(), 'utf8')).toContain('its-token');
  });

  it('says which turn it could not take on a full disk, and leaves no empty turn file for the next writer to wait out', async (context) => {
    const full = path.join(dir, 'full');
    await fs.mkdir(full);
    const mounted = tmpfsOrSkip(context, full, 'size=64k', '[lockfile] a full disk not exercised');
    try {
      // Filled to the last page: a new file can be made, and nothing written into it.
      await fs.writeFile(path.join(full, 'filler'), Buffer.alloc(64 * 1024)).catch(() => {});
      const lock = path.join(full, LOCKFILE_NAME);
      const error = await rejection(withLockfileTurn(lock, async () => 'written', { waitMs: 300 }));
      expect(error.message).toContain(`failed to take a turn at writing`);
      expect(error.message).toContain(`${lock}.writing`);
      expect(error.message).toContain('ENOSPC');
      expect(await fs.readdir(full)).toEqual(['filler']);
    } finally {
      mounted.unmount();
    }
  });
});
