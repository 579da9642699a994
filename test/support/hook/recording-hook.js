// The recording hook (appended to probe-common.js): every lifecycle call appends
// `{"fn", "event", "env"?}` to `events.jsonl` in its preopen, then does what `script.json` there
// says for that function. The script maps a function name to a list of steps, taken one per call
// (the last repeats); a step is one of
//   {"return": "none"} | {"return": "artifact" | "reopen-task", "val": "..."}
//   {"return": "write-manifests", "val": [{"binaryName", "content"}]}
//   {"return": "replace-context", "summary": "..."}         one user message holding the summary
//   {"return": "replace-context", "keep": "all" | "drop-tools" | "tamper-tools"}
//   {"return": "<any arm>", "val": ...}                      (a bad arm for the event, say)
//   {"err": "message"} | {"trap": true} | {"spin": true} | {"busy_ms": N}   (spins N ms, then answers none)
//   {"infer": {"messages": [...], "model"?}, "then": "artifact"}   one completion; its text as an artifact
// A missing script or function means `none`.
import { runInference } from 'murmur:runtime/inference@0.2.0';

const taken = {};

function script() {
  try {
    return JSON.parse(readFileText('script.json'));
  } catch {
    return {};
  }
}

function record(fn, event) {
  const line = { fn, event: plain(event) };
  if (fn === 'on-session-start') line.env = environmentObject();
  // Appended, not rewritten: a hook told a thousand events must not pay for each of them again.
  appendFileText('events.jsonl', `${toJson(line)}\n`);
}

function stepFor(fn) {
  const steps = script()[fn];
  if (!Array.isArray(steps) || steps.length === 0) return { return: 'none' };
  const index = taken[fn] ?? 0;
  taken[fn] = index + 1;
  return steps[Math.min(index, steps.length - 1)];
}

function replacement(step, event) {
  if (step.summary !== undefined) return [{ role: 'user', content: JSON.stringify(step.summary) }];
  if (step.keep === 'drop-tools') return event.messages.filter((message) => message.role !== 'tool');
  if (step.keep === 'tamper-tools')
    return event.messages.map((message) =>
      message.role === 'tool' ? { role: 'tool', content: message.content.replace('"is_error":false', '"is_error":true') } : message,
    );
  return event.messages;
}

function handle(fn, event) {
  if (preopen()) record(fn, event);
  const step = stepFor(fn);
  if (step.trap) throw new ProbeTrap(`scripted trap in ${fn}`);
  if (step.spin) spin();
  if (step.busy_ms !== undefined) {
    const until = Date.now() + step.busy_ms;
    while (Date.now() < until) {
      // a guest that computes: nothing leaves its queue meanwhile
    }
  }
  if (step.err !== undefined) throw step.err;
  if (step.infer) {
    try {
      const answer = runInference({ messages: step.infer.messages, model: step.infer.model, systemPrompt: step.infer.systemPrompt });
      return { tag: 'artifact', val: toJson({ text: answer.text, model: answer.modelUsed, inputTokens: answer.inputTokens }) };
    } catch (error) {
      return { tag: 'artifact', val: toJson({ error: errorText(error) }) };
    }
  }
  if (step.return === 'none' || step.return === undefined) return { tag: 'none' };
  if (step.return === 'replace-context' && step.val === undefined) return { tag: 'replace-context', val: replacement(step, event) };
  return { tag: step.return, val: step.val };
}

export const lifecycle = {
  onStage: (event) => handle('on-stage', event),
  onSessionStart: (event) => handle('on-session-start', event),
  onTaskStart: (event) => handle('on-task-start', event),
  onInference: (event) => handle('on-inference', event),
  onToolCall: (event) => handle('on-tool-call', event),
  onShell: (event) => handle('on-shell', event),
  onCompaction: (event) => handle('on-compaction', event),
  onTaskEnd: (event) => handle('on-task-end', event),
  onSessionEnd: (event) => handle('on-session-end', event),
};
