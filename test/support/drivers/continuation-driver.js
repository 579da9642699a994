// The continuation driver (world continuation-driver.wit): a driver that speaks the host's driver
// wire itself and never calls a model, to show what the host sent it.
//
// Its first turn (one message, no `continuation_id` in the request) asks for `bash`
// (`echo hello`) so that the loop takes a second turn, and answers with the metadata
// `continuation_id = cont-echo-1` — unless its driver config (`MURMUR_INFERENCE_DRIVER_CONFIG`)
// says NOCONT, when it answers with no metadata, as every driver without continuation does. The
// config never reaches the request, so both runs have the same logical messages.
//
// Any later turn ends the task with the text `wire_n=<messages sent> cont=<continuation_id or none>`.
import { getEnvironment } from 'wasi:cli/environment@0.2.12';

function passed(summary, reply, metadata) {
  return { status: 'passed', summary, data: JSON.stringify(reply), dataPath: undefined, truncated: false, metadata };
}

export const run = {
  run(input) {
    let request = {};
    try {
      request = JSON.parse(input.data ?? '{}') ?? {};
    } catch {
      // an unreadable request counts as an empty one
    }
    const sent = Array.isArray(request.messages) ? request.messages.length : 0;
    const continuation = typeof request.continuation_id === 'string' ? request.continuation_id : undefined;
    if (continuation === undefined && sent <= 1) {
      const config = new Map(getEnvironment()).get('MURMUR_INFERENCE_DRIVER_CONFIG') ?? '';
      const metadata = config.includes('NOCONT') ? [] : [['continuation_id', 'cont-echo-1']];
      const reply = { stop_reason: 'tool_call', content: [{ type: 'tool_call', id: 'toolu_echo', name: 'bash', input: { command: 'echo hello' } }] };
      return passed('turn0', reply, metadata);
    }
    const text = `wire_n=${sent} cont=${continuation ?? 'none'}`;
    return passed('done', { stop_reason: 'end_turn', content: [{ type: 'text', text }] }, []);
  },
};
