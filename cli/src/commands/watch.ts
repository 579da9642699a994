import { once } from 'node:events';
import { MurmurError, SessionIdSchema, fetchFailureReason, readBodyPrefix, shownUrl } from '@murmur/shared';
import { configuredTokenRefusal } from '@murmur/shared/node';
import { type Output, TerminalSafeStream, UsageError, oneLine } from '../output.js';

/**
 * `mur watch <url>`: upstream's observer. It asks a session's door for `stream/watch` (every event
 * of the session from the first, across tasks, submitting nothing) and prints it as upstream does:
 * `[working]  inference turn 1`, `[artifact] tool: <name> | <first line>`, a task's streamed text as
 * it comes, and at a task's end `[completed]` with its answer wrapped under it. A threaded capsule's
 * lines say which context and turn they belong to.
 *
 * It exits 0 when the session ends (`capsule-closed`), 1 when the URL is not a door that answers,
 * or the stream breaks before the session ended.
 */

/** The answer's column: upstream wraps at 80 less its two-space indent. */
const ANSWER_WIDTH = 78;
/** How long a door has to answer the watch request (its headers; the stream may then be quiet for as long as the session is). */
const DOOR_ANSWER_TIMEOUT_MS = 10_000;

interface WatchState {
  threaded: boolean;
  contexts: Map<string, string>;
  turns: Map<string, number>;
  /** Whether the last thing printed was streamed text that did not end its line. */
  midLine: boolean;
}

function doorUrl(given: string): URL {
  // An id read as a host name fails as a DNS lookup: say what is wanted instead.
  if (/^ses_[0-9a-f]{32}$/i.test(given.trim())) {
    throw new UsageError(`'${given.trim()}' is a session id; mur watch follows a session through its door's URL`, {
      path: 'url',
      hint: "pass the url mur run printed (murmur: url …); 'mur ps' lists each running session with its URL",
    });
  }
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(given) ? given : `http://${given}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new UsageError(`'${given}' is not a URL`, {
      path: 'url',
      hint: 'pass the url mur run printed (murmur: url …), or the launch line’s url',
    });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError(`${shownUrl(url.href)} is not an http(s) URL, which a door's is`, {
      path: 'url',
      hint: 'pass the url mur run printed (murmur: url …), or the launch line’s url',
    });
  // Never sent: fetch refuses such a URL, and said so repeating it whole, password and all.
  if (url.username !== '' || url.password !== '')
    throw new UsageError(`the URL ${shownUrl(url.href)} carries a user or password, which is never sent`, {
      path: 'url',
      hint: 'pass the door URL alone, as mur run printed it (murmur: url …)',
    });
  return url;
}

/** Where to get a credential for a door that asks for one (MURMUR_DOOR_TOKEN names the one to send). */
const TOKEN_HINT = "set MURMUR_DOOR_TOKEN to the session's own token (mur run prints it as its token) or to one of the door's MURMUR_DOOR_AUTH tokens";

/**
 * The bearer `mur watch` sends (`MURMUR_DOOR_TOKEN`), from the environment rather than the command
 * line, where every user of the machine could read it in the process list.
 */
function doorToken(env: NodeJS.ProcessEnv): string | undefined {
  const token = env.MURMUR_DOOR_TOKEN?.trim() || undefined;
  const refusal = token === undefined ? undefined : configuredTokenRefusal(token, { setting: 'MURMUR_DOOR_TOKEN', what: 'door', hint: TOKEN_HINT });
  if (refusal) throw refusal;
  return token;
}

export async function watchCommand(given: string, output: Output, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const url = doorUrl(given);
  const token = doorToken(env);
  const notADoor = (why: string): MurmurError =>
    new MurmurError('E-IO-003', `${url.href} is not a Murmur session's door: ${why}`, {
      path: 'url',
      hint: 'pass the url mur run printed (murmur: url …), or the launch line’s url; mur ps lists the running sessions',
    });
  let response: Response;
  // Until the door answers: a listener that takes the connection and says nothing held mur silent
  // for undici's 300 s. The stream itself may then be quiet as long as the session is.
  const unanswered = new AbortController();
  const timer = setTimeout(() => unanswered.abort(), DOOR_ANSWER_TIMEOUT_MS);
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        'last-event-id': '0',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'stream/watch', params: {} }),
      signal: unanswered.signal,
    });
  } catch (error) {
    const reason = unanswered.signal.aborted ? `nothing answered within ${DOOR_ANSWER_TIMEOUT_MS / 1000} s` : fetchFailureReason(error);
    throw new MurmurError('E-IO-003', `failed to connect to ${url.host}: ${reason}`, {
      path: 'url',
      hint: 'is the session still running? mur ps lists the running sessions',
    });
  } finally {
    clearTimeout(timer);
  }
  const type = response.headers.get('content-type') ?? '';
  if (!response.ok || !type.includes('text/event-stream')) {
    // Whole, to be read as JSON-RPC (a door's refusal carries details); only its message is shown.
    const body = await readBodyPrefix(response, 16_384);
    let reason = `it answered ${response.status}${type ? ` (${type.split(';')[0]})` : ''}`;
    let doorCode: string | undefined;
    try {
      const rpc = JSON.parse(body) as { error?: { message?: string; data?: Array<{ metadata?: { murmur_code?: string } }> } };
      if (rpc.error?.message) reason = rpc.error.message.slice(0, 300);
      doorCode = rpc.error?.data?.find((detail) => detail.metadata?.murmur_code)?.metadata?.murmur_code;
    } catch {
      // not JSON-RPC: the status says enough
    }
    // A door that asks for credentials is a door: what it needs is said, never that it is not one.
    if (response.status === 401)
      throw new MurmurError(
        'E-DOOR-003',
        token
          ? `the door at ${url.host} refused the token in MURMUR_DOOR_TOKEN for ${url.href}`
          : `the door at ${url.host} requires a bearer token to watch ${url.href}`,
        { path: 'MURMUR_DOOR_TOKEN', hint: TOKEN_HINT },
      );
    // A door that says no session of that id runs behind it: the session ended, or is elsewhere.
    // Unless the id itself is not one (mistyped), which no session could ever have answered.
    const pathId = /\/sessions\/([^/]*)/.exec(url.pathname)?.[1];
    const mistyped = pathId !== undefined && !SessionIdSchema.safeParse(pathId).success;
    if (doorCode === 'E-DOOR-001' && response.status === 404 && !mistyped) {
      throw new MurmurError('E-SES-001', `no running session answers at ${url.href}: ${reason}`, {
        path: 'url',
        hint: "the session has ended (its records stay in its workdir) or runs behind another door; 'mur ps' lists the running sessions",
      });
    }
    throw notADoor(reason);
  }
  const state: WatchState = { threaded: false, contexts: new Map(), turns: new Map(), midLine: false };
  const print = (line: string): void => {
    if (state.midLine) {
      output.out('');
      state.midLine = false;
    }
    output.out(line);
  };
  let ended = false;
  const terminal = process.stdout.isTTY ? new TerminalSafeStream() : undefined;
  for await (const frame of sseFrames(response)) {
    // A stdout read slowly holds the stream, not mur's memory: the door keeps (and drops) what a
    // slow watcher has not taken, and says so (`gap`), where everything waited here.
    if (process.stdout.writableNeedDrain) await once(process.stdout, 'drain');
    if (frame.event === 'connection-ack') {
      state.threaded = parse(frame.data).conversation_mode === 'threaded';
    } else if (frame.event === 'gap') {
      output.err(
        `[murmur] warning: buffer overflow — some earlier events were lost (first available id: ${String(parse(frame.data).first_available_id ?? 0)})`,
      );
    } else if (frame.event === 'capsule-closed') {
      if (state.midLine) output.out('');
      output.err('[murmur] capsule closed');
      ended = true;
      break;
    } else if (frame.event === 'error') {
      const error = parse(frame.data).error as { message?: string } | undefined;
      throw new MurmurError('E-IO-003', `the door ended the stream: ${error?.message ?? frame.data}`, { hint: `run mur watch ${given} again` });
    } else if (frame.event === 'status') printStatus(parse(frame.data), state, print);
    else if (frame.event === 'artifact') printArtifact(parse(frame.data), print);
    else if (frame.event === 'text') {
      const text = parse(frame.data).text;
      if (typeof text === 'string' && text !== '') {
        // The capsule's own text: on a terminal its control characters are shown, never acted on.
        process.stdout.write(terminal ? terminal.write(text) : text);
        state.midLine = !text.endsWith('\n');
      }
    }
  }
  if (terminal) process.stdout.write(terminal.end());
  if (!ended) throw new MurmurError('E-IO-003', `the stream from ${url.host} broke before the session ended`, { hint: `run mur watch ${given} again` });
  return 0;
}

function parse(data: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(data);
    return value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function printStatus(event: Record<string, unknown>, state: WatchState, print: (line: string) => void): void {
  const taskId = typeof event.id === 'string' ? event.id : '';
  const status = (event.status ?? {}) as { state?: string; message?: string; response?: string };
  // A door's words (a remote one is anyone's), and a status message a capsule wrote (a request for
  // input): on their one line, so none prints a `[completed]` line of its own.
  const taskState = oneLine(status.state ?? 'unknown');
  const final = event.final === true;
  let prefix = `[${taskState}]`;
  if (typeof event.context_id === 'string') state.contexts.set(taskId, event.context_id);
  if (state.threaded) {
    const context = state.contexts.get(taskId) ?? taskId;
    const turn = state.turns.get(context) ?? 1;
    prefix = `[${oneLine(shortContext(context))} / turn ${turn} / ${taskState}]`;
    if (final) state.turns.set(context, turn + 1);
  }
  if (!final) {
    print(`${prefix}  ${oneLine(status.message ?? '')}`);
    return;
  }
  print(prefix);
  if (taskState === 'completed' && typeof status.response === 'string') {
    for (const line of wrap(status.response, ANSWER_WIDTH)) print(`  ${line}`.trimEnd());
    print('');
  } else if (taskState !== 'completed' && typeof status.message === 'string' && status.message !== '') {
    // Why it failed (or was canceled, or refused): otherwise only out/result.txt says.
    for (const line of wrap(status.message, ANSWER_WIDTH)) print(`  ${line}`.trimEnd());
    print('');
  }
}

function printArtifact(event: Record<string, unknown>, print: (line: string) => void): void {
  const artifact = (event.artifact ?? {}) as { tool_name?: string; content?: string };
  const [first, ...rest] = (artifact.content ?? '').split('\n');
  // The tool's name is the model's to choose, even one no tool has: shown on its one line whatever it holds.
  const name = oneLine(artifact.tool_name ?? 'unknown');
  print(first ? `[artifact] tool: ${name} | ${first}` : `[artifact] tool: ${name}`);
  for (const line of rest) print(`  ${line}`);
}

/** `ctx_` and the first 8 characters after it, as upstream shortens a context id. */
function shortContext(context: string): string {
  return context.startsWith('ctx_') ? `ctx_${context.slice(4, 12)}...` : `${context.slice(0, 12)}...`;
}

/** Words filled to `width` per line; a paragraph break is kept as an empty line. */
export function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const paragraph of text.split('\n')) {
    if (paragraph.trim() === '') {
      lines.push('');
      continue;
    }
    let current = '';
    for (const word of paragraph.split(/\s+/).filter(Boolean)) {
      if (current === '') current = word;
      else if (current.length + 1 + word.length <= width) current += ` ${word}`;
      else {
        lines.push(current);
        current = word;
      }
    }
    if (current !== '') lines.push(current);
  }
  return lines;
}

/** The SSE frames of a response body, as they arrive: `event`, and the `data` lines joined. */
async function* sseFrames(response: Response): AsyncGenerator<{ event: string; data: string }> {
  if (!response.body) return;
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, '');
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf('\n');
      if (line === '') {
        if (event !== '' || data.length > 0) yield { event: event || 'message', data: data.join('\n') };
        event = '';
        data = [];
      } else if (line.startsWith(':')) {
        // a heartbeat comment
      } else if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
  }
}
