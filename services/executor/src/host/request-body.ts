/**
 * How a guest's request body crosses from its capsule host to the executor, which makes the
 * request. Shared by both ends, and free of imports: the host loads it without the schema library.
 */

/**
 * The most a request body may hold. The guest's writes past it are counted, not kept, and the
 * request is refused with `HTTP-request-body-size` when the guest waits on its response: a
 * model's request, images included, is well within it, and what the host and the executor hold
 * of one request is bounded by it.
 */
export const REQUEST_BODY_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * The most of a body one message to the executor carries, in base64 characters (a multiple of 4,
 * so each piece decodes alone). A larger body goes ahead in `http-upload` pieces, so no message,
 * string or parse on the executor's side is large, whatever the body: the executor's event loop
 * serves every session, and one parse of a 90 MB line would stall them all.
 */
export const UPLOAD_PIECE_CHARS = 1024 * 1024;

/** A base64 body cut into pieces of at most `UPLOAD_PIECE_CHARS`, each decodable alone. */
export function uploadPieces(base64: string): string[] {
  const pieces: string[] = [];
  for (let offset = 0; offset < base64.length; offset += UPLOAD_PIECE_CHARS) pieces.push(base64.slice(offset, offset + UPLOAD_PIECE_CHARS));
  return pieces;
}
