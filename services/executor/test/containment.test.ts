import { describe, expect, it } from 'vitest';
import type { ConfineProbe } from '../src/confinement.js';
import { assessContainment, containmentRefusal, hostContainment, strongestFloor } from '../src/containment.js';
import type { NamespaceProbe } from '../src/sandbox.js';

const bubblewrap: NamespaceProbe = { tool: 'bubblewrap', binary: 'bwrap', reason: undefined };
const sealable: ConfineProbe = { support: { helper: '/h', node: '/n' }, reason: undefined };
const unsealable: ConfineProbe = {
  support: undefined,
  reason: 'sealing a sandbox failed here: murmur-confine: Landlock is not available: Operation not supported',
};

describe('containment', () => {
  it('is sealed where bubblewrap and murmur-confine both work, scoped with bubblewrap alone, advisory otherwise', () => {
    expect(hostContainment(bubblewrap, sealable)).toMatchObject({ achieved: 'sealed', tier: 'mountns+pivot_root+landlock+seccomp' });
    expect(hostContainment(bubblewrap, unsealable)).toMatchObject({ achieved: 'scoped', tier: 'mountns+pivot_root' });
    expect(hostContainment({ tool: 'unshare', binary: 'unshare', reason: 'bwrap: missing' }, unsealable)).toMatchObject({
      achieved: 'advisory',
      tier: 'namespaces',
    });
    expect(hostContainment({ tool: undefined, binary: undefined, reason: 'none' }, unsealable)).toMatchObject({ achieved: 'advisory', tier: 'none' });
  });

  it('takes the strongest floor it is given', () => {
    expect(strongestFloor('advisory', undefined, 'sealed', 'scoped')).toBe('sealed');
    expect(strongestFloor(undefined)).toBe('advisory');
  });

  it('names the exact reason sealed is not met, in the E-CAP-003 upstream words', () => {
    const assessment = assessContainment(hostContainment(bubblewrap, unsealable), { workdir_exec: false }, 'sealed');
    expect(assessment).toMatchObject({ floorMet: false, achieved: 'scoped' });
    const error = containmentRefusal(assessment);
    expect(error.code).toBe('E-CAP-003');
    expect(error.message).toBe(`declared containment class 'sealed' is not achievable on this host (achieved: 'scoped'): ${unsealable.reason}`);
    expect(error.hint).toContain("lower the declared floor to 'scoped'");
  });

  it('caps a capsule with workdir_exec at advisory on every host, and says why when its floor is higher', () => {
    const assessment = assessContainment(hostContainment(bubblewrap, sealable), { workdir_exec: true }, 'scoped');
    expect(assessment).toMatchObject({ achieved: 'advisory', floorMet: false });
    expect(assessment.shortfall).toContain('capabilities.filesystem.workdir_exec: true keeps the execute right on the session workdir');
    expect(assessContainment(hostContainment(bubblewrap, sealable), { workdir_exec: true }, 'advisory').floorMet).toBe(true);
  });
});
