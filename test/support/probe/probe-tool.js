// The probe tool (world probe-tool.wit). Preceded by probe-common.js in the built source.
//
// `input.data` is JSON `{"actions": […]}`; the tool runs them in order and answers
// `{status: 'passed', summary: 'probe tool ran N actions', data: JSON of the results, …}`.
// Each result is also written as one JSON line to stderr (stdout is left to `print`).
//
// Shared actions: see probe-common.js. Tool-only ones:
//   {op:"chunk", text}, {op:"thinking", text}   murmur:text/chunks emit-chunk / emit-thinking-chunk
//   {op:"ask", prompt}                          murmur:task request-input; value: the answer
//   {op:"trap"}                                 throws out of `run`: an `unreachable` trap
import { requestInput } from 'murmur:task/task@0.1.0';
import { emitChunk, emitThinkingChunk } from 'murmur:text/chunks@0.1.0';

async function toolAction(action, report) {
  switch (action.op) {
    case 'chunk':
      emitChunk(String(action.text ?? ''));
      return null;
    case 'thinking':
      emitThinkingChunk(String(action.text ?? ''));
      return null;
    case 'ask':
      return requestInput(String(action.prompt ?? ''));
    case 'trap':
      report({ op: 'trap', ok: true, value: 'trapping' });
      throw new ProbeTrap('probe tool: trap requested');
    default:
      return commonAction(action, report);
  }
}

function errorResult(summary) {
  return { status: 'error', summary, data: undefined, dataPath: undefined, truncated: false, metadata: [] };
}

export const run = {
  async run(input) {
    let actions;
    try {
      const parsed = JSON.parse(input.data ?? '{}');
      actions = parsed && typeof parsed === 'object' ? parsed.actions : undefined;
      if (!Array.isArray(actions)) throw new Error('input.data has no "actions" array');
    } catch (error) {
      return errorResult(`probe tool: bad input: ${errorText(error)}`);
    }
    const results = [];
    const report = (result) => {
      results.push(result);
      console.error(toJson(result));
    };
    for (const action of actions) {
      report(await settle(action, (a) => toolAction(a, report)));
    }
    return {
      status: 'passed',
      summary: `probe tool ran ${actions.length} actions`,
      data: toJson(results),
      dataPath: undefined,
      truncated: false,
      metadata: [],
    };
  },
};
