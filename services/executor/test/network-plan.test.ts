import { describe, expect, it } from 'vitest';
import { MAX_LISTENERS, MAX_NAMES, planNetwork } from '../src/network-plan.js';

describe('the sealed sandbox’s network plan', () => {
  it('gives each allowlisted name an address of its own in 127.77/16, and listens on its ports', () => {
    const plan = planNetwork(['https://api.example.com', 'files.example.com:8443'], 16);
    expect(plan.names).toEqual({ 'api.example.com': '127.77.0.1', 'files.example.com': '127.77.0.2' });
    expect(plan.listeners).toEqual([
      { fd: 18, address: '127.77.0.1', port: 443, host: 'api.example.com' },
      { fd: 19, address: '127.77.0.2', port: 8443, host: 'files.example.com' },
    ]);
    expect(plan.dns).toEqual({ udpFd: 16, tcpFd: 17 });
  });

  it('listens on both 80 and 443 for a bare host, on the scheme’s port for a URL rule', () => {
    const plan = planNetwork(['example.com', 'http://plain.example.com'], 16);
    expect(plan.listeners.map((listener) => `${listener.host}:${listener.port}`)).toEqual(['example.com:80', 'example.com:443', 'plain.example.com:80']);
  });

  it('listens at an IPv4 literal’s own address, and at 127.0.0.1 for localhost (which DNS answers too)', () => {
    const plan = planNetwork(['10.0.0.5:8080', 'localhost:9000'], 16);
    expect(plan.listeners.map((listener) => [listener.address, listener.port])).toEqual([
      ['10.0.0.5', 8080],
      ['127.0.0.1', 9000],
    ]);
    expect(plan.names).toEqual({ localhost: '127.0.0.1' });
  });

  it('answers a rule written fully qualified, with the root’s dot, under the name a resolver asks for', () => {
    const plan = planNetwork(['api.example.com.:443', 'api.example.com:8443', 'localhost.:9000'], 16);
    expect(plan.names).toEqual({ 'api.example.com': '127.77.0.1', localhost: '127.0.0.1' });
    expect(plan.listeners.map((listener) => [listener.address, listener.port, listener.host])).toEqual([
      ['127.77.0.1', 8443, 'api.example.com'],
      ['127.77.0.1', 443, 'api.example.com.'],
      ['127.0.0.1', 9000, 'localhost.'],
    ]);
  });

  it('opens one listener for rules that land on the same address and port', () => {
    const plan = planNetwork(['https://api.example.com', 'api.example.com:443'], 16);
    expect(plan.listeners).toHaveLength(1);
  });

  it('skips an IPv6 literal, saying why: the sandbox is IPv4 only', () => {
    const plan = planNetwork(['[::1]:8080'], 16);
    expect(plan.listeners).toEqual([]);
    expect(plan.skipped).toEqual(["[::1]: the sandbox's network is IPv4 only"]);
  });

  it(`stops at ${MAX_LISTENERS} listeners and names what got none`, () => {
    const plan = planNetwork(
      Array.from({ length: MAX_LISTENERS + 2 }, (_, index) => `host${String(index).padStart(3, '0')}.example.com:1000`),
      16,
    );
    expect(plan.listeners).toHaveLength(MAX_LISTENERS);
    expect(plan.skipped).toHaveLength(2);
    expect(plan.skipped[0]).toContain(`past the ${MAX_LISTENERS} listeners a sandbox gets`);
  });

  it(`answers at most ${MAX_NAMES} names, each at an address of the range, so no allowlist counts past it (65 540 names)`, () => {
    const allow = Array.from({ length: 65_540 }, (_, index) => `n${index}.example`);
    const plan = planNetwork(allow, 16);
    expect(plan.listeners).toHaveLength(MAX_LISTENERS);
    const addresses = Object.values(plan.names);
    expect(addresses).toHaveLength(MAX_NAMES);
    expect(new Set(addresses).size).toBe(MAX_NAMES);
    for (const address of addresses)
      expect(
        address
          .split('.')
          .map(Number)
          .every((octet) => octet >= 0 && octet <= 255),
      ).toBe(true);
    expect(plan.skipped.filter((reason) => reason.endsWith(`past the ${MAX_NAMES} names a sandbox's DNS answers`))).toHaveLength(allow.length - MAX_NAMES);
  });

  it('plans nothing but DNS for an empty allowlist', () => {
    expect(planNetwork([], 16)).toEqual({ listeners: [], names: {}, dns: { udpFd: 16, tcpFd: 17 }, skipped: [] });
  });
});
