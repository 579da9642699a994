import { describe, expect, it } from 'vitest';
import { transportError } from '../src/egress.js';
import type { HostRequest } from '../src/host/protocol.js';
import { ResponseBodies } from '../src/host/response-bodies.js';
import { ResponseRelays } from '../src/response-relay.js';

/**
 * A relayed response body from the network to a guest's reads: the executor's `ResponseRelays`
 * and the host's `ResponseBodies`, joined directly where the IPC channel would carry their asks.
 * The network is a stream the test writes into.
 */

/** A network body the test writes to, counting how often the relay asked for more. */
function networkBody() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const counts = { pulls: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>(
    {
      start: (given) => {
        controller = given;
      },
      pull: () => {
        counts.pulls += 1;
      },
      cancel: () => {
        counts.cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, controller, counts };
}

function joined(limitBytes = 64 * 1024 * 1024, idleMs = 60_000) {
  const relays = new ResponseRelays(limitBytes, transportError, 64, idleMs);
  const asks: string[] = [];
  const bodies = new ResponseBodies({
    request: async (request: HostRequest) => {
      asks.push(request.op);
      if (request.op === 'http-body') return relays.next(request.body);
      if (request.op === 'http-body-release') return relays.release(request.body);
      throw new Error(`not a body ask: ${request.op}`);
    },
  });
  return { relays, bodies, asks };
}

const text = (read: unknown): string => Buffer.from((read as { bytes: Uint8Array }).bytes).toString();
const settle = () => new Promise((resolve) => setTimeout(resolve, 10));

describe('a relayed response body', () => {
  it('gives the guest each piece as it arrives, a read that does not wait answering nothing in between', async () => {
    const { relays, bodies } = joined();
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    network.controller.enqueue(Buffer.from('first '));
    await settle();
    expect(text(await bodies.read(id, 100, false))).toBe('first ');
    expect(text(await bodies.read(id, 100, false))).toBe('');
    const waiting = bodies.read(id, 100, true);
    network.controller.enqueue(Buffer.from('second'));
    expect(text(await waiting)).toBe('second');
    network.controller.close();
    expect(await bodies.read(id, 100, true)).toEqual({ end: true });
  });

  it('hands out at most what was asked, and the rest before the end', async () => {
    const { relays, bodies } = joined();
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    network.controller.enqueue(Buffer.from('abcdef'));
    network.controller.close();
    await settle();
    expect(text(await bodies.read(id, 4, true))).toBe('abcd');
    expect(text(await bodies.read(id, 4, true))).toBe('ef');
    expect(await bodies.read(id, 4, true)).toEqual({ end: true });
  });

  it('stops asking the network for more while a window of it waits unread, and asks again as the guest reads', async () => {
    const { relays, bodies } = joined();
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    const piece = Buffer.alloc(512 * 1024, 'x');
    for (let index = 0; index < 2; index += 1) {
      await settle();
      network.controller.enqueue(piece);
    }
    await settle();
    // Two asks filled the 1 MiB window; no third went out.
    const pullsWhileFull = network.counts.pulls;
    expect(pullsWhileFull).toBe(2);
    await settle();
    expect(network.counts.pulls).toBe(pullsWhileFull);
    let read = 0;
    while (read < piece.length) read += ((await bodies.read(id, 64 * 1024, true)) as { bytes: Uint8Array }).bytes.byteLength;
    await settle();
    expect(network.counts.pulls).toBeGreaterThan(pullsWhileFull);
  });

  it('ends a body past its size limit with HTTP-response-body-size, after what it read within it', async () => {
    const { relays, bodies } = joined(8);
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    network.controller.enqueue(Buffer.from('12345'));
    await settle();
    network.controller.enqueue(Buffer.from('67890'));
    await settle();
    expect(text(await bodies.read(id, 100, true))).toBe('12345');
    expect(await bodies.read(id, 100, true)).toEqual({ error: { code: 'HTTP-response-body-size', reason: 'the response is larger than 8 bytes' } });
    expect(network.counts.cancelled).toBe(true);
  });

  it('ends a body whose connection failed with the transport’s error code', async () => {
    const { relays, bodies } = joined();
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    network.controller.error(Object.assign(new Error('socket hang up'), { cause: { code: 'ECONNRESET' } }));
    expect(await bodies.read(id, 100, true)).toEqual({ error: { code: 'connection-terminated', reason: 'the connection was reset' } });
  });

  it('lets a body stream for longer than its silence may last, as long as each piece comes within it', async () => {
    const { relays, bodies } = joined(64 * 1024 * 1024, 200);
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    let said = '';
    for (const piece of ['one ', 'two ', 'three ', 'four ']) {
      const waiting = bodies.read(id, 100, true);
      await new Promise((resolve) => setTimeout(resolve, 100));
      network.controller.enqueue(Buffer.from(piece));
      said += text(await waiting);
    }
    network.controller.close();
    expect(said).toBe('one two three four ');
    expect(await bodies.read(id, 100, true)).toEqual({ end: true });
  });

  it('ends a body whose network says nothing for longer than its silence may last with connection-timeout, never as a whole body', async () => {
    const { relays, bodies } = joined(64 * 1024 * 1024, 100);
    const network = networkBody();
    const id = relays.hold(network.stream);
    bodies.open(id, 1);
    network.controller.enqueue(Buffer.from('so far'));
    expect(text(await bodies.read(id, 100, true))).toBe('so far');
    expect(await bodies.read(id, 100, true)).toEqual({ error: { code: 'connection-timeout', reason: 'the response sent nothing for 100 ms' } });
    expect(network.counts.cancelled).toBe(true);
  });

  it('wakes a wait over several bodies at the first with news, and a wait with a timeout at its end', async () => {
    const { relays, bodies } = joined();
    const quiet = networkBody();
    const talking = networkBody();
    const quietId = relays.hold(quiet.stream);
    const talkingId = relays.hold(talking.stream);
    bodies.open(quietId, 1);
    bodies.open(talkingId, 1);
    expect(await bodies.until([quietId, talkingId], 20)).toEqual([]);
    const waiting = bodies.until([quietId, talkingId], undefined);
    talking.controller.enqueue(Buffer.from('news'));
    expect(await waiting).toEqual([talkingId]);
  });

  it('lets the network go when the instance that opened a body ends before reading it all', async () => {
    const { relays, bodies, asks } = joined();
    const mine = networkBody();
    const other = networkBody();
    const mineId = relays.hold(mine.stream);
    const otherId = relays.hold(other.stream);
    bodies.open(mineId, 1);
    bodies.open(otherId, 2);
    bodies.releaseOwnedBy(1);
    await settle();
    expect(asks).toContain('http-body-release');
    expect(mine.counts.cancelled).toBe(true);
    expect(other.counts.cancelled).toBe(false);
    expect(await bodies.read(mineId, 10, false)).toEqual({ error: { code: 'internal-error', reason: `response body ${mineId} is not open` } });
  });

  it('refuses a further request while as many bodies as it allows are held, and allows one again once one is released', () => {
    const relays = new ResponseRelays(1024, transportError, 2, 60_000);
    const first = relays.hold(null);
    relays.hold(null);
    expect(relays.refusal()).toBe('this session already has 2 responses open or awaited: read or drop one first');
    relays.release(first);
    expect(relays.refusal()).toBeUndefined();
  });

  it('counts requests still waiting for their heads as open, since each already holds a connection', () => {
    const relays = new ResponseRelays(1024, transportError, 2, 60_000);
    expect(relays.refusal(1)).toBeUndefined();
    relays.hold(null);
    expect(relays.refusal(1)).toBe('this session already has 2 responses open or awaited: read or drop one first');
  });
});
