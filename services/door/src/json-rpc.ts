import { type JsonRpcId, JsonRpcIdSchema, JsonRpcRequestSchema, RPC_ERRORS, type RpcError } from '@murmur/shared';

/**
 * JSON-RPC 2.0 envelopes: reading one request out of a body, and writing results and errors.
 * A body that is not JSON is -32700; JSON that is not one request object (a batch, a missing
 * `jsonrpc` or `method`, an id that is not a string, number or null) is -32600 — answered with the
 * request's id when it had a usable one; params that are not an object (A2A names every
 * parameter) are -32602. Ids are the client's business: two requests with the same id are each
 * answered.
 *
 * **Decided:** a request without an `id` (a JSON-RPC notification) is -32600 too, and not run.
 * Every A2A method answers and A2A's requests all carry an id; run, a notification's send would
 * start a task whose id its client never learns, and answered, its reply (id null) could not be
 * told from a refusal whose id could not be read.
 */

export interface JsonRpcCall {
  id: JsonRpcId;
  method: string;
  params: unknown;
}

export function rpcResult(id: JsonRpcId, result: unknown): Record<string, unknown> {
  return { jsonrpc: '2.0', id, result };
}

/**
 * An error as both generations take it. 1.0 wants `data` to be an array of typed details (ProtoJSON
 * `Any`, each with its `@type`), an A2A error named by a `google.rpc.ErrorInfo` (`reason`, domain
 * `a2a-protocol.org`); 0.3 takes any `data`, so one shape serves both. Murmur's own code, where the
 * error has one, is that ErrorInfo's `murmur_code`, or an ErrorInfo of its own in the `murmur` domain.
 */
export function rpcError(id: JsonRpcId, error: RpcError): Record<string, unknown> {
  const details = errorDetails(error);
  return { jsonrpc: '2.0', id, error: { code: error.code, message: error.message, ...(details.length > 0 ? { data: details } : {}) } };
}

const ERROR_INFO = 'type.googleapis.com/google.rpc.ErrorInfo';

/** Each A2A-specific code's error type, as 1.0's ErrorInfo names it: UPPER_SNAKE_CASE, without "Error". */
const A2A_REASONS: Readonly<Record<number, string>> = {
  [-32001]: 'TASK_NOT_FOUND',
  [-32002]: 'TASK_NOT_CANCELABLE',
  [-32003]: 'PUSH_NOTIFICATION_NOT_SUPPORTED',
  [-32004]: 'UNSUPPORTED_OPERATION',
  [-32005]: 'CONTENT_TYPE_NOT_SUPPORTED',
  [-32006]: 'INVALID_AGENT_RESPONSE',
  [-32007]: 'EXTENDED_AGENT_CARD_NOT_CONFIGURED',
  [-32008]: 'EXTENSION_SUPPORT_REQUIRED',
  [-32009]: 'VERSION_NOT_SUPPORTED',
};

function errorDetails(error: RpcError): Array<Record<string, unknown>> {
  // ErrorInfo's metadata is a map of strings: what the error carried that is one.
  const metadata =
    error.data !== null && typeof error.data === 'object' && !Array.isArray(error.data)
      ? Object.fromEntries(Object.entries(error.data).filter((entry): entry is [string, string] => typeof entry[1] === 'string'))
      : {};
  const withMetadata = Object.keys(metadata).length > 0 ? { metadata } : {};
  const reason = A2A_REASONS[error.code];
  if (reason !== undefined) return [{ '@type': ERROR_INFO, reason, domain: 'a2a-protocol.org', ...withMetadata }];
  const murmurCode = metadata.murmur_code;
  if (murmurCode !== undefined) return [{ '@type': ERROR_INFO, reason: murmurCode.replaceAll('-', '_'), domain: 'murmur', ...withMetadata }];
  return [];
}

/**
 * Whether a `Content-Type` names JSON: `application/json`, or a type with the `+json` suffix,
 * parameters aside. The media type is compared, not searched for: a browser sends
 * `text/plain;charset=application/json` from any page without asking first (a "simple" request,
 * no CORS preflight), and a substring test would take it for JSON.
 */
export function isJsonMediaType(contentType: string): boolean {
  const mediaType = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  return mediaType === 'application/json' || /^application\/[a-z0-9!#$&^_.+-]+\+json$/.test(mediaType);
}

export function readJsonRpc(body: string): { ok: true; call: JsonRpcCall } | { ok: false; response: Record<string, unknown> } {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return { ok: false, response: rpcError(null, { code: RPC_ERRORS.parse, message: 'Parse error: the body is not valid JSON' }) };
  }
  const parsed = JsonRpcRequestSchema.safeParse(value);
  if (!parsed.success) {
    const candidate =
      value !== null && typeof value === 'object' && !Array.isArray(value) ? JsonRpcIdSchema.safeParse((value as { id?: unknown }).id) : undefined;
    const id = candidate?.success ? candidate.data : null;
    return { ok: false, response: rpcError(id, { code: RPC_ERRORS.invalidRequest, message: `Invalid Request: ${whyInvalid(value)}` }) };
  }
  // JSON.parse keeps 53 bits of an integer: a larger id would be answered as another number, one
  // its client cannot match to its request.
  if (typeof parsed.data.id === 'number' && Number.isInteger(parsed.data.id) && !Number.isSafeInteger(parsed.data.id)) {
    return {
      ok: false,
      response: rpcError(null, {
        code: RPC_ERRORS.invalidRequest,
        message: 'Invalid Request: "id" is an integer beyond 2^53, which cannot be answered with the same number; send it as a string',
      }),
    };
  }
  if (parsed.data.id === undefined) {
    return {
      ok: false,
      response: rpcError(null, {
        code: RPC_ERRORS.invalidRequest,
        message: 'Invalid Request: the request has no "id" (a JSON-RPC notification, which gets no answer); every A2A method answers, so send one',
      }),
    };
  }
  const { params } = parsed.data;
  if (params !== undefined && (params === null || typeof params !== 'object' || Array.isArray(params))) {
    return {
      ok: false,
      response: rpcError(parsed.data.id, {
        code: RPC_ERRORS.invalidParams,
        message: `Invalid params: params must be an object of named parameters (got ${Array.isArray(params) ? 'an array' : params === null ? 'null' : typeof params})`,
      }),
    };
  }
  return { ok: true, call: { id: parsed.data.id, method: parsed.data.method, params: params ?? {} } };
}

/** What is wrong with a body that is JSON but not one request object, named as precisely as it can be. */
function whyInvalid(value: unknown): string {
  if (Array.isArray(value)) return 'batch requests are not supported';
  const request = value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : undefined;
  if (request && request.jsonrpc === '2.0' && typeof request.method === 'string' && request.method !== '' && 'id' in request) {
    const id = request.id;
    if (typeof id === 'string' && id.length > 256) return `"id" is a string of ${id.length} characters; at most 256 are read`;
    if (typeof id === 'number' && !Number.isFinite(id)) return '"id" is a number past what a double holds; send it as a string';
    if (typeof id !== 'string' && typeof id !== 'number' && id !== null)
      return `"id" must be a string, a number or null (got ${Array.isArray(id) ? 'an array' : typeof id})`;
  }
  if (request && typeof request.method === 'string' && request.method.length > 128)
    return `"method" is ${request.method.length} characters long; no method has more than 128`;
  return 'expected an object with "jsonrpc": "2.0" and a "method" string';
}

/** A zod failure as the one line a client can act on: where, and what was wrong. */
export function describeInvalidParams(issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>): string {
  const first = issues[0];
  if (!first) return 'Invalid params';
  const where = first.path.length > 0 ? first.path.map(String).join('.') : 'params';
  return `Invalid params: ${where}: ${first.message}`;
}
