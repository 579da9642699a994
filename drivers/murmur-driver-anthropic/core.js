// murmur-driver-anthropic: the pure part, the dialect of the Anthropic Messages API. Translates
// the Murmur driver wire to that API and back.
//
// No imports and no exports: the build concatenates drivers/common.js, this file and the shared
// drivers/guest.js into one source (componentize-js resolves no relative imports), and node-side
// tests evaluate common.js and this file with drivers/load-core.mjs. The shared part (outcomes,
// tool-results, payload, environment, SSE lines, and the driver itself: `drive` and
// `parseResponse`) is common.js's and is in scope here. Declare no name common.js declares.
//
// `DIALECT` (at the end) is what guest.js hands common.js's `drive`: this API's request builder,
// non-streaming reply converter and stream parser; common.js documents the contract.

const ANTHROPIC_VERSION = '2023-06-01';

// ---------------------------------------------------------------------------------------------
// Request

/** Whether thinking blocks with a signature are sent back to the model. */
function anthropicThinkingEnabled(config, params) {
  if (config.thinking === 'enabled') return true;
  if (isObject(config.thinking) && config.thinking.type === 'enabled') return true;
  return isObject(params) && isObject(params.thinking) && params.thinking.type === 'enabled';
}

/** One wire content block as Anthropic content, or undefined when it is not sent. */
function anthropicBlock(block, thinkingEnabled) {
  switch (block.type) {
    case 'text':
      // The API refuses empty text blocks.
      return typeof block.text === 'string' && block.text !== '' ? { type: 'text', text: block.text } : undefined;
    case 'tool_call':
      return {
        type: 'tool_use',
        id: String(block.id ?? ''),
        name: String(block.name ?? ''),
        input: isObject(block.input) ? block.input : {},
      };
    case 'thinking':
      if (!thinkingEnabled || typeof block.signature !== 'string' || block.signature === '') return undefined;
      return { type: 'thinking', thinking: String(block.text ?? ''), signature: block.signature };
    default:
      return undefined;
  }
}

/** A `tool` wire message as an Anthropic `tool_result` block. */
function anthropicToolResult(message) {
  const result = { type: 'tool_result', tool_use_id: String(message.tool_call_id ?? '') };
  const texts = textsOf(message.content).filter((text) => text !== '');
  if (texts.length > 0) result.content = texts.map((text) => ({ type: 'text', text }));
  if (message.is_error === true) result.is_error = true;
  return result;
}

/**
 * The wire's messages as Anthropic messages. Consecutive `tool` messages become one `user`
 * message holding all their `tool_result` blocks, as the API requires. Throws on an unknown role.
 */
function anthropicMessages(messages, thinkingEnabled) {
  const out = [];
  let toolResults;
  for (const message of messages ?? []) {
    if (!isObject(message)) throw new Error('driver: bad input: a message is not an object');
    if (message.role === 'tool') {
      if (toolResults === undefined) {
        toolResults = [];
        out.push({ role: 'user', content: toolResults });
      }
      toolResults.push(anthropicToolResult(message));
      continue;
    }
    toolResults = undefined;
    if (message.role !== 'user' && message.role !== 'assistant') {
      throw new Error(`driver: unsupported message role '${String(message.role)}'`);
    }
    const content = [];
    for (const block of contentBlocks(message.content)) {
      const mapped = anthropicBlock(block, thinkingEnabled && message.role === 'assistant');
      if (mapped !== undefined) content.push(mapped);
    }
    // The API refuses a message without content (one holding only unsent thinking, say).
    if (content.length > 0) out.push({ role: message.role, content });
  }
  return out;
}

function anthropicTools(tools) {
  return (tools ?? []).filter(isObject).map((tool) => {
    const mapped = { name: String(tool.name ?? ''), input_schema: isObject(tool.parameters) ? tool.parameters : { type: 'object', properties: {} } };
    if (typeof tool.description === 'string' && tool.description !== '') mapped.description = tool.description;
    return mapped;
  });
}

/** `params.tool_choice` in Anthropic's shape: the OpenAI-style strings become objects. */
function anthropicToolChoice(choice) {
  if (choice === 'required') return { type: 'any' };
  if (choice === 'auto' || choice === 'none' || choice === 'any') return { type: choice };
  return choice;
}

/**
 * The HTTP request for a payload: `{url, headers, body}` with `body` an object (the caller
 * serialises it). `env` is `readDriverEnv`'s value. Throws on a message it cannot map.
 */
function buildAnthropicRequest(payload, env) {
  const config = isObject(env.config) ? env.config : {};
  const params = isObject(payload.params) ? payload.params : {};
  const headers = { 'content-type': 'application/json', 'anthropic-version': ANTHROPIC_VERSION };
  if (env.apiKey) headers['x-api-key'] = env.apiKey;
  const beta = Array.isArray(config.beta_features)
    ? config.beta_features.map(String).filter((feature) => feature !== '')
    : typeof config.beta_features === 'string' && config.beta_features.trim() !== ''
      ? [config.beta_features.trim()]
      : [];
  if (beta.length > 0) headers['anthropic-beta'] = beta.join(',');

  const body = { model: payload.model };
  if (payload.max_tokens !== undefined && payload.max_tokens !== null) body.max_tokens = payload.max_tokens;
  body.messages = anthropicMessages(payload.messages, anthropicThinkingEnabled(config, params));
  const system = typeof payload.system === 'string' ? payload.system.trim() : '';
  if (system !== '') body.system = system;
  const tools = anthropicTools(payload.tools);
  if (tools.length > 0) body.tools = tools;
  body.stream = true;
  for (const [key, value] of Object.entries(params)) {
    body[key] = key === 'tool_choice' ? anthropicToolChoice(value) : value;
  }
  return { url: endpointUrl(env.endpoint, '/v1/messages'), headers, body };
}

// ---------------------------------------------------------------------------------------------
// Response

/** Anthropic's stop_reason on the wire. */
function mapAnthropicStopReason(reason) {
  switch (reason) {
    case 'end_turn':
    case 'stop_sequence':
      return ok('end_turn');
    case 'tool_use':
      return ok('tool_call');
    case 'max_tokens':
      return ok('max_tokens');
    case 'refusal':
      return endedWith('stop_reason', reason, 'it refused to answer');
    case 'pause_turn':
      return endedWith('stop_reason', reason, 'a server tool paused its turn, which this runtime does not continue');
    case 'model_context_window_exceeded':
      return endedWith('stop_reason', reason, "the conversation fills the model's context window");
    default:
      return endedWith('stop_reason', reason, 'a reason this driver does not know');
  }
}

function anthropicErrorMessage(error) {
  if (!isObject(error)) return 'inference error';
  const type = typeof error.type === 'string' ? error.type : 'error';
  return typeof error.message === 'string' ? `inference error: ${type}: ${error.message}` : `inference error: ${type}`;
}

/** A non-streaming Messages response (already parsed) on the wire. */
function anthropicMessageToWire(message) {
  if (!isObject(message)) return fail(`${PARSE_ERROR_PREFIX}the body is not a JSON object`);
  if (message.type === 'error') return fail(anthropicErrorMessage(message.error));
  if (!Array.isArray(message.content)) return fail(`${PARSE_ERROR_PREFIX}no content list`);
  const stop = mapAnthropicStopReason(message.stop_reason);
  if (!stop.ok) return stop;
  const content = [];
  for (const block of message.content) {
    if (!isObject(block)) continue;
    if (block.type === 'text') {
      if (typeof block.text === 'string' && block.text !== '') content.push({ type: 'text', text: block.text });
    } else if (block.type === 'tool_use') {
      const name = String(block.name ?? '');
      // Held to what a streamed call is held to: an input that is no object is not quietly run as {}.
      const input =
        block.input === undefined ? ok({}) : isObject(block.input) ? ok(block.input) : parseToolInput(JSON.stringify(block.input), name, stop.value);
      if (!input.ok) return input;
      if (input.value !== undefined) content.push({ type: 'tool_call', id: String(block.id ?? ''), name, input: input.value });
    } else if (block.type === 'thinking') {
      const thinking = { type: 'thinking', text: String(block.thinking ?? '') };
      if (typeof block.signature === 'string' && block.signature !== '') thinking.signature = block.signature;
      content.push(thinking);
    }
  }
  const usage = isObject(message.usage) ? usageOf(message.usage.input_tokens, message.usage.output_tokens) : undefined;
  return ok(wireResponse(stop.value, content, usage));
}

/**
 * A reader of an SSE stream, one data line at a time as it arrives (common.js's stream-parser
 * contract). Text deltas go to `onText` and thinking deltas to `onThinking` at once. A stream that
 * ends before the stop reason arrives is an error.
 */
function createAnthropicStreamParser(onText, onThinking) {
  const blocks = new Map();
  let stopReason;
  let inputTokens;
  let outputTokens;
  return {
    line({ event, data }) {
      if (data === '' || data === '[DONE]') return undefined;
      let payload;
      try {
        payload = JSON.parse(data);
      } catch (error) {
        return fail(`${PARSE_ERROR_PREFIX}${describeError(error)}`);
      }
      if (!isObject(payload)) return undefined;
      const type = typeof payload.type === 'string' ? payload.type : event;
      switch (type) {
        case 'message_start': {
          const message = isObject(payload.message) ? payload.message : {};
          if (isObject(message.usage)) {
            if (typeof message.usage.input_tokens === 'number') inputTokens = message.usage.input_tokens;
            if (typeof message.usage.output_tokens === 'number') outputTokens = message.usage.output_tokens;
          }
          if (typeof message.stop_reason === 'string') stopReason = message.stop_reason;
          break;
        }
        case 'content_block_start': {
          const start = isObject(payload.content_block) ? payload.content_block : {};
          const index = typeof payload.index === 'number' ? payload.index : blocks.size;
          // A block started again would replace one whose text already reached the stream's
          // readers: what they were shown and the answer would part ways.
          if (blocks.has(index)) return fail(`${PARSE_ERROR_PREFIX}the stream started content block ${index} twice`);
          if (start.type === 'text') {
            const text = typeof start.text === 'string' ? start.text : '';
            emitTo(onText, text);
            blocks.set(index, { type: 'text', text });
          } else if (start.type === 'tool_use') {
            const initial = isObject(start.input) ? start.input : {};
            blocks.set(index, { type: 'tool_use', id: String(start.id ?? ''), name: String(start.name ?? ''), json: '', initial });
          } else if (start.type === 'thinking') {
            const text = typeof start.thinking === 'string' ? start.thinking : '';
            emitTo(onThinking, text);
            blocks.set(index, { type: 'thinking', text, signature: typeof start.signature === 'string' ? start.signature : '' });
          }
          // Other block types (redacted_thinking, server tools) have no place on the wire.
          break;
        }
        case 'content_block_delta': {
          const block = blocks.get(payload.index);
          const delta = isObject(payload.delta) ? payload.delta : {};
          if (block === undefined) break;
          if (delta.type === 'text_delta' && block.type === 'text' && typeof delta.text === 'string') {
            block.text += delta.text;
            emitTo(onText, delta.text);
          } else if (delta.type === 'input_json_delta' && block.type === 'tool_use' && typeof delta.partial_json === 'string') {
            block.json += delta.partial_json;
          } else if (delta.type === 'thinking_delta' && block.type === 'thinking' && typeof delta.thinking === 'string') {
            block.text += delta.thinking;
            emitTo(onThinking, delta.thinking);
          } else if (delta.type === 'signature_delta' && block.type === 'thinking' && typeof delta.signature === 'string') {
            block.signature += delta.signature;
          }
          break;
        }
        case 'message_delta': {
          if (isObject(payload.delta) && typeof payload.delta.stop_reason === 'string') stopReason = payload.delta.stop_reason;
          if (isObject(payload.usage)) {
            if (typeof payload.usage.input_tokens === 'number') inputTokens = payload.usage.input_tokens;
            if (typeof payload.usage.output_tokens === 'number') outputTokens = payload.usage.output_tokens;
          }
          break;
        }
        case 'error':
          return fail(anthropicErrorMessage(payload.error));
        default:
          // ping, content_block_stop, message_stop: nothing to do
          break;
      }
      return undefined;
    },
    finish() {
      if (stopReason === undefined) return fail(`${PARSE_ERROR_PREFIX}the stream ended before the stop reason`);
      const stop = mapAnthropicStopReason(stopReason);
      if (!stop.ok) return stop;
      const content = [];
      for (const index of [...blocks.keys()].sort((a, b) => a - b)) {
        const block = blocks.get(index);
        if (block.type === 'text') {
          if (block.text !== '') content.push({ type: 'text', text: block.text });
        } else if (block.type === 'thinking') {
          const thinking = { type: 'thinking', text: block.text };
          if (block.signature !== '') thinking.signature = block.signature;
          content.push(thinking);
        } else {
          // The input streams as JSON fragments; the start event's own input is only a fallback.
          const input = block.json.trim() === '' ? ok(block.initial) : parseToolInput(block.json, block.name, stop.value);
          if (!input.ok) return input;
          if (input.value !== undefined) content.push({ type: 'tool_call', id: block.id, name: block.name, input: input.value });
        }
      }
      return ok(wireResponse(stop.value, content, usageOf(inputTokens, outputTokens)));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Dialect

/** This API, for common.js's `drive` and `parseResponse`. */
const DIALECT = { buildRequest: buildAnthropicRequest, jsonToWire: anthropicMessageToWire, streamParser: createAnthropicStreamParser };
