import { types as shimHttpTypes } from '@bytecodealliance/preview2-shim/http';
import { describe, expect, it } from 'vitest';
import type { BodyCalls } from '../src/host/relayed-body.js';
import { type RelayedRequest, relayedHttp } from '../src/host/wasi-http.js';

/**
 * A guest's outgoing request as `wasi:http` has it built, up to where it crosses to the executor:
 * what the guest's calls answer, and what the executor would be asked to send (`send` records it).
 */
describe("a guest's outgoing request", () => {
  const encoder = new TextEncoder();
  const Fields = shimHttpTypes.Fields as unknown as { fromList(entries: Array<[string, Uint8Array]>): unknown };

  function http() {
    const sent: RelayedRequest[] = [];
    const { types, outgoingHandler } = relayedHttp(
      (request) => {
        sent.push(request);
        return { outcome: 'response', status: 200, headers: [], body: 1 };
      },
      () => undefined,
      { release: () => {} } as unknown as BodyCalls,
    );
    type Body = { write(): { blockingWriteAndFlush(bytes: Uint8Array): void }; [Symbol.dispose](): void };
    type Request = {
      setAuthority(authority: string): void;
      setPathWithQuery(path: string): void;
      setMethod(method: { tag: string; val?: string }): void;
      body(): Body;
    };
    const { OutgoingRequest, OutgoingBody } = types as {
      OutgoingRequest: new (headers: unknown) => Request;
      OutgoingBody: { finish(body: Body, trailers?: unknown): void };
    };
    const request = (headers: Array<[string, string]> = []): Request => {
      const made = new OutgoingRequest(Fields.fromList(headers.map(([name, value]) => [name, encoder.encode(value)])));
      made.setAuthority('127.0.0.1:9');
      made.setPathWithQuery('/p');
      made.setMethod({ tag: 'post' });
      return made;
    };
    const handle = outgoingHandler.handle as (
      request: Request,
      options: unknown,
    ) => { subscribe(): unknown; get(): { tag: string; val: { tag: string; val?: unknown } } };
    return { sent, request, finish: OutgoingBody.finish, handle };
  }

  it('is not sent cut short: a body dropped or waited on before it was finished is an error, and what is written after the wait is refused', () => {
    const { sent, request, handle } = http();
    const dropped = request();
    const body = dropped.body();
    body.write().blockingWriteAndFlush(encoder.encode('HALF'));
    body[Symbol.dispose]();
    expect(handle(dropped, undefined).get().val).toMatchObject({
      tag: 'err',
      val: { tag: 'internal-error', val: expect.stringContaining('was not finished') },
    });

    const early = request();
    const stream = early.body().write();
    stream.blockingWriteAndFlush(encoder.encode('EARLY'));
    const future = handle(early, undefined);
    future.subscribe();
    expect(() => stream.blockingWriteAndFlush(encoder.encode('LATE'))).toThrow(expect.objectContaining({ tag: 'closed' }));
    expect(future.get().val).toMatchObject({ tag: 'err' });
    expect(sent).toEqual([]);
  });

  it('is held to the content-length it declares when its body is finished, and sends a whole body as written', () => {
    const { sent, request, finish, handle } = http();
    const declared = request([['content-length', '100']]);
    const short = declared.body();
    short.write().blockingWriteAndFlush(encoder.encode('short'));
    expect(() => finish(short)).toThrow(expect.objectContaining({ tag: 'HTTP-request-body-size', val: 5n }));

    const whole = request([['content-length', '5']]);
    const body = whole.body();
    body.write().blockingWriteAndFlush(encoder.encode('whole'));
    finish(body);
    expect(handle(whole, undefined).get().val).toMatchObject({ tag: 'ok' });
    expect(sent).toHaveLength(1);
    expect(Buffer.from(sent[0]?.body ?? []).toString()).toBe('whole');
  });

  it('refuses a method that is no HTTP token and a path that is no request target, and sends its own method as it was given', () => {
    const { sent, request, finish, handle } = http();
    const made = request();
    expect(() => made.setMethod({ tag: 'other', val: 'GET /x HTTP/1.1\r\nX-Injected: 1\r\n' })).toThrow();
    expect(() => made.setPathWithQuery('/p\r\nX-Injected: 2')).toThrow();
    expect(() => made.setPathWithQuery('/with space')).toThrow();
    made.setMethod({ tag: 'other', val: 'purgeCache' });
    finish(made.body());
    handle(made, undefined).get();
    expect(sent[0]).toMatchObject({ method: 'purgeCache', url: 'https://127.0.0.1:9/p' });
  });
});
