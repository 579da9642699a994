// Shared part of the probe guests (probe-capsule.js, probe-tool.js).
//
// componentize-js takes one module and resolves no relative imports, so test/support/probe-guests.ts
// builds each guest's source as this file followed by the guest's own file. Names declared here
// are visible to both; the guest files must not import these bindings again.
//
// Every action yields one result object, `{op, ok: true, value}` or `{op, ok: false, error}`.
// `error` is a WASI error tag ("not-permitted", "no-entry"), a murmur `err` string, or String(e).
//
// Shared actions (paths are passed to `open-at` on the single preopen exactly as given, so
// absolute and `..` paths test the runtime's confinement; `follow: false` clears symlink-follow):
//   {op:"print", text}            console.log(text)
//   {op:"stderr", text}           console.error(text)
//   {op:"env"}                    value: the environment as an object
//   {op:"preopen"}                value: the preopen's guest-side name
//   {op:"write", path, text}      create/truncate, write via stream; value {bytes}
//   {op:"read", path}             value: the file's text
//   {op:"list", path}             value: sorted entry names ("." for the preopen)
//   {op:"mkdir", path}            create-directory-at
//   {op:"touch", path, count}     creates `count` empty files in the directory path (0, 1, …)
//   {op:"symlink", target, path}  symlink-at
//   {op:"unlink", path}           unlink-file-at (a file or a link, never followed)
//   {op:"rename", path, to}       rename-at, within the preopen
//   (write takes `repeat`: the text written that many times over)
//   {op:"stat", path}             value: stat-at (u64s as numbers)
//   {op:"hold", path}             opens (creating) for reading and writing, and never closes it
//   {op:"fetch", url, method?, body?, repeat?, headers?}
//                                 value {status, body (first 2000 chars)}; error String(e). A
//                                 denied or failed request surfaces only as StarlingMonkey's
//                                 "TypeError: NetworkError when attempting to fetch resource"
//                                 (the wasi:http error code is not visible to JS).
//   {op:"waitfor", path, seconds?}  polls until the file exists; value: its text
//   {op:"spin"}                   prints {"op":"spin","ok":true,"value":"spinning"}, loops forever
//   {op:"balloon", chunkBytes?, trap?}
//                                 fills linear memory (see `balloon`); trap: true ends the run
//                                 with a trap at the first failed allocation
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';
import { filesystemErrorCode } from 'wasi:filesystem/types@0.2.12';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** JSON text with u64 values (stat sizes, timestamps) as numbers, or strings when too large. */
function toJson(value) {
  return JSON.stringify(value, (_key, v) => {
    if (typeof v !== 'bigint') return v;
    return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= -BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
  });
}

/** A plain-data copy of a value from a binding (bigints converted, undefined fields dropped). */
function plain(value) {
  return value === undefined ? undefined : JSON.parse(toJson(value));
}

/**
 * The text of an error. Imports' `result` err arms arrive as a thrown `ComponentError` whose
 * `payload` is the err value: a string for murmur interfaces, an enum tag string for
 * wasi:filesystem error-code, a `{tag, val}` variant for wasi:io stream-error.
 */
function errorText(error) {
  let payload = error;
  if (payload !== null && typeof payload === 'object' && 'payload' in payload) payload = payload.payload;
  if (typeof payload === 'string') return payload;
  if (payload !== null && typeof payload === 'object' && typeof payload.tag === 'string') {
    if (payload.tag === 'last-operation-failed' && payload.val) {
      try {
        const code = filesystemErrorCode(payload.val);
        if (code) return code;
      } catch {
        // not a filesystem error
      }
      try {
        return `last-operation-failed: ${payload.val.toDebugString()}`;
      } catch {
        return 'last-operation-failed';
      }
    }
    return payload.val === undefined ? payload.tag : `${payload.tag}: ${toJson(payload.val)}`;
  }
  let text;
  try {
    text = String(error);
  } catch {
    text = '[unprintable]';
  }
  if (text !== '[object Object]') return text;
  try {
    const json = toJson(error);
    return json && json !== '{}' ? json : `${Object.prototype.toString.call(error)} ${Object.getOwnPropertyNames(error).join(',')}`;
  } catch {
    return text;
  }
}

/** Drops a resource now instead of at garbage collection, when the bindings allow it. */
function dispose(resource) {
  if (!resource) return;
  const drop = resource[Symbol.dispose ?? Symbol.for('dispose')] ?? resource[Symbol.for('dispose')];
  if (typeof drop === 'function') {
    try {
      drop.call(resource);
    } catch {
      // already dropped
    }
  }
}

function environmentObject() {
  return Object.fromEntries(getEnvironment());
}

let preopenCache;

/** The single preopened directory: `{descriptor, name}`, or undefined without one. */
function preopen() {
  if (preopenCache === undefined) {
    const [first] = getDirectories();
    preopenCache = first ? { descriptor: first[0], name: first[1] } : null;
  }
  return preopenCache ?? undefined;
}

function rootDescriptor() {
  const root = preopen();
  if (!root) throw new Error('no preopened directory');
  return root.descriptor;
}

function pathFlags(action) {
  return { symlinkFollow: action.follow !== false };
}

/** Reads a whole file through `read-via-stream`, relative to the preopen, as given. */
function readFileText(path, follow = true) {
  const file = rootDescriptor().openAt({ symlinkFollow: follow }, path, {}, { read: true });
  let stream;
  try {
    stream = file.readViaStream(0n);
    const chunks = [];
    let total = 0;
    for (;;) {
      let chunk;
      try {
        chunk = stream.blockingRead(65536n);
      } catch (error) {
        const payload = error && typeof error === 'object' && 'payload' in error ? error.payload : error;
        if (payload && payload.tag === 'closed') break;
        throw error;
      }
      chunks.push(chunk);
      total += chunk.length;
    }
    const bytes = new Uint8Array(total);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.length;
    }
    return decoder.decode(bytes);
  } finally {
    dispose(stream);
    dispose(file);
  }
}

/** Writes `text` whole to an output stream, in the 4096-byte pieces blocking-write-and-flush takes at most. */
function writeAll(stream, text) {
  const bytes = encoder.encode(text);
  for (let offset = 0; offset < bytes.length; offset += 4096) {
    stream.blockingWriteAndFlush(bytes.subarray(offset, offset + 4096));
  }
  return bytes.length;
}

/** Creates or truncates a file and writes `text` through `write-via-stream`. */
function writeFileText(path, text, follow = true) {
  const file = rootDescriptor().openAt({ symlinkFollow: follow }, path, { create: true, truncate: true }, { write: true });
  let stream;
  try {
    stream = file.writeViaStream(0n);
    return writeAll(stream, text);
  } finally {
    dispose(stream);
    dispose(file);
  }
}

/** Adds `text` at the end of a file (created when missing) through `append-via-stream`. */
function appendFileText(path, text) {
  const file = rootDescriptor().openAt({ symlinkFollow: true }, path, { create: true }, { write: true });
  let stream;
  try {
    stream = file.appendViaStream();
    return writeAll(stream, text);
  } finally {
    dispose(stream);
    dispose(file);
  }
}

/**
 * Entry names, sorted. The directory is always opened with `open-at` (`.` for the preopen
 * itself): preview2-shim's preopen descriptor refuses `read-directory` with `bad-descriptor`.
 */
function listDirectory(path, follow = true) {
  const target = path === undefined || path === '' ? '.' : path;
  const directory = rootDescriptor().openAt({ symlinkFollow: follow }, target, { directory: true }, { read: true });
  let entries;
  try {
    entries = directory.readDirectory();
    const names = [];
    for (;;) {
      const entry = entries.readDirectoryEntry();
      if (!entry) break;
      names.push(entry.name);
    }
    return names.sort();
  } finally {
    dispose(entries);
    dispose(directory);
  }
}

/** Files a probe opens and never closes (`hold`), as a guest that leaks them would: open for the rest of the run. */
const heldFiles = [];

/** Responses a probe keeps without reading (`fetch` with `unread`), alive for the rest of the run. */
const unreadResponses = [];

async function fetchAction(action) {
  const init = { method: action.method ?? 'GET' };
  if (action.body !== undefined) init.body = typeof action.body === 'string' ? action.body : JSON.stringify(action.body);
  // `repeat`: the body is `body` written `repeat` times (a large body without a large task).
  if (action.repeat !== undefined) init.body = String(action.body ?? 'x').repeat(action.repeat);
  if (action.headers) init.headers = action.headers;
  const response = await fetch(action.url, init);
  // `unread`: the response is kept, its body never read, as a guest that hoards connections would.
  if (action.unread) {
    unreadResponses.push(response);
    return { status: response.status };
  }
  const body = await response.text();
  return { status: response.status, body: body.slice(0, 2000) };
}

function fetchErrorText(error) {
  let text = String(error);
  if (error && typeof error === 'object' && error.cause !== undefined) text += ` (cause: ${errorText(error.cause)})`;
  return text;
}

/** Spins forever: the runtime's CPU or wall-clock limit must stop it. */
function spin() {
  let x = 1;
  for (;;) {
    x = (Math.imul(x, 1103515245) + 12345) | 0;
    if (x === 0x7fffffff) x = 2;
  }
}

/** Thrown to end the run with a trap: `settle` lets it through, out of the export. */
class ProbeTrap extends Error {}

/**
 * Allocates and retains memory, touching every page, until the runtime stops the guest. When an
 * allocation fails with a catchable exception (SpiderMonkey's "out of memory", once linear memory
 * cannot grow) it reports the failure once per chunk size (through `report`) and carries on with
 * halved chunks down to 64 KiB, so linear memory ends up as full as it can get. After 16 failures
 * in a row at 64 KiB it lets go of the memory and returns `{exhausted: true, retainedBytes, …}`:
 * reaching that means the runtime did not stop the guest. With `trap: true` the first failure
 * is thrown out of the export instead, which componentize-js turns into an `unreachable` trap
 * (what a runtime that caps linear memory would otherwise never see: a refused `memory.grow`
 * is a catchable "out of memory" in SpiderMonkey, not a trap).
 */
function balloon(action, report) {
  const minimum = 65536;
  let retained = [];
  let chunk = Math.max(minimum, Number(action.chunkBytes) || 8 * 1024 * 1024);
  let retainedBytes = 0;
  let failures = 0;
  let failuresAtMinimum = 0;
  let reportedChunk = 0;
  let firstError;
  for (;;) {
    try {
      const block = new Uint8Array(chunk);
      block.fill(0xa5);
      retained.push(block);
      retainedBytes += chunk;
      failuresAtMinimum = 0;
    } catch (error) {
      failures += 1;
      firstError ??= String(error);
      if (action.trap) {
        retained = null;
        report({ op: 'balloon', ok: false, error: String(error), retainedBytes, chunkBytes: chunk, trapping: true });
        throw new ProbeTrap(`probe: balloon trap after ${retainedBytes} bytes: ${String(error)}`);
      }
      if (reportedChunk !== chunk) {
        reportedChunk = chunk;
        report({ op: 'balloon', ok: false, error: String(error), retainedBytes, chunkBytes: chunk });
      }
      if (chunk > minimum) chunk = Math.max(minimum, Math.floor(chunk / 2));
      else if (++failuresAtMinimum >= 16) break;
    }
  }
  const blocks = retained.length;
  retained = null;
  return { exhausted: true, retainedBytes, blocks, failures, error: firstError };
}

/** What `commonAction` returns for an op it does not know. */
const unhandled = Symbol('unhandled');

/** The actions both guests share. Returns the action's value or throws to fail it. */
async function commonAction(action, report) {
  switch (action.op) {
    case 'print':
      console.log(String(action.text ?? ''));
      return null;
    case 'stderr':
      console.error(String(action.text ?? ''));
      return null;
    case 'env':
      return environmentObject();
    case 'write':
      return { bytes: writeFileText(action.path, String(action.text ?? '').repeat(action.repeat ?? 1), action.follow !== false) };
    case 'read':
      return readFileText(action.path, action.follow !== false);
    case 'list':
      return listDirectory(action.path, action.follow !== false);
    case 'mkdir':
      rootDescriptor().createDirectoryAt(action.path);
      return null;
    case 'touch':
      for (let index = 0; index < Number(action.count ?? 1); index++) {
        dispose(rootDescriptor().openAt({ symlinkFollow: false }, `${action.path}/${index}`, { create: true }, { write: true }));
      }
      return { created: Number(action.count ?? 1) };
    case 'symlink':
      rootDescriptor().symlinkAt(action.target, action.path);
      return null;
    case 'unlink':
      rootDescriptor().unlinkFileAt(action.path);
      return null;
    case 'rename':
      rootDescriptor().renameAt(action.path, rootDescriptor(), action.to);
      return null;
    case 'stat':
      return plain(rootDescriptor().statAt(pathFlags(action), action.path));
    case 'stream-zeroes': {
      // Zeroes through a file's output stream in one call, as many as asked: past what check-write permits, a trap.
      const file = rootDescriptor().openAt({ symlinkFollow: false }, action.path, { create: true }, { write: true });
      const stream = file.writeViaStream(0n);
      stream.blockingWriteZeroesAndFlush(BigInt(action.count));
      dispose(stream);
      dispose(file);
      return null;
    }
    case 'pread': {
      // One positioned read through a descriptor opened as asked: what `read` answers, or its error code.
      const opened = rootDescriptor().openAt(
        { symlinkFollow: false },
        action.path,
        action.directory ? { directory: true } : {},
        action.write ? { write: true } : { read: true },
      );
      try {
        const [bytes, eof] = opened.read(BigInt(action.length ?? 16), BigInt(action.offset ?? 0));
        return { bytes: bytes.byteLength, eof };
      } finally {
        dispose(opened);
      }
    }
    case 'hold':
      heldFiles.push(rootDescriptor().openAt({ symlinkFollow: true }, action.path, { create: true }, { read: true, write: true }));
      return null;
    case 'preopen': {
      const root = preopen();
      return root ? root.name : null;
    }
    case 'fetch':
      return await fetchAction(action);
    case 'waitfor': {
      // Polls until the file exists (what a test arranges to let the guest finish), up to `seconds`.
      const until = Date.now() + Number(action.seconds ?? 60) * 1000;
      for (;;) {
        try {
          return readFileText(action.path, true);
        } catch (error) {
          if (Date.now() > until) throw new Error(`${action.path} did not appear within ${action.seconds ?? 60}s`);
        }
      }
    }
    case 'spin':
      report({ op: 'spin', ok: true, value: 'spinning' });
      spin();
      return null;
    case 'balloon':
      return balloon(action, report);
    default:
      return unhandled;
  }
}

/** Runs one action through `handle`, turning a throw into `{ok: false}`. */
async function settle(action, handle) {
  const op = action && typeof action === 'object' ? action.op : undefined;
  try {
    const value = await handle(action);
    if (value === unhandled) return { op, ok: false, error: `unknown op ${toJson(op)}` };
    return { op, ok: true, value: value === undefined ? null : plain(value) };
  } catch (error) {
    if (error instanceof ProbeTrap) throw error;
    return { op, ok: false, error: op === 'fetch' ? fetchErrorText(error) : errorText(error) };
  }
}
