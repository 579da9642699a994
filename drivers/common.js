// The drivers' shared part: outcomes, tool-results, the payload and the environment, SSE lines
// and UTF-8 as they arrive, the pieces of a wire response, and the driver itself (`drive`,
// `readResponse`, `parseResponse`), generic over a dialect. Both murmur-driver-anthropic and
// murmur-driver-openai use them, and they live here once.
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
// `const DIALECT = { buildRequest, jsonToWire, streamParser }`, and guest.js passes it to `drive`:
//
// - `buildRequest(payload, env)`: the HTTP request for a payload (`parsePayload`'s value), as
//   `{url, headers, body}` with `body` an object (`drive` serialises it). `env` is
//   `readDriverEnv`'s value. May throw on a message it cannot map: the thrown value's description
//   is the error, as it is.
// - `jsonToWire(value)`: a non-streaming reply, its body already parsed from JSON (any value), as
//   an outcome holding the wire response. Does not throw.
// - `streamParser(onText, onThinking)`: a reader of one SSE stream, made afresh for each reply,
//   as `{line, finish}`. `line({event, data})` takes each data line as it arrives (`event` the
//   name in force, as `sseDataLines` gives them) and answers undefined to go on, or an outcome
//   when the reply is already decided (a failure: the rest of the stream is not read). `finish()`
//   answers the outcome holding the wire response once the stream ended. Text deltas go to
//   `onText` and thinking deltas to `onThinking` (either may be undefined; call them through
//   `emitTo`) the moment their line is read, which is what lets a reply stream live. Neither throws.

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
  // Trailing slashes off the path, never off a query or a fragment (a key may end in one).
  const endpoint = endpointUrl((vars.MURMUR_INFERENCE_ENDPOINT ?? '').trim(), '');
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

/**
 * The URL of one of the API's paths (`/v1/messages`) at `endpoint`: added to the endpoint's path,
 * its trailing slashes dropped, before its query (a Google-style `?key=`, Azure's `?api-version=`)
 * and its fragment, which stay as they were. Added after them, the key was sent as
 * `key=…/v1/messages` to the endpoint's root. With no suffix, the endpoint as a driver keeps it.
 */
function endpointUrl(endpoint, suffix) {
  const cut = endpoint.search(/[?#]/);
  const [path, rest] = cut < 0 ? [endpoint, ''] : [endpoint.slice(0, cut), endpoint.slice(cut)];
  return `${path.replace(/\/+$/, '')}${suffix}${rest}`;
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
 * A splitter of SSE text into data lines as it arrives, in pieces cut anywhere (mid-line, between
 * a CR and its LF): `{push(text), finish()}`, calling `onLine({event, data})` for each complete
 * data line with the event name in force. Each `data:` line is taken as one payload (both APIs
 * send one JSON object a line); `event:` names the payloads up to the next blank line; comments
 * are skipped. `onLine` answering anything but undefined stops the splitter, and `push` and
 * `finish` answer that value from then on.
 */
function createSseLineSplitter(onLine) {
  // The line not yet ended, in the pieces it came in: each piece is scanned once, as it comes, so
  // a long line costs its length and not its length times its pieces (a 20 MB line in 64 KB
  // pieces took the driver 97 s and 600 MB, searching and copying the whole of it for each).
  let partial = [];
  /** The last piece ended with a CR, which has ended a line: an LF first in the next is its pair. */
  let afterCr = false;
  let event = '';
  let stopped;
  /** Whether a line of the event stream's own has come (a comment, or a field SSE defines). */
  let spoken = false;
  const take = (line, unended = false) => {
    if (line === '') {
      event = '';
      return;
    }
    if (line.startsWith(':')) {
      spoken = true;
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event' || field === 'data' || field === 'id' || field === 'retry') spoken = true;
    if (field === 'event') event = value;
    else if (field === 'data') stopped = onLine(unended ? { event, data: value, unended } : { event, data: value });
  };
  const lineEnd = /[\r\n]/g;
  return {
    push(piece) {
      if (stopped !== undefined) return stopped;
      const text = String(piece);
      let from = afterCr && text.startsWith('\n') ? 1 : 0;
      if (text !== '') afterCr = false;
      lineEnd.lastIndex = from;
      for (let found = lineEnd.exec(text); found !== null; found = lineEnd.exec(text)) {
        const at = found.index;
        partial.push(text.slice(from, at));
        const line = partial.join('');
        partial = [];
        if (text[at] === '\r' && at === text.length - 1) afterCr = true;
        from = at + (text[at] === '\r' && text[at + 1] === '\n' ? 2 : 1);
        lineEnd.lastIndex = from;
        take(line);
        if (stopped !== undefined) return stopped;
      }
      if (from < text.length) partial.push(text.slice(from));
      return undefined;
    },
    finish() {
      if (stopped !== undefined) return stopped;
      if (partial.length > 0) {
        const line = partial.join('');
        partial = [];
        // The body ended inside this line: whole, perhaps (a server that ends without a newline),
        // perhaps cut short. Handed over marked, for the reader to tell the two apart.
        if (line !== '') take(line, true);
      }
      return stopped;
    },
    /** Whether anything came that an event stream says: none, and the body was something else. */
    spoke: () => spoken,
  };
}

/** The data lines of a whole SSE body, in order: `[{event, data}]`, as `createSseLineSplitter` splits them. */
function sseDataLines(text) {
  const out = [];
  const splitter = createSseLineSplitter((line) => {
    out.push(line);
    return undefined;
  });
  splitter.push(text);
  splitter.finish();
  return out;
}

/**
 * A decoder of UTF-8 arriving in pieces cut anywhere: `{push(bytes), finish()}`, each answering
 * the text that is complete so far. A character cut in two is held until its last byte arrives;
 * what cannot be decoded becomes U+FFFD, as `TextDecoder` does. (Written out rather than relying
 * on `TextDecoder`'s `stream` option, so the guest's runtime need not have it.)
 */
function createUtf8Decoder() {
  const decoder = new TextDecoder();
  let held = new Uint8Array(0);
  /** How many bytes at the end of `bytes` start a character that is not complete yet. */
  const incompleteTail = (bytes) => {
    for (let back = 1; back <= Math.min(3, bytes.length); back += 1) {
      const byte = bytes[bytes.length - back];
      if ((byte & 0xc0) === 0x80) continue;
      const needs = byte >= 0xf0 && byte <= 0xf7 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
      return needs > back ? back : 0;
    }
    return 0;
  };
  return {
    push(bytes) {
      const piece = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
      let all = piece;
      if (held.length > 0) {
        all = new Uint8Array(held.length + piece.length);
        all.set(held, 0);
        all.set(piece, held.length);
      }
      const tail = incompleteTail(all);
      held = all.slice(all.length - tail);
      return tail === all.length ? '' : decoder.decode(all.subarray(0, all.length - tail));
    },
    finish() {
      const rest = held;
      held = new Uint8Array(0);
      return rest.length === 0 ? '' : decoder.decode(rest);
    },
  };
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

/**
 * Token usage on the wire, a count the API did not report left out (the host estimates it: a 0
 * undercounted the trace's totals and the compaction threshold); undefined when it reported neither.
 */
function usageOf(inputTokens, outputTokens) {
  if (typeof inputTokens !== 'number' && typeof outputTokens !== 'number') return undefined;
  const usage = {};
  if (typeof inputTokens === 'number') usage.input_tokens = inputTokens;
  if (typeof outputTokens === 'number') usage.output_tokens = outputTokens;
  return usage;
}

/**
 * A stop reason the API documents but the loop cannot go on from, said as the model's own ending
 * (`what`), never as the runtime's limitation ("unsupported"), which sent users to check settings
 * that were right. The host's hint reads the `ended its reply with` of it.
 */
function endedWith(field, reason, what) {
  return fail(`the model ended its reply with ${field} '${String(reason)}'${what ? ` (${what})` : ''}, which ends the task`);
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
 * A reader of one HTTP response in `dialect`'s terms, taking its body as text arrives:
 * `{push(text), finish()}`. An error for a status of 400 or more, the dialect's non-streaming
 * reply when the body is a JSON object, else its SSE stream, each line handed to the dialect's
 * stream parser the moment it is complete. `push` answers undefined to go on, or the outcome once
 * it is decided early (a failure in the stream: the rest need not be read); `finish` answers the
 * outcome at the body's end. Which of the three a body is waits for its first character that is
 * not white space.
 */
function createResponseReader(status, onText, onThinking, dialect) {
  // The body so far, in its pieces, while it is a JSON reply (or an error's), joined once at its
  // end: held as one string grown and trimmed at each piece, a 30 MB reply was copied whole for
  // every piece, and ran the driver out of memory well inside the body's size limit.
  const pieces = [];
  let stream;
  /** Whether a piece other than whitespace has come yet: its first character tells JSON from SSE. */
  let begun = false;
  const wholeBody = () => {
    const trimmed = pieces.join('').trim();
    if (trimmed === '') return fail(`${PARSE_ERROR_PREFIX}empty body`);
    let reply;
    try {
      reply = JSON.parse(trimmed);
    } catch (error) {
      return fail(`${PARSE_ERROR_PREFIX}${describeError(error)}`);
    }
    return dialect.jsonToWire(reply);
  };
  return {
    push(text) {
      if (stream !== undefined) return stream.splitter.push(text);
      const piece = String(text);
      pieces.push(piece);
      if (status >= 400 || begun) return undefined;
      const first = piece.trimStart();
      if (first === '') return undefined;
      begun = true;
      if (first.startsWith('{')) return undefined;
      const parser = dialect.streamParser(onText, onThinking);
      // What it began with, to say what it was should no line of it be an event stream's.
      stream = { parser, splitter: createSseLineSplitter((line) => streamLine(parser, line)), head: first.slice(0, 40) };
      const everything = pieces.join('');
      pieces.length = 0;
      return stream.splitter.push(everything);
    },
    finish() {
      if (status >= 400) return fail(httpErrorMessage(status, pieces.join('')));
      if (stream === undefined) return wholeBody();
      const ended = stream.splitter.finish();
      if (ended !== undefined) return ended;
      // An HTML page (a proxy's login), a compressed body, a bare `null`: said as what it is, not as a stream cut short.
      if (!stream.splitter.spoke())
        return fail(`${PARSE_ERROR_PREFIX}the body is neither a JSON object nor an event stream: it begins ${JSON.stringify(stream.head)}`);
      return stream.parser.finish();
    },
  };
}

/**
 * One line of a stream, to its parser. The last line of a body that ended without ending it is
 * taken when the parser can read it, and else said to be what it most likely is — the stream cut
 * off inside an event (a proxy's timeout, the server going away) — rather than the parser's
 * complaint about half a JSON object, which read as a setting to check.
 */
function streamLine(parser, line) {
  const outcome = parser.line(line.unended ? { event: line.event, data: line.data } : line);
  if (!line.unended || outcome === undefined || outcome.ok) return outcome;
  const shown = line.data.length > 60 ? `…${line.data.slice(-60)}` : line.data;
  const why = outcome.error.startsWith(PARSE_ERROR_PREFIX) ? outcome.error.slice(PARSE_ERROR_PREFIX.length) : outcome.error;
  return fail(`${PARSE_ERROR_PREFIX}the stream was cut off inside its last event (${why}; its last line ended ${JSON.stringify(shown)})`);
}

/** A whole HTTP response on the wire, in `dialect`'s terms (what `createResponseReader` answers for it read at once). */
function parseResponse(status, bodyText, onText, onThinking, dialect) {
  const reader = createResponseReader(status, onText, onThinking, dialect);
  return reader.push(String(bodyText ?? '')) ?? reader.finish();
}

/**
 * An HTTP response's body read as it arrives, each piece handed to the response reader at once:
 * through `response.body`'s reader when there is one (StarlingMonkey's fetch streams it), else
 * `response.text()`. Stops reading when the outcome is decided early.
 */
async function readResponse(response, onText, onThinking, dialect) {
  const status = response.status;
  const body = response.body;
  if (body === undefined || body === null || typeof body.getReader !== 'function') {
    let bodyText;
    try {
      bodyText = await response.text();
    } catch (error) {
      return fail(`failed to read inference response: ${describeError(error)}`);
    }
    return parseResponse(status, bodyText, onText, onThinking, dialect);
  }
  const reader = createResponseReader(status, onText, onThinking, dialect);
  const decoder = createUtf8Decoder();
  const bytes = body.getReader();
  for (;;) {
    let piece;
    try {
      piece = await bytes.read();
    } catch (error) {
      return fail(`failed to read inference response: ${describeError(error)}`);
    }
    if (piece.done) break;
    const early = reader.push(decoder.push(piece.value));
    if (early !== undefined) {
      try {
        await bytes.cancel();
      } catch {
        // the reply is decided; the rest of the body is not needed
      }
      return early;
    }
  }
  return reader.push(decoder.finish()) ?? reader.finish();
}

// ---------------------------------------------------------------------------------------------
// The driver

/**
 * The whole driver, speaking `dialect`'s API: `inputData` is the tool input's `data`; `host` gives
 * `getEnvironment()`, `fetch`, `emitChunk` and `emitThinkingChunk`. Resolves to a tool-result and
 * never rejects. Host dependencies come in as arguments, so guest.js is a thin shell and tests can
 * run a driver end to end against a fake fetch. A streamed reply's chunks reach the sinks while
 * the reply is still arriving.
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
    return driverResult(await readResponse(response, host.emitChunk, host.emitThinkingChunk, dialect));
  } catch (error) {
    return errorResult(`driver: ${describeError(error)}`);
  }
}
