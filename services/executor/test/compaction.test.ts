import { describe, expect, it } from 'vitest';
import { pairingProblem } from '../src/host/compaction.js';
import type { WireMessage } from '../src/host/driver-wire.js';

const user = (text: string): WireMessage => ({ role: 'user', content: [{ type: 'text', text }] });
const calls = (...ids: string[]): WireMessage => ({ role: 'assistant', content: ids.map((id) => ({ type: 'tool_call', id, name: 'bash', input: {} })) });
const result = (id: string): WireMessage => ({ role: 'tool', tool_call_id: id, is_error: false, content: [{ type: 'text', text: 'ok' }] });
const answer = (text: string): WireMessage => ({ role: 'assistant', content: [{ type: 'text', text }] });

/** Tool-call pairing, which a compaction hook's replacement must keep (`pairingProblem`). */
describe('tool-call pairing', () => {
  it('pairs calls turn by turn: the same id in two turns, each answered in its own, is whole', () => {
    // A driver that numbers calls by their place in a turn (OpenAI's without ids: call_0).
    expect(
      pairingProblem([user('go'), calls('call_0'), result('call_0'), calls('call_0', 'call_1'), result('call_0'), result('call_1'), answer('done')]),
    ).toBeUndefined();
  });

  it('names a call whose turn ended without its result', () => {
    expect(pairingProblem([user('go'), calls('a', 'b'), result('a'), answer('done')])).toBe("tool call 'b' has no tool result");
    expect(pairingProblem([user('go'), calls('a')])).toBe("tool call 'a' has no tool result");
  });

  it('refuses a result for a call of an earlier turn, a result given twice, and an id issued twice in one message', () => {
    expect(pairingProblem([calls('a'), result('a'), result('a')])).toBe("tool call 'a' is answered twice");
    expect(pairingProblem([calls('a'), result('a'), calls('b'), result('a'), result('b')])).toBe(
      "a tool result answers 'a', which the assistant message before it does not call",
    );
    expect(pairingProblem([calls('a'), result('a'), user('next'), result('a')])).toBe(
      "a tool result answers 'a', which the assistant message before it does not call",
    );
    expect(pairingProblem([calls('a', 'a'), result('a')])).toBe("tool call 'a' is issued twice in one message");
  });
});
