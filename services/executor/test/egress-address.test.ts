import http from 'node:http';
import { type AddressInfo, isIP, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openOtelTracer } from '@murmur/shared/otel';
import { startOtlpReceiver } from '../../../test/support/otlp-receiver.js';
import { ipFamily, isPublicAddress, namesItsAddress, privateHostsSetting, type Resolve, systemResolve, vettedLookup } from '../src/egress-address.js';
import { EgressPolicy } from '../src/egress.js';
import { RequestUploads } from '../src/request-uploads.js';

/**
 * Where an allowed name may lead. A real server on loopback stands for everything private — the
 * bus, a door, the metadata service — and a resolver stands in for the DNS of a domain the
 * capsule's author controls (outside this system), answering whatever the author likes.
 */

describe("an address's family", () => {
  it('is what node says of every kind of string, an IPv6 one with a zone or a dotted quad among them', () => {
    const texts = [
      '127.0.0.1',
      '8.8.8.8',
      '01.2.3.4',
      '1.2.3',
      '256.1.1.1',
      '1.2.3.4:80',
      '::',
      '::1',
      'fe80::1%eth0',
      '::ffff:127.0.0.1',
      '2001:db8::5',
      '1:2:3:4:5:6:7:8',
      '1:2:3:4:5:6:7:8:9',
      ':::',
      ':',
      'localhost',
      'api.example.com',
      '[::1]',
      '',
    ];
    for (const text of texts) expect(ipFamily(text), text).toBe(isIP(text));
  });
});

describe('a public address', () => {
  it.each([['93.184.216.34'], ['8.8.8.8'], ['2606:4700:4700::1111'], ['::ffff:8.8.8.8'], ['2002:808:808::1'], ['64:ff9b::808:808']])('is %s', (address) => {
    expect(isPublicAddress(address)).toBe(true);
  });

  it.each([
    ['127.0.0.1'],
    ['127.255.0.9'],
    ['0.0.0.0'],
    ['10.1.2.3'],
    ['172.20.0.5'],
    ['192.168.1.1'],
    ['169.254.169.254'],
    ['100.64.0.1'],
    ['224.0.0.1'],
    ['255.255.255.255'],
    ['::1'],
    ['::'],
    ['fd00::1'],
    ['fe80::1'],
    ['ff02::1'],
    ['::ffff:127.0.0.1'],
    ['::ffff:7f00:1'],
    ['64:ff9b::a9fe:a9fe'],
    ['::a9fe:a9fe'],
    ['::169.254.169.254'],
    ['0:0:0:0:0:0:7f00:1'],
    ['64:ff9b:1::808:808'],
    ['2002:a9fe:a9fe::1'],
    ['2002:c0a8:101::'],
    ['fec0::1'],
    ['not-an-ip'],
  ])('is not %s', (address) => {
    expect(isPublicAddress(address)).toBe(false);
  });

  it('is what a rule that names an IP or localhost says plainly, and nothing else', () => {
    for (const host of ['127.0.0.1', '[::1]', '::1', 'localhost', 'LOCALHOST']) expect(namesItsAddress(host), host).toBe(true);
    for (const host of ['api.example.com', 'localhost.attacker.example', '127.0.0.1.nip.io']) expect(namesItsAddress(host), host).toBe(false);
  });

  it('may be waived by the operator for named hosts, or all', () => {
    const some = privateHostsSetting({ MURMUR_EGRESS_PRIVATE_HOSTS: ' model , LLM.internal' });
    expect([some('model'), some('llm.internal'), some('other')]).toEqual([true, true, false]);
    expect(privateHostsSetting({ MURMUR_EGRESS_PRIVATE_HOSTS: '*' })('anything')).toBe(true);
    expect(privateHostsSetting({})('model')).toBe(false);
  });
});

describe('a vetted lookup', () => {
  /** What `lookup` answers for `host` under `options`: the error, or the addresses given. */
  const looked = (resolve: Resolve, options: { all?: boolean; family?: number }) =>
    new Promise<{ error: Error | null; address: unknown }>((done) =>
      vettedLookup(() => false, resolve)('a.example', options as never, ((error: Error | null, address: unknown) => done({ error, address })) as never),
    );

  it('refuses a name any of whose addresses is not public, wherever in the answer it is, asked for one address or all', async () => {
    for (const answer of [
      [
        { address: '93.184.216.34', family: 4 },
        { address: '127.0.0.1', family: 4 },
      ],
      [
        { address: '2606:2800:220:1:248:1893:25c8:1946', family: 6 },
        { address: '93.184.216.34', family: 4 },
        { address: 'fd00::1', family: 6 },
      ],
    ]) {
      for (const options of [{}, { all: true }, { family: 4 }]) {
        const { error } = await looked(async () => answer, options);
        expect(error?.constructor.name, `${JSON.stringify(answer)} ${JSON.stringify(options)}`).toBe('ProhibitedAddress');
        expect(error?.message).toMatch(/^network policy: 'a\.example' resolves to (127\.0\.0\.1|fd00::1), which is not a public address/);
      }
    }
    // Every address public: the first is given, or all of them.
    const publicOnly = async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '93.184.216.35', family: 4 },
    ];
    expect(await looked(publicOnly, {})).toEqual({ error: null, address: '93.184.216.34' });
    expect((await looked(publicOnly, { all: true })).address).toHaveLength(2);
  });
});

describe("the system's resolver", () => {
  it('looks a name up once at a time: every request for it meanwhile waits on the same lookup', async () => {
    const first = systemResolve('localhost');
    const again = systemResolve('LOCALHOST');
    expect(again).toBe(first);
    expect((await first).length).toBeGreaterThan(0);
    // Once answered, the next request looks it up afresh (an answer is not kept past its lookup).
    expect(systemResolve('localhost')).not.toBe(first);
  });
});

describe('the egress relay and a name that resolves privately', () => {
  let server: http.Server;
  let port: number;
  const hits: string[] = [];

  beforeAll(async () => {
    server = http.createServer((request, response) => {
      hits.push(`${request.headers.host} ${request.url}`);
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { id: 'tsk_1', contextId: 'ctx_1', status: { state: 'completed' } } }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** The attacker's DNS: its name answers loopback, in either of IPv4's spellings. */
  const attackerDns =
    (address: string): Resolve =>
    async (hostname) =>
      hostname === 'api.attacker.example' ? [{ address, family: address.includes(':') ? 6 : 4 }] : [];
  const policy = (allow: string[], options: ConstructorParameters<typeof EgressPolicy>[1] = {}) =>
    new EgressPolicy({ policy: { network_allow: allow } as never, artifacts: [] }, { privateHosts: () => false, ...options });
  const get = (egress: EgressPolicy, url: string) => egress.http({ url, method: 'GET', headers: [], grant: 'capsule' } as never, new RequestUploads());

  it('refuses a request whose allowed name resolves to loopback, and never connects', async () => {
    for (const address of ['127.0.0.1', '::ffff:127.0.0.1']) {
      const before = hits.length;
      const egress = policy([`api.attacker.example:${port}`], { resolve: attackerDns(address) });
      const opened = await get(egress, `http://api.attacker.example:${port}/internal`);
      expect(opened).toMatchObject({ outcome: 'denied', code: 'destination-IP-prohibited' });
      expect((opened as { reason: string }).reason).toContain(`'api.attacker.example' resolves to ${address}, which is not a public address`);
      expect(hits.length).toBe(before);
      // A2A sends are held to the same rule.
      const sent = await egress.send(`http://api.attacker.example:${port}/`, { message_id: 'm1', text: 'hello' });
      expect(sent).toMatchObject({ ok: false, error: expect.stringContaining('not a public address') });
      expect(hits.length).toBe(before);
    }
  });

  it('reaches it when the operator lets the name resolve privately, connecting to the address it checked', async () => {
    const egress = policy([`api.attacker.example:${port}`], { resolve: attackerDns('127.0.0.1'), privateHosts: (host) => host === 'api.attacker.example' });
    const opened = await get(egress, `http://api.attacker.example:${port}/allowed`);
    expect(opened).toMatchObject({ outcome: 'response', status: 200 });
    // The name exists nowhere but in the stand-in resolver: reaching the server proves the connection used its answer.
    expect(hits.at(-1)).toBe(`api.attacker.example:${port} /allowed`);
    const body = (opened as { body: ReadableStream<Uint8Array> }).body;
    expect(await new Response(body).json()).toMatchObject({ result: { id: 'tsk_1' } });
  });

  it("keeps a session's connection between its requests, and closes it when the session ends", async () => {
    const connections: Array<Socket> = [];
    const count = (socket: Socket) => connections.push(socket);
    server.on('connection', count);
    try {
      const egress = policy([`127.0.0.1:${port}`]);
      for (const run of ['one', 'two', 'three']) {
        const opened = await get(egress, `http://127.0.0.1:${port}/${run}`);
        await new Response((opened as { body: ReadableStream<Uint8Array> }).body).arrayBuffer();
      }
      expect(connections).toHaveLength(1);
      egress.close();
      await new Promise((resolve) => connections[0]?.once('close', resolve));
      expect(connections[0]?.destroyed).toBe(true);
    } finally {
      server.off('connection', count);
    }
  });

  it('reaches a private address a rule names as it is written (an IP), as before', async () => {
    const opened = await get(policy([`127.0.0.1:${port}`]), `http://127.0.0.1:${port}/literal`);
    expect(opened).toMatchObject({ outcome: 'response', status: 200 });
    expect(hits.at(-1)).toBe(`127.0.0.1:${port} /literal`);
  });
});

describe("a peer's answer to an A2A send", () => {
  it('is read to a megabyte at most: a larger one is refused, not held whole in the executor', async () => {
    const huge = http.createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(`{"jsonrpc":"2.0","id":1,"result":{"padding":"${'x'.repeat(2 * 1024 * 1024)}"}}`);
    });
    await new Promise<void>((resolve) => huge.listen(0, '127.0.0.1', resolve));
    try {
      const port = (huge.address() as AddressInfo).port;
      const egress = new EgressPolicy({ policy: { network_allow: [`127.0.0.1:${port}`] } as never, artifacts: [] });
      const sent = await egress.send(`http://127.0.0.1:${port}/`, { message_id: 'm1', text: 'hello' });
      expect(sent).toEqual({ ok: false, error: expect.stringContaining('larger than 1048576 bytes') });
      egress.close();
    } finally {
      huge.closeAllConnections();
      await new Promise<void>((resolve) => huge.close(() => resolve()));
    }
  });
});

describe("a capsule's own OpenTelemetry collector", () => {
  it('is reached as its requests are: a name of the capsule that resolves to loopback gets no spans, and says why in its log', async () => {
    const receiver = await startOtlpReceiver();
    try {
      const port = Number(receiver.authority.split(':')[1]);
      const errors: string[] = [];
      const lookup = vettedLookup(
        () => false,
        async (hostname) => (hostname === 'otel.attacker.example' ? [{ address: '127.0.0.1', family: 4 }] : []),
      );
      const tracer = openOtelTracer({
        endpoint: `http://otel.attacker.example:${port}`,
        serviceName: 'capsule',
        serviceVersion: '0.1.0',
        scope: 'test',
        onExportError: (message) => errors.push(message),
        lookup,
      });
      tracer.span('capsule.session').end();
      await tracer.shutdown(2_000);
      expect(receiver.spans()).toEqual([]);
      expect(errors.join('\n')).toContain("'otel.attacker.example' resolves to 127.0.0.1, which is not a public address");
      // The same collector by its address, as a rule would name it: spans arrive.
      const direct = openOtelTracer({
        endpoint: receiver.endpoint,
        serviceName: 'capsule',
        serviceVersion: '0.1.0',
        scope: 'test',
        onExportError: () => {},
        lookup,
      });
      direct.span('capsule.session').end();
      await direct.shutdown(2_000);
      expect(receiver.spans().map((span) => span.name)).toEqual(['capsule.session']);
    } finally {
      await receiver.close();
    }
  });
});
