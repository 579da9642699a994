// The component entry of murmur-hook-eval. Built as scoring.js followed by this file (one source:
// componentize-js resolves no relative imports), so scoring.js's functions are in scope here.
//
// One instance lives for the session (the runtime keeps a hook resident). It remembers the tools
// the session calls; at each session end it scores the session's totals and replaces `eval.jsonl`
// in its preopen — whole, through a temporary file and a rename, so a reader never sees half a
// file, and a session with several tasks (several session ends, cumulative totals) leaves the
// scores of its last. It changes nothing in the session: every call answers `none`.
//
// Its configuration is the environment the runtime gives hooks: `MURMUR_EVAL_CONFIG` (the
// manifest's observability.eval as JSON), `MURMUR_DATASET_ID` and `MURMUR_CASE_ID` (set by
// `mur eval run`). What it cannot use it says in `logs/hook-murmur-hook-eval.log` under its
// preopen, or on stderr (the session's log) when it has none.
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const HOOK_NAME = 'murmur-hook-eval';
const NONE = { tag: 'none' };
/** blocking-write-and-flush takes at most 4096 bytes a call. */
const WRITE_CHUNK_BYTES = 4096;
/** How jco's bindings name a resource's drop (StarlingMonkey may lack `Symbol.dispose`). */
const DISPOSE = Symbol.dispose ?? Symbol.for('dispose');

const observedTools = [];
let evalConfig;

function environment() {
  return Object.fromEntries(getEnvironment());
}

/** The preopen (the entry's `filesystem.scope`), or undefined without a filesystem grant. */
function directory() {
  const [first] = getDirectories();
  return first?.[0];
}

/** A WASI error's code (`no-entry`, `access`…), or the thrown value's text. */
function describeError(error) {
  if (error !== null && typeof error === 'object' && 'payload' in error) return String(error.payload);
  return error instanceof Error ? error.message : String(error);
}

/** Writes `text` to `path` under `dir`: appended, or replacing what was there. */
function writeText(dir, path, text, append) {
  const file = dir.openAt({ symlinkFollow: false }, path, { create: true, truncate: !append }, { write: true });
  const stream = append ? file.appendViaStream() : file.writeViaStream(0n);
  try {
    const bytes = new TextEncoder().encode(text);
    for (let offset = 0; offset < bytes.length; offset += WRITE_CHUNK_BYTES) {
      stream.blockingWriteAndFlush(bytes.subarray(offset, offset + WRITE_CHUNK_BYTES));
    }
  } finally {
    stream[DISPOSE]?.();
    file[DISPOSE]?.();
  }
}

function warn(text) {
  const dir = directory();
  if (dir) {
    try {
      try {
        dir.createDirectoryAt('logs');
      } catch {
        // there already
      }
      writeText(dir, `logs/hook-${HOOK_NAME}.log`, `${text}\n`, true);
      return;
    } catch {
      // no room for a log: stderr still reaches the session's log
    }
  }
  console.error(`[${HOOK_NAME}] ${text}`);
}

/** The configuration, read (and its problems said) once per instance. */
function config() {
  if (evalConfig === undefined) {
    evalConfig = readEvalConfig(environment().MURMUR_EVAL_CONFIG);
    for (const warning of evalConfig.warnings) warn(warning);
  }
  return evalConfig;
}

function onSessionEnd(event) {
  const current = config();
  if (current.configured === 0) return NONE;
  const dir = directory();
  if (!dir) {
    warn('no directory to write eval.jsonl in: grant this hook capabilities.filesystem.scope: . on its artifacts: entry');
    return NONE;
  }
  const env = environment();
  const session = {
    turns: Number(event.totalTurns),
    inputTokens: Number(event.totalInputTokens),
    outputTokens: Number(event.totalOutputTokens),
    exitStatus: event.exitStatus,
  };
  const ids = { datasetId: env.MURMUR_DATASET_ID || current.datasetId, caseId: env.MURMUR_CASE_ID || null };
  const text = evalFileText(evalRecords(current, session, observedTools, ids, Date.now()));
  try {
    writeText(dir, '.eval.jsonl.tmp', text, false);
    dir.renameAt('.eval.jsonl.tmp', dir, 'eval.jsonl');
  } catch (error) {
    // An `err` answer: the runtime logs it and traces a hook_dispatch_error.
    throw `${HOOK_NAME} could not write eval.jsonl: ${describeError(error)}`;
  }
  return NONE;
}

export const lifecycle = {
  onStage: () => NONE,
  onSessionStart: () => {
    config();
    return NONE;
  },
  onTaskStart: () => NONE,
  onInference: () => NONE,
  onToolCall: (event) => {
    observedTools.push(event.toolName);
    return NONE;
  },
  onShell: () => NONE,
  onCompaction: () => NONE,
  onTaskEnd: () => NONE,
  onSessionEnd,
};
