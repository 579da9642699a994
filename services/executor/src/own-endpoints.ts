import { readFileSync } from 'node:fs';
import os from 'node:os';
import { natsEndpoint } from '@murmur/shared/bus';
import { bare, embeddedIpv4, ipFamily, systemResolve } from './egress-address.js';

/**
 * The runtime's own endpoints, which no capsule is connected to whatever its rules say: the bus
 * the executor is on, the operator's telemetry collector, and the listeners of the executor and
 * of the stager and watcher beside it on this machine. Whoever reaches the bus without
 * credentials controls the stack (it launches and stops sessions, reads their events); an
 * executor's metrics name every session's egress rules; the watcher's dashboard, which asks no
 * token on its default loopback bind, shows every session's timeline; the collector takes spans
 * as the runtime's own. A stager or watcher is known at the port its setting names in the
 * executor's environment (`MURMUR_<SERVICE>_PORT`, else its default): one on this machine at
 * another port, or one elsewhere, is not known here. A rule that names an address
 * (`172.18.0.2:4222`, or `127.0.0.1:7720` beside a local executor) says plainly where it goes only
 * to someone who knows whose that address is, and a name that resolves there is refused already
 * unless the operator lets names resolve privately (`egress-address.ts`).
 *
 * An endpoint on this machine (a loopback address, or one of the machine's own) is reached at its
 * port on every address of the machine, since a server listening on all of them answers on each.
 * A bus elsewhere is taken whole, every port of each address its name resolves to: the host a bus
 * runs on serves its monitoring (`/connz` lists every client and subscription, so every session),
 * its cluster routes and whatever else its operator put beside it, on ports this executor cannot
 * know. A collector elsewhere is taken at its port only: it is a sink for spans, not a control
 * plane, and its host may serve what capsules are granted. The machine the executor runs on cannot
 * be taken whole: capsules may be granted its other ports.
 */
export class OwnEndpoints {
  /** Address (`canonicalAddress`) → port → what is there. */
  private readonly taken = new Map<string, Map<number, OwnEndpoint>>();
  /** Host names as written, with their ports and what is there. */
  private readonly names = new Map<string, Map<number, OwnEndpoint>>();
  /** Addresses and names taken at every port: those of a bus elsewhere. */
  private readonly whole = new Set<string>();

  /** None: what a policy built without the runtime's endpoints (a unit's) refuses of its own. */
  static readonly none = new OwnEndpoints([]);

  /** Whether a name did not resolve, so it is refused by that name only (`of` is to be asked again). */
  unresolved = false;

  /** `here`: the addresses a connection made on this machine reaches it at (`thisMachine`), listed once. */
  private constructor(private readonly here: readonly string[]) {}

  /**
   * The endpoints of a runtime: the bus at `natsUrl` (`MURMUR_NATS_URL`: one URL, or several
   * comma-separated), the collector at `collectorUrl` (`MURMUR_OTEL_ENDPOINT`), and the services'
   * `listeners` on this machine, names resolved with `resolve`. A name that does not resolve (in
   * 5 s) is kept as a name only.
   */
  static async of(
    runtime: { natsUrl?: string | undefined; collectorUrl?: string | undefined; listeners?: Array<{ port: number; what: OwnListener }> },
    options: { resolve?: (host: string) => Promise<string[]>; unresolved?: (host: string, error: unknown) => void } = {},
  ): Promise<OwnEndpoints> {
    const own = new OwnEndpoints(thisMachine());
    const resolve = async (host: string): Promise<string[]> => {
      const literal = canonicalAddress(host);
      if (literal !== undefined) return [literal];
      return (options.resolve ?? resolveAll)(host).catch((error: unknown) => {
        options.unresolved?.(host, error);
        own.unresolved = true;
        return [] as string[];
      });
    };
    for (const server of busServers(runtime.natsUrl)) {
      const addresses = await resolve(server.host);
      own.add(own.names, server.host, server.port, BUS);
      // A server here serves its monitoring beside it (`/connz` names every session's subjects),
      // at nats-server's usual port: the machine's other ports are not taken, that one is.
      if (own.onThisMachine(server.host, addresses, [server.port, NATS_MONITORING_PORT], BUS)) own.add(own.names, server.host, NATS_MONITORING_PORT, BUS);
      else own.whole.add(server.host);
      // A bus elsewhere (or the part elsewhere of a name that resolves here too) is taken whole.
      for (const address of addresses.filter((candidate) => !own.isHere(candidate))) {
        own.add(own.taken, address, server.port, BUS);
        own.whole.add(address);
      }
    }
    const collector = collectorServer(runtime.collectorUrl);
    if (collector) {
      const addresses = await resolve(collector.host);
      own.add(own.names, collector.host, collector.port, COLLECTOR);
      own.onThisMachine(collector.host, addresses, [collector.port], COLLECTOR);
      for (const address of addresses.filter((candidate) => !own.isHere(candidate))) own.add(own.taken, address, collector.port, COLLECTOR);
    }
    for (const listener of runtime.listeners ?? []) own.onThisMachine('localhost', [], [listener.port], listener.what);
    return own;
  }

  /** Nothing is taken. */
  get empty(): boolean {
    return this.names.size === 0;
  }

  /**
   * What a connection to `host:port` (as a rule or a URL writes it) would reach of these
   * endpoints — the bus itself, another port of the host a bus elsewhere runs on, a service's
   * listener on this machine or the collector — or undefined when it reaches none of them.
   */
  covers(host: string, port: number): OwnEndpoint | undefined {
    const plain = hostName(host);
    const written = (plain === 'localhost' ? ['127.0.0.1', '::1'] : [canonicalAddress(plain)]).filter((address) => address !== undefined);
    // Every address in 127/8 reaches the machine: what is on it is taken at each (`thisMachine`).
    const keys = [plain, ...written, ...(written.some(isLoopback) ? ['127.0.0.1'] : [])];
    const named = this.names.get(plain)?.get(port) ?? keys.map((key) => this.taken.get(key)?.get(port)).find((what) => what !== undefined);
    if (named) return named;
    if (keys.some((key) => this.whole.has(key))) return BUS_HOST;
    // An address the machine holds that it did not when this was built (an interface that came
    // up since), or that the interface list left out (one up with no link, as `docker0` with no
    // container is): whatever is taken on every address of the machine is taken there too.
    if (written.some((address) => !this.isHere(address) && localAddresses.has(address))) return this.names.get('localhost')?.get(port);
    return undefined;
  }

  /**
   * `what` at `ports` on every address of this machine, when `host` (or an address it resolved
   * to) is on this machine; false, taking nothing, when it is not.
   */
  private onThisMachine(host: string, addresses: string[], ports: number[], what: OwnEndpoint): boolean {
    if (host !== 'localhost' && !addresses.some((address) => this.isHere(address))) return false;
    for (const port of ports) {
      this.add(this.names, 'localhost', port, what);
      for (const address of [...this.here, ...addresses.filter((candidate) => this.isHere(candidate))]) this.add(this.taken, address, port, what);
    }
    return true;
  }

  /** Whether a connection to `address` reaches this machine. */
  private isHere(address: string): boolean {
    return isLoopback(address) || this.here.includes(address);
  }

  private add(map: Map<string, Map<number, OwnEndpoint>>, key: string, port: number, what: OwnEndpoint): void {
    const ports = map.get(key) ?? new Map<number, OwnEndpoint>();
    // The bus is named first where two would share a port: it is the one to fear.
    if (!ports.has(port)) ports.set(port, what);
    map.set(key, ports);
  }
}

const BUS = 'the bus this runtime runs on';
const BUS_HOST = 'the host of the bus this runtime runs on';
const COLLECTOR = 'the telemetry collector this runtime exports to';

/** The services' listeners on the executor's machine that no capsule is connected to (the door and roost serve capsules' requests by design). */
export const OWN_LISTENERS = {
  executor: "this executor's health and metrics listener",
  stager: "a stager's health and metrics listener on this machine",
  watcher: "the watcher's dashboard on this machine",
} as const;
export type OwnListener = (typeof OWN_LISTENERS)[keyof typeof OWN_LISTENERS];

/** What of the runtime's own a connection would reach. */
export type OwnEndpoint = typeof BUS | typeof BUS_HOST | typeof COLLECTOR | OwnListener;

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

/** The collector of an OTLP endpoint URL, as host and port (its scheme's when none is written); undefined when there is none. */
function collectorServer(url: string | undefined): { host: string; port: number } | undefined {
  if (url === undefined || url.trim() === '') return undefined;
  try {
    const parsed = new URL(url.trim());
    const port = parsed.port === '' ? (parsed.protocol === 'https:' ? 443 : 80) : Number(parsed.port);
    return { host: hostName(parsed.hostname), port };
  } catch {
    return undefined;
  }
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
 * `known`: the family the system gave it with (an interface's), which needs no checking.
 */
function canonicalAddress(address: string, known?: 4 | 6): string | undefined {
  const family = known ?? ipFamily(address);
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
  return address === '::1' || (address.startsWith('127.') && ipFamily(address) === 4);
}

/**
 * The addresses a connection made here reaches this machine at: loopback, the unspecified ones,
 * each interface's, and each the kernel routes locally (`localAddresses`): Node lists only the
 * interfaces that are up and have a link, and a connection to the address of one without a link
 * (`docker0` before its first container) reaches this machine all the same.
 */
function thisMachine(): string[] {
  let interfaces: string[] = [];
  try {
    interfaces = Object.values(os.networkInterfaces()).flatMap((entries) =>
      (entries ?? []).flatMap((entry) => canonicalAddress(entry.address, entry.family === 'IPv6' ? 6 : 4) ?? []),
    );
  } catch {
    // The interfaces could not be listed: loopback and the unspecified addresses are still the machine's.
  }
  return [...new Set(['127.0.0.1', '::1', '0.0.0.0', '::', ...interfaces, ...localAddresses.list()])];
}

/** How long the kernel's local addresses are taken as read: a judgment may ask at every connection. */
const LOCAL_ADDRESSES_FRESH_MS = 1_000;

/**
 * The addresses the kernel holds as this machine's now: IPv4 from its local routing table
 * (`/proc/net/fib_trie`, each `/32 host LOCAL` leaf), IPv6 from `/proc/net/if_inet6` (every address
 * configured, on an interface with a link or without: when in doubt, the machine's). Read again
 * when a second old. Where neither can be read (not Linux), none: the interface list stands.
 */
export const localAddresses = {
  read: 0,
  held: new Set<string>(),
  has(address: string): boolean {
    return this.current().has(address);
  },
  list(): string[] {
    return [...this.current()];
  },
  current(): Set<string> {
    const now = Date.now();
    if (now - this.read < LOCAL_ADDRESSES_FRESH_MS) return this.held;
    this.read = now;
    this.held = new Set([...readProc('/proc/net/fib_trie', localIpv4Of), ...readProc('/proc/net/if_inet6', localIpv6Of)]);
    return this.held;
  },
};

function readProc(file: string, parse: (text: string) => string[]): string[] {
  try {
    return parse(readFileSync(file, 'utf8'));
  } catch {
    return [];
  }
}

/** The `/32 host LOCAL` leaves of `/proc/net/fib_trie`: each under the `|-- <address>` line before it. */
export function localIpv4Of(fibTrie: string): string[] {
  const addresses: string[] = [];
  let leaf: string | undefined;
  for (const line of fibTrie.split('\n')) {
    const node = /^\s*\|-- (\S+)$/.exec(line);
    if (node) leaf = node[1];
    else if (leaf !== undefined && /^\s*\/32 host LOCAL\b/.test(line) && ipFamily(leaf) === 4) addresses.push(leaf);
  }
  return addresses;
}

/** The addresses of `/proc/net/if_inet6`: 32 hex digits a line, canonical. */
export function localIpv6Of(ifInet6: string): string[] {
  return ifInet6.split('\n').flatMap((line) => {
    const hex = line.trim().split(/\s+/)[0] ?? '';
    if (!/^[0-9a-f]{32}$/i.test(hex)) return [];
    return canonicalAddress(hex.match(/.{4}/g)!.join(':'), 6) ?? [];
  });
}
