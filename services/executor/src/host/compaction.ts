import type { ContentBlock, WireMessage } from './driver-wire.js';
import type { HookMessage } from './hooks.js';

/**
 * Compaction's conversions (upstream's shapes, §7.1): the history goes to the on-compaction hook
 * as `{role, content}` strings, and its replacement comes back the same way.
 *
 * - A user or assistant message's content is its blocks as JSON; a string the hook returns
 *   becomes one text block, anything else that is not a block list becomes its JSON as text.
 * - A tool message travels as an envelope `{"__murmur_tool_msg__":true,"body","is_error",
 *   "tool_call_id"}`, and **survives only unmodified**: a tool message in the replacement must be
 *   byte-for-byte one of the envelopes the hook was given. A model must never read a tool result
 *   the tool did not produce.
 * - The replacement must keep pairing: every `tool_call` an assistant message issues has exactly
 *   its tool result, and every tool result answers a call. Upstream logs a broken replacement and
 *   carries on uncompacted; here it fails the session, naming what broke, because a hook that
 *   returns one is broken and silently ignoring it hides that.
 */

/** JSON with object keys sorted, as upstream's serde_json (no `preserve_order`) writes values. */
export function sortedJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value as Record<string, unknown>)
      .sort()
      .map((key) => [key, sortKeys((value as Record<string, unknown>)[key])]),
  );
}

export function toHookMessages(messages: readonly WireMessage[]): HookMessage[] {
  return messages.map((message) =>
    message.role === 'tool'
      ? {
          role: 'tool',
          content: sortedJson({ __murmur_tool_msg__: true, body: message.content, is_error: message.is_error, tool_call_id: message.tool_call_id }),
        }
      : { role: message.role, content: sortedJson(message.content) },
  );
}

export type Replacement = { ok: true; messages: WireMessage[] } | { ok: false; reason: string };

/** The hook's replacement as driver messages, or why it cannot stand. */
export function fromHookMessages(replacement: readonly HookMessage[], given: readonly HookMessage[]): Replacement {
  const givenTools = new Set(given.filter((message) => message.role === 'tool').map((message) => message.content));
  const messages: WireMessage[] = [];
  for (const [index, message] of replacement.entries()) {
    if (message.role === 'tool') {
      if (!givenTools.has(message.content)) {
        return { ok: false, reason: `message ${index} is a tool result that is not one the hook was given unmodified` };
      }
      const envelope = JSON.parse(message.content) as { body: ContentBlock[]; is_error: boolean; tool_call_id: string };
      messages.push({ role: 'tool', tool_call_id: envelope.tool_call_id, is_error: envelope.is_error, content: envelope.body });
      continue;
    }
    if (message.role !== 'user' && message.role !== 'assistant') {
      return { ok: false, reason: `message ${index} has role '${message.role}'; expected user, assistant or tool` };
    }
    messages.push({ role: message.role, content: blocksOf(message.content) });
  }
  const problem = pairingProblem(messages);
  return problem ? { ok: false, reason: problem } : { ok: true, messages };
}

function blocksOf(content: string): ContentBlock[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(content);
  } catch {
    return [{ type: 'text', text: content }];
  }
  if (Array.isArray(parsed) && parsed.every((block) => block !== null && typeof block === 'object' && typeof block.type === 'string')) {
    return parsed as ContentBlock[];
  }
  if (typeof parsed === 'string') return [{ type: 'text', text: parsed }];
  return [{ type: 'text', text: JSON.stringify(parsed) }];
}

/**
 * What breaks tool-call pairing in `messages`, or undefined when every call has its one result:
 * the calls of an assistant message are answered by the tool messages that follow it, before the
 * next user or assistant message. Pairs are found turn by turn, not across the history: a driver
 * that numbers calls by their place in a turn (`call_0`) uses the same id in many turns.
 */
export function pairingProblem(messages: readonly WireMessage[]): string | undefined {
  /** The calls of the latest assistant message still waiting for their results, and those answered. */
  let open = new Set<string>();
  let answered = new Set<string>();
  for (const message of messages) {
    if (message.role === 'tool') {
      const id = message.tool_call_id;
      if (answered.has(id)) return `tool call '${id}' is answered twice`;
      if (!open.has(id)) return `a tool result answers '${id}', which the assistant message before it does not call`;
      open.delete(id);
      answered.add(id);
      continue;
    }
    const unanswered = [...open][0];
    if (unanswered !== undefined) return `tool call '${unanswered}' has no tool result`;
    open = new Set();
    answered = new Set();
    if (message.role !== 'assistant' || !Array.isArray(message.content)) continue;
    for (const block of message.content) {
      if (block.type !== 'tool_call' || typeof block.id !== 'string') continue;
      if (open.has(block.id)) return `tool call '${block.id}' is issued twice in one message`;
      open.add(block.id);
    }
  }
  const unanswered = [...open][0];
  return unanswered === undefined ? undefined : `tool call '${unanswered}' has no tool result`;
}

/** The summary a dump records: the text of every non-tool message, one per line. */
export function summaryOf(messages: readonly WireMessage[]): string {
  return messages
    .filter((message) => message.role !== 'tool')
    .map((message) =>
      typeof message.content === 'string'
        ? message.content
        : message.content
            .filter((block) => block.type === 'text' && typeof block.text === 'string')
            .map((block) => block.text as string)
            .join('\n'),
    )
    .filter((text) => text !== '')
    .join('\n');
}
