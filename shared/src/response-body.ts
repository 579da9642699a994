import { type ErrorCode, MurmurError } from './errors.js';
import { fetchFailureReason } from './fetch-failure.js';

/** The most of an artifact index read (roost's, or one `mur search` fetches): an answer of a server. */
export const INDEX_CEILING_BYTES = 16 * 1024 * 1024;

/**
 * A response's body read with a ceiling: a server's answer is a stranger's, and read whole it can
 * be as large as that server likes. Past `limit` (declared or as it comes) the read stops and is
 * refused with `code`, naming `what`. A body that breaks off (the connection closed, the request's
 * time ran out) is refused with `brokenCode`, naming `what` and how far it came, where undici's
 * bare `TypeError: terminated` reached the user as a bug with its stack.
 */
export async function readBodyCapped(
  response: Response,
  limit: number,
  what: string,
  code: ErrorCode = 'E-ART-002',
  brokenCode: ErrorCode = code,
): Promise<Buffer> {
  const declared = Number(response.headers.get('content-length') ?? '0');
  if (declared > limit) {
    await response.body?.cancel().catch(() => undefined);
    throw new MurmurError(code, `${what} is ${declared} bytes, over the ${limit}-byte ceiling`);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (response.body) {
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        total += chunk.byteLength;
        if (total > limit) throw new MurmurError(code, `${what} exceeds the ${limit}-byte ceiling`);
        chunks.push(chunk);
      }
    } catch (error) {
      if (error instanceof MurmurError) throw error;
      throw new MurmurError(brokenCode, `${what} broke off after ${total} bytes: ${fetchFailureReason(error)}`, {
        hint: 'the server stopped sending before the end of its answer; try again, and check the server if it happens again',
        cause: error,
      });
    }
  }
  return Buffer.concat(chunks, total);
}

/** The first `limit` bytes of a body, as text, the rest left unread: what an error's body is shown as. */
export async function readBodyPrefix(response: Response, limit: number): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    while (total < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      total += value.byteLength;
    }
  } catch {
    // A body that broke off is shown as far as it came.
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks).subarray(0, limit).toString('utf8');
}
