import { promises as fs } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { rehearseRunStart } from '../src/snapshot-rehearsal.js';
import { tempDir } from '../../test/support/fs.js';
import { type NatsServer, startNatsServer } from '../../test/support/nats-server.js';

/**
 * The thin client's snapshot is built after a rehearsal of a run's first steps, so that it holds
 * their code compiled (`cli/src/snapshot-rehearsal.ts`). The build runs it against a loopback
 * stand-in (`scripts/snapshot.mjs`); here it runs against a real nats-server, so what it rehearses
 * is what a run does.
 */
describe('the rehearsal of a run against a stack', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let nats: NatsServer;

  beforeEach(async () => {
    // Loaded before, as in the bundle the snapshot is built from: the test runner's module loader
    // reads its own environment variables while it loads a module, which the rehearsal would count.
    await import('@murmur/shared/bus/nats');
    scratch = await tempDir('murmur-rehearsal-');
    nats = await startNatsServer();
  });

  afterEach(async () => {
    await nats.stop();
    await scratch.cleanup();
  });

  it('reads, packs and talks to the bus, then leaves nothing behind and the environment as it was', async () => {
    const environment = process.env;
    await rehearseRunStart(scratch.dir, nats.url);
    expect(process.env).toBe(environment);
    expect(await fs.readdir(scratch.dir)).toEqual([]);
  });

  it('without a bus, rehearses what needs none', async () => {
    await rehearseRunStart(scratch.dir, undefined);
    expect(await fs.readdir(scratch.dir)).toEqual([]);
  });

  it('fails, naming where it was, when the bus is not there', async () => {
    const url = nats.url;
    await nats.stop();
    await expect(rehearseRunStart(scratch.dir, url)).rejects.toThrow(/cannot connect to the bus at nats:\/\/127\.0\.0\.1/);
    expect(await fs.readdir(scratch.dir)).toEqual([]);
  });
});
