import { execFileSync } from 'node:child_process';
import { existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { appendBeneath, copyFileBeneath, mkdirBeneath, openAppendBeneath, writeFileBeneath } from '@murmur/shared/node';
import { refusalOf as refusal } from '../../test/support/refusals.js';

/**
 * Writing into a directory a guest can write, from outside its sandbox: a directory `outside`
 * stands for everything beyond the workdir, and each case plants what a guest could — a link, a
 * FIFO, a hard link — where the runtime writes, then checks that nothing reached `outside`.
 */
describe('writing beneath a workdir the guest can write', () => {
  let scratch: string;
  let root: string;
  let outside: string;

  beforeEach(() => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'murmur-beneath-'));
    root = path.join(scratch, 'workdir');
    outside = path.join(scratch, 'outside');
    mkdirSync(path.join(root, 'logs'), { recursive: true });
    mkdirSync(outside);
  });

  afterEach(() => rmSync(scratch, { recursive: true, force: true }));

  it('writes, appends, copies and makes directories where nothing is in the way', () => {
    writeFileBeneath(root, path.join(root, 'tools', 'x', 'murmur.yaml'), 'name: x\n', 0o600);
    expect(readFileSync(path.join(root, 'tools', 'x', 'murmur.yaml'), 'utf8')).toBe('name: x\n');
    expect(statSync(path.join(root, 'tools', 'x', 'murmur.yaml')).mode & 0o777).toBe(0o600);
    appendBeneath(root, path.join(root, 'logs', 'host.log'), 'one\n');
    appendBeneath(root, path.join(root, 'logs', 'host.log'), 'two\n');
    expect(readFileSync(path.join(root, 'logs', 'host.log'), 'utf8')).toBe('one\ntwo\n');
    const source = path.join(scratch, 'blob');
    writeFileSync(source, Buffer.alloc(3 * 1024 * 1024 + 7, 0x61));
    copyFileBeneath(root, source, path.join(root, 'tools', 'x', 'bin', 'x'), 0o755);
    expect(readFileSync(path.join(root, 'tools', 'x', 'bin', 'x')).equals(readFileSync(source))).toBe(true);
    expect(statSync(path.join(root, 'tools', 'x', 'bin', 'x')).mode & 0o777).toBe(0o755);
    mkdirBeneath(root, path.join(root, 'a', 'b', 'c'));
    expect(statSync(path.join(root, 'a', 'b', 'c')).isDirectory()).toBe(true);
  });

  it('makes a private directory its owner’s alone, whether it made it or found it', () => {
    mkdirBeneath(root, path.join(root, '.murmur'), { private: true });
    expect((statSync(path.join(root, '.murmur')).mode & 0o777).toString(8)).toBe('700');
    mkdirSync(path.join(root, 'shared'), { mode: 0o755 });
    mkdirBeneath(root, path.join(root, 'shared'), { private: true });
    expect((statSync(path.join(root, 'shared')).mode & 0o777).toString(8)).toBe('700');
  });

  it('names a failure by its path in the workdir, never the descriptor it was reached through', () => {
    const long = 'n'.repeat(300);
    for (const write of [
      () => mkdirBeneath(root, path.join(root, 'logs', long, 'x')),
      () => writeFileBeneath(root, path.join(root, 'logs', long), 'x'),
      () => appendBeneath(root, path.join(root, 'logs', long), 'x'),
    ]) {
      const failure = (() => {
        try {
          write();
        } catch (error) {
          return error as NodeJS.ErrnoException;
        }
        return undefined;
      })();
      expect(failure?.code).toBe('ENAMETOOLONG');
      expect(failure?.message).not.toContain('/proc/self/fd/');
      expect(failure?.message).toContain(path.join(root, 'logs', long));
    }
  });

  it('replaces a link in place of the file it writes, never following it', () => {
    symlinkSync(path.join(outside, 'cron'), path.join(root, 'task.md'));
    writeFileBeneath(root, path.join(root, 'task.md'), 'the task');
    expect(existsSync(path.join(outside, 'cron'))).toBe(false);
    expect(lstatSync(path.join(root, 'task.md')).isFile()).toBe(true);
    expect(readFileSync(path.join(root, 'task.md'), 'utf8')).toBe('the task');
  });

  it('refuses a link on the way, relative or absolute, naming it, and makes nothing outside', () => {
    symlinkSync('../outside', path.join(root, 'tools'));
    const error = refusal(() => writeFileBeneath(root, path.join(root, 'tools', 'x', 'skill.md'), 'pwned'));
    expect(error.code).toBe('E-SES-004');
    expect(error.message).toContain("'tools' is a link or not a directory");
    expect(refusal(() => mkdirBeneath(root, path.join(root, 'tools', 'y'))).code).toBe('E-SES-004');
    rmSync(path.join(root, 'logs'), { recursive: true });
    symlinkSync(outside, path.join(root, 'logs'));
    expect(refusal(() => appendBeneath(root, path.join(root, 'logs', 'host.log'), 'pwned')).code).toBe('E-SES-004');
    expect(execFileSync('find', [outside, '-mindepth', '1'], { encoding: 'utf8' })).toBe('');
  });

  it('refuses to append to a link, a FIFO (without waiting for a reader) or a hard link', () => {
    symlinkSync(path.join(outside, 'passwd'), path.join(root, 'logs', 'host.log'));
    expect(refusal(() => appendBeneath(root, path.join(root, 'logs', 'host.log'), 'x')).message).toContain('is a link, a FIFO or a directory');
    execFileSync('mkfifo', [path.join(root, 'logs', 'otel.log')]);
    expect(refusal(() => openAppendBeneath(root, path.join(root, 'logs', 'otel.log'))).code).toBe('E-SES-004');
    writeFileSync(path.join(outside, 'secret'), 'keep me');
    linkSync(path.join(outside, 'secret'), path.join(root, 'logs', 'bootstrap.log'));
    expect(refusal(() => appendBeneath(root, path.join(root, 'logs', 'bootstrap.log'), 'x')).message).toContain('a hard link');
    expect(readFileSync(path.join(outside, 'secret'), 'utf8')).toBe('keep me');
    expect(existsSync(path.join(outside, 'passwd'))).toBe(false);
  });

  it('refuses a path that is not beneath its root', () => {
    expect(refusal(() => writeFileBeneath(root, path.join(root, '..', 'outside', 'x'), 'x')).message).toContain('not beneath');
    expect(refusal(() => writeFileBeneath(root, root, 'x')).code).toBe('E-SES-004');
  });
});
