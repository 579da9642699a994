/**
 * Strangers' text bound for one line: a model provider's error body, a manifest's value quoted in
 * its refusal, a tool name a model made up, a registry's description. Every control character is
 * shown as its escape, line breaks and tabs among them, to a pipe as to a terminal and in a log
 * file: left as it was, a `\n` in a provider's answer printed a `status:  ok` or `  hint:` line of
 * its choosing under `mur run`'s refusal, where nothing tells it from the runtime's own.
 */

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this pattern finds
const LINE_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
const NAMED_ESCAPES: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

export function oneLine(text: string): string {
  return text.replace(LINE_CONTROLS, (control) => NAMED_ESCAPES[control] ?? controlEscape(control));
}

/**
 * A control character as it is shown: `\x1b` for C0, its familiar form; `\u009b` for DEL, the C1
 * controls and the bidirectional ones, which is also how JSON writes them.
 */
export function controlEscape(control: string): string {
  const code = control.charCodeAt(0);
  return code >= 0x7f ? `\\u${code.toString(16).padStart(4, '0')}` : `\\x${code.toString(16).padStart(2, '0')}`;
}
