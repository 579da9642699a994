import { describe, expect, it } from 'vitest';
import { attachCommands } from '../src/host-sandbox.js';
import { mountPointRefusal, poolRefusal } from '../src/host-pool.js';
import { recordBinds } from '../src/workdir.js';

const pool = { workdirBase: '/srv/murmur', bundlesDir: '/srv/murmur/cache/transpiled/jco' };
const plain = {
  canSpawn: false,
  harness: false,
  policy: { interpreter_runtime: [], staged_runtime: [], unix_sockets: false, workdir_exec: false },
  chosenWorkdir: false,
  base: '/srv/murmur',
  accessible: '/srv/murmur/workdir/ses_1',
  components: [{ bundle_dir: '/srv/murmur/cache/transpiled/jco/abc' }],
} as unknown as Parameters<typeof poolRefusal>[1];

describe('which launches a pooled host can take', () => {
  it('takes a capsule that starts no subprocess, in a workdir made under the pool’s base', () => {
    expect(poolRefusal(pool, plain)).toBeUndefined();
  });

  it('starts a fresh host for whatever shapes the sandbox by its session, and names why', () => {
    expect(poolRefusal(pool, { ...plain, canSpawn: true })).toMatch(/subprocesses/);
    expect(poolRefusal(pool, { ...plain, harness: true })).toMatch(/harness/);
    expect(poolRefusal(pool, { ...plain, policy: { ...plain.policy, workdir_exec: true } })).toMatch(/workdir_exec/);
    expect(poolRefusal(pool, { ...plain, chosenWorkdir: true })).toMatch(/the launcher chose/);
    expect(poolRefusal(pool, { ...plain, base: '/home/me/project' })).toMatch(/base/);
    expect(poolRefusal(pool, { ...plain, accessible: '/elsewhere/ses_1' })).toMatch(/not in \/srv\/murmur\/workdir/);
    expect(poolRefusal(pool, { ...plain, components: [{ bundle_dir: '/other/cache/abc' }] } as typeof plain)).toMatch(/outside the bundles/);
  });
});

describe('the held helper’s commands', () => {
  it('mount the session’s workdir from the staging view at its own path, then take the staging view away', () => {
    expect(attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/ses_1').split('\n')).toEqual([
      'mkdir /srv/murmur/workdir/ses_1',
      'bind /.murmur-attach/workdir/ses_1\t/srv/murmur/workdir/ses_1',
      'readonly /srv/murmur/workdir',
      'unmount /.murmur-attach',
      'done',
      '',
    ]);
  });

  it('bind the session’s records over themselves read-only once the workdir is in, and refuse a record outside it or a writable one', () => {
    const records = recordBinds({ accessible: '/srv/murmur/workdir/ses_1', sessionDir: '/srv/murmur/workdir/ses_1' });
    expect(attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/ses_1', records).split('\n').slice(1, 7)).toEqual([
      'bind /.murmur-attach/workdir/ses_1\t/srv/murmur/workdir/ses_1',
      'bind /srv/murmur/workdir/ses_1/children\t/srv/murmur/workdir/ses_1/children',
      'readonly /srv/murmur/workdir/ses_1/children',
      'bind /srv/murmur/workdir/ses_1/trace.jsonl\t/srv/murmur/workdir/ses_1/trace.jsonl',
      'readonly /srv/murmur/workdir/ses_1/trace.jsonl',
      'readonly /srv/murmur/workdir',
    ]);
    const file = (at: string, writable = false) => [{ path: at, kind: 'file' as const, writable }];
    expect(() => attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/ses_1', file('/srv/murmur/workdir/ses_2/trace.jsonl'))).toThrow(
      /only paths in its workdir/,
    );
    expect(() => attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/ses_1', file('/srv/murmur/workdir/ses_1/a\tb'))).toThrow(
      /only paths in its workdir/,
    );
    // A chosen workdir's session directory is writable inside a read-only .murmur: never a pooled host's.
    const chosen = recordBinds({ accessible: '/srv/murmur/workdir/ses_1', sessionDir: '/srv/murmur/workdir/ses_1/.murmur/ses_1' });
    expect(() => attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/ses_1', chosen)).toThrow(/read-only only/);
  });

  it('refuse a workdir that is not directly in the mount point, or whose path would break a command line', () => {
    expect(() => attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/a/b')).toThrow(/directly in/);
    expect(() => attachCommands('/srv/murmur/workdir', '/srv/other')).toThrow(/directly in/);
    expect(() => attachCommands('/srv/murmur/workdir', '/srv/murmur/workdir/a\nunmount /')).toThrow(/directly in/);
  });
});

describe('where a pooled sandbox can make its workdir mount point', () => {
  it('can in its own tmpfs or a hidden directory, and cannot inside a read-only bind', () => {
    expect(mountPointRefusal('/nonexistent-murmur/base/workdir', ['/work/code', '/usr'], [])).toBeUndefined();
    expect(mountPointRefusal('/work/code/examples/x/workdir-missing', ['/work/code', '/usr'], ['/work/code/.cache'])).toMatch(/inside \/work\/code/);
    expect(mountPointRefusal('/work/code/.cache/home/workdir-missing', ['/work/code'], ['/work/code/.cache'])).toBeUndefined();
  });
});
