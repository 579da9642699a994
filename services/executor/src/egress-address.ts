import { type LookupAddress, type LookupOptions, promises as dnsPromises } from 'node:dns';
import { BlockList, type LookupFunction, isIPv4, isIPv6 } from 'node:net';

/**
 * Where an allowed name may lead. `capabilities.network.allow` names hosts, and the capsule's
 * author chooses the names — and so what they resolve to. A rule for `api.attacker.example` whose
 * DNS answers `127.0.0.1`, `169.254.169.254` or the stack's own addresses would otherwise carry the
 * capsule to the executor's loopback (the bus, a door, a dashboard), the cloud's metadata service
 * or the stack's private network, none of which the rule shows to whoever reads the scope.
 *
 * So a name is resolved here, and reached only when every address it resolves to is public; the
 * connection is then made to the address that was checked (`lookup`), so the name is not resolved
 * a second time to something else. An address reaches a private destination only as it is
 * written: a rule that names an IP (`127.0.0.1:8080`, `[::1]`) or `localhost` says plainly where
 * it goes, and the operator can let named hosts resolve privately (`MURMUR_EGRESS_PRIVATE_HOSTS`:
 * host names, comma-separated, or `*`), e.g. a model server on the stack's own network.
 */

/** What resolves a name: the system's resolver, or a test's stand-in for the DNS of a domain nobody here owns. */
export type Resolve = (hostname: string) => Promise<Array<{ address: string; family: number }>>;

/** Lookups under way, by name: what every caller asking for the same name meanwhile is given. */
const resolving = new Map<string, Promise<Array<{ address: string; family: number }>>>();

/**
 * The system's resolver (getaddrinfo, the hosts file included), one lookup of a name at a time:
 * each runs on one of libuv's few pool threads until the resolver gives up, and a capsule whose
 * allowed name never answers made each of its many requests hold another, which starved every
 * session's lookups (and the executor's file work) long after its requests timed out. A capsule
 * can only have looked up the names its rules allow, so what it holds is bounded by its rules.
 */
export const systemResolve: Resolve = (hostname) => {
  const key = hostname.toLowerCase();
  const pending = resolving.get(key);
  if (pending) return pending;
  const lookup = dnsPromises.lookup(hostname, { all: true, verbatim: true });
  resolving.set(key, lookup);
  const done = (): void => {
    if (resolving.get(key) === lookup) resolving.delete(key);
  };
  lookup.then(done, done);
  return lookup;
};

let nonPublic: BlockList | undefined;

/**
 * The prefixes no name of a rule may lead to: loopback, unspecified, private, shared, link-local,
 * multicast, reserved. Made at first use: a `BlockList` holds a native handle, which `mur`'s
 * startup snapshot cannot keep.
 */
function nonPublicPrefixes(): BlockList {
  if (nonPublic) return nonPublic;
  const list = new BlockList();
  for (const [prefix, length] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.0.0.0', 24],
    ['192.168.0.0', 16],
    ['198.18.0.0', 15],
    ['224.0.0.0', 4],
    ['240.0.0.0', 4],
  ] as const)
    list.addSubnet(prefix, length, 'ipv4');
  for (const [prefix, length] of [
    ['::', 128],
    ['::1', 128],
    ['64:ff9b:1::', 48],
    ['fc00::', 7],
    ['fe80::', 10],
    ['fec0::', 10],
    ['ff00::', 8],
  ] as const)
    list.addSubnet(prefix, length, 'ipv6');
  nonPublic = list;
  return list;
}

/**
 * `net.isIP`, answered the same for every string, without trying its IPv6 pattern on one that
 * cannot be an IPv6 address (every one has a colon, no IPv4 address or name has): node compiles
 * that pattern the first time it runs, ~3–4 ms on these machines, which a host name (`localhost`,
 * a rule's `api.example.com`) would otherwise pay on the way to a launch or a first request.
 */
export function ipFamily(text: string): 0 | 4 | 6 {
  if (!text.includes(':')) return isIPv4(text) ? 4 : 0;
  return isIPv6(text) ? 6 : 0;
}

/**
 * The IPv4 address an IPv6 one carries, if any: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
 * (the deprecated `::a.b.c.d`, all of `::/96`: `::` and `::1` carry 0.0.0.0 and 0.0.0.1, neither
 * public), NAT64's well-known `64:ff9b::/96`, and 6to4's `2002:aabb:ccdd::/48`. Each reaches the
 * IPv4 address where a route for it exists, so it is as public as that address.
 */
export function embeddedIpv4(address: string): string | undefined {
  const words = ipv6Words(address);
  if (!words) return undefined;
  const quad = (high: number, low: number): string => [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
  const zeros = (from: number, to: number): boolean => words.slice(from, to).every((word) => word === 0);
  if (zeros(0, 5) && (words[5] === 0 || words[5] === 0xffff)) return quad(words[6] as number, words[7] as number);
  if (words[0] === 0x64 && words[1] === 0xff9b && zeros(2, 6)) return quad(words[6] as number, words[7] as number);
  if (words[0] === 0x2002) return quad(words[1] as number, words[2] as number);
  return undefined;
}

/** An IPv6 address (one `ipFamily` took) as its eight 16-bit words, a trailing dotted quad included. */
function ipv6Words(address: string): number[] | undefined {
  let text = address.toLowerCase();
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headWords = head === '' ? [] : head.split(':');
  const tailWords = tail === undefined || tail === '' ? [] : tail.split(':');
  const missing = tail === undefined ? 0 : 8 - headWords.length - tailWords.length;
  const words = [...headWords, ...Array<string>(Math.max(0, missing)).fill('0'), ...tailWords].map((word) => Number.parseInt(word, 16));
  return words.length === 8 && words.every((word) => Number.isInteger(word) && word >= 0 && word <= 0xffff) ? words : undefined;
}

/** Whether `address` (an IP) is a public one a name may lead to. */
export function isPublicAddress(address: string): boolean {
  const family = ipFamily(address);
  if (family === 0) return false;
  if (family === 6) {
    const carried = embeddedIpv4(address);
    if (carried) return isPublicAddress(carried);
    return !nonPublicPrefixes().check(address, 'ipv6');
  }
  return !nonPublicPrefixes().check(address, 'ipv4');
}

/** A host as a rule writes it, its IPv6 brackets off. */
export function bare(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/** Whether a host says where it goes as it is written: an IP, or `localhost`. */
export function namesItsAddress(host: string): boolean {
  const plain = bare(host).toLowerCase();
  return ipFamily(plain) !== 0 || plain === 'localhost';
}

/** `MURMUR_EGRESS_PRIVATE_HOSTS`: the names the operator lets resolve to private addresses. */
export function privateHostsSetting(env: NodeJS.ProcessEnv): (host: string) => boolean {
  const entries = new Set(
    (env.MURMUR_EGRESS_PRIVATE_HOSTS ?? '')
      .split(',')
      .map((entry) => entry.trim().toLowerCase())
      .filter((entry) => entry !== ''),
  );
  return (host) => entries.has('*') || entries.has(bare(host).toLowerCase());
}

/** A name that led somewhere it may not: the WASI error code and the reason the trace records. */
export class ProhibitedAddress extends Error {
  readonly code = 'destination-IP-prohibited';
  /** `reason`: why, when it is not that the address is not public (it is the runtime's own bus). */
  constructor(host: string, address: string, reason?: string) {
    super(
      reason ??
        `network policy: '${host}' resolves to ${address}, which is not a public address; a rule reaches such an address only by naming it (an IP, or localhost), or when the operator lets the name resolve privately (MURMUR_EGRESS_PRIVATE_HOSTS)`,
    );
  }
}

/**
 * The `lookup` a connection to an allowed host is made with: the host's addresses, refused when
 * one is not public and the host neither names its address nor is let resolve privately.
 */
export function vettedLookup(privateAllowed: (host: string) => boolean, resolve: Resolve = systemResolve): LookupFunction {
  return (hostname, options, callback) => {
    const answer = callback as unknown as (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
    resolve(hostname).then(
      (addresses) => {
        if (addresses.length === 0) return answer(Object.assign(new Error(`'${hostname}' did not resolve`), { code: 'ENOTFOUND' }), '', 0);
        if (!namesItsAddress(hostname) && !privateAllowed(hostname)) {
          const prohibited = addresses.find((entry) => !isPublicAddress(entry.address));
          if (prohibited) return answer(new ProhibitedAddress(hostname, prohibited.address) as unknown as NodeJS.ErrnoException, '', 0);
        }
        const wanted = (options as LookupOptions).family;
        const usable = wanted === 4 || wanted === 6 ? addresses.filter((entry) => entry.family === wanted) : addresses;
        if ((options as LookupOptions).all) return answer(null, usable);
        const first = usable[0];
        if (!first) return answer(Object.assign(new Error(`'${hostname}' has no IPv${wanted} address`), { code: 'ENOTFOUND' }), '', 0);
        answer(null, first.address, first.family);
      },
      (error: NodeJS.ErrnoException) => answer(error, '', 0),
    );
  };
}
