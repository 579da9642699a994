import {
  type NetworkAllowRule,
  type StagedPlan,
  anyRuleMatches,
  artifactNetworkRules,
  formatRule,
  newRequestId,
  parseNetworkAllowRules,
  requestTargetOf,
  ruleMatches,
} from '@murmur/shared';
import type { LookupAddress } from 'node:dns';
import type net from 'node:net';
import { ProhibitedAddress, type Resolve, privateHostsSetting, vettedLookup } from './egress-address.js';
import { EgressConnections, egressRequest } from './egress-request.js';
import { OwnEndpoints } from './own-endpoints.js';
import type { HttpRequest } from './host/protocol.js';
import { REQUEST_BODY_LIMIT_BYTES } from './host/request-body.js';
import type { RequestUploads } from './request-uploads.js';

/**
 * The one enforcement point for everything that leaves a sandbox: outgoing HTTP and outgoing A2A
 * messages. A capsule host has no network; it asks, and this decides against `network.allow`
 * (§1.5.1) and, only if allowed, makes the request itself. A refused request never produces a
 * connection. Redirects are not followed here — a redirect to a host the capsule may not reach is
 * handed back to the guest as a response, never chased on its behalf. A name is reached only where
 * it resolves to public addresses, and connected to the address that was checked
 * (`egress-address.ts`): what a rule allows is a host, not whatever its DNS says today.
 */

/** The most a response body may hold: a relay that reaches it ends the body with `HTTP-response-body-size`. */
export const RESPONSE_LIMIT_BYTES = 64 * 1024 * 1024;
/**
 * How long a request may wait for its response's head, and then its body for each next piece: a
 * server's silence, not a reply's length (which the guest call's deadline bounds).
 */
export const REQUEST_TIMEOUT_MS = 60_000;
/** Hop-by-hop and connection-bound headers: meaningless across the relay, and refused by WASI Fields. */
const DROPPED_HEADERS = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'host',
  'upgrade',
  'te',
  'trailer',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
]);

/**
 * A guest's `content-length` is not sent as it gave it: the relay sends the body it holds, and
 * says that body's length itself. A response's is passed on (as wasmtime does): it is what the
 * server said of the body the guest is about to read, and what a guest sizes a buffer or a
 * progress bar by; the relay holds the body to `RESPONSE_LIMIT_BYTES` whatever it says.
 */
const DROPPED_REQUEST_HEADERS = new Set([...DROPPED_HEADERS, 'content-length']);

/**
 * An allowed request's response as soon as its head arrived, its body still arriving (it is
 * read, within `RESPONSE_LIMIT_BYTES` and the request's timeout, by `ResponseRelays`); or the
 * WASI error code that refused or failed the request.
 */
export type EgressOpened =
  | { outcome: 'response'; status: number; headers: Array<[string, string]>; body: ReadableStream<Uint8Array> | null }
  /** `failed`: the policy allowed it, and the connection or the exchange failed (traced as such, never as a refusal). */
  | { outcome: 'denied'; code: string; reason: string; failed?: true };

/** The port a request target goes to: its own, or its scheme's. */
function portOf(target: { scheme: string; port?: number | undefined }): number {
  return target.port ?? (target.scheme === 'https' ? 443 : 80);
}

/** The rules each grant holder (the capsule, each tool) is judged by. */
export class EgressPolicy {
  private readonly ceiling: NetworkAllowRule[];
  private readonly tools = new Map<string, NetworkAllowRule[]>();
  /** How every allowed connection finds its address: vetted (`egress-address.ts`); reached through `lookupTo`. */
  private readonly lookup: net.LookupFunction;
  /** This session's HTTP connections, kept alive between its requests. */
  private readonly connections: EgressConnections;

  /** The runtime's own endpoints, refused whatever the rules say. */
  private readonly own: OwnEndpoints;

  constructor(
    plan: Pick<StagedPlan, 'policy' | 'artifacts'>,
    options: { privateHosts?: (host: string) => boolean; resolve?: Resolve; own?: OwnEndpoints } = {},
  ) {
    this.own = options.own ?? OwnEndpoints.none;
    this.lookup = vettedLookup(options.privateHosts ?? privateHostsSetting(process.env), options.resolve);
    this.connections = new EgressConnections((port) => this.lookupTo(port));
    this.ceiling = parseNetworkAllowRules(plan.policy.network_allow);
    // The entries dropped here were said at staging (`W-SEC-007`, `artifactGrantWarnings`).
    for (const artifact of plan.artifacts) {
      const rules = artifactNetworkRules(this.ceiling, artifact);
      if (rules) this.tools.set(artifact.name, rules.kept);
    }
  }

  /**
   * The vetted lookup for a connection to `port`: a name that resolves to the bus this runtime runs
   * on is refused there too (a name the operator lets resolve privately could lead to it; an
   * address as written is refused by the judges, and a connection to one looks nothing up).
   */
  lookupTo(port: number): net.LookupFunction {
    if (this.own.empty) return this.lookup;
    return (hostname, options, callback) => {
      const answer = callback as unknown as (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
      this.lookup(hostname, options, ((error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => {
        const addresses = typeof address === 'string' ? [address] : (address ?? []).map((entry) => entry.address);
        const refused = (error ? [] : addresses)
          .map((candidate) => ({ candidate, reason: this.ownEndpointRefusal(candidate, port, `${hostname} (${candidate})`) }))
          .find((entry) => entry.reason !== undefined);
        if (refused?.reason === undefined) return answer(error, address, family);
        answer(new ProhibitedAddress(hostname, refused.candidate, refused.reason) as unknown as NodeJS.ErrnoException, '', 0);
      }) as unknown as Parameters<net.LookupFunction>[2]);
    };
  }

  /** Why `host:port` may not be reached (the runtime's own, `own-endpoints.ts`), said as `shown`; undefined when it may. */
  private ownEndpointRefusal(host: string, port: number, shown = host): string | undefined {
    const what = this.own.covers(host, port);
    return what && `network policy: '${shown}:${port}' is ${what}, which no capsule may reach whatever capabilities.network.allow says`;
  }

  /** `lookupTo` for the port an http(s) URL goes to (a collector's), or for 443 when there is none. */
  lookupToUrl(url: string | undefined): net.LookupFunction {
    const target = url === undefined ? undefined : requestTargetOf(url);
    return this.lookupTo(target ? portOf(target) : 443);
  }

  /** The session has ended: its kept connections close. */
  close(): void {
    this.connections.close();
  }

  rulesFor(grant: string): NetworkAllowRule[] {
    if (grant.startsWith('tool:')) return this.tools.get(grant.slice(5)) ?? this.ceiling;
    // A hook reaches only what its own entry allows: the capsule's rules are not its to inherit (upstream's rule).
    if (grant.startsWith('hook:')) return this.tools.get(grant.slice(5)) ?? [];
    return this.ceiling;
  }

  describe(grant: string): string {
    const rules = this.rulesFor(grant);
    return rules.length === 0 ? 'nothing' : rules.map(formatRule).join(', ');
  }

  /**
   * Whether a request to `url` may go under `grant`, decided from the URL alone: what
   * `outgoing-handler.handle` answers before the guest writes a body, and what `http` checks again.
   */
  judgeHttp(url: string, grant: string): { allowed: true; rule: string } | { allowed: false; code: string; reason: string } {
    const target = requestTargetOf(url);
    if (!target) return { allowed: false, code: 'HTTP-request-URI-invalid', reason: `'${url}' is not an http(s) URL` };
    const rule = this.rulesFor(grant).find((candidate) => ruleMatches(candidate, target));
    if (!rule) {
      // An artifact judged by its own entry's rules is told those, not the capsule's it may not have.
      const own = grant.startsWith('hook:') || (grant.startsWith('tool:') && this.tools.has(grant.slice(5)));
      const whose = own ? `${grant}'s network.allow (${this.describe(grant)})` : 'capabilities.network.allow';
      return { allowed: false, code: 'HTTP-request-denied', reason: `network policy: '${target.host}:${target.port ?? ''}' not in ${whose}` };
    }
    // After the rules: a capsule no rule lets near the bus learns nothing of where the bus is.
    const own = this.ownEndpointRefusal(target.host, portOf(target));
    if (own) return { allowed: false, code: 'destination-IP-prohibited', reason: own };
    return { allowed: true, rule: formatRule(rule) };
  }

  /** The rule that admits `url` under `grant`, as the manifest wrote it (what a decision is counted under), or undefined. */
  ruleForHttp(url: string, grant: string): string | undefined {
    const verdict = this.judgeHttp(url, grant);
    return verdict.allowed ? verdict.rule : undefined;
  }

  /**
   * A TCP connection a sealed sandbox's process made to `host:port` (the destination its listener
   * stands for). Bytes carry no scheme, so a URL rule admits its host and port, whatever is spoken
   * over them: the same host and port the rule already lets `wasi:http` reach.
   */
  judgeTcp(host: string, port: number): { allowed: true; rule: string } | { allowed: false; reason: string } {
    // A URL rule always has its port (written, or its scheme's default); a host rule without one admits any.
    const admitted = this.ceiling.find((rule) => rule.host === host.toLowerCase() && (rule.port === undefined || rule.port === port));
    if (!admitted) return { allowed: false, reason: `network policy: '${host}:${port}' not in capabilities.network.allow` };
    const own = this.ownEndpointRefusal(host, port);
    if (own) return { allowed: false, reason: own };
    return { allowed: true, rule: formatRule(admitted) };
  }

  /**
   * Judges and, if allowed, makes one HTTP request, answering once its head arrived. The timeout
   * covers the body too: its signal aborts a read still going when it fires.
   */
  async http(request: HttpRequest, uploads: RequestUploads): Promise<EgressOpened> {
    const verdict = this.judgeHttp(request.url, request.grant);
    // A body sent ahead is let go whatever happens next: it was for this request alone. It counts
    // against the session's bytes until the request is answered (`RequestUploads.send`).
    const uploaded = request.upload === undefined ? undefined : uploads.send(request.upload);
    let release = uploaded && 'release' in uploaded ? uploaded.release : () => {};
    let response: Awaited<ReturnType<typeof egressRequest>>;
    // Once a request is made, its body counts until it is written out or the request is gone, not
    // until its answer: a server that answers first and never reads held bodies no limit counted.
    let releasedWhenSent = false;
    try {
      if (!verdict.allowed) return { outcome: 'denied', code: verdict.code, reason: verdict.reason };
      // A CONNECT asks the server for a tunnel: what would pass through it is past every judgment
      // here, and node answers it with no response at all (the request waited out its timeout).
      if (request.method.toUpperCase() === 'CONNECT')
        return {
          outcome: 'denied',
          code: 'HTTP-request-method-invalid',
          reason: 'CONNECT asks for a tunnel, and what passes through a tunnel is past the egress policy',
        };
      if (request.oversized_bytes !== undefined)
        return {
          outcome: 'denied',
          code: 'HTTP-request-body-size',
          reason: `the request body is ${request.oversized_bytes} bytes, more than the ${REQUEST_BODY_LIMIT_BYTES} a request may carry`,
        };
      if (uploaded && 'refused' in uploaded) return { outcome: 'denied', code: 'internal-error', reason: uploaded.refused };
      const headers = request.headers.filter(([name]) => !DROPPED_REQUEST_HEADERS.has(name.toLowerCase()));
      const sent = uploaded?.body ?? (request.body_base64 === undefined ? undefined : Buffer.from(request.body_base64, 'base64'));
      // Any method may carry a body (a search API's GET does), and a guest that wrote one meant it
      // sent, as wasmtime sends it. An empty one on a GET or a HEAD is no body: a guest's fetch
      // opens one for every request, and `content-length: 0` on a GET is refused by some servers.
      const body = sent !== undefined && (sent.length > 0 || (request.method !== 'GET' && request.method !== 'HEAD')) ? sent : undefined;
      if (body && !uploaded) {
        const inline = uploads.sendInline(body.length);
        if ('refused' in inline) return { outcome: 'denied', code: 'HTTP-request-body-size', reason: inline.refused };
        release = inline.release;
      }
      if (body) headers.push(['content-length', String(body.length)]);
      // Until the head arrives; the body's pieces are timed by their relay.
      const unanswered = new AbortController();
      const timer = setTimeout(() => unanswered.abort(new DOMException('the request timed out', 'TimeoutError')), REQUEST_TIMEOUT_MS);
      try {
        response = await egressRequest(request.url, {
          method: request.method,
          headers,
          body,
          signal: unanswered.signal,
          connections: this.connections,
        });
      } catch (error) {
        // An address the lookup refused is the policy's refusal; anything else, the network's failure.
        return { outcome: 'denied', ...transportError(error), ...(error instanceof ProhibitedAddress ? {} : { failed: true as const }) };
      } finally {
        clearTimeout(timer);
      }
      void response.sent.then(release);
      releasedWhenSent = true;
    } finally {
      if (!releasedWhenSent) release();
    }
    const declared = Number(response.headers.find(([name]) => name === 'content-length')?.[1] ?? Number.NaN);
    // A response with no body (HEAD, 204, 304) may declare the size of the one it stands for.
    if (response.body !== null && declared > RESPONSE_LIMIT_BYTES) {
      response.body?.cancel().catch(() => {});
      return { outcome: 'denied', code: 'HTTP-response-body-size', reason: `the response is larger than ${RESPONSE_LIMIT_BYTES} bytes` };
    }
    const responseHeaders = response.headers.filter(([name]) => !DROPPED_HEADERS.has(name));
    return { outcome: 'response', status: response.status, headers: responseHeaders, body: response.body };
  }

  /**
   * `murmur:message/send`: an A2A `message/send` to a peer, judged by the capsule's rules first.
   * Returns the peer's task, or the error string the guest receives.
   */
  async send(
    peerUrl: string,
    message: { message_id: string; context_id?: string | undefined; text: string },
    /** The sending session's span: the peer continues its trace (what `a2a_send.traceparent` records). */
    traceparent?: string,
  ): Promise<PeerSendResult> {
    const url = peerRequestUrl(peerUrl);
    const target = requestTargetOf(url);
    if (!target) return { ok: false, error: `invalid peer URL '${peerUrl}'` };
    if (!anyRuleMatches(this.ceiling, target)) return { ok: false, error: `network policy: '${peerUrl}' not in capabilities.network.allow`, denied: true };
    const own = this.ownEndpointRefusal(target.host, portOf(target));
    if (own) return { ok: false, error: own, denied: true };
    const body = {
      jsonrpc: '2.0',
      id: newRequestId(),
      method: 'message/send',
      params: {
        message: {
          messageId: message.message_id,
          ...(message.context_id ? { contextId: message.context_id } : {}),
          role: 'user',
          parts: [{ kind: 'text', text: message.text }],
        },
      },
    };
    let reply: { result?: { id?: string; contextId?: string; status?: { state?: string } }; error?: { message?: string } };
    try {
      const payload = Buffer.from(JSON.stringify(body));
      const response = await egressRequest(url, {
        method: 'POST',
        headers: [
          ['content-type', 'application/json'],
          ['content-length', String(payload.length)],
          ...(traceparent ? [['traceparent', traceparent] as [string, string]] : []),
        ],
        body: payload,
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        connections: this.connections,
      });
      const text = await readCapped(response.body, SEND_REPLY_LIMIT_BYTES);
      const unreadable = peerAnswerRefusal(peerUrl, response.status, response.headers, text);
      if (unreadable !== undefined) return { ok: false, error: unreadable };
      reply = JSON.parse(text) as typeof reply;
    } catch (error) {
      // An address the lookup refused (the runtime's own, or one no capsule may reach) is the
      // policy's refusal, as it is for `wasi:http`: nothing was connected to.
      return {
        ok: false,
        error: `failed to send to '${peerUrl}': ${transportError(error).reason}`,
        ...(error instanceof ProhibitedAddress ? { denied: true as const } : {}),
      };
    }
    if (reply.error) return { ok: false, error: `the peer refused the message: ${reply.error.message ?? 'error'}` };
    const task = reply.result;
    if (!task?.id || !task.contextId || !task.status?.state) return { ok: false, error: `the peer at '${peerUrl}' answered without a task` };
    return { ok: true, value: { task_id: task.id, context_id: task.contextId, state: task.status.state, traceparent: traceparent ?? null } };
  }
}

/**
 * What `send` comes to: the peer's task, or the error string the guest receives; `denied` when the
 * network policy refused it (recorded as a denial, where a peer that failed is recorded as failed).
 */
export type PeerSendResult =
  | { ok: true; value: { task_id: string; context_id: string; state: string; traceparent: string | null } }
  | { ok: false; error: string; denied?: true };

/**
 * Why a peer's answer to `message/send` is no JSON-RPC reply, in words the model can act on: the
 * status it answered with (a redirect says where it led, as it is not followed), or that its body
 * is not JSON. Undefined when it can be read as a reply (a JSON-RPC error rides on any status).
 */
function peerAnswerRefusal(peerUrl: string, status: number, headers: ReadonlyArray<[string, string]>, text: string): string | undefined {
  let json = true;
  try {
    JSON.parse(text);
  } catch {
    json = false;
  }
  if (json) return undefined;
  if (status >= 300 && status < 400) {
    const location = headers.find(([name]) => name === 'location')?.[1];
    return `the peer at '${peerUrl}' answered HTTP ${status}${location ? ` to ${location.slice(0, 200)}` : ''}, a redirect, which is not followed: send to the URL it names, if the capsule's rules allow it`;
  }
  if (status < 200 || status >= 300) return `the peer at '${peerUrl}' answered HTTP ${status} with no JSON-RPC reply: is it an A2A agent's URL?`;
  return `the peer at '${peerUrl}' answered HTTP ${status} with a body that is not JSON: is it an A2A agent's URL?`;
}

/** The URL a peer is reached at: a peer named without a scheme (`host:port`, as the spec writes them) is spoken to over http. */
export function peerRequestUrl(peerUrl: string): string {
  return peerUrl.includes('://') ? peerUrl : `http://${peerUrl}`;
}

/** The most a peer's answer to `message/send` may hold: a task, not a payload. */
const SEND_REPLY_LIMIT_BYTES = 1024 * 1024;

/** A body's text, refused (the rest not read) past `limit` bytes: a peer's answer is read whole, so it is bounded. */
async function readCapped(body: ReadableStream<Uint8Array> | null, limit: number): Promise<string> {
  if (!body) return '';
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      throw new Error(`the peer's answer is larger than ${limit} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The WASI error code (and the reason the trace records) of a failed request or body read. */
export function transportError(error: unknown): { code: string; reason: string } {
  if (error instanceof ProhibitedAddress) return { code: error.code, reason: error.message };
  const cause = (error as { cause?: { code?: unknown; name?: string; message?: string } }).cause;
  // An abort's cause is a DOMException, whose `code` is a number (23): its name says what it is.
  const causeCode = typeof cause?.code === 'string' ? cause.code : cause?.name === 'TimeoutError' || cause?.name === 'AbortError' ? cause.name : undefined;
  const ownCode = (error as { code?: unknown }).code;
  const code = causeCode ?? (typeof ownCode === 'string' ? ownCode : undefined) ?? (error as { name?: string }).name;
  switch (code) {
    case 'ECONNREFUSED':
      return { code: 'connection-refused', reason: 'connection refused' };
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return { code: 'DNS-error', reason: 'the host name did not resolve' };
    case 'TimeoutError':
    case 'AbortError':
    case 'ABORT_ERR':
    case 'UND_ERR_CONNECT_TIMEOUT':
      return { code: 'connection-timeout', reason: 'the request timed out' };
    case 'ECONNRESET':
      return { code: 'connection-terminated', reason: 'the connection was reset' };
    default:
      return { code: 'internal-error', reason: cause?.message ?? (error instanceof Error ? error.message : String(error)) };
  }
}
