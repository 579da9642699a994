import { createSocket } from 'node:dgram';
import { type AddressInfo, connect, createServer, type LookupFunction, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { QTYPE, RCODE } from '../src/dns-message.js';
import { vettedLookup } from '../src/egress-address.js';
import type { NetworkPlan } from '../src/network-plan.js';
import { type EgressRecord, SandboxNetwork } from '../src/sandbox-network.js';
import { eventually } from '../../../test/support/processes.js';

/**
 * The executor's end of a sealed sandbox's network, with real sockets on loopback standing in for
 * the ones murmur-confine binds inside the sandbox: what it answers, what it relays, what it refuses.
 */

function query(name: string, id = 7): Buffer {
  const labels = name.split('.').flatMap((label) => [Buffer.from([label.length]), Buffer.from(label)]);
  return Buffer.concat([Buffer.from([0, id, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]), ...labels, Buffer.from([0, 0, QTYPE.A, 0, 1])]);
}

async function listening(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

describe('the executor’s end of a sealed sandbox’s network', () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });

  async function setup(
    judge: (host: string, port: number) => { allowed: true } | { allowed: false; reason: string },
    destination: { host: string; lookup?: LookupFunction } = { host: '127.0.0.1' },
    maxConnections?: number,
    dnsQueriesPerSecond?: number,
  ) {
    const upstreamConnections: string[] = [];
    const upstream = createServer((socket) => {
      socket.on('data', (chunk: Buffer) => {
        upstreamConnections.push(chunk.toString());
        socket.end(`echo:${chunk.toString()}`);
      });
    });
    const upstreamPort = await listening(upstream);
    const plan: NetworkPlan = {
      listeners: [{ fd: 18, address: '127.77.0.1', port: upstreamPort, host: destination.host }],
      names: { 'api.example.com': '127.77.0.1' },
      dns: { udpFd: 16, tcpFd: 17 },
      skipped: [],
    };
    const records: EgressRecord[] = [];
    const network = new SandboxNetwork({
      plan,
      judge,
      record: (record) => records.push(record),
      ...(destination.lookup ? { lookupTo: () => destination.lookup as LookupFunction } : {}),
      ...(maxConnections === undefined ? {} : { maxConnections }),
      ...(dnsQueriesPerSecond === undefined ? {} : { dnsQueriesPerSecond }),
    });
    // Stand-ins for the sandbox's sockets, handed over as the host hands them.
    const listener = createServer();
    const listenerPort = await listening(listener);
    network.attach(18, 'tcp', listener);
    const dnsTcp = createServer();
    const dnsTcpPort = await listening(dnsTcp);
    network.attach(17, 'tcp', dnsTcp);
    const dnsUdp = createSocket('udp4');
    await new Promise<void>((resolve) => dnsUdp.bind(0, '127.0.0.1', resolve));
    network.attach(16, 'udp', dnsUdp);
    cleanups.push(() => {
      network.close();
      upstream.close();
    });
    return { network, records, upstreamConnections, upstreamPort, listenerPort, dnsTcpPort, dnsUdpPort: dnsUdp.address().port };
  }

  const exchange = (port: number, payload: string): Promise<{ data: string; error?: string }> =>
    new Promise((resolve) => {
      let data = '';
      const socket = connect(port, '127.0.0.1', () => socket.write(payload));
      socket.on('data', (chunk: Buffer) => (data += chunk.toString()));
      socket.on('end', () => resolve({ data }));
      socket.on('error', (error: NodeJS.ErrnoException) => resolve({ data, error: error.code ?? error.message }));
    });

  it('splices an allowed connection to the real destination, bytes untouched, and records it', async () => {
    const { records, upstreamConnections, upstreamPort, listenerPort } = await setup(() => ({ allowed: true }));
    expect(await exchange(listenerPort, 'GET / HTTP/1.0\r\n\r\n')).toEqual({ data: 'echo:GET / HTTP/1.0\r\n\r\n' });
    expect(upstreamConnections).toEqual(['GET / HTTP/1.0\r\n\r\n']);
    expect(records).toEqual([{ kind: 'tcp', target: `127.0.0.1:${upstreamPort}`, decision: 'allowed' }]);
  });

  it('resets a connection the policy refuses, and never opens one to the destination', async () => {
    const { records, upstreamConnections, listenerPort } = await setup(() => ({ allowed: false, reason: 'network policy: nope' }));
    const result = await exchange(listenerPort, 'hello');
    expect(result.error).toBe('ECONNRESET');
    expect(upstreamConnections).toEqual([]);
    expect(records[0]).toMatchObject({ kind: 'tcp', decision: 'denied', reason: 'network policy: nope' });
  });

  it('refuses, as a denial, an allowed name whose DNS answers a private address, and never connects there', async () => {
    // The capsule author's DNS (outside this system) answers loopback for its name.
    const lookup = vettedLookup(
      () => false,
      async (hostname) => (hostname === 'api.attacker.example' ? [{ address: '127.0.0.1', family: 4 }] : []),
    );
    const { records, upstreamConnections, listenerPort, upstreamPort } = await setup(() => ({ allowed: true }), { host: 'api.attacker.example', lookup });
    const result = await exchange(listenerPort, 'PUB x 1\r\n');
    expect(result.error).toBe('ECONNRESET');
    expect(upstreamConnections).toEqual([]);
    expect(records[0]).toMatchObject({
      kind: 'tcp',
      target: `api.attacker.example:${upstreamPort}`,
      decision: 'denied',
      reason: expect.stringContaining("'api.attacker.example' resolves to 127.0.0.1, which is not a public address"),
    });
  });

  it('refuses a connection past the sandbox’s open-connection ceiling, and takes one again once another closed', async () => {
    const { records, upstreamConnections, listenerPort } = await setup(() => ({ allowed: true }), { host: '127.0.0.1' }, 2);
    const spliced = () => records.filter((record) => record.decision === 'allowed').length;
    const held = [connect(listenerPort, '127.0.0.1'), connect(listenerPort, '127.0.0.1')];
    cleanups.push(() => {
      for (const socket of held) socket.destroy();
    });
    await expect.poll(spliced).toBe(2);
    const third = await exchange(listenerPort, 'one too many');
    expect(third.error).toBe('ECONNRESET');
    expect(upstreamConnections).toEqual([]);
    expect(records.at(-1)).toMatchObject({
      kind: 'tcp',
      decision: 'denied',
      reason: 'this sandbox already has 2 connections open: close one before opening another',
    });
    held[0]?.destroy();
    await expect.poll(() => exchange(listenerPort, 'room again')).toEqual({ data: 'echo:room again' });
  });

  it('answers DNS over UDP: the allowlisted name with its address, anything else REFUSED and recorded', async () => {
    const { records, dnsUdpPort } = await setup(() => ({ allowed: true }));
    const client = createSocket('udp4');
    cleanups.push(() => client.close());
    const ask = (name: string): Promise<Buffer> =>
      new Promise((resolve) => {
        client.once('message', resolve);
        client.send(query(name), dnsUdpPort, '127.0.0.1');
      });
    const allowed = await ask('api.example.com');
    expect(allowed.readUInt16BE(2) & 0xf).toBe(RCODE.NOERROR);
    expect([...allowed.subarray(allowed.length - 4)]).toEqual([127, 77, 0, 1]);
    const refused = await ask('exfil.attacker.example');
    expect(refused.readUInt16BE(2) & 0xf).toBe(RCODE.REFUSED);
    expect(records).toEqual([{ kind: 'dns', target: 'exfil.attacker.example', decision: 'denied', reason: 'not in capabilities.network.allow' }]);
  });

  it('drops a question it cannot answer and records it, and goes on answering: no question ends the executor', async () => {
    const { network, records, dnsUdpPort } = await setup(() => ({ allowed: true }));
    // An address no A record can carry, as a plan that counted past its range once gave a name.
    (network as unknown as { options: { plan: NetworkPlan } }).options.plan.names['broken.example'] = '127.77.256.0';
    const client = createSocket('udp4');
    cleanups.push(() => client.close());
    client.send(query('broken.example', 9), dnsUdpPort, '127.0.0.1');
    await eventually(() => records.find((record) => record.target === '(unanswerable)'), 5_000, 'the unanswerable question to be recorded');
    const answered = await new Promise<Buffer>((resolve) => {
      client.once('message', resolve);
      client.send(query('api.example.com', 10), dnsUdpPort, '127.0.0.1');
    });
    expect(answered.readUInt16BE(0)).toBe(10);
    expect([...answered.subarray(answered.length - 4)]).toEqual([127, 77, 0, 1]);
    expect(records[0]).toMatchObject({ kind: 'dns', decision: 'failed', reason: expect.stringContaining('could not be answered') });
  });

  it('answers a sandbox’s DNS questions within its budget a second, drops the rest unanswered, and records the first drop', async () => {
    const { records, dnsUdpPort } = await setup(() => ({ allowed: true }), undefined, undefined, 10);
    const client = createSocket('udp4');
    cleanups.push(() => client.close());
    let answered = 0;
    client.on('message', () => {
      answered += 1;
    });
    // A flood at once: the burst (twice the rate) is answered, the rest dropped.
    for (let id = 0; id < 100; id += 1) client.send(query('api.example.com', id % 250), dnsUdpPort, '127.0.0.1');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(answered).toBeGreaterThanOrEqual(20);
    expect(answered).toBeLessThan(30);
    expect(records.filter((record) => record.target === '(over budget)')).toEqual([
      {
        kind: 'dns',
        target: '(over budget)',
        decision: 'denied',
        reason: 'more than 10 DNS questions a second: the rest are dropped unanswered while it lasts',
      },
    ]);
    // The budget refills with time: a question a while later is answered.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const before = answered;
    client.send(query('api.example.com'), dnsUdpPort, '127.0.0.1');
    await eventually(() => (answered > before ? true : undefined), 5_000, 'a question answered once the budget refilled');
  });

  it('answers DNS over TCP, each message framed by its length', async () => {
    const { dnsTcpPort } = await setup(() => ({ allowed: true }));
    const message = query('api.example.com');
    const framed = Buffer.concat([Buffer.from([0, message.length]), message]);
    const reply = await new Promise<Buffer>((resolve) => {
      const socket = connect(dnsTcpPort, '127.0.0.1', () => socket.write(framed));
      socket.once('data', (chunk: Buffer) => {
        resolve(chunk);
        socket.destroy();
      });
    });
    expect(reply.readUInt16BE(0)).toBe(reply.length - 2);
    expect(reply.readUInt16BE(4) & 0xf).toBe(RCODE.NOERROR);
  });

  it('survives a DNS connection reset from inside, and answers the next one', async () => {
    const { dnsTcpPort } = await setup(() => ({ allowed: true }));
    // One byte of a length prefix, then RST: the executor's side of the socket gets ECONNRESET.
    for (let round = 0; round < 3; round += 1) {
      await new Promise<void>((resolve) => {
        const socket = connect(dnsTcpPort, '127.0.0.1', () => {
          socket.write(Buffer.from([0]));
          // Once the executor's side has read it and waits for the rest.
          setTimeout(() => {
            socket.resetAndDestroy();
            resolve();
          }, 100);
        });
        socket.on('error', () => undefined);
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    const message = query('api.example.com');
    const reply = await new Promise<Buffer>((resolve) => {
      const socket = connect(dnsTcpPort, '127.0.0.1', () => socket.write(Buffer.concat([Buffer.from([0, message.length]), message])));
      socket.once('data', (chunk: Buffer) => {
        resolve(chunk);
        socket.destroy();
      });
    });
    expect(reply.readUInt16BE(4) & 0xf).toBe(RCODE.NOERROR);
  });

  it('closes a handle it does not expect instead of serving it', async () => {
    const { network } = await setup(() => ({ allowed: true }));
    const stray = createServer();
    await listening(stray);
    network.attach(99, 'tcp', stray);
    expect(stray.listening).toBe(false);
  });

  it('destroys a connected socket it is handed where it expects none, rather than hold it open', async () => {
    const { network, upstreamPort } = await setup(() => ({ allowed: true }));
    const socket = connect(upstreamPort, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    network.attach(18, 'tcp', socket);
    expect(socket.destroyed).toBe(true);
  });
});
