import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MurmurError, silentLog } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { type StageProgress, StagingSlots, startStagerService } from '@murmur/stager';
import { probeProject } from '../../../test/support/capsules.js';
import { tempDir } from '../../../test/support/fs.js';

/** A piece of work the test ends when it chooses, and whether it has started. */
function gate(): { started: boolean; open: () => void; work: () => Promise<string> } {
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  const held = { started: false, open: () => open(), work: async () => '' };
  held.work = async () => {
    held.started = true;
    await opened;
    return 'done';
  };
  return held;
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('a stager works on a bounded number of stagings at once', () => {
  it('runs at most its concurrency at once and the rest in the order they came, each told how many wait ahead as that changes', async () => {
    const slots = new StagingSlots(2, 8, 'the stager s-1');
    const gates = [gate(), gate(), gate(), gate()];
    const told: number[][] = gates.map(() => []);
    const runs = gates.map((held, index) => slots.run(held.work, (ahead) => told[index]?.push(ahead)));
    await settled();
    expect(gates.map((held) => held.started)).toEqual([true, true, false, false]);
    expect(told).toEqual([[], [], [0], [1]]);
    gates[1]?.open();
    await settled();
    expect(gates.map((held) => held.started)).toEqual([true, true, true, false]);
    expect(told[3]).toEqual([1, 0]);
    for (const held of gates) held.open();
    expect(await Promise.all(runs)).toEqual(['done', 'done', 'done', 'done']);
  });

  it('gives the slot of a staging that failed to the next in line', async () => {
    const slots = new StagingSlots(1, 8, 'the stager s-1');
    const failing = slots.run(
      async () => {
        throw new Error('the archive was refused');
      },
      () => {},
    );
    const next = gate();
    const after = slots.run(next.work, () => {});
    await expect(failing).rejects.toThrow('the archive was refused');
    next.open();
    expect(await after).toBe('done');
  });

  it('refuses one past its queue at once with E-BUS-007 naming both bounds, and runs the others', async () => {
    const slots = new StagingSlots(1, 1, 'the stager s-1');
    const first = gate();
    const second = gate();
    const runs = [slots.run(first.work, () => {}), slots.run(second.work, () => {})];
    const refused = await slots.run(gate().work, () => {}).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(MurmurError);
    expect((refused as MurmurError).code).toBe('E-BUS-007');
    expect((refused as MurmurError).message).toBe(
      'the stager s-1 is busy: 1 stagings are running (MURMUR_STAGER_CONCURRENCY) and 1 waiting (MURMUR_STAGER_QUEUE)',
    );
    first.open();
    second.open();
    expect(await Promise.all(runs)).toEqual(['done', 'done']);
  });

  it('once closed, refuses what waits and what comes later, and starts none of it', async () => {
    const slots = new StagingSlots(1, 8, 'the stager s-1');
    const running = gate();
    const waiting = gate();
    const first = slots.run(running.work, () => {});
    const second = slots.run(waiting.work, () => {});
    slots.close(new MurmurError('E-BUS-006', 'the stager s-1 shut down'));
    await expect(second).rejects.toThrow('the stager s-1 shut down');
    await expect(slots.run(gate().work, () => {})).rejects.toThrow('the stager s-1 shut down');
    running.open();
    expect(await first).toBe('done');
    expect(waiting.started).toBe(false);
  });
});

describe('the stager on the bus', () => {
  it('stages one project at a time under MURMUR_STAGER_CONCURRENCY=1, tells the one waiting so, and refuses one past MURMUR_STAGER_QUEUE', async () => {
    const scratch = await tempDir('murmur-stager-slots-');
    const bus = createBus(new InProcessTransport(), silentLog);
    const env = { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_STAGER_CONCURRENCY: '1', MURMUR_STAGER_QUEUE: '1' };
    const stager = startStagerService({ bus, log: silentLog, env });
    try {
      const project = await probeProject(path.join(scratch.dir, 'probe'));
      const source = { kind: 'project' as const, project: await uploadProject(bus, project) };
      const heard: StageProgress[][] = [[], [], []];
      const stagings = heard.map((progress) =>
        requestStaging(bus, { source }, { onProgress: (event) => progress.push(event) }).then(
          (plan) => plan.capsule.name,
          (error: unknown) => error,
        ),
      );
      const outcomes = await Promise.all(stagings);
      // Which of the three came first is the bus's affair: one ran at once, one waited its turn, one was refused.
      const refused = outcomes.filter((outcome): outcome is MurmurError => outcome instanceof MurmurError);
      expect(refused.map((error) => error.code)).toEqual(['E-BUS-007']);
      expect(refused[0]?.message).toContain('is busy: 1 stagings are running (MURMUR_STAGER_CONCURRENCY) and 1 waiting (MURMUR_STAGER_QUEUE)');
      const staged = [0, 1, 2].filter((index) => outcomes[index] === 'probe');
      expect(staged).toHaveLength(2);
      // The one that waited was told so before anything else, and the one that ran never was.
      const firstHeard = staged.map((index) => heard[index]?.[0]);
      expect(firstHeard).toContainEqual({ phase: 'queued', stager_id: stager.instanceId, ahead: 0 });
      expect(staged.filter((index) => heard[index]?.some((event) => event.phase === 'queued'))).toHaveLength(1);
    } finally {
      await stager.close();
      await bus.close();
      await scratch.cleanup();
    }
  });

  it('refuses a concurrency of 0 when it starts, naming the variable', () => {
    const bus = createBus(new InProcessTransport(), silentLog);
    expect(() => startStagerService({ bus, log: silentLog, env: { MURMUR_STAGER_CONCURRENCY: '0' } })).toThrow(
      "invalid MURMUR_STAGER_CONCURRENCY: '0' is not a whole number of stagings above 0",
    );
  });
});
