import { promises as dnsPromises } from 'node:dns';
import { isIP } from 'node:net';
import os from 'node:os';
import { natsEndpoint } from '@murmur/shared/bus';
import { bare, embeddedIpv4 } from './egress-address.js';

/**
 * The runtime's own endpoints, which no capsule is connected to whatever its rules say: the bus
 * the executor is on. Whoever reaches the bus without credentials controls the stack (it launches
 * and stops sessions, reads their events); a rule that names an address (`172.18.0.2:4222`, or
 * `127.0.0.1:4222` beside a local stack) says plainly where it goes only to someone who knows
 * that address is the bus's, and a name that resolves there is refused already unless the
 * operator lets names resolve privately (`egress-address.ts`).
 *
 * A bus on this machine (a loopback address, or one of the machine's own) is reached at its port
 * on every address of the machine, since a server listening on all of them answers on each; a
 * bus elsewhere, on each address its name resolves to.
 */
export class OwnEndpoints {
  /** Address (`canonicalAddress`) → the ports taken there. */
  private readonly taken = new Map<string, Set<number>>();
  /** Host names as written in the bus's URL, with their ports. */
  private readonly names = new Map<string, Set<number>>();

  /** None: an executor on the in-process bus has no endpoint a capsule could reach. */
  static readonly none = new OwnEndpoints();

  /**
   * The endpoints of the bus at `natsUrl` (`MURMUR_NATS_URL`: one URL, or several comma-separated),
   * its names resolved with `resolve`. A name that does not resolve is kept as a name.
   */
  static async ofBus(natsUrl: string | undefined, resolve: (host: string) => Promise<string[]> = resolveAll): Promise<OwnEndpoints> {
    const own = new OwnEndpoints();
    for (const server of busServers(natsUrl)) {
      const host = server.host;
      own.add(own.names, host, server.port);
      const literal = canonicalAddress(host);
      const addresses = literal !== undefined ? [literal] : await resolve(host).catch(() => [] as string[]);
      const onThisMachine = host === 'localhost' || addresses.some(isThisMachine);
      for (const address of onThisMachine ? thisMachine() : addresses) own.add(own.taken, address, server.port);
    }
    return own;
  }

  /** Whether a connection to `host:port` (as a rule or a URL writes it) would reach one of these endpoints. */
  covers(host: string, port: number): boolean {
    const plain = bare(host).toLowerCase();
    if (this.names.get(plain)?.has(port)) return true;
    const written = plain === 'localhost' ? ['127.0.0.1', '::1'] : [canonicalAddress(plain)];
    return written.some(
      (address) => address !== undefined && (this.taken.get(address)?.has(port) || (isLoopback(address) && this.taken.get('127.0.0.1')?.has(port))),
    );
  }

  private add(map: Map<string, Set<number>>, key: string, port: number): void {
    const ports = map.get(key) ?? new Set<number>();
    ports.add(port);
    map.set(key, ports);
  }
}

/** Each server of a `MURMUR_NATS_URL`, as host (without brackets, lowercased) and port (NATS's 4222 when none is written). */
export function busServers(natsUrl: string | undefined): Array<{ host: string; port: number }> {
  if (natsUrl === undefined || natsUrl.trim() === '') return [];
  return natsEndpoint(natsUrl).servers.flatMap((server) => {
    try {
      const parsed = new URL(server.includes('://') ? server : `nats://${server}`);
      return [{ host: bare(parsed.hostname).toLowerCase(), port: parsed.port === '' ? 4222 : Number(parsed.port) }];
    } catch {
      return [];
    }
  });
}

async function resolveAll(host: string): Promise<string[]> {
  return (await dnsPromises.lookup(host, { all: true, verbatim: true })).flatMap((entry) => canonicalAddress(entry.address) ?? []);
}

/**
 * An IP as one string per address: IPv6 compressed and lowercased (`0:0::1` is `::1`), and an
 * IPv4 address an IPv6 one carries (`::ffff:127.0.0.1`) as that IPv4 address. Not an IP: undefined.
 */
function canonicalAddress(address: string): string | undefined {
  const family = isIP(address);
  if (family === 4) return address;
  if (family !== 6) return undefined;
  let compressed: string;
  try {
    compressed = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  } catch {
    // A scoped address (`fe80::1%eth0`) is no URL host: kept as written.
    compressed = address.toLowerCase();
  }
  return embeddedIpv4(compressed) ?? compressed;
}

/** Every IPv4 address in 127.0.0.0/8 reaches this machine, and so does `::1`. */
function isLoopback(address: string): boolean {
  return address === '::1' || (isIP(address) === 4 && address.startsWith('127.'));
}

/** The addresses a connection made here reaches this machine at: loopback, the unspecified ones, and each interface's. */
function thisMachine(): string[] {
  const interfaces = Object.values(os.networkInterfaces()).flatMap((entries) => (entries ?? []).flatMap((entry) => canonicalAddress(entry.address) ?? []));
  return ['127.0.0.1', '::1', '0.0.0.0', '::', ...interfaces];
}

function isThisMachine(address: string): boolean {
  return isLoopback(address) || thisMachine().includes(address);
}
