// The drivers' shared part: outcomes, tool-results, the payload and the environment, SSE lines,
// the pieces of a wire response, and the driver itself (`drive`, `parseResponse`), generic over a
// dialect. Both murmur-driver-anthropic and murmur-driver-openai use them, and they live here once.
//
// Not a module of its own: no imports and no exports, top-level declarations only. componentize-js
// resolves no relative imports, so drivers/guests.mjs builds each driver's source as this file,
// then the driver's core.js, then the shared drivers/guest.js, concatenated into one module;
// everything declared here is in scope in all three. Node-side tests evaluate this file before a
// core.js with drivers/load-core.mjs (`loadCore`), or alone (`loadCommon`). A core.js must not
// declare a name this file declares: in one module, that is a redeclaration.
//
// Outcomes are `{ok: true, value}` or `{ok: false, error}`; `driverResult` turns one into the
// tool-result record `murmur:tool/run` returns.
//
// A dialect is what one API makes different. Each core.js declares its own at top level as
// `const DIALECT = { buildRequest, jsonToWire, parseStream }`, and guest.js passes it to `drive`:
//
// - `buildRequest(payload, env)`: the HTTP request for a payload (`parsePayload`'s value), as
//   `{url, headers, body}` with `body` an object (`drive` serialises it). `env` is
//   `readDriverEnv`'s value. May throw on a message it cannot map: the thrown value's description
//   is the error, as it is.
// - `jsonToWire(value)`: a non-streaming reply, its body already parsed from JSON (any value), as
//   an outcome holding the wire response. Does not throw.
// - `parseStream(bodyText, onText, onThinking)`: an SSE body as an outcome holding the wire
//   response, text deltas passed to `onText` and thinking deltas to `onThinking` (either may be
//   undefined; call them through `emitTo`) as they are read. Does not throw.

/** How much of an HTTP error body goes into the error message, in characters. */
const HTTP_ERROR_BODY_LIMIT = 2000;

/** The start of every error about a reply that cannot be read. */
const PARSE_ERROR_PREFIX = 'failed to parse inference response: ';

// ---------------------------------------------------------------------------------------------
// Outcomes

/** A success outcome. */
function ok(value) {
  return { ok: true, value };
}

/** A failure outcome; `error` is the message. */
function fail(error) {
  return { ok: false, error };
}

/** Whether a value is a plain JSON-style object (not null, not a list). */
function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The text of a thrown value (an Error's message, with its cause when it has one). */
function describeError(error) {
  if (error instanceof Error) {
    let text = error.message || String(error);
    if (error.cause !== undefined) text += ` (cause: ${describeError(error.cause)})`;
    return text;
  }
  if (typeof error === 'string') return error;
  try {
    return String(error);
  } catch {
    return 'unknown error';
  }
}

// ---------------------------------------------------------------------------------------------
// Tool-results

/** The tool-result of a success: `data` carries the wire response. */
function successResult(response) {
  return { status: 'passed', summary: undefined, data: JSON.stringify(response), dataPath: undefined, truncated: false, metadata: [] };
}

/** The tool-result of a failure: the message as the summary, and `{error, stop_reason: "error"}` as data. */
function errorResult(message) {
  return {
    status: 'error',
    summary: message,
    data: JSON.stringify({ error: message, stop_reason: 'error' }),
    dataPath: undefined,
    truncated: false,
    metadata: [],
  };
}

/** The tool-result of an outcome. */
function driverResult(outcome) {
  return outcome.ok ? successResult(outcome.value) : errorResult(outcome.error);
}

// ---------------------------------------------------------------------------------------------
// Input

/** `input.data` parsed: the driver payload, an object with at least a model and a messages list. */
function parsePayload(data) {
  if (data === undefined || data === null || data === '') return fail('driver: bad input: no payload');
  let payload;
  try {
    payload = JSON.parse(data);
  } catch (error) {
    return fail(`driver: bad input: ${describeError(error)}`);
  }
  if (!isObject(payload)) return fail('driver: bad input: the payload is not a JSON object');
  if (typeof payload.model !== 'string' || payload.model === '') return fail('driver: bad input: no model');
  if (payload.messages !== undefined && !Array.isArray(payload.messages)) return fail('driver: bad input: messages is not a list');
  if (payload.tools !== undefined && payload.tools !== null && !Array.isArray(payload.tools)) return fail('driver: bad input: tools is not a list');
  if (payload.params !== undefined && payload.params !== null && !isObject(payload.params)) return fail('driver: bad input: params is not an object');
  return ok(payload);
}

/**
 * The driver's settings from its environment (`getEnvironment()`'s list of pairs, or an object):
 * `{endpoint, apiKey?, config}`, the endpoint without trailing slashes.
 */
function readDriverEnv(environment) {
  const pairs = Array.isArray(environment) ? environment : Object.entries(environment ?? {});
  const vars = {};
  for (const pair of pairs) {
    if (Array.isArray(pair) && typeof pair[0] === 'string') vars[pair[0]] = String(pair[1] ?? '');
  }
  const endpoint = (vars.MURMUR_INFERENCE_ENDPOINT ?? '').trim().replace(/\/+$/, '');
  if (endpoint === '') return fail('driver: missing MURMUR_INFERENCE_ENDPOINT');
  const apiKey = (vars.MURMUR_INFERENCE_API_KEY ?? '').trim();
  let config = {};
  const configText = (vars.MURMUR_INFERENCE_DRIVER_CONFIG ?? '').trim();
  if (configText !== '') {
    try {
      config = JSON.parse(configText);
    } catch (error) {
      return fail(`driver: MURMUR_INFERENCE_DRIVER_CONFIG is not valid JSON: ${describeError(error)}`);
    }
    if (!isObject(config)) return fail('driver: MURMUR_INFERENCE_DRIVER_CONFIG is not a JSON object');
  }
  return ok({ endpoint, apiKey: apiKey === '' ? undefined : apiKey, config });
}

// ---------------------------------------------------------------------------------------------
// Response

/** The error of an HTTP status of 400 or more, with the start of the body. */
function httpErrorMessage(status, bodyText) {
  return `HTTP ${status}: ${String(bodyText ?? '').slice(0, HTTP_ERROR_BODY_LIMIT)}`;
}

/** Calls a chunk sink, ignoring its failures: streaming to observers is best-effort. */
function emitTo(sink, text) {
  if (typeof sink !== 'function' || text === '') return;
  try {
    sink(text);
  } catch {
    // an observer's failure is not the inference's
  }
}

/**
 * The data lines of an SSE body, in order, with the event name in force for each:
 * `[{event, data}]`. Each `data:` line is taken as one payload (both APIs send one JSON object a
 * line); `event:` names the payloads up to the next blank line; comments are skipped.
 */
function sseDataLines(text) {
  const out = [];
  let event = '';
  for (const line of String(text).split(/\r\n|\r|\n/)) {
    if (line === '') {
      event = '';
      continue;
    }
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') out.push({ event, data: value });
  }
  return out;
}

/** A wire message's content as a list of blocks (a plain string is one text block). */
function contentBlocks(content) {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (Array.isArray(content)) return content.filter(isObject);
  return [];
}

/** The texts of a wire message's `text` blocks. */
function textsOf(content) {
  return contentBlocks(content)
    .filter((block) => block.type === 'text' && typeof block.text === 'string')
    .map((block) => block.text);
}

/** Token usage on the wire, a missing count as 0; undefined when the API reported neither. */
function usageOf(inputTokens, outputTokens) {
  if (typeof inputTokens !== 'number' && typeof outputTokens !== 'number') return undefined;
  return { input_tokens: typeof inputTokens === 'number' ? inputTokens : 0, output_tokens: typeof outputTokens === 'number' ? outputTokens : 0 };
}

/** The wire response, usage left out when the API reported none. */
function wireResponse(stopReason, content, usage) {
  const response = { stop_reason: stopReason, content };
  if (usage !== undefined) response.usage = usage;
  return response;
}

/**
 * A tool call's streamed input, parsed. Empty input is `{}`. Input that does not parse is an
 * error, unless the reply was cut at max_tokens: then the unfinished call is dropped (`undefined`).
 */
function parseToolInput(text, name, stopReason) {
  if (text.trim() === '') return ok({});
  try {
    const input = JSON.parse(text);
    if (isObject(input)) return ok(input);
    if (stopReason === 'max_tokens') return ok(undefined);
    return fail(`${PARSE_ERROR_PREFIX}the input of tool call '${name}' is not a JSON object`);
  } catch (error) {
    if (stopReason === 'max_tokens') return ok(undefined);
    return fail(`${PARSE_ERROR_PREFIX}the input of tool call '${name}' is not valid JSON: ${describeError(error)}`);
  }
}

/**
 * An HTTP response on the wire, in `dialect`'s terms: an error for a status of 400 or more, the
 * dialect's non-streaming reply when the body is a JSON object, else its SSE stream.
 */
function parseResponse(status, bodyText, onText, onThinking, dialect) {
  const text = String(bodyText ?? '');
  if (status >= 400) return fail(httpErrorMessage(status, text));
  const trimmed = text.trim();
  if (trimmed === '') return fail(`${PARSE_ERROR_PREFIX}empty body`);
  if (trimmed.startsWith('{')) {
    let reply;
    try {
      reply = JSON.parse(trimmed);
    } catch (error) {
      return fail(`${PARSE_ERROR_PREFIX}${describeError(error)}`);
    }
    return dialect.jsonToWire(reply);
  }
  return dialect.parseStream(text, onText, onThinking);
}

// ---------------------------------------------------------------------------------------------
// The driver

/**
 * The whole driver, speaking `dialect`'s API: `inputData` is the tool input's `data`; `host` gives
 * `getEnvironment()`, `fetch`, `emitChunk` and `emitThinkingChunk`. Resolves to a tool-result and
 * never rejects. Host dependencies come in as arguments, so guest.js is a thin shell and tests can
 * run a driver end to end against a fake fetch.
 */
async function drive(inputData, host, dialect) {
  try {
    const payload = parsePayload(inputData);
    if (!payload.ok) return errorResult(payload.error);
    const env = readDriverEnv(host.getEnvironment());
    if (!env.ok) return errorResult(env.error);
    let request;
    try {
      request = dialect.buildRequest(payload.value, env.value);
    } catch (error) {
      return errorResult(describeError(error));
    }
    let response;
    try {
      response = await host.fetch(request.url, { method: 'POST', headers: request.headers, body: JSON.stringify(request.body) });
    } catch (error) {
      return errorResult(`inference request failed: ${describeError(error)}`);
    }
    let bodyText;
    try {
      bodyText = await response.text();
    } catch (error) {
      return errorResult(`failed to read inference response: ${describeError(error)}`);
    }
    return driverResult(parseResponse(response.status, bodyText, host.emitChunk, host.emitThinkingChunk, dialect));
  } catch (error) {
    return errorResult(`driver: ${describeError(error)}`);
  }
}
