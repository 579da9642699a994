import { types as shimHttpTypes } from '@bytecodealliance/preview2-shim/http';
import { type BodyCalls, RelayedBodyStream } from './relayed-body.js';
import { REQUEST_BODY_LIMIT_BYTES } from './request-body.js';
import { CLOSED, SinkOutputStream, readyPollable } from './streams.js';

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

/** RFC 9110's token: what a method may be. */
const HTTP_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A request target's characters: visible ASCII, no space (anything else is percent-encoded by whoever builds it). */
const REQUEST_TARGET = /^[\x21-\x7e]*$/;

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
  /** Its request was relayed: what is written after would be sent nowhere. */
  sent = false;

  /** `declaredLength`: the request's `content-length`, which `finish` holds the body to. */
  constructor(private readonly declaredLength: () => number | undefined) {}

  write(): SinkOutputStream {
    if (this.streamTaken) throw undefined;
    this.streamTaken = true;
    return new SinkOutputStream((bytes) => this.take(bytes));
  }

  private take(bytes: Uint8Array): void {
    // Said as the stream closed, never taken and dropped: the request went with what it had.
    if (this.sent) throw CLOSED;
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

  /**
   * The body is whole. A `content-length` it does not match fails here (WASI's contract), where
   * the host rewrote the header to what was written and sent a request the guest never declared.
   */
  static finish(body: OutgoingBody): void {
    const declared = body.declaredLength();
    if (declared !== undefined && declared !== body.written) throw { tag: 'HTTP-request-body-size', val: BigInt(body.written) };
    body.finished = true;
  }

  /** Taken and written to, and never finished: dropped part-way, or waited on before it was whole. */
  get unfinished(): boolean {
    return this.streamTaken && this.written > 0 && !this.finished;
  }

  [Symbol.dispose](): void {}
}

class OutgoingRequest {
  private methodValue: Variant = { tag: 'get' };
  private schemeValue: Variant | undefined;
  private pathValue: string | undefined;
  private authorityValue: string | undefined;
  private bodyTaken = false;
  readonly outgoingBody = new OutgoingBody(() => this.declaredLength());

  constructor(private readonly headerFields: ShimFields) {}

  private declaredLength(): number | undefined {
    const value = this.headerFields.entries().find(([name]) => name.toLowerCase() === 'content-length')?.[1];
    if (value === undefined) return undefined;
    const text = decoder.decode(value).trim();
    return /^\d+$/.test(text) ? Number(text) : undefined;
  }

  body(): OutgoingBody {
    if (this.bodyTaken) throw undefined;
    this.bodyTaken = true;
    return this.outgoingBody;
  }

  method(): Variant {
    return this.methodValue;
  }

  /** A method of its own must be an HTTP token: anything else (a space, a line break) is refused here, as WASI has it. */
  setMethod(method: Variant): void {
    if (method.tag === 'other' && !HTTP_TOKEN.test(String(method.val))) throw undefined;
    this.methodValue = method;
  }

  pathWithQuery(): string | undefined {
    return this.pathValue;
  }

  /** A path that is not one (a space, a control character: what a URL would quietly re-encode into another path) is refused. */
  setPathWithQuery(path: string | undefined): void {
    if (path !== undefined && !REQUEST_TARGET.test(path)) throw undefined;
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
    // A method of the guest's own is sent as it is: methods are case-sensitive.
    const method = this.methodValue.tag === 'other' ? String(this.methodValue.val) : this.methodValue.tag.toUpperCase();
    return {
      method,
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
        // A body is sent whole: one waited on before it was finished, or dropped part-way, would
        // go out cut short as if it were complete (WASI: a body dropped unfinished is an error).
        const body = request.outgoingBody;
        body.sent = true;
        if (body.unfinished)
          return {
            tag: 'err',
            val: {
              tag: 'internal-error',
              val: 'the request body was not finished (outgoing-body.finish) before its response was waited on: a body is sent whole, and this one would have gone cut short',
            },
          };
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
