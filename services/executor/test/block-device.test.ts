import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { deviceNumbers, throttleDevice } from '../src/block-device.js';

/** glibc's `makedev()`, the inverse of what is tested. */
function makedev(major: number, minor: number): bigint {
  const [M, m] = [BigInt(major), BigInt(minor)];
  return (m & 0xffn) | ((M & 0xfffn) << 8n) | ((m & ~0xffn) << 12n) | ((M & ~0xfffn) << 32n);
}

describe('device numbers', () => {
  it('are read in the wide encoding: a major past 255 and a minor past 255 both survive', () => {
    expect(deviceNumbers(makedev(8, 0))).toEqual({ major: 8, minor: 0 });
    expect(deviceNumbers(makedev(259, 3))).toEqual({ major: 259, minor: 3 });
    expect(deviceNumbers(makedev(254, 70_000))).toEqual({ major: 254, minor: 70_000 });
    expect(deviceNumbers(makedev(5_000, 1))).toEqual({ major: 5_000, minor: 1 });
  });
});

/**
 * Against a sysfs laid out as the kernel lays it (`dev/block/M:m` a link into `devices/`, a
 * partition's directory inside its disk's), keyed by the real device of a real directory.
 */
describe('the device a workdir is throttled on', () => {
  let scratch: string;
  let sysfs: string;
  let own: string;

  beforeEach(() => {
    scratch = mkdtempSync(path.join(os.tmpdir(), 'murmur-block-device-'));
    sysfs = path.join(scratch, 'sys');
    mkdirSync(path.join(sysfs, 'dev', 'block'), { recursive: true });
    const { major, minor } = deviceNumbers(statSync(scratch, { bigint: true }).dev);
    own = `${major}:${minor}`;
  });

  afterEach(() => rmSync(scratch, { recursive: true, force: true }));

  const disk = (relative: string, dev: string, partition: boolean): void => {
    const dir = path.join(sysfs, 'devices', relative);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'dev'), `${dev}\n`);
    if (partition) writeFileSync(path.join(dir, 'partition'), '1\n');
  };

  it('is the filesystem’s own device when that is a whole disk', () => {
    disk('vda', own, false);
    symlinkSync(path.join('..', '..', 'devices', 'vda'), path.join(sysfs, 'dev', 'block', own));
    expect(throttleDevice(scratch, path.join(sysfs, 'dev', 'block'))).toEqual({ device: own });
  });

  it('is the disk a partition lies on, since the kernel refuses a throttle on a partition', () => {
    disk('sda', '8:0', false);
    disk(path.join('sda', 'sda3'), own, true);
    symlinkSync(path.join('..', '..', 'devices', 'sda', 'sda3'), path.join(sysfs, 'dev', 'block', own));
    expect(throttleDevice(scratch, path.join(sysfs, 'dev', 'block'))).toEqual({ device: '8:0' });
  });

  it('is unresolved, and says why, for a filesystem with no block device (overlayfs, tmpfs)', () => {
    const answer = throttleDevice(scratch, path.join(sysfs, 'dev', 'block'));
    expect(answer).toEqual({ unresolved: expect.stringContaining(`(device ${own}) lies on no block device of its own`) });
  });

  it('is unresolved for a workdir that cannot be read, naming it', () => {
    const missing = path.join(scratch, 'gone');
    expect(throttleDevice(missing)).toEqual({ unresolved: `the workdir ${missing} cannot be read (ENOENT)` });
  });

  it('is unresolved on this machine’s real tmpfs, and resolved on its root disk when that is one', () => {
    expect(throttleDevice('/dev/shm')).toHaveProperty('unresolved');
    const root = throttleDevice('/');
    if ('device' in root) expect(statSync(path.join('/sys/dev/block', root.device, 'partition'), { throwIfNoEntry: false })).toBeUndefined();
    else expect(root.unresolved).toMatch(/no block device of its own/);
  });
});
