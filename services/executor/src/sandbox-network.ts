import type { Socket as DatagramSocket, RemoteInfo } from 'node:dgram';
import { type LookupFunction, type Server, type Socket, connect } from 'node:net';
import { ProhibitedAddress } from './egress-address.js';
import { decide, encodeAnswer, parseQuery } from './dns-message.js';
import type { NetworkPlan, PlannedListener } from './network-plan.js';

/**
 * The executor's end of a sealed sandbox's network: the sockets `murmur-confine` bound inside the
 * sandbox's network namespace, handed over by the capsule host, served here — outside the
 * sandbox, where the policy is.
 *
 * - DNS (UDP and TCP, port 53 of every sandbox address) answers the allowlisted names with their
 *   listeners' addresses and refuses every other name at once (`dns-message.ts`).
 * - Each listener stands for one allowlisted destination. A connection to it is judged again
 *   (`judge`), then spliced to the real destination, resolved and connected from here; bytes are
 *   passed through untouched — no TLS termination, nothing for the tool to configure.
 *
 * A connection to anything else in the sandbox finds no listener and is refused by its own
 * kernel: it never reaches this process at all.
 */

export interface EgressRecord {
  kind: 'tcp' | 'dns';
  target: string;
  decision: 'allowed' | 'denied' | 'failed';
  reason?: string;
  /** The network.allow entry that admitted it, as written. */
  rule?: string;
}

export interface SandboxNetworkOptions {
  plan: NetworkPlan;
  judge(host: string, port: number): { allowed: true; rule?: string } | { allowed: false; reason: string };
  /** Each decision, for the trace (bounded by the caller). */
  record(record: EgressRecord): void;
  /** How long an upstream connect may take before the sandbox's connection is reset. */
  connectTimeoutMs?: number;
  /** How a destination's name is resolved for a port: vetted by the egress policy (`EgressPolicy.lookupTo`), and connected to as checked. */
  lookupTo?: (port: number) => LookupFunction;
  /** Connections the sandbox may hold open through its listeners at once (`MAX_CONNECTIONS` unless a test says). */
  maxConnections?: number;
  /** DNS questions answered per second, beyond a burst of twice as many (`DNS_QUERIES_PER_SECOND` unless a test says). */
  dnsQueriesPerSecond?: number;
}

const DNS_TCP_IDLE_MS = 10_000;
/**
 * The questions one sandbox's DNS is answered per second (and twice that in a burst): a program
 * asks a few names at a time, and one UDP sender flooding it took 58% of the executor's event
 * loop, which every session shares. Past it a question is dropped unanswered, as a resolver that
 * is busy drops it, and the first drop is recorded.
 */
const DNS_QUERIES_PER_SECOND = 200;
const DNS_TCP_BUFFER_BYTES = 64 * 1024;
/**
 * Spliced connections one sandbox may hold open at once. Each costs the executor two descriptors
 * and two sockets' buffers, shared with every other session, so a tool that opens connections
 * and never closes them is stopped at its own session's count rather than at the executor's
 * descriptor limit, where every session would fail. Parallel downloads use tens; 256 is far past them.
 */
export const MAX_CONNECTIONS = 256;
/** DNS over TCP is one exchange per connection (it idles out in 10 s): a few at once is plenty. */
const MAX_DNS_CONNECTIONS = 16;

export class SandboxNetwork {
  private readonly servers = new Set<Server>();
  private readonly datagrams = new Set<DatagramSocket>();
  private readonly sockets = new Set<Socket>();
  /** The sandbox's end of each spliced connection still open (its upstream end may still be connecting). */
  private spliced = 0;
  private dnsConnections = 0;
  private closed = false;
  /** What is left of the DNS budget (`takeDnsQuestion`), and when it was last counted. */
  private dnsBudget: number;
  private dnsBudgetAt = performance.now();
  private dnsDropRecorded = false;
  private readonly dnsRate: number;

  constructor(private readonly options: SandboxNetworkOptions) {
    this.dnsRate = options.dnsQueriesPerSecond ?? DNS_QUERIES_PER_SECOND;
    this.dnsBudget = 2 * this.dnsRate;
  }

  /** Whether one more DNS question is within the sandbox's budget; the first one past it is recorded. */
  private takeDnsQuestion(): boolean {
    const now = performance.now();
    this.dnsBudget = Math.min(2 * this.dnsRate, this.dnsBudget + ((now - this.dnsBudgetAt) / 1000) * this.dnsRate);
    this.dnsBudgetAt = now;
    if (this.dnsBudget >= 1) {
      this.dnsBudget -= 1;
      return true;
    }
    if (!this.dnsDropRecorded) {
      this.dnsDropRecorded = true;
      this.options.record({
        kind: 'dns',
        target: '(over budget)',
        decision: 'denied',
        reason: `more than ${this.dnsRate} DNS questions a second: the rest are dropped unanswered while it lasts`,
      });
    }
    return false;
  }

  /** Takes one socket the host handed over; anything unexpected is closed rather than served. */
  attach(fd: number, protocol: 'tcp' | 'udp', handle: unknown): void {
    const { plan } = this.options;
    const listener = plan.listeners.find((planned) => planned.fd === fd);
    if (this.closed) closeHandle(handle);
    else if (protocol === 'udp' && fd === plan.dns.udpFd && isDatagram(handle)) this.serveDnsUdp(handle);
    else if (protocol === 'tcp' && isServer(handle) && fd === plan.dns.tcpFd) this.serveDnsTcp(handle);
    else if (protocol === 'tcp' && isServer(handle) && listener) this.serveListener(handle, listener);
    else closeHandle(handle);
  }

  private serveDnsUdp(socket: DatagramSocket): void {
    this.datagrams.add(socket);
    socket.on('message', (message: Buffer, from: RemoteInfo) => {
      if (!this.takeDnsQuestion()) return;
      const reply = this.answer(message);
      if (reply) socket.send(reply, from.port, from.address);
    });
    socket.on('error', () => undefined);
  }

  private serveDnsTcp(server: Server): void {
    this.servers.add(server);
    server.on('connection', (socket) => {
      this.track(socket);
      if (this.dnsConnections >= MAX_DNS_CONNECTIONS) return void socket.resetAndDestroy();
      this.dnsConnections += 1;
      socket.once('close', () => (this.dnsConnections -= 1));
      socket.setTimeout(DNS_TCP_IDLE_MS, () => socket.destroy());
      let pending = Buffer.alloc(0);
      socket.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        if (pending.length > DNS_TCP_BUFFER_BYTES) return void socket.destroy();
        while (pending.length >= 2) {
          const length = pending.readUInt16BE(0);
          if (pending.length < 2 + length) break;
          if (!this.takeDnsQuestion()) return void socket.destroy();
          const reply = this.answer(pending.subarray(2, 2 + length));
          pending = pending.subarray(2 + length);
          if (!reply) return void socket.destroy();
          const framed = Buffer.alloc(2 + reply.length);
          framed.writeUInt16BE(reply.length, 0);
          reply.copy(framed, 2);
          socket.write(framed);
        }
      });
    });
    server.on('error', () => undefined);
  }

  /**
   * The reply to one question, or undefined to drop it. Never throws: it runs in a socket's event
   * handler, where a throw ends the executor and every session on it, and whatever is inside the
   * sandbox chooses the bytes.
   */
  private answer(message: Buffer): Buffer | undefined {
    try {
      const query = parseQuery(message);
      if (!query) return undefined;
      const decision = decide(query, this.options.plan.names);
      if (decision.rcode !== 0)
        this.options.record({
          kind: 'dns',
          target: query.question?.name ?? '(malformed)',
          decision: 'denied',
          reason: query.question ? 'not in capabilities.network.allow' : 'malformed question',
        });
      return encodeAnswer(query, decision);
    } catch (error) {
      this.options.record({
        kind: 'dns',
        target: '(unanswerable)',
        decision: 'failed',
        reason: `the question could not be answered: ${(error as Error).message}`,
      });
      return undefined;
    }
  }

  private serveListener(server: Server, listener: PlannedListener): void {
    this.servers.add(server);
    const target = `${listener.host}:${listener.port}`;
    server.on('connection', (inside) => {
      this.track(inside);
      const verdict = this.options.judge(listener.host, listener.port);
      const limit = this.options.maxConnections ?? MAX_CONNECTIONS;
      if (!verdict.allowed || this.spliced >= limit) {
        const reason = verdict.allowed ? `this sandbox already has ${limit} connections open: close one before opening another` : verdict.reason;
        this.options.record({ kind: 'tcp', target, decision: 'denied', reason });
        inside.resetAndDestroy();
        return;
      }
      this.spliced += 1;
      inside.once('close', () => (this.spliced -= 1));
      inside.pause();
      const outside = connect({
        host: listener.host,
        port: listener.port,
        timeout: this.options.connectTimeoutMs ?? 30_000,
        ...(this.options.lookupTo ? { lookup: this.options.lookupTo(listener.port) } : {}),
      });
      this.track(outside);
      let connected = false;
      outside.once('connect', () => {
        connected = true;
        outside.setTimeout(0);
        this.options.record({ kind: 'tcp', target, decision: 'allowed', ...(verdict.rule ? { rule: verdict.rule } : {}) });
        inside.pipe(outside);
        outside.pipe(inside);
        inside.resume();
      });
      outside.once('timeout', () => outside.destroy(new Error('the connection timed out')));
      outside.on('error', (error) => {
        // A name that led to an address no rule may reach is a denial, not a failure of the network.
        if (!connected)
          this.options.record({
            kind: 'tcp',
            target,
            decision: error instanceof ProhibitedAddress ? 'denied' : 'failed',
            reason: error.message,
            ...(verdict.rule ? { rule: verdict.rule } : {}),
          });
        if (!inside.destroyed) inside.resetAndDestroy();
      });
      inside.on('error', () => outside.destroy());
      inside.on('close', () => outside.destroy());
      outside.on('close', () => {
        if (!inside.destroyed) inside.end();
      });
    });
    server.on('error', () => undefined);
  }

  /**
   * Every socket, from the moment it is accepted or opened: kept to be closed with the sandbox,
   * and given an `error` listener first of all. Whatever is inside the sandbox can reset a
   * connection (a DNS query over TCP, one byte, then RST), and an `error` with no listener is
   * thrown out of the event loop: it ended the executor, and every session on it.
   */
  private track(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('error', () => socket.destroy());
    socket.once('close', () => this.sockets.delete(socket));
  }

  /** Closes every socket: the listeners (so nothing more is accepted) and each open connection. */
  close(): void {
    this.closed = true;
    for (const server of this.servers) server.close();
    for (const socket of this.datagrams) socket.close();
    for (const socket of this.sockets) socket.destroy();
    this.servers.clear();
    this.datagrams.clear();
    this.sockets.clear();
  }
}

function isServer(handle: unknown): handle is Server {
  return typeof handle === 'object' && handle !== null && typeof (handle as Server).listen === 'function' && typeof (handle as Server).address === 'function';
}

function isDatagram(handle: unknown): handle is DatagramSocket {
  return (
    typeof handle === 'object' &&
    handle !== null &&
    typeof (handle as DatagramSocket).send === 'function' &&
    typeof (handle as DatagramSocket).addMembership === 'function'
  );
}

/** Closes a handle a host sent over Node's IPC (a server, a socket or a datagram socket), whatever state it is in. */
export function closeHandle(handle: unknown): void {
  const closable = handle as { destroy?: () => void; close?: () => void } | null | undefined;
  try {
    // A connected socket is destroyed (it has no `close`); a server or a datagram socket is closed.
    if (typeof closable?.destroy === 'function') closable.destroy();
    else closable?.close?.();
  } catch {
    // already closed
  }
}
