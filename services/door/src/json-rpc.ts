import { type JsonRpcId, JsonRpcIdSchema, JsonRpcRequestSchema, RPC_ERRORS, type RpcError } from '@murmur/shared';

/**
 * JSON-RPC 2.0 envelopes: reading one request out of a body, and writing results and errors.
 * A body that is not JSON is -32700; JSON that is not one request object (a batch, a missing
 * `jsonrpc` or `method`, an id that is not a string, number or null) is -32600 — answered with the
 * request's id when it had a usable one; params that are not an object (A2A names every
 * parameter) are -32602. Ids are the client's business: two requests with the same id are each
 * answered.
 */

export interface JsonRpcCall {
  id: JsonRpcId;
  method: string;
  params: unknown;
}

export function rpcResult(id: JsonRpcId, result: unknown): Record<string, unknown> {
  return { jsonrpc: '2.0', id, result };
}

export function rpcError(id: JsonRpcId, error: RpcError): Record<string, unknown> {
  return { jsonrpc: '2.0', id, error };
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
    const why = Array.isArray(value) ? 'batch requests are not supported' : 'expected an object with "jsonrpc": "2.0" and a "method" string';
    return { ok: false, response: rpcError(id, { code: RPC_ERRORS.invalidRequest, message: `Invalid Request: ${why}` }) };
  }
  const { params } = parsed.data;
  if (params !== undefined && (params === null || typeof params !== 'object' || Array.isArray(params))) {
    return {
      ok: false,
      response: rpcError(parsed.data.id ?? null, {
        code: RPC_ERRORS.invalidParams,
        message: `Invalid params: params must be an object of named parameters (got ${Array.isArray(params) ? 'an array' : params === null ? 'null' : typeof params})`,
      }),
    };
  }
  return { ok: true, call: { id: parsed.data.id ?? null, method: parsed.data.method, params: params ?? {} } };
}

/** A zod failure as the one line a client can act on: where, and what was wrong. */
export function describeInvalidParams(issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>): string {
  const first = issues[0];
  if (!first) return 'Invalid params';
  const where = first.path.length > 0 ? first.path.map(String).join('.') : 'params';
  return `Invalid params: ${where}: ${first.message}`;
}
