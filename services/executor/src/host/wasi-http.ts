import { types as shimHttpTypes } from '@bytecodealliance/preview2-shim/http';
import { type BodyCalls, RelayedBodyStream } from './relayed-body.js';
import { REQUEST_BODY_LIMIT_BYTES } from './request-body.js';
import { SinkOutputStream, readyPollable } from './streams.js';

/**
 * `wasi:http/types` and `wasi:http/outgoing-handler` for a guest whose every request leaves
 * through the executor. A request is collected in memory (method, URL, headers, body) and, when
 * the guest first asks for its response, handed to `send` — which crosses to the executor, where
 * `network.allow` decides and, if it allows, the request is made. The sandboxed host process has
 * no network of its own; nothing here opens a socket.
 *
 * Streaming request bodies are sent whole once the guest waits on the response, up to
 * `REQUEST_BODY_LIMIT_BYTES` (past it, the request is refused with `HTTP-request-body-size`).
 * A response's head comes back as soon as the executor has it, and its body streams: the guest
 * reads each piece as it arrives (`RelayedBodyStream`), so a model's streamed reply is read while
 * it is written. A refusal is the WASI error code the executor chose (`HTTP-request-denied`),
 * thrown as a variant value rather than a string, so it lowers into the guest's error type.
 */

export interface RelayedRequest {
  method: string;
  url: string;
  headers: Array<[string, string]>;
  /** Empty when the guest wrote more than `REQUEST_BODY_LIMIT_BYTES`; `bodyBytes` says how much it wrote. */
  body: Uint8Array;
  bodyBytes: number;
}

export type RelayedOutcome =
  /** `body`: the id the host's main thread holds the arriving body by. */
  { outcome: 'response'; status: number; headers: Array<[string, string]>; body: number } | { outcome: 'error'; code: { tag: string; val?: unknown } };

type Variant = { tag: string; val?: unknown };

interface ShimFields {
  entries(): Array<[string, Uint8Array]>;
}

const Fields = shimHttpTypes.Fields as unknown as { fromList(entries: Array<[string, Uint8Array]>): ShimFields; new (): ShimFields };
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * A request body as the guest writes it: kept up to `REQUEST_BODY_LIMIT_BYTES`, and past that only
 * counted, so a guest that writes without end holds no more of the host's memory than the limit.
 * Its writes keep succeeding; the request is refused (`HTTP-request-body-size`) when it is made.
 */
class OutgoingBody {
  private readonly chunks: Uint8Array[] = [];
  private kept = 0;
  private streamTaken = false;
  /** Every byte the guest wrote, kept or not. */
  written = 0;
  finished = false;

  write(): SinkOutputStream {
    if (this.streamTaken) throw undefined;
    this.streamTaken = true;
    return new SinkOutputStream((bytes) => this.take(bytes));
  }

  private take(bytes: Uint8Array): void {
    this.written += bytes.byteLength;
    if (this.written > REQUEST_BODY_LIMIT_BYTES) {
      // Nothing of an oversized body will be sent: what was kept is let go at once.
      this.chunks.length = 0;
      this.kept = 0;
      return;
    }
    this.chunks.push(bytes);
    this.kept += bytes.byteLength;
  }

  bytes(): Uint8Array {
    return this.kept === 0 ? new Uint8Array() : Buffer.concat(this.chunks, this.kept);
  }

  static finish(body: OutgoingBody): void {
    body.finished = true;
  }

  [Symbol.dispose](): void {}
}

class OutgoingRequest {
  private methodValue: Variant = { tag: 'get' };
  private schemeValue: Variant | undefined;
  private pathValue: string | undefined;
  private authorityValue: string | undefined;
  private bodyTaken = false;
  readonly outgoingBody = new OutgoingBody();

  constructor(private readonly headerFields: ShimFields) {}

  body(): OutgoingBody {
    if (this.bodyTaken) throw undefined;
    this.bodyTaken = true;
    return this.outgoingBody;
  }

  method(): Variant {
    return this.methodValue;
  }

  setMethod(method: Variant): void {
    this.methodValue = method;
  }

  pathWithQuery(): string | undefined {
    return this.pathValue;
  }

  setPathWithQuery(path: string | undefined): void {
    this.pathValue = path;
  }

  scheme(): Variant | undefined {
    return this.schemeValue;
  }

  setScheme(scheme: Variant | undefined): void {
    this.schemeValue = scheme;
  }

  authority(): string | undefined {
    return this.authorityValue;
  }

  setAuthority(authority: string | undefined): void {
    this.authorityValue = authority;
  }

  headers(): ShimFields {
    return this.headerFields;
  }

  /** The request as the executor is asked to make it, or the WASI error for one that cannot be. */
  relayed(): RelayedRequest | Variant {
    if (!this.authorityValue) return { tag: 'HTTP-request-URI-invalid' };
    const scheme =
      this.schemeValue === undefined
        ? 'https'
        : this.schemeValue.tag === 'other'
          ? String(this.schemeValue.val).toLowerCase()
          : this.schemeValue.tag.toLowerCase();
    const method = this.methodValue.tag === 'other' ? String(this.methodValue.val) : this.methodValue.tag;
    return {
      method: method.toUpperCase(),
      url: `${scheme}://${this.authorityValue}${this.pathValue ?? '/'}`,
      headers: this.headerFields.entries().map(([name, value]) => [name, decoder.decode(value)]),
      body: this.outgoingBody.bytes(),
      bodyBytes: this.outgoingBody.written,
    };
  }

  [Symbol.dispose](): void {}
}

class IncomingBody {
  private streamTaken = false;

  constructor(
    private readonly calls: BodyCalls,
    private readonly body: number,
  ) {}

  stream(): RelayedBodyStream {
    if (this.streamTaken) throw undefined;
    this.streamTaken = true;
    return new RelayedBodyStream(this.calls, this.body);
  }

  static finish(_body: IncomingBody): FutureTrailers {
    return new FutureTrailers();
  }

  /** A body dropped unread is let go; once its stream is taken, the stream decides. */
  [Symbol.dispose](): void {
    if (!this.streamTaken) this.calls.release(this.body);
    this.streamTaken = true;
  }
}

class FutureTrailers {
  private taken = false;

  subscribe(): unknown {
    return readyPollable();
  }

  get(): Variant | undefined {
    if (this.taken) return { tag: 'err' };
    this.taken = true;
    return { tag: 'ok', val: { tag: 'ok', val: undefined } };
  }

  [Symbol.dispose](): void {}
}

class IncomingResponse {
  private bodyTaken = false;

  constructor(
    private readonly statusCode: number,
    private readonly headerFields: ShimFields,
    private readonly calls: BodyCalls,
    private readonly body: number,
  ) {}

  status(): number {
    return this.statusCode;
  }

  headers(): ShimFields {
    return this.headerFields;
  }

  consume(): IncomingBody {
    if (this.bodyTaken) throw undefined;
    this.bodyTaken = true;
    return new IncomingBody(this.calls, this.body);
  }

  /** A response dropped before its body was consumed lets the body go. */
  [Symbol.dispose](): void {
    if (!this.bodyTaken) this.calls.release(this.body);
    this.bodyTaken = true;
  }
}

class FutureIncomingResponse {
  private settled: Variant | undefined;
  private taken = false;

  constructor(private readonly perform: () => Variant) {}

  /** The request is made the first time the guest waits on or asks for the response. */
  private settle(): Variant {
    this.settled ??= this.perform();
    return this.settled;
  }

  subscribe(): unknown {
    this.settle();
    return readyPollable();
  }

  get(): Variant | undefined {
    const result = this.settle();
    if (this.taken) return { tag: 'err' };
    this.taken = true;
    return { tag: 'ok', val: result };
  }

  [Symbol.dispose](): void {}
}

/**
 * The two interfaces, with every request relayed through `send`. `check` is asked at `handle`
 * with the request's URL, before the guest writes a body: a request the policy refuses fails from
 * `handle` itself (`HTTP-request-denied`), as a guest that only calls `handle` expects; an allowed
 * one is relayed (and judged again) when the guest first waits on its response.
 */
export function relayedHttp(
  send: (request: RelayedRequest) => RelayedOutcome,
  check: (url: string) => { tag: string; val?: unknown } | undefined,
  bodies: BodyCalls,
): { types: Record<string, unknown>; outgoingHandler: Record<string, unknown> } {
  const types = {
    ...shimHttpTypes,
    OutgoingRequest,
    OutgoingBody,
    IncomingBody,
    IncomingResponse,
    FutureIncomingResponse,
    FutureTrailers,
  };
  const outgoingHandler = {
    handle(request: OutgoingRequest, _options: unknown): FutureIncomingResponse {
      if (!(request instanceof OutgoingRequest)) throw { tag: 'internal-error', val: 'not an outgoing request of this runtime' };
      const target = request.relayed();
      if ('tag' in target) throw target;
      const refusal = check(target.url);
      if (refusal) throw refusal;
      return new FutureIncomingResponse(() => {
        const relayed = request.relayed();
        if ('tag' in relayed) return { tag: 'err', val: relayed };
        const outcome = send(relayed);
        if (outcome.outcome === 'error') return { tag: 'err', val: outcome.code };
        const headers = Fields.fromList(outcome.headers.map(([name, value]) => [name, encoder.encode(value)]));
        return { tag: 'ok', val: new IncomingResponse(outcome.status, headers, bodies, outcome.body) };
      });
    },
  };
  return { types, outgoingHandler };
}
