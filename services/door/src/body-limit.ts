import type { Context, MiddlewareHandler } from 'hono';

/**
 * Reads a request body up to `maxBytes`, never holding more. A body over the limit is answered
 * with `refuse` once the client has finished sending — what arrives past the limit is read and
 * dropped, up to `drainBytes`, so an ordinary client gets the 413 instead of a broken pipe — and
 * the connection is closed after it. A client that keeps sending past `drainBytes` is cut off.
 */
export function limitBody(maxBytes: number, refuse: (context: Context) => Response, drainBytes = 16 * maxBytes): MiddlewareHandler {
  return async (context, next) => {
    const body = context.req.raw.body;
    if (!body) return next();
    const declared = Number(context.req.header('content-length'));
    const reader = body.getReader();
    const kept: Uint8Array[] = [];
    let size = 0;
    let over = Number.isFinite(declared) && declared > maxBytes;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > maxBytes) over = true;
      if (over) {
        if (size > drainBytes) {
          void reader.cancel();
          break;
        }
        continue;
      }
      kept.push(value);
    }
    if (over) {
      const response = refuse(context);
      response.headers.set('connection', 'close');
      return response;
    }
    const whole = new Uint8Array(size);
    let offset = 0;
    for (const chunk of kept) {
      whole.set(chunk, offset);
      offset += chunk.byteLength;
    }
    context.req.raw = new Request(context.req.raw, { body: whole });
    await next();
  };
}
