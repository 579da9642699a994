import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';

/**
 * Reads a request body up to `maxBytes`, never holding more. A body over the limit is answered
 * with `refuse` once the client has finished sending — what arrives past the limit is read and
 * dropped, up to `drainBytes`, so an ordinary client gets the 413 instead of a broken pipe — and
 * the connection is closed after it. A client that keeps sending past `drainBytes` is cut off; one
 * that declares so much (`Content-Length`) is answered at once, before any of it is read, so it
 * has the 413 to read rather than only a reset after the door has read `drainBytes` for nothing.
 *
 * Served by Node (`listenHttp`), the body is read from Node's own request stream, not through the
 * fetch `Request`'s web stream (which costs a door more than the rest of its JSON-RPC work), and
 * handed on by `keptBody`; elsewhere (`app.request` in a test) it is read from the `Request`.
 */
export function limitBody(maxBytes: number, refuse: (context: Context) => Response, drainBytes = 16 * maxBytes): MiddlewareHandler {
  return async (context, next) => {
    const incoming = (context.env as { incoming?: IncomingMessage } | undefined)?.incoming;
    const declared = Number(context.req.header('content-length'));
    if (Number.isFinite(declared) && declared > drainBytes) {
      const response = refuse(context);
      response.headers.set('connection', 'close');
      return response;
    }
    const read = incoming ? await readIncoming(incoming, maxBytes, drainBytes, declared) : await readRequest(context.req.raw, maxBytes, drainBytes, declared);
    if (read === 'none') return next();
    if (read === 'over') {
      const response = refuse(context);
      response.headers.set('connection', 'close');
      return response;
    }
    kept.set(context, read);
    await next();
  };
}

/** The bodies `limitBody` read, by the request they came with. */
const kept = new WeakMap<Context, Uint8Array>();

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The body `limitBody` read for this request, as text (the request's own, when it read none), or
 * undefined when it is not UTF-8: decoded leniently, each bad byte would become a three-byte
 * U+FFFD, and a body under the limit three times its size on its way on.
 */
export async function keptBody(context: Context): Promise<string | undefined> {
  const body = kept.get(context) ?? new Uint8Array(await context.req.arrayBuffer());
  try {
    return strictUtf8.decode(body);
  } catch {
    return undefined;
  }
}

/** A body its client stopped sending before it was whole: the client's doing, answered 400. */
export class BodyCutShort extends Error {}

/** Collects a limited body from its chunks: 'over' once past `maxBytes`, the bytes otherwise. */
class LimitedBody {
  private readonly parts: Uint8Array[] = [];
  private size = 0;
  over: boolean;

  constructor(
    private readonly maxBytes: number,
    private readonly drainBytes: number,
    declared: number,
  ) {
    this.over = Number.isFinite(declared) && declared > maxBytes;
  }

  /** Takes one chunk; false once more than `drainBytes` came and the rest must be cut off. */
  add(chunk: Uint8Array): boolean {
    this.size += chunk.byteLength;
    if (this.size > this.maxBytes) this.over = true;
    if (!this.over) this.parts.push(chunk);
    return !this.over || this.size <= this.drainBytes;
  }

  result(): Uint8Array | 'over' {
    if (this.over) return 'over';
    if (this.parts.length === 1) return this.parts[0] as Uint8Array;
    const whole = new Uint8Array(this.size);
    let offset = 0;
    for (const part of this.parts) {
      whole.set(part, offset);
      offset += part.byteLength;
    }
    return whole;
  }
}

async function readRequest(request: Request, maxBytes: number, drainBytes: number, declared: number): Promise<Uint8Array | 'over' | 'none'> {
  const body = request.body;
  if (!body) return 'none';
  const reader = body.getReader();
  const limited = new LimitedBody(maxBytes, drainBytes, declared);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (!limited.add(value)) {
      void reader.cancel();
      break;
    }
  }
  return limited.result();
}

/**
 * The same from Node's stream: a GET or HEAD has no body to read, as its `Request` would have
 * none; a body cut short (the client gone) fails as reading the `Request` would.
 */
function readIncoming(incoming: IncomingMessage, maxBytes: number, drainBytes: number, declared: number): Promise<Uint8Array | 'over' | 'none'> {
  if (incoming.method === 'GET' || incoming.method === 'HEAD') return Promise.resolve('none');
  const limited = new LimitedBody(maxBytes, drainBytes, declared);
  return new Promise((resolve, reject) => {
    const settle = (outcome: Error | undefined): void => {
      incoming.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      if (outcome) reject(outcome);
      else resolve(limited.result());
    };
    const onEnd = (): void => settle(undefined);
    const onClose = (): void => settle(new BodyCutShort('the request body ended before it was complete'));
    const onData = (chunk: Buffer): void => {
      if (limited.add(chunk)) return;
      incoming.destroy();
      settle(undefined);
    };
    const onError = (error: Error): void => settle(new BodyCutShort(`the request body broke off: ${error.message}`));
    incoming.on('data', onData).once('end', onEnd).once('error', onError).once('close', onClose);
  });
}
