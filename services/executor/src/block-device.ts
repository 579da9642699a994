import { existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * The block device a directory's files are written to, named as the block layer's throttles
 * (`io.max`, v1's `blkio.throttle.*_bps_device`) take it: `MAJ:MIN` of a whole disk.
 *
 * A directory's `st_dev` is not always that. On a partition it is the partition's numbers, which
 * the kernel refuses in a throttle rule (only whole disks carry one), so a partition is taken to
 * its disk through sysfs. On overlayfs, tmpfs, a btrfs subvolume or NFS it is an anonymous device
 * with no queue at all: there is nothing to throttle, and the answer says so rather than guess
 * which disk lies below (inside a container, the one below is not even visible).
 */
export type ThrottleDevice = { device: string } | { unresolved: string };

/** glibc's `major()`/`minor()`: each 32 bits, split in pieces across the 64-bit number. */
export function deviceNumbers(dev: bigint): { major: number; minor: number } {
  const major = Number(((dev >> 8n) & 0xfffn) | ((dev >> 32n) & 0xfffff000n));
  const minor = Number((dev & 0xffn) | ((dev >> 12n) & 0xffffff00n));
  return { major, minor };
}

export function throttleDevice(dir: string, sysfs = '/sys/dev/block'): ThrottleDevice {
  let dev: bigint;
  try {
    dev = statSync(dir, { bigint: true }).dev;
  } catch (error) {
    return { unresolved: `the workdir ${dir} cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)})` };
  }
  const { major, minor } = deviceNumbers(dev);
  const entry = path.join(sysfs, `${major}:${minor}`);
  if (!existsSync(entry))
    return {
      unresolved: `the workdir's filesystem (device ${major}:${minor}) lies on no block device of its own (overlayfs, tmpfs, a btrfs subvolume or a network filesystem)`,
    };
  if (!existsSync(path.join(entry, 'partition'))) return { device: `${major}:${minor}` };
  try {
    // A partition's sysfs directory lies inside its disk's, whose `dev` names the disk.
    return { device: readFileSync(path.join(realpathSync(entry), '..', 'dev'), 'utf8').trim() };
  } catch (error) {
    return { unresolved: `the disk of partition ${major}:${minor} cannot be found in sysfs (${(error as NodeJS.ErrnoException).code ?? String(error)})` };
  }
}
