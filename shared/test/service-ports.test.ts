import { describe, expect, it } from 'vitest';
import { FETCH_BLOCKED_PORTS, SERVICE_DEFAULT_PORTS, fetchFailureReason, portFromEnv, servicePort, servicePortIn } from '@murmur/shared';
import { refusalOf } from '../../test/support/refusals.js';

describe("the services' ports", () => {
  it('reads a port from a setting, or the fallback when it is unset or blank', () => {
    expect(portFromEnv('7801', 7700)).toBe(7801);
    expect(portFromEnv(' 0 ', 7700)).toBe(0);
    expect(portFromEnv(undefined, 7700)).toBe(7700);
    expect(portFromEnv('  ', 7700)).toBe(7700);
  });

  it('refuses a setting that is not a port with E-IO-003, naming the setting', () => {
    for (const value of ['70000', '-1', '7.5', 'http']) {
      const refusal = refusalOf(() => portFromEnv(value, 7700, 'MURMUR_STAGER_PORT'));
      expect(refusal.code, value).toBe('E-IO-003');
      expect(refusal.message).toContain(`invalid MURMUR_STAGER_PORT: '${value}'`);
    }
    // A service's own port is refused by the same words, naming its setting.
    expect(refusalOf(() => servicePort({ MURMUR_WATCHER_PORT: 'http' }, 'watcher')).message).toContain("invalid MURMUR_WATCHER_PORT: 'http'");
  });

  it('refuses a port fetch clients will not connect to, naming the setting, since no browser or mur could reach the service', () => {
    const refusal = refusalOf(() => servicePort({ MURMUR_DOOR_PORT: '6000' }, 'door'));
    expect(refusal.code).toBe('E-IO-003');
    expect(refusal.message).toBe("invalid MURMUR_DOOR_PORT: 6000 is a port fetch clients will not connect to (the Fetch standard's blocked ports)");
    expect(refusalOf(() => portFromEnv('10080', 7700, '--port')).message).toContain('invalid --port: 10080 is a port fetch clients will not connect to');
    expect(portFromEnv('6001', 7700)).toBe(6001);
  });

  it("holds only ports this node's fetch refuses to connect to, and says so in an operator's words", async () => {
    // Refused before any connection is tried: nothing on this machine is reached.
    for (const port of FETCH_BLOCKED_PORTS) {
      const error = await fetch(`http://127.0.0.1:${port}/`).then(
        () => undefined,
        (failure: unknown) => failure,
      );
      expect(fetchFailureReason(error), String(port)).toBe("it is a port fetch clients will not connect to (the Fetch standard's blocked ports)");
    }
  });

  it("tells another process a service's port by the same settings, and nothing when it picks a free one or cannot start", () => {
    expect(servicePortIn({}, 'watcher')).toBe(SERVICE_DEFAULT_PORTS.watcher);
    expect(servicePortIn({ MURMUR_WATCHER_PORT: '9740' }, 'watcher')).toBe(9740);
    expect(servicePortIn({ MURMUR_WATCHER_PORT: '9740' }, 'stager')).toBe(SERVICE_DEFAULT_PORTS.stager);
    expect(servicePortIn({ MURMUR_STAGER_PORT: '0' }, 'stager')).toBeUndefined();
    expect(servicePortIn({ MURMUR_STAGER_PORT: 'nope' }, 'stager')).toBeUndefined();
  });
});
