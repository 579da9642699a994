import { isIP } from 'node:net';
import os from 'node:os';
import { natsEndpoint } from '@murmur/shared/bus';
import { bare, embeddedIpv4, systemResolve } from './egress-address.js';

/**
 * The runtime's own endpoints, which no capsule is connected to whatever its rules say: the bus
 * the executor is on. Whoever reaches the bus without credentials controls the stack (it launches
 * and stops sessions, reads their events); a rule that names an address (`172.18.0.2:4222`, or
 * `127.0.0.1:4222` beside a local stack) says plainly where it goes only to someone who knows
 * that address is the bus's, and a name that resolves there is refused already unless the
 * operator lets names resolve privately (`egress-address.ts`).
 *
 * A bus on this machine (a loopback address, or one of the machine's own) is reached at its port
 * on every address of the machine, since a server listening on all of them answers on each. A bus
 * elsewhere is taken whole, every port of each address its name resolves to: the host a bus runs
 * on serves its monitoring (`/connz` lists every client and subscription, so every session), its
 * cluster routes and whatever else its operator put beside it, on ports this executor cannot know.
 * The machine the executor runs on cannot be taken whole: capsules may be granted its other ports.
 */
export class OwnEndpoints {
  /** Address (`canonicalAddress`) → the bus's ports there. */
  private readonly taken = new Map<string, Set<number>>();
  /** Host names as written in the bus's URL, with the bus's ports. */
  private readonly names = new Map<string, Set<number>>();
  /** Addresses and names taken at every port: those of a bus elsewhere. */
  private readonly whole = new Set<string>();

  /** None: an executor on the in-process bus has no endpoint a capsule could reach. */
  static readonly none = new OwnEndpoints();

  /** Whether a name of the bus did not resolve, so it is refused by that name only (`ofBus` is to be asked again). */
  unresolved = false;

  /**
   * The endpoints of the bus at `natsUrl` (`MURMUR_NATS_URL`: one URL, or several comma-separated),
   * its names resolved with `resolve`. A name that does not resolve (in 5 s) is kept as a name only.
   */
  static async ofBus(
    natsUrl: string | undefined,
    options: { resolve?: (host: string) => Promise<string[]>; unresolved?: (host: string, error: unknown) => void } = {},
  ): Promise<OwnEndpoints> {
    const resolve = options.resolve ?? resolveAll;
    const own = new OwnEndpoints();
    const here = thisMachine();
    const isHere = (address: string): boolean => isLoopback(address) || here.includes(address);
    for (const server of busServers(natsUrl)) {
      const host = server.host;
      const literal = canonicalAddress(host);
      const addresses =
        literal !== undefined
          ? [literal]
          : await resolve(host).catch((error: unknown) => {
              options.unresolved?.(host, error);
              own.unresolved = true;
              return [] as string[];
            });
      const onThisMachine = host === 'localhost' || addresses.some(isHere);
      own.add(own.names, host, server.port);
      if (!onThisMachine) own.whole.add(host);
      // A name that resolves both here and elsewhere: the machine at the bus's port, the rest whole.
      for (const address of onThisMachine ? [...here, ...addresses] : addresses) {
        own.add(own.taken, address, server.port);
        // A server here serves its monitoring beside it (`/connz` names every session's subjects),
        // at nats-server's usual port: the machine's other ports are not taken, that one is.
        if (isHere(address)) own.add(own.taken, address, NATS_MONITORING_PORT);
        else own.whole.add(address);
      }
      if (onThisMachine) own.add(own.names, host, NATS_MONITORING_PORT);
    }
    return own;
  }

  /** Nothing is taken: the in-process bus. */
  get empty(): boolean {
    return this.names.size === 0;
  }

  /**
   * What a connection to `host:port` (as a rule or a URL writes it) would reach of these
   * endpoints — the bus itself, or another port of the host a bus elsewhere runs on — or
   * undefined when it reaches none of them.
   */
  covers(host: string, port: number): OwnEndpoint | undefined {
    const plain = hostName(host);
    const written = (plain === 'localhost' ? ['127.0.0.1', '::1'] : [canonicalAddress(plain)]).filter((address) => address !== undefined);
    // Every address in 127/8 reaches the machine: a bus on it is taken at each (`thisMachine`).
    const keys = [plain, ...written, ...(written.some(isLoopback) ? ['127.0.0.1'] : [])];
    if (this.names.get(plain)?.has(port) || keys.some((key) => this.taken.get(key)?.has(port))) return 'the bus this runtime runs on';
    if (keys.some((key) => this.whole.has(key))) return 'the host of the bus this runtime runs on';
    return undefined;
  }

  private add(map: Map<string, Set<number>>, key: string, port: number): void {
    map.set(key, (map.get(key) ?? new Set<number>()).add(port));
  }
}

/** What of the runtime's own a connection would reach. */
export type OwnEndpoint = 'the bus this runtime runs on' | 'the host of the bus this runtime runs on';

/** Each server of a `MURMUR_NATS_URL`, as host (`hostName`) and port (when none is written: a websocket's scheme's, else NATS's 4222). */
export function busServers(natsUrl: string | undefined): Array<{ host: string; port: number }> {
  if (natsUrl === undefined || natsUrl.trim() === '') return [];
  return natsEndpoint(natsUrl).servers.flatMap((server) => {
    try {
      const parsed = new URL(server.includes('://') ? server : `nats://${server}`);
      const written = parsed.port === '' ? undefined : Number(parsed.port);
      const port = written ?? (parsed.protocol === 'wss:' ? 443 : parsed.protocol === 'ws:' ? 80 : 4222);
      return [{ host: hostName(parsed.hostname), port }];
    } catch {
      return [];
    }
  });
}

/** A host as written, compared as a name: without brackets, lowercased, and `nats.` the same as `nats`. */
function hostName(host: string): string {
  return bare(host)
    .toLowerCase()
    .replace(/(?<=.)\.$/, '');
}

/** nats-server's monitoring port when it is turned on (`-m 8222`, the port its documentation uses). */
const NATS_MONITORING_PORT = 8222;

/** How long the bus's name may take to resolve: every launch waits for the answer. */
const RESOLVE_TIMEOUT_MS = 5_000;

async function resolveAll(host: string): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`'${host}' did not resolve within ${RESOLVE_TIMEOUT_MS} ms`)), RESOLVE_TIMEOUT_MS);
    timer.unref();
  });
  try {
    const answers = await Promise.race([systemResolve(host), timedOut]);
    return answers.flatMap((entry) => canonicalAddress(entry.address) ?? []);
  } finally {
    clearTimeout(timer);
  }
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
  let interfaces: string[] = [];
  try {
    interfaces = Object.values(os.networkInterfaces()).flatMap((entries) => (entries ?? []).flatMap((entry) => canonicalAddress(entry.address) ?? []));
  } catch {
    // The interfaces could not be listed: loopback and the unspecified addresses are still the machine's.
  }
  return ['127.0.0.1', '::1', '0.0.0.0', '::', ...interfaces];
}
