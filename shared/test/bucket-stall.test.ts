import { describe, expect, it } from 'vitest';
import { startNatsServer } from '../../test/support/nats-server.js';
import { MurmurError, silentLog } from '@murmur/shared';
import { connectBus } from '@murmur/shared/bus';

describe('a bucket on a NATS server that hangs', () => {
  it('is said to be the server’s to answer, with what to check, not a service’s', async () => {
    const nats = await startNatsServer();
    const bus = await connectBus({ natsUrl: nats.url, name: 'bucket-stall', log: silentLog });
    try {
      const store = await bus.keyValue('murmur-stall');
      await nats.pause();
      const refusal = await store.get('key').then(
        () => undefined,
        (error: unknown) => error,
      );
      nats.resume();
      expect(refusal).toBeInstanceOf(MurmurError);
      expect((refusal as MurmurError).code).toBe('E-BUS-003');
      expect((refusal as MurmurError).message).toContain("the key-value bucket 'murmur-stall'");
      expect((refusal as MurmurError).hint).toBe(
        `the NATS server at ${nats.url} answers for its buckets: check that it runs and is not overloaded or stalled, then run again`,
      );
    } finally {
      nats.resume();
      await bus.close();
      await nats.stop();
    }
  }, 30_000);
});
