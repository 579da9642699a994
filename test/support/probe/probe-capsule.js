// The probe capsule (world probe-capsule.wit). Preceded by probe-common.js in the built source.
//
// Reads a JSON array of actions from $PROBE_ACTIONS, or else from `task.md` in its preopened
// directory, runs them in order and prints one JSON line per action to stdout:
// `{"op":…,"ok":true,"value":…}` or `{"op":…,"ok":false,"error":…}`. At the end (and before
// trap, exit, spin and balloon, which may not come back) it writes every result so far to
// `out/probe.json` under the preopen.
//
// Capsule-only actions (shared ones: see probe-common.js). A murmur `result` err arm becomes
// `{ok: false, error: <the err string>}`.
//   {op:"invoke", name, data?}         murmur:tool-registry invoke; data: string, or JSON-encoded
//   {op:"shell", binary, args?, env?}  murmur:shell run; env: {K: V} or [[K, V], …]
//   {op:"send", peer, text, repeat?, contextId?, messageId?}   murmur:message send (text written `repeat` times)
//   {op:"artifacts"}, {op:"describe", name}, {op:"search", query}, {op:"pull", name, version},
//   {op:"remove", name}, {op:"diagnostics"}          murmur:artifact-manager
//   {op:"handle", url}                 wasi:http/outgoing-handler `handle` alone, never waiting on the
//                                      response: "handled", or the error code it refused with
//   {op:"exit", code, withCode?}       wasi:cli/exit `exit` (ok when code is 0, else err), or
//                                      `exit-with-code` when withCode is true
//   {op:"trap"}                        throws out of `run`: componentize-js prints the error and a
//                                      stack to stderr, then aborts with a wasm `unreachable` trap
import { exit, exitWithCode } from 'wasi:cli/exit@0.2.12';
import { invoke } from 'murmur:tool-registry/invoke@0.1.0';
import { run as runShell } from 'murmur:shell/execute@0.1.0';
import { list as listArtifacts, describe, search, pull, remove, diagnostics } from 'murmur:artifact-manager/manage@0.1.0';
import { send } from 'murmur:message/send@0.1.0';
import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingRequest } from 'wasi:http/types@0.2.12';

const results = [];

function report(result) {
  results.push(result);
  console.log(toJson(result));
}

function saveResults() {
  try {
    try {
      rootDescriptor().createDirectoryAt('out');
    } catch {
      // exists already, or cannot be made: the write below says which
    }
    writeFileText('out/probe.json', toJson(results));
  } catch {
    // no preopen, or read-only: the results are on stdout anyway
  }
}

/**
 * The actions: $PROBE_ACTIONS when set and not blank, else `task.md`. Either is a JSON array; in
 * `task.md` it may also sit inside Markdown (the first `[` to the last `]` is tried).
 */
function loadActions() {
  const fromEnv = environmentObject().PROBE_ACTIONS;
  const text = fromEnv !== undefined && fromEnv.trim() !== '' ? fromEnv : readFileText('task.md');
  let actions;
  try {
    actions = JSON.parse(text);
  } catch (error) {
    const start = text.indexOf('[');
    const end = text.lastIndexOf(']');
    if (start < 0 || end <= start) throw error;
    actions = JSON.parse(text.slice(start, end + 1));
  }
  if (!Array.isArray(actions)) throw new Error('the actions are not a JSON array');
  return actions;
}

/** Tool input data: strings go as they are, anything else as JSON text. */
function dataText(data) {
  if (data === undefined || data === null) return undefined;
  return typeof data === 'string' ? data : JSON.stringify(data);
}

/** `env` as an object `{K: V}` or a list of `[K, V]` pairs, as WIT `list<tuple<string, string>>`. */
function envTuples(env) {
  if (!env) return [];
  const entries = Array.isArray(env) ? env : Object.entries(env);
  return entries.map(([key, value]) => [String(key), String(value)]);
}

let sent = 0;

async function capsuleAction(action) {
  switch (action.op) {
    case 'invoke':
      return invoke(String(action.name), { data: dataText(action.data), logPath: action.logPath ?? undefined });
    case 'shell':
      return runShell(String(action.binary), (action.args ?? []).map(String), envTuples(action.env));
    case 'send':
      sent += 1;
      return send(String(action.peer), {
        messageId: action.messageId ?? `probe-message-${sent}`,
        contextId: action.contextId ?? undefined,
        text: String(action.text ?? '').repeat(action.repeat ?? 1),
      });
    case 'artifacts':
      return listArtifacts();
    case 'describe':
      return describe(String(action.name));
    case 'search':
      return search(String(action.query ?? ''));
    case 'pull':
      return pull(String(action.name), String(action.version ?? ''));
    case 'remove':
      return remove(String(action.name));
    case 'diagnostics':
      return diagnostics();
    case 'handle':
      return handleOnly(String(action.url));
    default:
      return commonAction(action, report);
  }
}

export const run = {
  async run() {
    let actions;
    try {
      actions = loadActions();
    } catch (error) {
      report({ op: 'load', ok: false, error: errorText(error) });
      saveResults();
      return;
    }
    for (const action of actions) {
      const op = action && typeof action === 'object' ? action.op : undefined;
      if (op === 'spin' || op === 'balloon') saveResults();
      if (op === 'exit') {
        const code = Number(action.code ?? 0);
        report({ op, ok: true, value: code });
        saveResults();
        // wasi:cli/exit `exit` takes `result` (no payloads): only success or failure reaches the
        // host. `withCode: true` calls `exit-with-code` instead, passing the code itself.
        if (action.withCode) exitWithCode(code & 0xff);
        else exit(code === 0 ? { tag: 'ok' } : { tag: 'err' });
        // Not reached when the host honours exit.
        report({ op: 'exit', ok: false, error: 'exit returned' });
        continue;
      }
      if (op === 'trap') {
        report({ op, ok: true, value: 'trapping' });
        saveResults();
        // An exception escaping the export makes componentize-js print it to stderr and abort,
        // which is a wasm `unreachable` trap in any host.
        throw new ProbeTrap('probe: trap requested');
      }
      report(await settle(action, capsuleAction));
    }
    saveResults();
  },
};

/** `handle` and nothing after it: what a guest learns from the handler alone. */
function handleOnly(url) {
  const parsed = new URL(url);
  const request = new OutgoingRequest(new Fields());
  request.setScheme(parsed.protocol === 'https:' ? { tag: 'HTTPS' } : { tag: 'HTTP' });
  request.setAuthority(parsed.host);
  request.setPathWithQuery(`${parsed.pathname}${parsed.search}`);
  try {
    handle(request, undefined);
    return 'handled';
  } catch (error) {
    const code = error && typeof error === 'object' && 'payload' in error ? error.payload : error;
    throw new Error(`handle refused: ${code && typeof code === 'object' && 'tag' in code ? code.tag : String(code)}`);
  }
}
