import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { EgressPolicy } from '../src/egress.js';
import { OwnEndpoints, busServers } from '../src/own-endpoints.js';

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
    expect(busServers(undefined)).toEqual([]);
    expect(busServers('  ')).toEqual([]);
  });

  it('takes a bus elsewhere at each address its name resolves to, at its port only', async () => {
    const own = await OwnEndpoints.ofBus('nats://token@nats:4222', async () => ['172.18.0.2']);
    expect(own.covers('172.18.0.2', 4222)).toBe(true);
    expect(own.covers('nats', 4222)).toBe(true);
    expect(own.covers('NATS', 4222)).toBe(true);
    expect(own.covers('[::ffff:172.18.0.2]', 4222)).toBe(true);
    expect(own.covers('::ffff:ac12:2', 4222)).toBe(true);
    expect(own.covers('172.18.0.2', 8222)).toBe(false);
    expect(own.covers('172.18.0.3', 4222)).toBe(false);
    expect(own.covers('127.0.0.1', 4222)).toBe(false);
    expect(own.covers('localhost', 4222)).toBe(false);
  });

  it('takes a bus on this machine at its port on every address of the machine', async () => {
    const own = await OwnEndpoints.ofBus('nats://127.0.0.1:4999', noDns);
    const interfaces = Object.values(os.networkInterfaces()).flatMap((entries) => (entries ?? []).map((entry) => entry.address));
    for (const host of ['127.0.0.1', '127.0.0.2', '127.255.0.9', 'localhost', '::1', '[0:0:0:0:0:0:0:1]', '0.0.0.0', '::', '[::ffff:127.0.0.1]', ...interfaces])
      expect(own.covers(host, 4999), host).toBe(true);
    expect(own.covers('127.0.0.1', 4998)).toBe(false);
    expect(own.covers('8.8.8.8', 4999)).toBe(false);
  });

  it('keeps a name that does not resolve as the name', async () => {
    const own = await OwnEndpoints.ofBus('bus.internal:4222', noDns);
    expect(own.covers('bus.internal', 4222)).toBe(true);
    expect(own.covers('bus.internal', 4223)).toBe(false);
  });

  it('is nothing for an executor on the in-process bus', async () => {
    for (const own of [OwnEndpoints.none, await OwnEndpoints.ofBus(undefined, noDns)]) {
      expect(own.covers('127.0.0.1', 4222)).toBe(false);
      expect(own.covers('localhost', 4222)).toBe(false);
    }
  });

  it('refuses the bus over HTTP and TCP even where a rule allows it, and lets the rule through elsewhere', async () => {
    const own = await OwnEndpoints.ofBus('nats://127.0.0.1:4999', noDns);
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
    } finally {
      policy.close();
    }
  });
});
