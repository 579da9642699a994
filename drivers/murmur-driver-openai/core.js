// murmur-driver-openai: the pure part, the dialect of an OpenAI-compatible Chat Completions API.
// Translates the Murmur driver wire to that API and back.
//
// No imports and no exports: the build concatenates drivers/common.js, this file and the shared
// drivers/guest.js into one source (componentize-js resolves no relative imports), and node-side
// tests evaluate common.js and this file with drivers/load-core.mjs. The shared part (outcomes,
// tool-results, payload, environment, SSE lines, and the driver itself: `drive` and
// `parseResponse`) is common.js's and is in scope here. Declare no name common.js declares.
//
// `DIALECT` (at the end) is what guest.js hands common.js's `drive`: this API's request builder,
// non-streaming reply converter and stream parser; common.js documents the contract.

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';

// ---------------------------------------------------------------------------------------------
// Request

/** The joined text of a wire message's `text` blocks (a plain string as it is). */
function joinedText(content) {
  return textsOf(content).join('\n');
}

/**
 * An assistant wire message as a Chat Completions message; thinking is not sent back. Its content
 * is null only beside tool calls: the API refuses an assistant message with neither, and one empty
 * reply, once recorded in a context, had every later turn of it refused (HTTP 400).
 */
function openAIAssistantMessage(message) {
  const blocks = contentBlocks(message.content);
  const texts = blocks.filter((block) => block.type === 'text' && typeof block.text === 'string' && block.text !== '').map((block) => block.text);
  const hasToolCalls = blocks.some((block) => block.type === 'tool_call');
  const out = { role: 'assistant', content: texts.length > 0 ? texts.join('') : hasToolCalls ? null : '' };
  const toolCalls = blocks
    .filter((block) => block.type === 'tool_call')
    .map((block) => ({
      id: String(block.id ?? ''),
      type: 'function',
      function: { name: String(block.name ?? ''), arguments: JSON.stringify(isObject(block.input) ? block.input : {}) },
    }));
  if (toolCalls.length > 0) out.tool_calls = toolCalls;
  return out;
}

/** The wire's messages as Chat Completions messages, the system prompt first. Throws on an unknown role. */
function openAIMessages(system, messages) {
  const out = [];
  if (system !== '') out.push({ role: 'system', content: system });
  for (const message of messages ?? []) {
    if (!isObject(message)) throw new Error('driver: bad input: a message is not an object');
    switch (message.role) {
      case 'user':
        out.push({ role: 'user', content: joinedText(message.content) });
        break;
      case 'assistant':
        out.push(openAIAssistantMessage(message));
        break;
      case 'tool':
        out.push({ role: 'tool', tool_call_id: String(message.tool_call_id ?? ''), content: joinedText(message.content) });
        break;
      default:
        throw new Error(`driver: unsupported message role '${String(message.role)}'`);
    }
  }
  return out;
}

function openAITools(tools) {
  return (tools ?? []).filter(isObject).map((tool) => {
    const fn = { name: String(tool.name ?? ''), parameters: isObject(tool.parameters) ? tool.parameters : { type: 'object', properties: {} } };
    if (typeof tool.description === 'string' && tool.description !== '') fn.description = tool.description;
    return { type: 'function', function: fn };
  });
}

/**
 * The HTTP request for a payload: `{url, headers, body}` with `body` an object (the caller
 * serialises it). `env` is `readDriverEnv`'s value. Throws on a message it cannot map.
 */
function buildOpenAIRequest(payload, env) {
  const params = isObject(payload.params) ? payload.params : {};
  const headers = { 'content-type': 'application/json' };
  if (env.apiKey) headers.authorization = `Bearer ${env.apiKey}`;
  const system = typeof payload.system === 'string' ? payload.system.trim() : '';
  const body = { model: payload.model, messages: openAIMessages(system, payload.messages) };
  const tools = openAITools(payload.tools);
  if (tools.length > 0) body.tools = tools;
  if (payload.max_tokens !== undefined && payload.max_tokens !== null) body.max_completion_tokens = payload.max_tokens;
  body.stream = true;
  body.stream_options = { include_usage: true };
  Object.assign(body, params);
  // stream_options is refused without streaming.
  if (body.stream !== true && !Object.hasOwn(params, 'stream_options')) delete body.stream_options;
  return { url: endpointUrl(env.endpoint, '/chat/completions'), headers, body };
}

// ---------------------------------------------------------------------------------------------
// Response

/** A finish_reason on the wire; `stop` with tool calls (some servers say so) is a tool call. */
function mapOpenAIFinishReason(reason, hasToolCalls) {
  switch (reason) {
    case 'stop':
      return ok(hasToolCalls ? 'tool_call' : 'end_turn');
    case 'tool_calls':
    case 'function_call':
      return ok('tool_call');
    case 'length':
      return ok('max_tokens');
    case 'content_filter':
      return endedWith('finish_reason', reason, "the provider's content filter withheld the reply");
    default:
      return endedWith('finish_reason', reason, 'a reason this driver does not know');
  }
}

function openAIErrorMessage(error) {
  if (typeof error === 'string') return `inference error: ${error}`;
  if (!isObject(error)) return 'inference error';
  const message = typeof error.message === 'string' ? error.message : JSON.stringify(error);
  const type = typeof error.type === 'string' ? error.type : typeof error.code === 'string' ? error.code : '';
  return type === '' ? `inference error: ${message}` : `inference error: ${type}: ${message}`;
}

/** The length of the longest suffix of `text` that is a proper prefix of `tag`. */
function partialTagLength(text, tag) {
  for (let length = Math.min(text.length, tag.length - 1); length > 0; length--) {
    if (text.endsWith(tag.slice(0, length))) return length;
  }
  return 0;
}

/**
 * Routes a `<think>…</think>` that opens the streamed content (reasoning models put their
 * reasoning there, before the answer) to thinking: `push(delta)` for each content delta, then
 * `finish()` for `{text, thinking}`. Text goes to `onText` and thinking to `onThinking` as it is
 * read; a tag split across deltas is held back until it is complete. Only at the start: the same
 * characters later are the answer's own (a reply about the tag), and read as a tag they sent the
 * rest of the answer to thinking.
 */
function createThinkSplitter(onText, onThinking) {
  /** `start` until the content's first characters that are not white space have told; then `thinking` until the close, and `text` for good. */
  let state = 'start';
  let pending = '';
  let text = '';
  let thinking = '';
  const out = (part, into) => {
    if (part === '') return;
    if (into === 'thinking') {
      thinking += part;
      emitTo(onThinking, part);
    } else {
      text += part;
      emitTo(onText, part);
    }
  };
  return {
    push(delta) {
      if (state === 'text') {
        out(delta, 'text');
        return;
      }
      pending += delta;
      if (state === 'start') {
        const opening = pending.trimStart();
        if (opening.startsWith(THINK_OPEN)) {
          state = 'thinking';
          pending = opening.slice(THINK_OPEN.length);
        } else if (THINK_OPEN.startsWith(opening)) {
          return;
        } else {
          state = 'text';
          out(pending, 'text');
          pending = '';
          return;
        }
      }
      const at = pending.indexOf(THINK_CLOSE);
      if (at !== -1) {
        out(pending.slice(0, at), 'thinking');
        const rest = pending.slice(at + THINK_CLOSE.length);
        pending = '';
        state = 'text';
        out(rest, 'text');
        return;
      }
      const hold = partialTagLength(pending, THINK_CLOSE);
      out(pending.slice(0, pending.length - hold), 'thinking');
      pending = pending.slice(pending.length - hold);
    },
    finish() {
      out(pending, state === 'thinking' ? 'thinking' : 'text');
      pending = '';
      return { text, thinking };
    },
  };
}

/** `<think>…</think>` segments of a whole content string split off: `{text, thinking}`. */
function splitThinkTags(content) {
  const splitter = createThinkSplitter(undefined, undefined);
  splitter.push(content);
  return splitter.finish();
}

/** A Chat Completions message's content as text: a string, or the text of its parts. */
function openAIContentText(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .filter((part) => isObject(part) && typeof part.text === 'string' && (part.type === undefined || part.type === 'text'))
      .map((part) => part.text)
      .join('');
  }
  return '';
}

/** The reasoning a message or delta carries (`reasoning_content`, or `reasoning` on some servers). */
function openAIReasoning(message) {
  if (typeof message.reasoning_content === 'string') return message.reasoning_content;
  if (typeof message.reasoning === 'string') return message.reasoning;
  return '';
}

/**
 * The wire content of a reply, thinking first, then text, then tool calls (`[{id, name,
 * arguments}]`, arguments as JSON text), and its stop reason.
 */
function openAIReplyToWire(thinking, text, toolCalls, finishReason, usage) {
  const stop = mapOpenAIFinishReason(finishReason, toolCalls.length > 0);
  if (!stop.ok) return stop;
  const content = [];
  if (thinking !== '') content.push({ type: 'thinking', text: thinking });
  if (text !== '') content.push({ type: 'text', text });
  for (const [position, call] of toolCalls.entries()) {
    const input = parseToolInput(call.arguments, call.name, stop.value);
    if (!input.ok) return input;
    if (input.value !== undefined) content.push({ type: 'tool_call', id: call.id || `call_${position}`, name: call.name, input: input.value });
  }
  // finish_reason `tool_calls` without a single call (a server's slip) asks for no tool: the turn ends.
  const stopReason = stop.value === 'tool_call' && !content.some((block) => block.type === 'tool_call') ? 'end_turn' : stop.value;
  return ok(wireResponse(stopReason, content, usage));
}

function openAIUsage(usage) {
  return isObject(usage) ? usageOf(usage.prompt_tokens, usage.completion_tokens) : undefined;
}

/** A non-streaming Chat Completions response (already parsed) on the wire. */
function openAICompletionToWire(completion) {
  if (!isObject(completion)) return fail(`${PARSE_ERROR_PREFIX}the body is not a JSON object`);
  if (completion.error !== undefined && completion.error !== null) return fail(openAIErrorMessage(completion.error));
  const choice = Array.isArray(completion.choices) ? completion.choices.find(isObject) : undefined;
  if (choice === undefined) return fail(`${PARSE_ERROR_PREFIX}no choices`);
  const message = isObject(choice.message) ? choice.message : {};
  // A refusal is the model's answer, in a field of its own: dropped, the task ended ok with none.
  const split = splitThinkTags(openAIContentText(message.content) || (typeof message.refusal === 'string' ? message.refusal : ''));
  const reasoning = openAIReasoning(message);
  const thinking = reasoning !== '' && split.thinking !== '' ? `${reasoning}\n${split.thinking}` : reasoning + split.thinking;
  const toolCalls = (Array.isArray(message.tool_calls) ? message.tool_calls : []).filter(isObject).map((call) => {
    const fn = isObject(call.function) ? call.function : {};
    const args = fn.arguments;
    return {
      id: typeof call.id === 'string' ? call.id : '',
      name: String(fn.name ?? ''),
      arguments: typeof args === 'string' ? args : isObject(args) ? JSON.stringify(args) : '',
    };
  });
  return openAIReplyToWire(thinking, split.text, toolCalls, choice.finish_reason, openAIUsage(completion.usage));
}

/**
 * A reader of an SSE stream, one data line at a time as it arrives (common.js's stream-parser
 * contract). Content deltas go to `onText` and reasoning to `onThinking` at once (`<think>`
 * segments of content count as reasoning). A stream that ends before a finish_reason is an error.
 */
function createOpenAIStreamParser(onText, onThinking) {
  const splitter = createThinkSplitter(onText, onThinking);
  let reasoning = '';
  const calls = new Map();
  let finishReason;
  let usage;
  let done = false;
  return {
    line({ data }) {
      const trimmed = data.trim();
      if (done || trimmed === '') return undefined;
      if (trimmed === '[DONE]') {
        done = true;
        return undefined;
      }
      let chunk;
      try {
        chunk = JSON.parse(trimmed);
      } catch (error) {
        return fail(`${PARSE_ERROR_PREFIX}${describeError(error)}`);
      }
      if (!isObject(chunk)) return undefined;
      if (chunk.error !== undefined && chunk.error !== null) return fail(openAIErrorMessage(chunk.error));
      const chunkUsage = openAIUsage(chunk.usage);
      if (chunkUsage !== undefined) usage = chunkUsage;
      for (const choice of Array.isArray(chunk.choices) ? chunk.choices : []) {
        if (!isObject(choice) || (choice.index ?? 0) !== 0) continue;
        const delta = isObject(choice.delta) ? choice.delta : {};
        const thought = openAIReasoning(delta);
        if (thought !== '') {
          reasoning += thought;
          emitTo(onThinking, thought);
        }
        const text = openAIContentText(delta.content);
        if (text !== '') splitter.push(text);
        if (typeof delta.refusal === 'string' && delta.refusal !== '') splitter.push(delta.refusal);
        for (const fragment of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
          if (!isObject(fragment)) continue;
          const index = typeof fragment.index === 'number' ? fragment.index : calls.size;
          let call = calls.get(index);
          if (call === undefined) {
            call = { id: '', name: '', arguments: '' };
            calls.set(index, call);
          }
          if (typeof fragment.id === 'string' && fragment.id !== '' && call.id === '') call.id = fragment.id;
          const fn = isObject(fragment.function) ? fragment.function : {};
          // Most servers send the name once; some repeat it whole in every fragment.
          if (typeof fn.name === 'string' && fn.name !== '' && fn.name !== call.name) call.name += fn.name;
          if (typeof fn.arguments === 'string') call.arguments += fn.arguments;
          // Some servers send the arguments as an object, as a JSON reply may: read alike.
          else if (isObject(fn.arguments)) call.arguments = JSON.stringify(fn.arguments);
        }
        if (typeof choice.finish_reason === 'string' && choice.finish_reason !== '') finishReason = choice.finish_reason;
      }
      return undefined;
    },
    finish() {
      const split = splitter.finish();
      if (finishReason === undefined) return fail(`${PARSE_ERROR_PREFIX}the stream ended before a finish_reason`);
      const thinking = reasoning !== '' && split.thinking !== '' ? `${reasoning}\n${split.thinking}` : reasoning + split.thinking;
      const toolCalls = [...calls.keys()].sort((a, b) => a - b).map((index) => calls.get(index));
      return openAIReplyToWire(thinking, split.text, toolCalls, finishReason, usage);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Dialect

/** This API, for common.js's `drive` and `parseResponse`. */
const DIALECT = { buildRequest: buildOpenAIRequest, jsonToWire: openAICompletionToWire, streamParser: createOpenAIStreamParser };
