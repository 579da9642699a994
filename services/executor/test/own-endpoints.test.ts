import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { EgressPolicy } from '../src/egress.js';
import { OWN_LISTENERS, OwnEndpoints, busServers, localAddresses, localIpv4Of, localIpv6Of } from '../src/own-endpoints.js';

const BUS = 'the bus this runtime runs on';
const BUS_HOST = 'the host of the bus this runtime runs on';
const LISTENER = OWN_LISTENERS.executor;
const COLLECTOR = 'the telemetry collector this runtime exports to';

const noDns = async (host: string): Promise<string[]> => {
  throw new Error(`no DNS in this test (${host})`);
};

describe("the runtime's own endpoints", () => {
  it('reads every server of a bus URL, credentials and scheme or not, with NATS’s port when none is written', () => {
    expect(busServers('nats://s3cret@10.0.0.5:4333, 10.0.0.6,nats://user:pass@[fd00::1]:4444')).toEqual([
      { host: '10.0.0.5', port: 4333 },
      { host: '10.0.0.6', port: 4222 },
      { host: 'fd00::1', port: 4444 },
    ]);
    expect(busServers('ws://10.0.0.7,wss://10.0.0.8')).toEqual([
      { host: '10.0.0.7', port: 80 },
      { host: '10.0.0.8', port: 443 },
    ]);
    expect(busServers(undefined)).toEqual([]);
    expect(busServers('  ')).toEqual([]);
  });

  it('takes a bus elsewhere whole: its port as the bus, every other port of its name and addresses as the bus’s host', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://token@nats:4222' }, { resolve: async () => ['172.18.0.2'] });
    for (const host of ['172.18.0.2', 'nats', 'NATS', '[::ffff:172.18.0.2]', '::ffff:ac12:2']) {
      expect(own.covers(host, 4222), host).toBe(BUS);
      // Its monitoring (/connz names every client and subscription), its cluster routes, anything beside it.
      for (const port of [8222, 6222, 80]) expect(own.covers(host, port), `${host}:${port}`).toBe(BUS_HOST);
    }
    expect(own.covers('nats.', 4222)).toBe(BUS);
    expect(own.covers('nats.', 8222)).toBe(BUS_HOST);
    expect(own.covers('172.18.0.3', 4222)).toBeUndefined();
    expect(own.covers('127.0.0.1', 4222)).toBeUndefined();
    expect(own.covers('localhost', 8222)).toBeUndefined();
  });

  it('takes a name that resolves both here and elsewhere at its port on this machine, and whole elsewhere', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://bus.example:4222' }, { resolve: async () => ['127.0.0.1', '10.1.2.3'] });
    expect(own.covers('10.1.2.3', 4222)).toBe(BUS);
    expect(own.covers('10.1.2.3', 8222)).toBe(BUS_HOST);
    expect(own.covers('127.0.0.1', 4222)).toBe(BUS);
    expect(own.covers('::1', 4222)).toBe(BUS);
    // The part here serves its monitoring beside it, as a bus on this machine does.
    expect(own.covers('127.0.0.1', 8222)).toBe(BUS);
  });

  it('takes a bus on this machine at its port on every address of the machine', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://127.0.0.1:4999' }, { resolve: noDns });
    const interfaces = Object.values(os.networkInterfaces()).flatMap((entries) => (entries ?? []).map((entry) => entry.address));
    for (const host of ['127.0.0.1', '127.0.0.2', '127.255.0.9', 'localhost', '::1', '[0:0:0:0:0:0:0:1]', '0.0.0.0', '::', '[::ffff:127.0.0.1]', ...interfaces])
      expect(own.covers(host, 4999), host).toBe(BUS);
    // The machine the executor is on is not taken whole: a capsule may be granted its other ports.
    expect(own.covers('127.0.0.1', 4998)).toBeUndefined();
    expect(own.covers('8.8.8.8', 4999)).toBeUndefined();
    // But a local bus's monitoring is (nats-server's usual port): /connz names every session's subjects.
    for (const host of ['127.0.0.1', 'localhost', '::1', ...interfaces]) expect(own.covers(host, 8222), `${host}:8222`).toBe(BUS);
    expect(own.unresolved).toBe(false);
  });

  it('takes a local bus on every address the kernel routes to this machine, those of interfaces without a link and those that came up later included', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://127.0.0.1:4999' }, { resolve: noDns });
    // The kernel's own list, read here: Node lists only interfaces that are up with a link.
    for (const address of localAddresses.list()) expect(own.covers(address.includes(':') ? `[${address}]` : address, 4999), address).toBe(BUS);
    // An address the machine takes after the endpoints were worked out (an interface coming up).
    const held = localAddresses.held;
    localAddresses.held = new Set([...held, '198.51.100.7']);
    localAddresses.read = Date.now() + 60_000;
    try {
      expect(own.covers('198.51.100.7', 4999)).toBe(BUS);
      expect(own.covers('198.51.100.7', 4998)).toBeUndefined();
    } finally {
      localAddresses.held = held;
      localAddresses.read = 0;
    }
    expect(own.covers('198.51.100.7', 4999)).toBeUndefined();
  });

  it("reads the machine's addresses as the kernel lists them: the local /32 leaves of fib_trie, and if_inet6's", () => {
    const fibTrie = [
      'Main:',
      '  +-- 0.0.0.0/0 3 0 5',
      '     |-- 0.0.0.0',
      '        /0 universe UNICAST',
      '     +-- 127.0.0.0/8 2 0 2',
      '        +-- 127.0.0.0/31 1 0 0',
      '           |-- 127.0.0.0',
      '              /8 host LOCAL',
      '           |-- 127.0.0.1',
      '              /32 host LOCAL',
      '     |-- 172.17.0.1',
      '        /32 host LOCAL',
      '     |-- 172.17.255.255',
      '        /32 link BROADCAST',
      '     |-- 192.0.2.0',
      '        /24 link UNICAST',
    ].join('\n');
    expect(localIpv4Of(fibTrie)).toEqual(['127.0.0.1', '172.17.0.1']);
    const ifInet6 = [
      '00000000000000000000000000000001 01 80 10 80       lo',
      'fe8000000000000000428efffebfa108 05 40 20 80  docker0',
      'fd000000000000000000000000000002 04 40 00 82     eth0',
      '',
    ].join('\n');
    // `::1` is held in the IPv4 form its last word spells (`canonicalAddress`), as everywhere here.
    expect(localIpv6Of(ifInet6)).toEqual(['0.0.0.1', 'fe80::42:8eff:febf:a108', 'fd00::2']);
    // Every address Node lists is among the kernel's (but `::1`, held as above).
    const listed = Object.values(os.networkInterfaces()).flatMap((entries) =>
      (entries ?? []).filter((entry) => !entry.scopeid && entry.address !== '::1').map((entry) => entry.address),
    );
    expect(localAddresses.list()).toEqual(expect.arrayContaining(listed));
  });

  it('keeps a name that does not resolve as the name, whole, and says it did not resolve', async () => {
    const unresolved: string[] = [];
    const own = await OwnEndpoints.of({ natsUrl: 'bus.internal:4222' }, { resolve: noDns, unresolved: (host) => unresolved.push(host) });
    expect(unresolved).toEqual(['bus.internal']);
    // So the executor asks again at a later launch (a bus not up yet when it started).
    expect(own.unresolved).toBe(true);
    expect(own.covers('bus.internal', 4222)).toBe(BUS);
    expect(own.covers('bus.internal', 4223)).toBe(BUS_HOST);
    expect(own.covers('Bus.Internal.', 4223)).toBe(BUS_HOST);
    expect(own.covers('other.internal', 4222)).toBeUndefined();
  });

  it("takes the executor's own listener at its port on every address of the machine, and no other port", async () => {
    const own = await OwnEndpoints.of({ listeners: [{ port: 7720, what: LISTENER }] }, { resolve: noDns });
    const interfaces = Object.values(os.networkInterfaces()).flatMap((entries) => (entries ?? []).map((entry) => entry.address));
    for (const host of ['127.0.0.1', '127.0.0.2', 'localhost', '::1', '0.0.0.0', ...interfaces]) expect(own.covers(host, 7720), host).toBe(LISTENER);
    expect(own.covers('127.0.0.1', 7721)).toBeUndefined();
    expect(own.covers('10.9.9.9', 7720)).toBeUndefined();
    expect(own.empty).toBe(false);
  });

  it('takes a collector elsewhere at its port only, by its name and by each address it resolves to', async () => {
    const own = await OwnEndpoints.of({ collectorUrl: 'http://otel-collector:4318' }, { resolve: async () => ['172.18.0.9'] });
    for (const host of ['otel-collector', 'OTEL-Collector.', '172.18.0.9', '::ffff:172.18.0.9']) expect(own.covers(host, 4318), host).toBe(COLLECTOR);
    // A sink for spans, not a control plane: its host's other ports are not the runtime's.
    expect(own.covers('172.18.0.9', 4317)).toBeUndefined();
    expect(own.covers('otel-collector', 80)).toBeUndefined();
    expect(own.covers('127.0.0.1', 4318)).toBeUndefined();
    // Without a port written, its scheme's.
    expect((await OwnEndpoints.of({ collectorUrl: 'https://collector.example/v1' }, { resolve: async () => ['10.0.0.8'] })).covers('10.0.0.8', 443)).toBe(
      COLLECTOR,
    );
  });

  it('takes a collector on this machine at its port on every address of the machine, beside the bus', async () => {
    const own = await OwnEndpoints.of(
      { natsUrl: 'nats://127.0.0.1:4999', collectorUrl: 'http://localhost:4318/', listeners: [{ port: 7720, what: LISTENER }] },
      { resolve: noDns },
    );
    for (const host of ['127.0.0.1', 'localhost', '::1']) {
      expect(own.covers(host, 4318), host).toBe(COLLECTOR);
      expect(own.covers(host, 4999), host).toBe(BUS);
      expect(own.covers(host, 7720), host).toBe(LISTENER);
    }
  });

  it('is nothing for an executor on the in-process bus', async () => {
    for (const own of [OwnEndpoints.none, await OwnEndpoints.of({ natsUrl: undefined }, { resolve: noDns })]) {
      expect(own.covers('127.0.0.1', 4222)).toBeUndefined();
      expect(own.covers('localhost', 4222)).toBeUndefined();
    }
  });

  it('refuses the bus over HTTP and TCP even where a rule allows it, and lets the rule through elsewhere', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://127.0.0.1:4999' }, { resolve: noDns });
    const policy = new EgressPolicy(
      { policy: { network_allow: ['127.0.0.1:4999', 'localhost', '127.0.0.1:5000'] } as never, artifacts: [] },
      { own, privateHosts: () => false },
    );
    try {
      expect(policy.judgeHttp('http://127.0.0.1:4999/', 'capsule')).toEqual({
        allowed: false,
        code: 'destination-IP-prohibited',
        reason: "network policy: '127.0.0.1:4999' is the bus this runtime runs on, which no capsule may reach whatever capabilities.network.allow says",
      });
      expect(policy.judgeHttp('http://localhost:4999/', 'capsule')).toMatchObject({ allowed: false, code: 'destination-IP-prohibited' });
      expect(policy.judgeTcp('127.0.0.1', 4999)).toMatchObject({ allowed: false, reason: expect.stringMatching(/is the bus this runtime runs on/) });
      expect(policy.judgeTcp('localhost', 4999)).toMatchObject({ allowed: false });
      expect(policy.judgeHttp('http://127.0.0.1:5000/', 'capsule')).toMatchObject({ allowed: true });
      expect(policy.judgeTcp('localhost', 80)).toMatchObject({ allowed: true });
      // No rule, no word of the bus: the refusal is the rules', as for any other address.
      expect(policy.judgeHttp('http://10.9.9.9:4999/', 'capsule')).toMatchObject({ allowed: false, code: 'HTTP-request-denied' });
      expect((await policy.send('http://[::1]:4999', { message_id: 'm', text: 'hi' })) as unknown).toMatchObject({
        ok: false,
        error: expect.stringMatching(/not in capabilities.network.allow/),
      });
      expect(await policy.send('http://127.0.0.1:4999', { message_id: 'm', text: 'hi' })).toEqual({
        ok: false,
        error: "network policy: '127.0.0.1:4999' is the bus this runtime runs on, which no capsule may reach whatever capabilities.network.allow says",
        denied: true,
      });
    } finally {
      policy.close();
    }
  });

  it("refuses the executor's listener, naming it, where a rule allows its address", async () => {
    const own = await OwnEndpoints.of({ listeners: [{ port: 7720, what: LISTENER }] }, { resolve: noDns });
    const policy = new EgressPolicy({ policy: { network_allow: ['127.0.0.1'] } as never, artifacts: [] }, { own, privateHosts: () => false });
    try {
      expect(policy.judgeHttp('http://127.0.0.1:7720/metrics', 'capsule')).toEqual({
        allowed: false,
        code: 'destination-IP-prohibited',
        reason:
          "network policy: '127.0.0.1:7720' is this executor's health and metrics listener, which no capsule may reach whatever capabilities.network.allow says",
      });
      expect(policy.judgeTcp('127.0.0.1', 7720)).toMatchObject({ allowed: false });
      expect(policy.judgeHttp('http://127.0.0.1:7721/', 'capsule')).toMatchObject({ allowed: true });
    } finally {
      policy.close();
    }
  });

  it('refuses the monitoring port of a bus elsewhere where a rule allows it, naming it as the bus’s host', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://nats:4222' }, { resolve: async () => ['172.18.0.2'] });
    const policy = new EgressPolicy(
      { policy: { network_allow: ['nats:8222', '172.18.0.2', 'https://api.example.com'] } as never, artifacts: [] },
      { own, privateHosts: () => true, resolve: async () => [{ address: '172.18.0.2', family: 4 }] },
    );
    try {
      expect(policy.judgeHttp('http://nats:8222/connz?subs=1', 'capsule')).toEqual({
        allowed: false,
        code: 'destination-IP-prohibited',
        reason: "network policy: 'nats:8222' is the host of the bus this runtime runs on, which no capsule may reach whatever capabilities.network.allow says",
      });
      expect(policy.judgeTcp('172.18.0.2', 6222)).toMatchObject({
        allowed: false,
        reason: expect.stringMatching(/is the host of the bus this runtime runs on/),
      });
      expect(policy.judgeHttp('http://172.18.0.2:4222/', 'capsule')).toMatchObject({ reason: expect.stringMatching(/is the bus this runtime runs on/) });
      // A name that resolves there is refused at any port too.
      const lookup = await new Promise<{ error: Error | null }>((resolve) =>
        policy.lookupTo(443)('api.example.com', { family: 4 }, (error) => resolve({ error })),
      );
      expect(lookup.error?.message).toMatch(/'api\.example\.com \(172\.18\.0\.2\):443' is the host of the bus this runtime runs on/);
    } finally {
      policy.close();
    }
  });

  it('refuses a name that resolves to the bus, at the bus’s port only, when names may resolve privately', async () => {
    const own = await OwnEndpoints.of({ natsUrl: 'nats://127.0.0.1:4999' }, { resolve: noDns });
    const policy = new EgressPolicy(
      { policy: { network_allow: ['model.internal'] } as never, artifacts: [] },
      { own, privateHosts: () => true, resolve: async () => [{ address: '127.0.0.1', family: 4 }] },
    );
    const lookup = (port: number): Promise<{ error: Error | null; address: unknown }> =>
      new Promise((resolve) => policy.lookupTo(port)('model.internal', { family: 4 }, (error, address) => resolve({ error, address })));
    try {
      const toBus = await lookup(4999);
      expect(toBus.error?.message).toMatch(/is the bus this runtime runs on/);
      expect((toBus.error as { code?: string } | null)?.code).toBe('destination-IP-prohibited');
      expect(await lookup(11434)).toEqual({ error: null, address: '127.0.0.1' });
    } finally {
      policy.close();
    }
  });
});
