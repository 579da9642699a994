import { type NetworkAllowRule, parseNetworkAllowRules } from '@murmur/shared';
import { ipFamily } from './egress-address.js';

/**
 * The network a sandbox's processes see, planned from `capabilities.network.allow`.
 *
 * The sandbox has its own network namespace with loopback only, in which every IPv4 address is
 * local: a connect to an address nobody listens on is refused at once (`ECONNREFUSED`), a UDP
 * packet to one goes nowhere, and nothing is routed out. What is listened on is exactly what the
 * allowlist names:
 *
 * - a **name** (`api.example.com`) gets an address of its own in `127.77.0.0/16`, which the
 *   sandbox's DNS answers for it, and a listener there on each of its ports;
 * - an **IPv4 literal** (`10.0.0.5:8443`) is listened on at that very address;
 * - `localhost` is `127.0.0.1`, as the sandbox's `/etc/hosts` says.
 *
 * A port is the rule's (explicit, or its scheme's default); a bare host gets 80 and 443. The
 * capsule host accepts each connection and hands it to the executor, which judges it against the
 * same allowlist as `wasi:http` and, if it passes, splices the bytes to the real destination — no
 * TLS termination, no proxy settings, nothing a tool has to cooperate with. DNS (UDP and TCP on
 * port 53 of every address) answers the allowlisted names and refuses the rest.
 */

export interface PlannedListener {
  /** Where the helper places the listening socket in the sandbox's descriptor table. */
  fd: number;
  address: string;
  port: number;
  /** Where a connection to it goes: the allowlisted host, as written. */
  host: string;
}

export interface NetworkPlan {
  listeners: PlannedListener[];
  /** The address the sandbox's DNS answers for each allowlisted name. */
  names: Record<string, string>;
  /** DNS over UDP and TCP, on port 53 of every address. */
  dns: { udpFd: number; tcpFd: number };
  /** Rules that get no listener (an IPv6 literal: the sandbox is IPv4 only; past the cap), said at launch. */
  skipped: string[];
}

/** Listeners beyond this are not opened (each is a descriptor in every sandbox). */
export const MAX_LISTENERS = 64;
/**
 * Names beyond this get no address (the synthetic range holds 65 534): a name is answered even
 * where its ports get no listener, so a connection to it is refused as to any port not allowed.
 */
export const MAX_NAMES = 4_096;
const SYNTHETIC_BASE = [127, 77];
const DNS_PORT = 53;

/** The `n`th name's address in `127.77.0.0/16`, from `127.77.0.1`: at most `MAX_NAMES` are ever given. */
function syntheticAddress(n: number): string {
  return `${SYNTHETIC_BASE[0]}.${SYNTHETIC_BASE[1]}.${Math.floor(n / 256)}.${n % 256}`;
}

function portsOf(rule: NetworkAllowRule): number[] {
  if (rule.port !== undefined) return [rule.port];
  if (rule.scheme === 'https') return [443];
  if (rule.scheme === 'http') return [80];
  return [80, 443];
}

export function planNetwork(allow: readonly string[], firstFd: number): NetworkPlan {
  const rules = parseNetworkAllowRules(allow);
  // Without a prototype: a rule's host named `constructor` or `__proto__` is a name like any other.
  const names = Object.create(null) as Record<string, string>;
  const wanted = new Map<string, PlannedListener>();
  const skipped: string[] = [];
  let nextFd = firstFd + 2;
  let synthetic = 0;
  /**
   * Where connections to `host` are listened for: an IPv4 literal itself, `localhost` its
   * address, a name an address of its own in the synthetic range, up to `MAX_NAMES` of them (an
   * allowlist of 65 536 names counted past the range, and the DNS's answer for the last threw in
   * the executor's event loop). A name past them is not answered: `exhausted`.
   */
  const addressOf = (host: string): string | undefined | 'exhausted' => {
    // A resolver asks for a name without the root's dot (`dns-message.ts`): a rule written fully
    // qualified (`api.example.`) is the name `api.example` asks for too.
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    if (name === 'localhost') {
      names.localhost = '127.0.0.1';
      return names.localhost;
    }
    const family = ipFamily(name.replace(/^\[|\]$/g, ''));
    if (family === 4) return name;
    if (family === 6) return undefined;
    if (!names[name]) {
      if (synthetic >= MAX_NAMES) return 'exhausted';
      synthetic += 1;
      names[name] = syntheticAddress(synthetic);
    }
    return names[name];
  };
  for (const rule of [...rules].sort((left, right) => (left.host < right.host ? -1 : left.host > right.host ? 1 : 0))) {
    // The unspecified address is no destination, and would take its port on every address; the
    // synthetic range is where this plan puts names, so a literal in it would take a name's place.
    if (rule.host === '0.0.0.0' || rule.host.startsWith(`${SYNTHETIC_BASE.join('.')}.`)) {
      skipped.push(`${rule.host}: not an address a sandbox's connection can stand for`);
      continue;
    }
    const address = addressOf(rule.host);
    if (address === undefined) {
      skipped.push(`${rule.host}: the sandbox's network is IPv4 only`);
      continue;
    }
    if (address === 'exhausted') {
      skipped.push(`${rule.host}: past the ${MAX_NAMES} names a sandbox's DNS answers`);
      continue;
    }
    for (const port of portsOf(rule)) {
      if (port === DNS_PORT) {
        skipped.push(`${rule.host}:${port}: port ${DNS_PORT} is the sandbox's own DNS`);
        continue;
      }
      const key = `${address}:${port}`;
      if (wanted.has(key)) continue;
      if (wanted.size >= MAX_LISTENERS) {
        skipped.push(`${rule.host}:${port}: past the ${MAX_LISTENERS} listeners a sandbox gets`);
        continue;
      }
      wanted.set(key, { fd: nextFd++, address, port, host: rule.host });
    }
  }
  return { listeners: [...wanted.values()], names, dns: { udpFd: firstFd, tcpFd: firstFd + 1 }, skipped };
}
