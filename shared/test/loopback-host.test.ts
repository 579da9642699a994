import { describe, expect, it } from 'vitest';
import type { IncomingMessage } from 'node:http';
import { loopbackHostGuard } from '../src/loopback-host.js';
import { requestedAuthority } from '../src/node/http.js';

describe('the host guard of a service on loopback', () => {
  it('answers for loopback names and addresses, with or without a port, and for a request that names no host', () => {
    const guard = loopbackHostGuard('http://127.0.0.1:7730', undefined);
    for (const host of ['localhost', 'localhost:7730', 'LocalHost.', 'agent.localhost:7730', '127.0.0.1:7730', '127.8.9.10', '[::1]:7730', undefined, '']) {
      expect(guard?.(host), String(host)).toBe(true);
    }
  });

  it('refuses any other name, one that only starts or ends like a loopback name, and a Host that is not one', () => {
    const guard = loopbackHostGuard('http://[::1]:7730', undefined);
    for (const host of [
      'attacker.example',
      'attacker.example:7730',
      'localhost.attacker.example',
      'evillocalhost',
      'xlocalhost:7730',
      '127.0.0.1.nip.io',
      '10.0.0.5:7730',
      'a b',
      '@evil',
    ]) {
      expect(guard?.(host), host).toBe(false);
    }
  });

  it('judges each Host on its own, whatever it answered the request before', () => {
    const guard = loopbackHostGuard('http://127.0.0.1:7730', undefined);
    const asked = [
      'localhost:7730',
      'localhost:7730',
      'attacker.example:7730',
      'attacker.example:7730',
      'localhost:7730',
      'localhost.attacker.example',
      '127.0.0.1:7730',
    ];
    expect(asked.map((host) => guard?.(host))).toEqual([true, true, false, false, true, false, true]);
  });

  it('answers for the name of its public URL as well', () => {
    const guard = loopbackHostGuard('http://127.0.0.1:7730', 'https://agents.example.org/');
    expect(guard?.('agents.example.org')).toBe(true);
    expect(guard?.('agents.example.org.:443')).toBe(true);
    expect(loopbackHostGuard('http://127.0.0.1:7730', 'https://agents.example.org./')?.('agents.example.org')).toBe(true);
    expect(guard?.('other.example.org')).toBe(false);
  });

  it('is not there for a service listening beyond loopback: its operator chose the names it is reached by', () => {
    expect(loopbackHostGuard('http://0.0.0.0:8080', undefined)).toBeUndefined();
    expect(loopbackHostGuard('http://[::]:8080', undefined)).toBeUndefined();
    expect(loopbackHostGuard('http://10.1.2.3:8080', undefined)).toBeUndefined();
  });

  it('judges the authority of a target in absolute form over Host, and a target with none as no name it answers, never as a request that named no host', () => {
    const guard = loopbackHostGuard('http://127.0.0.1:7730', undefined);
    const asked = (url: string, host?: string) => requestedAuthority({ url, headers: host === undefined ? {} : { host } } as IncomingMessage);
    expect(asked('/health', 'localhost:7730')).toBe('localhost:7730');
    expect(asked('http://attacker.example:7730/health', 'localhost:7730')).toBe('attacker.example:7730');
    expect(asked('http://localhost:7730/health', 'attacker.example')).toBe('localhost:7730');
    expect(guard?.(asked('http://[bad/health', 'localhost:7730'))).toBe(false);
  });
});
