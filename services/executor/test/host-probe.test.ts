import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { probeHost, subprocessRefusals } from '../src/host-probe.js';
import { tempDir } from '../../../test/support/fs.js';

let scratch: { dir: string; cleanup: () => Promise<void> };

beforeEach(async () => {
  scratch = await tempDir('murmur-host-probe-');
});

afterEach(async () => {
  await scratch.cleanup();
});

/** A bubblewrap that writes down each time it is started, then is the real one. */
function countingBubblewrap(): { bwrap: string; starts: () => number } {
  const log = path.join(scratch.dir, 'starts.log');
  writeFileSync(log, '');
  const bwrap = path.join(scratch.dir, 'bwrap');
  writeFileSync(bwrap, `#!/bin/sh\necho started >> '${log}'\nexec bwrap "$@"\n`);
  chmodSync(bwrap, 0o755);
  return { bwrap, starts: () => readFileSync(log, 'utf8').split('\n').filter(Boolean).length };
}

describe('the host probe', () => {
  it('asks bubblewrap again only when no sandbox was sealed with it since boot, or the kept answer was forgotten', () => {
    const { bwrap, starts } = countingBubblewrap();
    const env = { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_BWRAP: bwrap };

    const first = probeHost(env);
    expect(first.namespaces.tool).toBe('bubblewrap');
    expect(first.confine.support, first.confine.reason).toBeDefined();
    // The namespaces, then a whole sealed sandbox.
    expect(starts()).toBe(2);

    const again = probeHost(env);
    expect(again.namespaces).toEqual(first.namespaces);
    expect(again.confine.support).toEqual(first.confine.support);
    expect(starts()).toBe(2);

    // A launch that found the host changed forgets the answer: both are asked again.
    again.confine.forget?.();
    probeHost(env);
    expect(starts()).toBe(4);

    // Sealing turned off keeps nothing to go by: bubblewrap itself is asked.
    const unsealed = probeHost({ ...env, MURMUR_CONFINE: 'none' });
    expect(unsealed.namespaces.tool).toBe('bubblewrap');
    expect(starts()).toBe(5);
  });

  it('refuses a bubblewrap that cannot bind a directory by descriptor, saying which version is needed', () => {
    // A bubblewrap from before 0.7, as its option parser answers an option it does not know.
    const old = path.join(scratch.dir, 'old-bwrap');
    writeFileSync(
      old,
      `#!/bin/sh\nfor arg in "$@"; do case "$arg" in --ro-bind-fd|--bind-fd) echo "bwrap: Unknown option $arg" >&2; exit 1;; esac; done\nexec bwrap "$@"\n`,
    );
    chmodSync(old, 0o755);
    const probe = probeHost({
      PATH: process.env.PATH ?? '',
      MURMUR_HOME: path.join(scratch.dir, 'home'),
      MURMUR_BWRAP: old,
      MURMUR_UNSHARE: 'none',
    });
    expect(probe.namespaces.tool).toBeUndefined();
    expect(probe.namespaces.reason).toContain(
      `bubblewrap (${old}) cannot bind a directory by descriptor, which it does since 0.7 (--ro-bind-fd: bwrap: Unknown option --ro-bind-fd); install bubblewrap 0.7 or later`,
    );
  });
});

describe('a refusal of a capsule that can spawn', () => {
  const noCgroups = { support: undefined, reason: 'EACCES on /sys/fs/cgroup/memory/murmur' } as unknown as Parameters<typeof subprocessRefusals>[1]['cgroups'];
  const withoutNamespaces = (reason: string) => ({ namespaces: { tool: undefined, binary: undefined, reason }, cgroups: noCgroups });

  it('says to turn user namespaces on where bubblewrap is installed and was refused them, and to install it only where it is missing', () => {
    const refused = subprocessRefusals(
      true,
      withoutNamespaces(
        'bubblewrap (bwrap): bwrap: Creating new namespace failed: No space left on device; unshare (unshare): unshare failed: Operation not permitted',
      ),
    );
    expect(refused[0]).toMatchObject({
      code: 'E-CAP-005',
      hint: expect.stringContaining('bubblewrap is installed, and the kernel refused it user namespaces'),
    });
    expect(refused[0]?.hint).not.toContain('apt-get install bubblewrap');
    const missing = subprocessRefusals(true, withoutNamespaces('bubblewrap (bwrap): spawnSync bwrap ENOENT; unshare (unshare): spawnSync unshare ENOENT'));
    expect(missing[0]?.hint).toContain("install bubblewrap ('apt-get install bubblewrap')");
  });

  it('names MURMUR_CGROUP_PARENT where no cgroup can be made, the one way to point at a delegated subtree on cgroup v1', () => {
    const refused = subprocessRefusals(true, { namespaces: { tool: 'bubblewrap', binary: 'bwrap', reason: undefined }, cgroups: noCgroups }, 1000);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ code: 'E-RUN-012', hint: expect.stringContaining('MURMUR_CGROUP_PARENT') });
  });
});
