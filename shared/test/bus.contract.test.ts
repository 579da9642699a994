import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ERROR_CATALOGUE, MurmurError } from '@murmur/shared';
import { type Bus, InProcessTransport, type Subscription, type Transport, createBus, defineCommand, defineEvent } from '@murmur/shared/bus';
import { NatsTransport } from '@murmur/shared/bus/nats';
import { type NatsServer, startNatsServer } from '../../test/support/nats-server.js';
import { RecordingLog } from '../../test/support/recording-log.js';
import { rejectionOf as rejection, refusalOf as thrown } from '../../test/support/refusals.js';

/**
 * One contract, two transports: everything below must hold identically for the embedded
 * in-process bus and for a real nats-server, or code tested in-process would behave differently
 * in the deployed stack.
 */

// ---------------------------------------------------------------------------------------------
// Topics used by the suite

const Greeting = z.object({
  id: z.number().int().nonnegative(),
  text: z.string().min(1),
  tags: z.array(z.string()),
  meta: z.object({ from: z.string(), at: z.number() }),
});
type Greeting = z.infer<typeof Greeting>;

const Ping = z.object({ n: z.number().int() });

const greeted = defineEvent('contract.greeted', Greeting);
const sessionEvents = defineEvent('contract.session.*.events', Greeting);
const work = defineEvent('contract.work', Ping);
const ticks = defineEvent('contract.ticks', Ping);

const wildOne = defineEvent('wild.*', Ping);
const wildRest = defineEvent('wild.>', Ping);
const wildMiddle = defineEvent('wild.*.leaf', Ping);
const at = (subject: string) => defineEvent(subject, Ping);

const Add = z.object({ a: z.number(), b: z.number() });
const Sum = z.object({ sum: z.number() });
const add = defineCommand('contract.add', Add, Sum);
const lonely = defineCommand('contract.lonely', Add, Sum);
const stuck = defineCommand('contract.stuck', Add, Sum);
const failing = defineCommand('contract.failing', Add, Sum);
const crashing = defineCommand('contract.crashing', Add, Sum);
const broken = defineCommand('contract.broken', Add, Sum);
const sessionCommand = defineCommand('contract.session.*.stop', Add, Sum);
/** Answered by any member of one service's queue group, as the stack's stage, launch and the like are. */
const staffed = defineCommand('contract.staffed', Add, Sum, { answeredBy: 'adder' });

function greeting(id: number, text = `hello ${id}`): Greeting {
  return { id, text, tags: ['a', `t${id}`], meta: { from: 'contract', at: 1_700_000_000_000 + id } };
}

// ---------------------------------------------------------------------------------------------
// Helpers

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Polls `check` until it stops throwing, or rethrows its last failure at the deadline. */
async function eventually<T>(check: () => T | Promise<T>, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 5_000);
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() >= deadline) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 10));
  }
}

/**
 * A barrier: once it resolves, everything the first bus published has been delivered to the
 * later buses' handlers. Over NATS, a flush is a PING/PONG: the publisher's PONG means the server
 * has routed all its messages; a subscriber's PONG arrives after the messages queued before it.
 * In-process, a flush waits until every scheduled delivery has run. Used to prove that something
 * did NOT arrive without sleeping.
 */
async function settle(...buses: Bus[]): Promise<void> {
  for (const bus of buses) await bus.flush();
}

let bucketCounter = 0;
/** A bucket no earlier test wrote (a nats-server keeps its buckets across the tests of a suite). */
async function collect(chunks: AsyncIterable<Uint8Array> | undefined): Promise<Buffer> {
  if (!chunks) throw new Error('no such object');
  const parts: Buffer[] = [];
  for await (const chunk of chunks) parts.push(Buffer.from(chunk));
  return Buffer.concat(parts);
}

function nextBucket(): string {
  bucketCounter += 1;
  return `contract-kv-${process.pid}-${bucketCounter}`;
}

/** Records every uncaught exception and unhandled rejection while it is installed. */
function watchForCrashes(): { readonly seen: unknown[]; stop(): void } {
  const seen: unknown[] = [];
  const record = (error: unknown): void => {
    seen.push(error);
  };
  process.on('uncaughtException', record);
  process.on('unhandledRejection', record);
  return {
    seen,
    stop() {
      process.off('uncaughtException', record);
      process.off('unhandledRejection', record);
    },
  };
}

/** A bus, the transport under it (to put raw bytes on the wire), and what it logged. */
interface Endpoint {
  readonly bus: Bus;
  readonly transport: Transport;
  readonly log: RecordingLog;
}

/** Where the buses of one test meet: one in-process transport, or one nats-server. */
interface Network {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Another participant: in-process, a bus on the shared transport; over NATS, a new connection. */
  connect(): Promise<Endpoint>;
  closeAll(): Promise<void>;
}

function inProcessNetwork(): Network {
  let transport: InProcessTransport | undefined;
  const open: Bus[] = [];
  return {
    start: async () => {},
    stop: async () => {},
    async connect() {
      transport ??= new InProcessTransport();
      const log = new RecordingLog();
      const bus = createBus(transport, log);
      open.push(bus);
      return { bus, transport, log };
    },
    async closeAll() {
      for (const bus of open.splice(0)) await bus.close();
      transport = undefined;
    },
  };
}

function natsNetwork(): Network {
  let server: NatsServer | undefined;
  const open: Bus[] = [];
  return {
    async start() {
      server = await startNatsServer();
    },
    async stop() {
      await server?.stop();
      server = undefined;
    },
    async connect() {
      if (!server) throw new Error('the nats-server is not running');
      const log = new RecordingLog();
      const transport = await NatsTransport.connect(server.url, { log, name: 'bus-contract-test' });
      const bus = createBus(transport, log);
      open.push(bus);
      return { bus, transport, log };
    },
    async closeAll() {
      await Promise.all(open.splice(0).map((bus) => bus.close()));
    },
  };
}

const transports: Array<{ name: string; network: () => Network }> = [
  { name: 'in-process', network: inProcessNetwork },
  { name: 'NATS', network: natsNetwork },
];

// ---------------------------------------------------------------------------------------------
// The contract

describe.each(transports)('the contract bus over $name', ({ network: makeNetwork }) => {
  const network = makeNetwork();
  beforeAll(() => network.start());
  afterEach(() => network.closeAll());
  afterAll(() => network.stop());

  it('delivers a published event to every subscriber of its subject, validated and deep-equal', async () => {
    const publisher = await network.connect();
    const first = await network.connect();
    const second = await network.connect();
    const got: Record<string, Array<{ payload: Greeting; subject: string }>> = { first: [], second: [], alsoFirst: [] };
    first.bus.subscribe(greeted, (payload, info) => got.first!.push({ payload, subject: info.subject }));
    first.bus.subscribe(greeted, (payload, info) => got.alsoFirst!.push({ payload, subject: info.subject }));
    second.bus.subscribe(greeted, (payload, info) => got.second!.push({ payload, subject: info.subject }));
    await settle(first.bus, second.bus);

    const sent = greeting(1);
    publisher.bus.publish(greeted, sent);

    await eventually(() => {
      for (const name of ['first', 'alsoFirst', 'second']) expect(got[name]).toHaveLength(1);
    });
    for (const name of ['first', 'alsoFirst', 'second']) {
      const [received] = got[name]!;
      expect(received!.subject).toBe('contract.greeted');
      expect(received!.payload).toEqual(sent);
      // Each subscriber decodes its own copy; nobody shares the sender's object.
      expect(received!.payload).not.toBe(sent);
    }
    expect(got.first![0]!.payload).not.toBe(got.alsoFirst![0]!.payload);
  });

  it('matches exactly one token with * and one or more trailing tokens with >', async () => {
    const publisher = await network.connect();
    const subscriber = await network.connect();
    const seen = { one: [] as string[], rest: [] as string[], middle: [] as string[] };
    subscriber.bus.subscribe(wildOne, (_payload, info) => seen.one.push(info.subject));
    subscriber.bus.subscribe(wildRest, (_payload, info) => seen.rest.push(info.subject));
    subscriber.bus.subscribe(wildMiddle, (_payload, info) => seen.middle.push(info.subject));
    await settle(subscriber.bus);

    const subjects = ['wild', 'wild.b.c', 'wild.b', 'wild.b.leaf', 'wild.b.c.d', 'other.b', 'wildly.b', 'wild.x'];
    for (const [n, subject] of subjects.entries()) publisher.bus.publish(at(subject), { n });
    await settle(publisher.bus, subscriber.bus);

    expect(seen.one).toEqual(['wild.b', 'wild.x']);
    expect(seen.rest).toEqual(['wild.b.c', 'wild.b', 'wild.b.leaf', 'wild.b.c.d', 'wild.x']);
    expect(seen.middle).toEqual(['wild.b.leaf']);
  });

  it('publishes a topic whose wildcards are filled by at(...) to the concrete subject', async () => {
    const publisher = await network.connect();
    const subscriber = await network.connect();
    const onPattern: Array<{ subject: string; payload: Greeting }> = [];
    const onConcrete: Greeting[] = [];
    subscriber.bus.subscribe(sessionEvents, (payload, info) => onPattern.push({ subject: info.subject, payload }));
    subscriber.bus.subscribe(sessionEvents.at('s-2'), (payload) => onConcrete.push(payload));
    await settle(subscriber.bus);

    const concrete = sessionEvents.at('s-1');
    expect(concrete.subject).toBe('contract.session.s-1.events');
    expect(concrete.kind).toBe('event');
    publisher.bus.publish(concrete, greeting(1));
    publisher.bus.publish(sessionEvents.at('s-2'), greeting(2));
    await settle(publisher.bus, subscriber.bus);

    expect(onPattern).toEqual([
      { subject: 'contract.session.s-1.events', payload: greeting(1) },
      { subject: 'contract.session.s-2.events', payload: greeting(2) },
    ]);
    expect(onConcrete).toEqual([greeting(2)]);
    expect(sessionCommand.at('s-9').subject).toBe('contract.session.s-9.stop');
    expect(() => sessionEvents.at('a', 'b')).toThrow(/fewer wildcards/);
  });

  it('shares messages among the members of a queue group while a plain subscriber still gets every one', async () => {
    const publisher = await network.connect();
    const members = [await network.connect(), await network.connect(), await network.connect()];
    const watcher = await network.connect();
    const perMember: number[][] = members.map(() => []);
    const watched: number[] = [];
    for (const [index, member] of members.entries()) member.bus.subscribe(work, ({ n }) => perMember[index]!.push(n), { queue: 'workers' });
    watcher.bus.subscribe(work, ({ n }) => watched.push(n));
    await settle(...members.map((member) => member.bus), watcher.bus);

    const total = 90;
    for (let n = 0; n < total; n += 1) publisher.bus.publish(work, { n });
    await settle(publisher.bus, watcher.bus, ...members.map((member) => member.bus));

    const all = Array.from({ length: total }, (_, n) => n);
    expect(watched).toEqual(all);
    const handled = perMember.flat().sort((x, y) => x - y);
    expect(handled).toEqual(all); // each message reached exactly one member
    for (const got of perMember) expect(got.length).toBeGreaterThan(0); // and every member got some
  });

  it('answers a request with the reply, validated against the reply schema', async () => {
    const server = await network.connect();
    const client = await network.connect();
    const asked: Array<{ payload: z.infer<typeof Add>; subject: string }> = [];
    server.bus.serve(add, async (payload, info) => {
      asked.push({ payload, subject: info.subject });
      // The extra field is not part of the reply contract and must not reach the requester.
      return { sum: payload.a + payload.b, extra: 'dropped' } as z.infer<typeof Sum>;
    });
    await settle(server.bus);

    const reply = await client.bus.request(add, { a: 2, b: 40 });
    expect(reply).toStrictEqual({ sum: 42 });
    expect(asked).toEqual([{ payload: { a: 2, b: 40 }, subject: 'contract.add' }]);

    const replies = await Promise.all([1, 2, 3].map((a) => client.bus.request(add, { a, b: 10 })));
    expect(replies).toEqual([{ sum: 11 }, { sum: 12 }, { sum: 13 }]);
  });

  it('fails a request nobody serves at once with E-BUS-004', async () => {
    const client = await network.connect();
    const started = performance.now();
    const error = await rejection(client.bus.request(lonely, { a: 1, b: 1 }, { timeoutMs: 5_000 }));
    const elapsed = performance.now() - started;
    expect(error.code).toBe('E-BUS-004');
    expect(error.path).toBe('contract.lonely');
    expect(error.message).toContain("'contract.lonely'");
    expect(elapsed).toBeLessThan(1_000);
  });

  it('names the service a request needs when none of it answers, or none replies in time', async () => {
    const client = await network.connect();
    const overNats = client.bus.description !== 'in-process';
    const unanswered = await rejection(client.bus.request(staffed, { a: 1, b: 1 }, { timeoutMs: 5_000 }));
    expect(unanswered.code).toBe('E-BUS-004');
    expect(unanswered.hint).toBe(
      overNats
        ? `start the adder service, connected to ${client.bus.description} ('mur health' lists what answers), or unset MURMUR_NATS_URL to run everything in-process`
        : "this process's own adder did not answer: that is a bug in mur; please report it with the command you ran",
    );
    const server = await network.connect();
    server.bus.serve(staffed, () => new Promise<never>(() => {}));
    await settle(server.bus);
    const silent = await rejection(client.bus.request(staffed, { a: 1, b: 1 }, { timeoutMs: 200 }));
    expect(silent.code).toBe('E-BUS-003');
    if (overNats)
      expect(silent.hint).toBe(`check that the adder service is connected to ${client.bus.description} and keeping up ('mur health' says), then try again`);
    // A command one particular instance answers says nothing of a service to start: that one is gone.
    expect((await rejection(client.bus.request(lonely, { a: 1, b: 1 }, { timeoutMs: 5_000 }))).hint).toBe(
      'start the service, or unset MURMUR_NATS_URL to run everything in-process',
    );
  });

  it('fails a request whose server never answers with E-BUS-003 after the timeout', async () => {
    const server = await network.connect();
    const client = await network.connect();
    let calls = 0;
    server.bus.serve(stuck, () => {
      calls += 1;
      return new Promise<never>(() => {});
    });
    await settle(server.bus);

    const timeoutMs = 300;
    const started = performance.now();
    const error = await rejection(client.bus.request(stuck, { a: 1, b: 1 }, { timeoutMs }));
    const elapsed = performance.now() - started;
    expect(error.code).toBe('E-BUS-003');
    expect(error.path).toBe('contract.stuck');
    expect(error.message).toContain(`${timeoutMs} ms`);
    expect(elapsed).toBeGreaterThanOrEqual(timeoutMs - 20);
    expect(elapsed).toBeLessThan(timeoutMs + 2_000);
    expect(calls).toBe(1);
  });

  it('gathers a reply from every server of a request, one per queue group, until the replies go quiet', async () => {
    const first = await network.connect();
    const second = await network.connect();
    const grouped = await network.connect();
    const client = await network.connect();
    first.bus.serve(add, ({ a, b }) => ({ sum: a + b }));
    second.bus.serve(add, ({ a, b }) => ({ sum: a + b + 100 }));
    // Two members of one queue group are one answer, as a request to the group would be.
    grouped.bus.serve(add, ({ a, b }) => ({ sum: a + b + 1_000 }), { queue: 'pool' });
    grouped.bus.serve(add, ({ a, b }) => ({ sum: a + b + 1_000 }), { queue: 'pool' });
    await settle(first.bus, second.bus, grouped.bus);

    const timeoutMs = 10_000;
    const started = performance.now();
    const { replies, refused } = await client.bus.gather(add, { a: 1, b: 2 }, { timeoutMs, quietMs: 1_000 });
    // Over once the replies went quiet, not at the timeout.
    expect(performance.now() - started).toBeLessThan(timeoutMs / 2);
    expect(replies.map((reply) => reply.sum).sort((left, right) => left - right)).toEqual([3, 103, 1_003]);
    expect(refused).toEqual([]);
  });

  it('gathers nothing, without failing, when nobody serves the request', async () => {
    const client = await network.connect();
    expect(await client.bus.gather(lonely, { a: 1, b: 1 }, { timeoutMs: 300, quietMs: 100 })).toEqual({ replies: [], refused: [] });
  });

  it('gives a gathered reply that is an error or breaks the reply schema as request would have thrown it', async () => {
    const good = await network.connect();
    const failingServer = await network.connect();
    const responder = await network.connect();
    const client = await network.connect();
    good.bus.serve(add, ({ a, b }) => ({ sum: a + b }));
    failingServer.bus.serve(add, () => {
      throw new MurmurError('E-BUS-006', 'not today');
    });
    responder.transport.subscribe('contract.add', (message) => message.respond?.(encoder.encode(JSON.stringify({ ok: true, data: { sum: 'x' } }))));
    await settle(good.bus, failingServer.bus, responder.bus);

    const { replies, refused } = await client.bus.gather(add, { a: 2, b: 2 }, { timeoutMs: 10_000, quietMs: 1_000 });
    expect(replies).toEqual([{ sum: 4 }]);
    expect(refused.map((error) => [error.code, error.message]).sort()).toEqual([
      ['E-BUS-002', expect.stringContaining("refused the reply on 'contract.add': payload does not match its contract")],
      ['E-BUS-006', 'not today'],
    ]);
    expect(client.log.about('warn', 'contract.add')).toHaveLength(1);
  });

  it('refuses an invalid payload on send with E-BUS-001 naming the subject, and nothing is delivered', async () => {
    const publisher = await network.connect();
    const subscriber = await network.connect();
    const server = await network.connect();
    const received: Greeting[] = [];
    let served = 0;
    subscriber.bus.subscribe(greeted, (payload) => received.push(payload));
    server.bus.serve(add, ({ a, b }) => {
      served += 1;
      return { sum: a + b };
    });
    await settle(subscriber.bus, server.bus);

    const bad = { ...greeting(1), tags: 'not-a-list' } as unknown as Greeting;
    const error = thrown(() => publisher.bus.publish(greeted, bad));
    expect(error.code).toBe('E-BUS-001');
    expect(error.message).toContain("'contract.greeted'");
    expect(error.message).toContain('tags');
    expect(error.path).toBe('contract.greeted');
    expect(publisher.log.about('warn', 'contract.greeted')).toHaveLength(1);

    const badRequest = await rejection(publisher.bus.request(add, { a: 'one', b: 2 } as unknown as z.infer<typeof Add>));
    expect(badRequest.code).toBe('E-BUS-001');
    expect(badRequest.message).toContain("'contract.add'");

    publisher.bus.publish(greeted, greeting(2));
    await settle(publisher.bus, subscriber.bus, server.bus);
    expect(received).toEqual([greeting(2)]);
    expect(served).toBe(0);
  });

  it('refuses to publish to a pattern with E-BUS-001', async () => {
    const publisher = await network.connect();
    const tapper = await network.connect();
    const tapped: string[] = [];
    tapper.bus.tap('>', (subject) => tapped.push(subject));
    await settle(tapper.bus);

    const attempts: Array<[string, () => void]> = [
      ...[wildOne, wildRest, wildMiddle, wildMiddle.at()].map((topic): [string, () => void] => [topic.subject, () => publisher.bus.publish(topic, { n: 1 })]),
      [sessionEvents.subject, () => publisher.bus.publish(sessionEvents, greeting(1))],
    ];
    for (const [subject, publish] of attempts) {
      const error = thrown(publish);
      expect(error.code).toBe('E-BUS-001');
      expect(error.message).toContain(`'${subject}'`);
      expect(error.message).toContain('pattern');
    }
    const requestError = await rejection(publisher.bus.request(sessionCommand, { a: 1, b: 2 }));
    expect(requestError.code).toBe('E-BUS-001');

    publisher.bus.publish(ticks, { n: 1 });
    await settle(publisher.bus, tapper.bus);
    expect(tapped).toEqual(['contract.ticks']);
  });

  it('logs and drops an invalid payload arriving on the wire, and the subscriber handles the next valid one', async () => {
    const crashes = watchForCrashes();
    try {
      const publisher = await network.connect();
      const subscriber = await network.connect();
      const received: Greeting[] = [];
      subscriber.bus.subscribe(greeted, (payload) => received.push(payload));
      await settle(subscriber.bus);

      publisher.transport.publish('contract.greeted', encoder.encode('{not json'));
      publisher.transport.publish('contract.greeted', new Uint8Array([0xff, 0xfe, 0x00, 0x01]));
      publisher.transport.publish('contract.greeted', encoder.encode(JSON.stringify({ id: 'seven', text: '' })));
      publisher.transport.publish('contract.greeted', encoder.encode('null'));
      publisher.bus.publish(greeted, greeting(8));

      await eventually(() => expect(received).toEqual([greeting(8)]));
      const refusals = subscriber.log.about('warn', 'contract.greeted');
      expect(refusals).toHaveLength(4);
      expect(refusals[0]!.fields.reason).toBe('payload is not JSON');
      expect(refusals[1]!.fields.reason).toBe('payload is not JSON');
      expect(refusals[2]!.fields.reason).toMatch(/does not match its contract/);
      expect(refusals[3]!.fields.reason).toMatch(/does not match its contract/);
      expect(subscriber.log.errors).toEqual([]);

      publisher.bus.publish(greeted, greeting(9));
      await eventually(() => expect(received).toEqual([greeting(8), greeting(9)]));
      expect(crashes.seen).toEqual([]);
    } finally {
      crashes.stop();
    }
  });

  it('logs a handler that throws and keeps the subscription working', async () => {
    const crashes = watchForCrashes();
    try {
      const publisher = await network.connect();
      const subscriber = await network.connect();
      const handled: number[] = [];
      subscriber.bus.subscribe(ticks, async ({ n }) => {
        handled.push(n);
        if (n === 1) throw new Error('sync-looking failure');
        await Promise.resolve();
        if (n === 2) throw new Error('async failure');
      });
      // A plainly synchronous thrower as well.
      subscriber.bus.subscribe(ticks, ({ n }) => {
        if (n === 3) throw new MurmurError('E-IO-003', 'disk gone');
      });
      await settle(subscriber.bus);

      for (const n of [1, 2, 3, 4]) publisher.bus.publish(ticks, { n });
      await eventually(() => {
        expect(handled).toEqual([1, 2, 3, 4]);
        expect(subscriber.log.about('error', 'contract.ticks')).toHaveLength(3);
      });
      const failures = subscriber.log.about('error', 'contract.ticks').map((entry) => (entry.fields.err as Error).message);
      expect(failures.sort()).toEqual(['async failure', 'disk gone', 'sync-looking failure']);

      publisher.bus.publish(ticks, { n: 5 });
      await eventually(() => expect(handled).toEqual([1, 2, 3, 4, 5]));
      expect(crashes.seen).toEqual([]);
    } finally {
      crashes.stop();
    }
  });

  it('passes a MurmurError thrown by a serve handler to the requester with its code and message, and turns a plain Error into E-BUS-006', async () => {
    const server = await network.connect();
    const client = await network.connect();
    server.bus.serve(failing, async ({ a }) => {
      await Promise.resolve();
      throw new MurmurError('E-REG-001', `artifact 'tool-${a}@1.0.0' is not in the registry`, { path: `tool-${a}` });
    });
    server.bus.serve(crashing, () => {
      throw new Error('disk on fire');
    });
    await settle(server.bus);

    const refused = await rejection(client.bus.request(failing, { a: 7, b: 0 }));
    expect(refused.code).toBe('E-REG-001');
    expect(refused.message).toBe("artifact 'tool-7@1.0.0' is not in the registry");
    expect(refused.hint).toBe(ERROR_CATALOGUE['E-REG-001'].hint);
    expect(refused.path).toBe('tool-7');

    const crashed = await rejection(client.bus.request(crashing, { a: 1, b: 1 }));
    expect(crashed.code).toBe('E-BUS-006');
    expect(crashed.message).toContain('disk on fire');
    expect(server.log.about('error', 'contract.crashing')).toHaveLength(1);
    // The server keeps serving after a failure.
    expect((await rejection(client.bus.request(crashing, { a: 1, b: 1 }))).code).toBe('E-BUS-006');
  });

  it("says a handler's file-system failure as the user's to mend, naming the file even where the system's message does not (a write)", async () => {
    const server = await network.connect();
    const client = await network.connect();
    server.bus.serve(crashing, () => {
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), {
        code: 'ENOSPC',
        syscall: 'write',
        path: '/var/lib/murmur/cache/blobs/ab/abc',
      });
    });
    await settle(server.bus);
    const full = await rejection(client.bus.request(crashing, { a: 1, b: 1 }));
    expect(full.code).toBe('E-IO-003');
    expect(full.message).toBe('the service could not do its work: ENOSPC: no space left on device, write (/var/lib/murmur/cache/blobs/ab/abc)');
    expect(full.path).toBe('/var/lib/murmur/cache/blobs/ab/abc');
    expect(full.hint).toContain('full');
  });

  it('makes the requester reject a reply that breaks the reply schema (E-BUS-001 from the server) rather than receive it', async () => {
    const server = await network.connect();
    const client = await network.connect();
    server.bus.serve(broken, () => ({ sum: 'forty-two' }) as unknown as z.infer<typeof Sum>);
    await settle(server.bus);

    const error = await rejection(client.bus.request(broken, { a: 40, b: 2 }));
    expect(error.code).toBe('E-BUS-001');
    expect(error.message).toContain("'contract.broken'");
    expect(error.message).toContain('sum');
    expect(server.log.about('error', 'contract.broken')).toHaveLength(1);
  });

  it('refuses a reply that breaks the reply schema on arrival with E-BUS-002', async () => {
    const responder = await network.connect();
    const client = await network.connect();
    const replies = [encoder.encode(JSON.stringify({ ok: true, data: { sum: 'x' } })), encoder.encode('garbage'), encoder.encode(JSON.stringify({ sum: 3 }))];
    let next = 0;
    responder.transport.subscribe('contract.add', (message) => message.respond?.(replies[next++]!));
    await settle(responder.bus);

    for (let attempt = 0; attempt < replies.length; attempt += 1) {
      const error = await rejection(client.bus.request(add, { a: 1, b: 2 }));
      expect(error.code).toBe('E-BUS-002');
      expect(error.message).toContain("'contract.add'");
    }
    expect(client.log.about('warn', 'contract.add')).toHaveLength(replies.length);
  });

  it('answers an invalid request sent as raw bytes with an E-BUS-002 error envelope', async () => {
    const server = await network.connect();
    const client = await network.connect();
    let calls = 0;
    server.bus.serve(add, ({ a, b }) => {
      calls += 1;
      return { sum: a + b };
    });
    await settle(server.bus);

    for (const garbage of ['not json at all', JSON.stringify({ a: 'one', b: 2 }), '']) {
      const bytes = await client.transport.request('contract.add', encoder.encode(garbage), 2_000);
      const envelope = JSON.parse(decoder.decode(bytes)) as unknown;
      expect(envelope).toMatchObject({ ok: false, error: { code: 'E-BUS-002' } });
      expect((envelope as { error: { message: string } }).error.message).toContain("'contract.add'");
    }
    expect(calls).toBe(0);
    expect(server.log.about('warn', 'contract.add')).toHaveLength(3);
    // A valid request right after still works.
    expect(await client.bus.request(add, { a: 1, b: 2 })).toEqual({ sum: 3 });
  });

  it("lets tap('>') see every subject with its payload decoded from JSON", async () => {
    const publisher = await network.connect();
    const tapper = await network.connect();
    const tapped: Array<{ subject: string; payload: unknown }> = [];
    tapper.bus.tap('>', (subject, payload) => tapped.push({ subject, payload }));
    const sessionOnly: string[] = [];
    tapper.bus.tap('contract.session.>', (subject) => sessionOnly.push(subject));
    await settle(tapper.bus);

    publisher.bus.publish(greeted, greeting(1));
    publisher.bus.publish(sessionEvents.at('s-1'), greeting(2));
    publisher.bus.publish(at('wild.a.b.c'), { n: 3 });
    publisher.transport.publish('raw.text', encoder.encode('plain text, not JSON'));
    publisher.transport.publish('raw.json', encoder.encode('[1,{"x":null}]'));
    await settle(publisher.bus, tapper.bus);

    expect(tapped).toEqual([
      { subject: 'contract.greeted', payload: greeting(1) },
      { subject: 'contract.session.s-1.events', payload: greeting(2) },
      { subject: 'wild.a.b.c', payload: { n: 3 } },
      { subject: 'raw.text', payload: 'plain text, not JSON' },
      { subject: 'raw.json', payload: [1, { x: null }] },
    ]);
    expect(sessionOnly).toEqual(['contract.session.s-1.events']);
    expect(thrown(() => tapper.bus.tap('a.>.b', () => {})).code).toBe('E-BUS-001');
  });

  it("keeps request/reply plumbing out of tap('>'): a monitor sees the request subject, not the reply inbox", async () => {
    const server = await network.connect();
    const client = await network.connect();
    const tapper = await network.connect();
    const tapped: string[] = [];
    tapper.bus.tap('>', (subject) => tapped.push(subject));
    server.bus.serve(add, ({ a, b }) => ({ sum: a + b }));
    await settle(tapper.bus, server.bus);

    expect(await client.bus.request(add, { a: 1, b: 2 })).toEqual({ sum: 3 });
    await settle(client.bus, server.bus, tapper.bus);

    // In-process replies never travel on a subject; over NATS they must not show up either, or
    // `mur events` would differ between the two buses.
    expect(tapped).toEqual(['contract.add']);
  });

  it('fails a request, a gathering or a publish on a closed bus with E-BUS-005', async () => {
    const { bus } = await network.connect();
    await bus.close();

    const requestError = await rejection(bus.request(add, { a: 1, b: 2 }));
    expect(requestError.code).toBe('E-BUS-005');
    const gatherError = await rejection(bus.gather(add, { a: 1, b: 2 }, { timeoutMs: 500, quietMs: 100 }));
    expect(gatherError.code).toBe('E-BUS-005');
    const publishError = thrown(() => bus.publish(ticks, { n: 1 }));
    expect(publishError.code).toBe('E-BUS-005');
  });

  it('shares key-value state among every bus on the network: put, get, keys, delete', async () => {
    const writer = await network.connect();
    const reader = await network.connect();
    const bucket = nextBucket();
    const written = await writer.bus.keyValue(bucket);
    const read = await reader.bus.keyValue(bucket);

    expect(await read.get('session.one')).toBeUndefined();
    expect(await read.keys()).toEqual([]);
    await written.put('session.one', '{"n":1}');
    await written.put('approval.ab12', 'é and ✓ survive as UTF-8');
    await written.put('session.one', '{"n":2}');

    expect(await read.get('session.one')).toBe('{"n":2}');
    expect(await read.get('approval.ab12')).toBe('é and ✓ survive as UTF-8');
    expect((await read.keys()).sort()).toEqual(['approval.ab12', 'session.one']);

    await read.delete('session.one');
    expect(await written.get('session.one')).toBeUndefined();
    expect(await written.entry('session.one')).toBeUndefined();
    expect(await written.keys()).toEqual(['approval.ab12']);
    await written.delete('never-written');

    // Buckets are separate namespaces.
    expect(await (await reader.bus.keyValue(nextBucket())).get('approval.ab12')).toBeUndefined();
  });

  it('creates a key only when it holds nothing, and updates only at the revision that was read', async () => {
    const first = await network.connect();
    const second = await network.connect();
    const bucket = nextBucket();
    const a = await first.bus.keyValue(bucket);
    const b = await second.bus.keyValue(bucket);

    expect(await a.create('approval.x', 'fresh')).toBe(true);
    expect(await b.create('approval.x', 'second')).toBe(false);
    expect(await b.get('approval.x')).toBe('fresh');

    const seen = await b.entry('approval.x');
    expect(seen).toMatchObject({ value: 'fresh' });
    expect(seen!.revision).toBeGreaterThan(0);
    expect(await a.update('approval.x', 'used by a', seen!.revision)).toBe(true);
    expect(await b.update('approval.x', 'used by b', seen!.revision)).toBe(false);
    expect(await b.get('approval.x')).toBe('used by a');
    const after = await a.entry('approval.x');
    expect(after!.revision).toBeGreaterThan(seen!.revision);
    expect(await a.update('missing', 'x', after!.revision)).toBe(false);

    // Many racers from one revision: exactly one wins.
    const racers = await Promise.all(Array.from({ length: 8 }, (_, n) => (n % 2 === 0 ? a : b).update('approval.x', `racer ${n}`, after!.revision)));
    expect(racers.filter(Boolean)).toHaveLength(1);
    const winner = racers.indexOf(true);
    expect(await a.get('approval.x')).toBe(`racer ${winner}`);

    // A deleted key can be created again.
    await b.delete('approval.x');
    expect(await a.create('approval.x', 'again')).toBe(true);
    expect(await b.get('approval.x')).toBe('again');
  });

  it('refuses keys and bucket names NATS KV cannot hold with E-BUS-001, identically on both transports', async () => {
    const { bus } = await network.connect();
    const store = await bus.keyValue(nextBucket());
    for (const key of ['', 'has space', '.leading', 'trailing.', 'empty..token', 'wild*', 'wild.>', 'ünï']) {
      const error = await rejection(store.put(key, 'v'));
      expect(error.code, key).toBe('E-BUS-001');
      expect((await rejection(store.get(key))).code).toBe('E-BUS-001');
    }
    await store.put('ok-key_1/2=3.x', 'v');
    expect(await store.get('ok-key_1/2=3.x')).toBe('v');
    for (const bucket of ['has.dot', 'has space', '', 'a/b']) {
      expect((await rejection(bus.keyValue(bucket))).code, bucket).toBe('E-BUS-001');
    }
  });

  it('fails a key-value operation on a closed bus with E-BUS-005', async () => {
    const { bus } = await network.connect();
    const store = await bus.keyValue(nextBucket());
    await store.put('k', 'v');
    await bus.close();
    expect((await rejection(store.get('k'))).code).toBe('E-BUS-005');
    expect((await rejection(store.put('k', 'w'))).code).toBe('E-BUS-005');
    expect((await rejection(bus.keyValue(nextBucket()))).code).toBe('E-BUS-005');
  });

  it('shares objects of any size among every bus on the network, chunked, with their sizes', async () => {
    const writer = await network.connect();
    const reader = await network.connect();
    const bucket = nextBucket();
    const written = await writer.bus.objectStore(bucket);
    const read = await reader.bus.objectStore(bucket);
    // Over a message's size, so NATS must chunk it; the pattern makes a misplaced chunk visible.
    const big = Uint8Array.from({ length: 3 * 1024 * 1024 + 17 }, (_, n) => (n * 31 + (n >> 12)) & 0xff);

    expect(await read.info('blob/absent')).toBeUndefined();
    expect(await read.get('blob/absent')).toBeUndefined();
    expect(await written.put('blob/big', { bytes: big })).toEqual({ name: 'blob/big', size: big.byteLength });
    let opened = 0;
    await written.put('blob/streamed', {
      size: 6,
      open: async function* () {
        opened += 1;
        yield new TextEncoder().encode('abc');
        yield new TextEncoder().encode('def');
      },
    });

    expect(await read.info('blob/big')).toEqual({ name: 'blob/big', size: big.byteLength });
    expect(Buffer.compare(await collect(await read.get('blob/big')), Buffer.from(big))).toBe(0);
    expect((await collect(await read.get('blob/streamed'))).toString()).toBe('abcdef');
    expect(opened).toBeGreaterThan(0);

    await read.delete('blob/big');
    expect(await written.info('blob/big')).toBeUndefined();
    expect(await written.get('blob/big')).toBeUndefined();
    // Buckets are separate namespaces.
    expect(await (await reader.bus.objectStore(nextBucket())).info('blob/streamed')).toBeUndefined();
  });

  it('refuses object names NATS cannot hold with E-BUS-001, and fails on a closed bus with E-BUS-005', async () => {
    const { bus } = await network.connect();
    const store = await bus.objectStore(nextBucket());
    for (const name of ['', 'has space', '.leading', 'trailing.', 'wild*', 'wild>', 'ünï', 'x'.repeat(256)]) {
      expect((await rejection(store.put(name, { bytes: new Uint8Array(1) }))).code, name).toBe('E-BUS-001');
      expect((await rejection(store.info(name))).code).toBe('E-BUS-001');
    }
    expect((await rejection(bus.objectStore('has.dot'))).code).toBe('E-BUS-001');
    await store.put('ok-name_1/2=3.x', { bytes: new Uint8Array([1]) });
    await bus.close();
    expect((await rejection(store.info('ok-name_1/2=3.x'))).code).toBe('E-BUS-005');
    expect((await rejection(store.put('ok-name_1/2=3.x', { bytes: new Uint8Array(1) }))).code).toBe('E-BUS-005');
    expect((await rejection(bus.objectStore(nextBucket()))).code).toBe('E-BUS-005');
  });

  it('stops delivery once a subscription is unsubscribed', async () => {
    const publisher = await network.connect();
    const subscriber = await network.connect();
    const stopped: number[] = [];
    const still: number[] = [];
    const subscription: Subscription = subscriber.bus.subscribe(ticks, ({ n }) => stopped.push(n));
    subscriber.bus.subscribe(ticks, ({ n }) => still.push(n));
    const server = await network.connect();
    const served = server.bus.serve(add, ({ a, b }) => ({ sum: a + b }));
    await settle(subscriber.bus, server.bus);

    publisher.bus.publish(ticks, { n: 1 });
    await eventually(() => expect(stopped).toEqual([1]));
    expect(await publisher.bus.request(add, { a: 1, b: 1 })).toEqual({ sum: 2 });

    subscription.unsubscribe();
    served.unsubscribe();
    await settle(subscriber.bus, server.bus);
    publisher.bus.publish(ticks, { n: 2 });
    publisher.bus.publish(ticks, { n: 3 });
    await settle(publisher.bus, subscriber.bus);

    expect(still).toEqual([1, 2, 3]);
    expect(stopped).toEqual([1]);
    expect((await rejection(publisher.bus.request(add, { a: 1, b: 1 }, { timeoutMs: 2_000 }))).code).toBe('E-BUS-004');
  });
});

// ---------------------------------------------------------------------------------------------
// NATS only: a service outlives a nats-server restart

describe('the contract bus over NATS across a server restart', () => {
  let server: NatsServer | undefined;
  const open: Bus[] = [];

  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((bus) => bus.close()));
  });
  afterAll(async () => {
    await server?.stop();
  });

  async function connect(): Promise<Endpoint> {
    if (!server) throw new Error('the nats-server is not running');
    const log = new RecordingLog();
    const transport = await NatsTransport.connect(server.url, { log, name: 'bus-restart-test' });
    const bus = createBus(transport, log);
    open.push(bus);
    return { bus, transport, log };
  }

  it('resumes delivery to the existing subscription and request/reply after the server restarts on the same port', async () => {
    const subscriber = await connect();
    const publisher = await connect();
    const received: number[] = [];
    subscriber.bus.subscribe(greeted, ({ id }) => received.push(id));
    subscriber.bus.serve(add, ({ a, b }) => ({ sum: a + b }));
    await settle(subscriber.bus);

    publisher.bus.publish(greeted, greeting(0));
    await eventually(() => expect(received).toEqual([0]));
    expect(await publisher.bus.request(add, { a: 1, b: 2 })).toEqual({ sum: 3 });

    await server!.restart();

    // Messages published before the subscriber has re-subscribed may be lost; keep publishing
    // until one arrives.
    let next = 1;
    await eventually(
      () => {
        publisher.bus.publish(greeted, greeting(next));
        next += 1;
        expect(received.some((id) => id >= 1)).toBe(true);
      },
      { timeoutMs: 10_000, intervalMs: 100 },
    );

    const fresh = next;
    publisher.bus.publish(greeted, greeting(fresh));
    await eventually(() => expect(received).toContain(fresh));

    const reply = await eventually(() => publisher.bus.request(add, { a: 20, b: 22 }, { timeoutMs: 1_000 }), { timeoutMs: 10_000, intervalMs: 100 });
    expect(reply).toEqual({ sum: 42 });

    expect(subscriber.log.warnings.some((entry) => entry.message === 'bus disconnected; reconnecting')).toBe(true);
    expect(subscriber.log.entries.some((entry) => entry.level === 'info' && entry.message === 'bus reconnected')).toBe(true);
  });
});

describe('a NATS connection the server will not have back', () => {
  it('is said to be closed for good, with the reason, when the restarted server refuses its credentials', async () => {
    const server = await startNatsServer();
    const log = new RecordingLog();
    const bus = createBus(await NatsTransport.connect(server.url, { log, name: 'closed-for-good-test' }), log);
    try {
      const states: Array<{ state: string; reason?: string | undefined }> = [];
      bus.onConnectionChange((state, reason) => states.push({ state, reason }));
      expect(bus.connected).toBe(true);
      // The operator turns a token on: this connection has none, and is refused on reconnecting.
      await server.restart({ token: 'a-token-the-client-never-had-0123456789' });
      await eventually(() => expect(states.map((change) => change.state)).toContain('closed'), { timeoutMs: 15_000, intervalMs: 100 });
      expect(states.find((change) => change.state === 'closed')?.reason).toMatch(/authorization/i);
      expect(bus.connected).toBe(false);
      expect(log.entries.some((entry) => entry.level === 'error' && entry.message === 'the bus connection is closed for good')).toBe(true);
      // A listener that comes after (a service still starting) is told too, not never.
      const late = await new Promise<[string, string | undefined]>((resolve) => bus.onConnectionChange((state, reason) => resolve([state, reason])));
      expect(late[0]).toBe('closed');
      expect(late[1]).toMatch(/authorization/i);
    } finally {
      await bus.close();
      await server.stop();
    }
  });

  it('is not said to be closed when this side closes it', async () => {
    const server = await startNatsServer();
    const log = new RecordingLog();
    const bus = createBus(await NatsTransport.connect(server.url, { log, name: 'closed-by-us-test' }), log);
    const states: string[] = [];
    bus.onConnectionChange((state) => states.push(state));
    await bus.close();
    await server.stop();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(states).toEqual([]);
  });
});

describe('a NATS connection closing while its server hangs', () => {
  it('waits for the server to take what was published even when nats.js gives its drain up at once', async () => {
    const server = await startNatsServer();
    const transport = await NatsTransport.connect(server.url, { log: new RecordingLog(), name: 'hung-close-test' });
    try {
      // A subscription that timed out is ended but never let go of: nats.js's drain then gives up
      // at once, flushing nothing and closing nothing.
      const { connection } = transport as unknown as { connection: { subscribe(subject: string, options: { timeout: number; callback(): void }): unknown } };
      connection.subscribe('hung-close.never', { timeout: 1, callback: () => {} });
      await new Promise((resolve) => setTimeout(resolve, 50));
      transport.publish('hung-close.last-word', new TextEncoder().encode('bye'));
      await server.pause();
      const asked = Date.now();
      await transport.close();
      // Waited for the server's answer until the close's own limit (2 s), rather than closing at once without it.
      expect(Date.now() - asked).toBeGreaterThanOrEqual(1_500);
    } finally {
      server.resume();
      await transport.close();
      await server.stop();
    }
  });
});

describe('a first connection to something that is not a NATS server', () => {
  it('is refused in its own words when the other end never greets, and leaves no connection open', async () => {
    // What the client did alone: time out, and keep the socket open for as long as the other end did.
    const silent = net.createServer((socket) => socket.on('error', () => {}));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      const refused = await rejection(
        NatsTransport.connect(`nats://127.0.0.1:${port}`, { log: new RecordingLog(), name: 'silent-test', connectTimeoutMs: 300 }),
      );
      expect(refused.code).toBe('E-BUS-005');
      expect(refused.message).toContain('sent no NATS greeting');
      expect(refused.hint).toContain('names the nats-server port');
      // A nats-server that is stopped (SIGSTOP) or swamped greets no more than another service does.
      expect(refused.hint).toContain('or the nats-server there is stopped or overloaded');
      await eventually(async () => expect(await new Promise((resolve) => silent.getConnections((_error, count) => resolve(count)))).toBe(0), {
        timeoutMs: 2_000,
        intervalMs: 50,
      });
    } finally {
      silent.close();
    }
  });

  it('is refused at once when the other end answers with something that is not NATS', async () => {
    const talker = net.createServer((socket) => {
      socket.on('error', () => {});
      socket.write('HTTP/1.1 400 Bad Request\r\n\r\n');
    });
    await new Promise<void>((resolve) => talker.listen(0, '127.0.0.1', resolve));
    const port = (talker.address() as net.AddressInfo).port;
    try {
      const refused = await rejection(
        NatsTransport.connect(`nats://127.0.0.1:${port}`, { log: new RecordingLog(), name: 'talker-test', connectTimeoutMs: 5_000 }),
      );
      expect(refused.code).toBe('E-BUS-005');
      expect(refused.message).toContain('not as a NATS server does ("HTTP/');
    } finally {
      talker.close();
    }
  });
});

describe('key-value state over NATS across a server restart', () => {
  let server: NatsServer | undefined;
  const open: Bus[] = [];

  beforeAll(async () => {
    server = await startNatsServer();
  });
  afterAll(async () => {
    await Promise.all(open.splice(0).map((bus) => bus.close()));
    await server?.stop();
  });

  async function connect(): Promise<{ bus: Bus; log: RecordingLog }> {
    if (!server) throw new Error('the nats-server is not running');
    const log = new RecordingLog();
    const bus = createBus(await NatsTransport.connect(server.url, { log, name: 'kv-restart-test' }), log);
    open.push(bus);
    return { bus, log };
  }

  it('keeps every key written before the restart, for the bus that wrote it and for a new connection', async () => {
    const { bus, log } = await connect();
    const store = await bus.keyValue('contract-kv-restart');
    await store.put('session.ses_1', '{"capsule":"a"}');
    expect(await store.create('approval.abc', '{"used":false}')).toBe(true);
    await store.put('gone', 'x');
    await store.delete('gone');
    const before = await store.entry('approval.abc');

    await server!.restart();

    // The same bus reconnects (a request sent while it is away waits out its timeout), then reads.
    await eventually(() => expect(log.entries.some((entry) => entry.message === 'bus reconnected')).toBe(true), { timeoutMs: 10_000 });
    expect(await store.get('session.ses_1')).toBe('{"capsule":"a"}');
    expect(await store.entry('approval.abc')).toEqual(before);
    expect(await store.get('gone')).toBeUndefined();
    expect((await store.keys()).sort()).toEqual(['approval.abc', 'session.ses_1']);
    // Revisions survive too: a compare-and-set against the revision read before still works once.
    expect(await store.update('approval.abc', '{"used":true}', before!.revision)).toBe(true);
    expect(await store.update('approval.abc', '{"used":true}', before!.revision)).toBe(false);

    const fresh = await (await connect()).bus.keyValue('contract-kv-restart');
    expect(await fresh.get('session.ses_1')).toBe('{"capsule":"a"}');
    expect(await fresh.get('approval.abc')).toBe('{"used":true}');
  });
});
