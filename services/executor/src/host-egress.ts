import { type EgressPolicy, REQUEST_TIMEOUT_MS, RESPONSE_LIMIT_BYTES, peerRequestUrl, transportError } from './egress.js';
import type { EgressRecords } from './egress-records.js';
import type { HostRequest } from './host/protocol.js';
import { RequestUploads } from './request-uploads.js';
import { ResponseRelays } from './response-relay.js';

/** Response bodies one session may hold open at once (each is a connection of the executor's). */
const MAX_OPEN_RESPONSE_BODIES = 64;

/** The host's requests to leave the sandbox: `wasi:http`'s (a request, its body's pieces, its response's) and an A2A send. */
export type EgressRequest = Extract<HostRequest, { op: `http${string}` | 'send' }>;

export function isEgressRequest(request: HostRequest): request is EgressRequest {
  return request.op.startsWith('http') || request.op === 'send';
}

/**
 * One session's way out, as its host asks for it: each request judged by the session's egress
 * policy, made by the executor (the sandbox itself reaches nothing), and recorded allowed or not.
 * An allowed response's head goes back at once and its body piece by piece as the host reads it;
 * a request body larger than one message comes ahead of its request, in pieces.
 */
export class HostEgress {
  /** Allowed responses whose bodies the host is still reading. */
  private readonly responseBodies = new ResponseRelays(RESPONSE_LIMIT_BYTES, transportError, MAX_OPEN_RESPONSE_BODIES, REQUEST_TIMEOUT_MS);
  /** Requests made and not yet answered with a head: they count against `MAX_OPEN_RESPONSE_BODIES` too. */
  private awaitedResponses = 0;
  /** Request bodies sent ahead of their requests, in pieces (`http-upload`). */
  private readonly requestUploads = new RequestUploads();

  constructor(
    private readonly options: {
      /** The session's policy, once its launch has made it. */
      policy(): EgressPolicy;
      records: EgressRecords;
      /** The session's trace context, when it exports spans: an A2A peer continues it. */
      traceparent(): string | undefined;
    },
  ) {}

  /** Answers one of the host's requests to leave (its reply's value); a refusal is a value, as the guest reads it. */
  async answer(request: EgressRequest): Promise<unknown> {
    const { records } = this.options;
    const startedAt = Date.now();
    switch (request.op) {
      case 'http': {
        const full = this.responseBodies.refusal(this.awaitedResponses);
        if (full !== undefined) {
          // Refused before it connects, not after it holds one more of the executor's sockets.
          if (request.request.upload !== undefined) this.requestUploads.take(request.request.upload);
          records.request('http', request.request.grant, request.request.url, { decision: 'denied', code: 'internal-error', reason: full });
          return { outcome: 'denied', code: 'internal-error', reason: full };
        }
        const policy = this.options.policy();
        this.awaitedResponses += 1;
        let result: Awaited<ReturnType<EgressPolicy['http']>>;
        try {
          result = await policy.http(request.request, this.requestUploads);
        } finally {
          this.awaitedResponses -= 1;
        }
        records.request(
          'http',
          request.request.grant,
          request.request.url,
          result.outcome === 'response'
            ? { decision: 'allowed', status: result.status }
            : { decision: result.failed ? 'failed' : 'denied', code: result.code, reason: result.reason },
          policy.ruleForHttp(request.request.url, request.request.grant),
          startedAt,
        );
        // The head goes back now; the body follows as the host asks for it (`http-body`).
        return result.outcome === 'response'
          ? { outcome: 'response', response: { status: result.status, headers: result.headers, body: this.responseBodies.hold(result.body) } }
          : { outcome: 'denied', code: result.code, reason: result.reason };
      }
      case 'http-upload':
        this.requestUploads.add(request.upload, request.chunk_base64);
        return null;
      case 'http-upload-release':
        this.requestUploads.take(request.upload);
        return null;
      case 'http-body':
        return this.responseBodies.next(request.body);
      case 'http-body-release':
        this.responseBodies.release(request.body);
        return null;
      case 'http-check': {
        const verdict = this.options.policy().judgeHttp(request.request.url, request.request.grant);
        // A refusal at `handle` is the request's only decision: it is recorded now, and never relayed.
        if (!verdict.allowed)
          records.request('http', request.request.grant, request.request.url, {
            decision: 'denied',
            code: verdict.code,
            reason: verdict.reason,
            at: 'handle',
          });
        return verdict;
      }
      case 'send': {
        const policy = this.options.policy();
        const result = await policy.send(request.request.peer_url, request.request, this.options.traceparent());
        records.request(
          'a2a',
          'capsule',
          request.request.peer_url,
          result.ok ? { decision: 'allowed', state: result.value.state } : { decision: result.denied ? 'denied' : 'failed', reason: result.error },
          policy.ruleForHttp(peerRequestUrl(request.request.peer_url), 'capsule'),
          startedAt,
        );
        return result.ok ? result : { ok: false, error: result.error };
      }
    }
  }

  /** Lets go of every held body and upload: the session has ended. */
  releaseAll(): void {
    this.responseBodies.releaseAll();
    this.requestUploads.clear();
  }
}
