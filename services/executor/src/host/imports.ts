import type { BridgeClient } from './bridge.js';
import { confineOpensTo, holdBeneathPreopen } from './beneath-preopen.js';
import { loadShimIo } from './in-thread-io.js';
import type { BodyCalls } from './relayed-body.js';
import { REQUEST_BODY_LIMIT_BYTES } from './request-body.js';
import type { HttpCheckVerdict } from './protocol.js';
import type { BodyRead } from './response-bodies.js';
import type { RelayedOutcome, RelayedRequest } from './wasi-http.js';

/**
 * The import object of one WebAssembly instance, built from its grants and nothing else.
 *
 * Every interface is written here explicitly. preview2-shim supplies only pieces that hold no
 * process-wide state of ours (resource classes, clocks, randomness, a filesystem created for this
 * instance with this instance's single preopen); its defaults — the host's environment, argv,
 * cwd, stdio, `process.exit`, its own network — never reach a guest. `wasi:sockets` is not offered
 * at all: a component that imports it fails to link, which is the refusal.
 */

/** How a guest's `wasi:cli/exit` ends its run: thrown through the guest, caught by the runner. */
export class GuestExit extends Error {
  constructor(readonly code: number) {
    super(`the guest exited with code ${code}`);
  }
}

export interface GuestGrants {
  /** The host directory the guest sees as `.`: its one preopen; empty for none (a hook without a filesystem grant). */
  preopen: string;
  env: Array<[string, string]>;
  /** Whose network grant the guest's requests are judged under. */
  grant: string;
  stdout(bytes: Uint8Array): void;
  stderr(bytes: Uint8Array): void;
  bridge: BridgeClient;
  /** Imports only a capsule has (`murmur:tool-registry`, `artifact-manager`, `shell`, `message`). */
  capsuleImports: boolean;
  /** The import only a hook has: `murmur:runtime/inference`, one completion through the session's driver. */
  hookImports?: boolean;
  /** `limits.memory_bytes`: no list the host makes for the guest can be larger than what its memory may hold. */
  memoryLimitBytes?: number;
}

/** The guest's `Descriptor.openAt`, minus the `mutate-directory` flag the shim refuses. */
function allowMutateDirectory(types: { Descriptor: { prototype: Record<string, unknown> } }): void {
  const prototype = types.Descriptor.prototype as { openAt: (this: unknown, ...args: unknown[]) => unknown; __murmurPatched?: boolean };
  if (prototype.__murmurPatched) return;
  const openAt = prototype.openAt;
  // Rust guests open files for writing with `mutate-directory` set. This worker runs exactly one
  // guest, so adjusting the class here is per instance, not process-wide.
  prototype.openAt = function openAtWithoutMutate(this: unknown, pathFlags: unknown, path: unknown, openFlags: unknown, descriptorFlags: unknown) {
    const given = descriptorFlags as Record<string, unknown> | undefined;
    const flags = given?.mutateDirectory ? { ...given, mutateDirectory: false } : given;
    return openAt.call(this, pathFlags, path, openFlags, flags);
  };
  prototype.__murmurPatched = true;
}

/** A `wasi:http/types#error-code` value; the cases that carry a payload get one. */
function errorCode(code: string, reason: string): { tag: string; val?: unknown } {
  if (code === 'internal-error') return { tag: code, val: reason };
  if (code === 'DNS-error') return { tag: code, val: { rcode: undefined, infoCode: undefined } };
  return { tag: code };
}

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('base64');
}

/**
 * Only what the component imports is built, and only the shim modules those pieces need are
 * loaded: a component that imports no WASI at all starts without loading any of it.
 */
const loaded = new Map<string, ReturnType<typeof importPieces>>();

/** The shim modules (and ours) a component's imports need, loaded once per worker. */
function loadPieces(needed: readonly string[]): ReturnType<typeof importPieces> {
  const key = needed.join(' ');
  let pieces = loaded.get(key);
  if (!pieces) {
    pieces = importPieces(needed);
    loaded.set(key, pieces);
  }
  return pieces;
}

async function importPieces(needed: readonly string[]) {
  const wants = (prefix: string): boolean => needed.some((name) => name.startsWith(prefix));
  const usesStreams = wants('wasi:cli/') || wants('wasi:io/') || wants('wasi:http/') || wants('wasi:filesystem/');
  const usesClocks = usesStreams || wants('wasi:clocks/');
  // First the shim's io module, its I/O answered in this thread; every other shim module shares it.
  if (usesClocks || wants('wasi:random/')) await loadShimIo();
  return Promise.all([
    usesClocks ? import('@bytecodealliance/preview2-shim/io') : undefined,
    usesClocks ? import('@bytecodealliance/preview2-shim/clocks') : undefined,
    wants('wasi:random/') ? import('@bytecodealliance/preview2-shim/random') : undefined,
    wants('wasi:filesystem/') ? import('@bytecodealliance/preview2-shim/filesystem') : undefined,
    usesStreams ? import('./streams.js') : undefined,
    wants('wasi:http/') ? import('./wasi-http.js') : undefined,
    wants('wasi:http/') ? import('./relayed-body.js') : undefined,
  ]);
}

/**
 * `wasi:random/random` whose `get-random-bytes` refuses, before making them, more bytes than the
 * guest's memory may hold: the length is the guest's to choose, and the shim made any it was
 * asked for (2 GB of the host's memory under a 16 MiB cap, then a raw RangeError).
 */
function boundedRandom<Random extends { getRandomBytes(len: bigint): Uint8Array }>(random: Random, memoryLimitBytes: number | undefined): Random {
  if (memoryLimitBytes === undefined) return random;
  const refuseOver = (len: bigint | number): void => {
    if (BigInt(len) > BigInt(memoryLimitBytes)) {
      throw new Error(
        `wasi:random get-random-bytes asked for ${len} bytes, more than the guest's memory may hold (capabilities.limits.memory_bytes: ${memoryLimitBytes})`,
      );
    }
  };
  const getRandomBytes = (len: bigint): Uint8Array => {
    refuseOver(len);
    return random.getRandomBytes(len);
  };
  // The shim's own lowering, which fills the guest's memory directly, is kept behind the same check.
  const LOWER = Symbol.for('cabiLower');
  type Lowering = (context: unknown) => (len: bigint | number, retptr: number) => void;
  const lower = (random.getRandomBytes as unknown as Record<symbol, Lowering | undefined>)[LOWER];
  if (lower) {
    (getRandomBytes as unknown as Record<symbol, Lowering>)[LOWER] = (context) => {
      const lowered = lower(context);
      return (len, retptr) => {
        refuseOver(len);
        lowered(len, retptr);
      };
    };
  }
  return { ...random, getRandomBytes };
}

/** Loads the pieces a component will need before its job arrives: a spare worker's head start. */
export async function preloadImports(needed: readonly string[]): Promise<void> {
  await loadPieces(needed);
}

export async function buildImports(grants: GuestGrants, needed: readonly string[]): Promise<Record<string, unknown>> {
  const [io, clocks, random, filesystemModule, streamsModule, httpModule, relayedBody] = await loadPieces(needed);
  const imports: Record<string, unknown> = {};
  if (streamsModule) Object.assign(imports, cliImports(grants, streamsModule));
  if (io && clocks) {
    imports['wasi:clocks/monotonic-clock'] = clocks.monotonicClock;
    imports['wasi:clocks/wall-clock'] = clocks.wallClock;
    imports['wasi:io/error'] = io.error;
    // With wasi:http, a list may hold a relayed body's pollable, which only our poll can wait on.
    imports['wasi:io/poll'] = relayedBody ? { ...io.poll, poll: relayedBody.pollWithBodies } : io.poll;
    imports['wasi:io/streams'] = io.streams;
  }
  if (random) imports['wasi:random/random'] = boundedRandom(random.random, grants.memoryLimitBytes);
  if (!filesystemModule) confineOpensTo(undefined);
  if (filesystemModule) {
    // The shim's typings describe its browser build; this is the Node build, which takes host paths.
    const filesystem = (
      filesystemModule.createFilesystem as unknown as (config: { preopens: Record<string, string> }) => { types: unknown; preopens: unknown }
    )({ preopens: grants.preopen === '' ? {} : { '.': grants.preopen } });
    allowMutateDirectory(filesystem.types as unknown as { Descriptor: { prototype: Record<string, unknown> } });
    // Whatever the shim resolved, what it reaches must still lie beneath the preopen when it does (`beneath-preopen.ts`).
    holdBeneathPreopen((filesystem.types as { Descriptor: { prototype: object } }).Descriptor, grants.preopen);
    imports['wasi:filesystem/types'] = filesystem.types;
    imports['wasi:filesystem/preopens'] = filesystem.preopens;
  }
  if (httpModule) {
    const http = httpModule.relayedHttp(
      (request) => relay(grants, request),
      (url) => {
        const verdict = grants.bridge.call<HttpCheckVerdict>('http-check', { url, grant: grants.grant });
        return verdict.allowed ? undefined : errorCode(verdict.code, verdict.reason);
      },
      bodyCalls(grants.bridge),
    );
    imports['wasi:http/types'] = http.types;
    imports['wasi:http/outgoing-handler'] = http.outgoingHandler;
  }
  return { ...imports, ...murmurImports(grants) };
}

/** An outgoing request, relayed to the executor through the bridge: its answer, or the refusal. */
function relay(grants: GuestGrants, request: RelayedRequest): RelayedOutcome {
  const result = grants.bridge.call<
    { outcome: 'response'; response: { status: number; headers: Array<[string, string]>; body: number } } | { outcome: 'denied'; code: string; reason: string }
  >('http', {
    method: request.method,
    url: request.url,
    headers: request.headers,
    ...(request.bodyBytes > REQUEST_BODY_LIMIT_BYTES
      ? { oversized_bytes: request.bodyBytes }
      : request.body.byteLength > 0
        ? { body_base64: base64(request.body) }
        : {}),
    grant: grants.grant,
  });
  if (result.outcome === 'denied') return { outcome: 'error', code: errorCode(result.code, result.reason) };
  return { outcome: 'response', status: result.response.status, headers: result.response.headers, body: result.response.body };
}

/** How a relayed response body is read: each call crosses the bridge to the host's main thread, which holds what arrived. */
function bodyCalls(bridge: BridgeClient): BodyCalls {
  return {
    read: (body, max, wait) => bridge.call<BodyRead>('http-body-read', { body, max, wait }),
    wait: (bodies, timeoutMs) => bridge.call<number[]>('http-body-wait', { bodies, ...(timeoutMs === undefined ? {} : { timeout_ms: timeoutMs }) }),
    release: (body) => void bridge.call('http-body-release', { body }),
  };
}

/** `wasi:cli`: the granted environment, captured stdio, no stdin, no terminal, an `exit` that is contained. */
function cliImports(grants: GuestGrants, streams: typeof import('./streams.js')): Record<string, unknown> {
  const stdout = new streams.SinkOutputStream(grants.stdout);
  const stderr = new streams.SinkOutputStream(grants.stderr);
  const stdin = new streams.MemoryInputStream(new Uint8Array());
  class TerminalInput {}
  class TerminalOutput {}
  return {
    'wasi:cli/environment': {
      getEnvironment: () => grants.env.map(([name, value]) => [name, value]),
      getArguments: () => [],
      initialCwd: () => undefined,
    },
    'wasi:cli/exit': {
      exit(status: { tag: string }) {
        throw new GuestExit(status.tag === 'ok' ? 0 : 1);
      },
      exitWithCode(code: number) {
        throw new GuestExit(code);
      },
    },
    'wasi:cli/stdin': { getStdin: () => stdin },
    'wasi:cli/stdout': { getStdout: () => stdout },
    'wasi:cli/stderr': { getStderr: () => stderr },
    'wasi:cli/terminal-input': { TerminalInput },
    'wasi:cli/terminal-output': { TerminalOutput },
    'wasi:cli/terminal-stdin': { getTerminalStdin: () => undefined },
    'wasi:cli/terminal-stdout': { getTerminalStdout: () => undefined },
    'wasi:cli/terminal-stderr': { getTerminalStderr: () => undefined },
  };
}

/** The murmur interfaces: tools, shell, messages, artifacts (capsules), text and task (everyone). */
function murmurImports(grants: GuestGrants): Record<string, unknown> {
  const imports: Record<string, unknown> = {};
  // Not a hook's: its world imports `inference` alone. Given one, a hook with no grant spoke in the
  // agent's voice on the task's stream, asked the user for input in the task's name (and read the
  // reply), and left the task waiting on an ask nobody would answer.
  if (!grants.hookImports) {
    // The host decides what these mean: chunks reach A2A observers of the current task (a no-op
    // outside one, as upstream), and request-input pauses that task until a reply or its timeout.
    // An error from request-input (timeout, cancel, no task) traps the guest: the WIT function
    // returns a plain string, so there is no error arm to lower it into.
    imports['murmur:text/chunks'] = {
      emitChunk: (chunk: string) => void grants.bridge.call('chunk', { kind: 'text', text: chunk }),
      emitThinkingChunk: (chunk: string) => void grants.bridge.call('chunk', { kind: 'thinking', text: chunk }),
    };
    imports['murmur:task/task'] = {
      requestInput: (prompt: string) => grants.bridge.call<string>('request-input', { prompt }),
    };
  }
  if (grants.hookImports) {
    // `inference` uses the lifecycle's `message` record, so the hook world imports the lifecycle
    // interface too (a `use` in an imported interface names an imported one), functions and all.
    // The host is the one that calls them; a hook that calls one itself gets an error.
    imports['murmur:hook/lifecycle'] = Object.fromEntries(
      ['onStage', 'onSessionStart', 'onTaskStart', 'onInference', 'onToolCall', 'onShell', 'onCompaction', 'onTaskEnd', 'onSessionEnd'].map((name) => [
        name,
        () => {
          throw new Error(`murmur:hook/lifecycle#${name} is the hook's own export; the runtime calls it, a hook does not import it`);
        },
      ]),
    );
    imports['murmur:runtime/inference'] = {
      runInference: (request: unknown) => {
        const outcome = grants.bridge.call<{ ok: true; value: unknown } | { ok: false; error: string }>('run-inference', request);
        if (!outcome.ok) throw outcome.error;
        return outcome.value;
      },
    };
  }
  if (grants.capsuleImports) {
    const call = <T>(op: string, payload: unknown): T => grants.bridge.call<T>(op, payload);
    // `result<T, string>` imports: the ok value is returned; the err string is thrown as is (a
    // non-Error value), which jco lowers into the guest's err arm rather than trapping it.
    const fallible =
      <T>(op: string) =>
      (payload: unknown): T => {
        const outcome = call<{ ok: true; value: T } | { ok: false; error: string }>(op, payload);
        if (!outcome.ok) throw outcome.error;
        return outcome.value;
      };
    // A capsule that calls tools imports `murmur:tool/run` too, for the types `invoke` shares with
    // it; jco wants a `run` there, but only tools export it, so calling it is an error.
    imports['murmur:tool/run'] = {
      run: () => {
        throw new Error('murmur:tool/run is exported by tools; a capsule calls tools through murmur:tool-registry/invoke');
      },
    };
    imports['murmur:tool-registry/invoke'] = {
      invoke: (name: string, input: { data?: string; logPath?: string }) => fallible('invoke')({ name, input }),
    };
    imports['murmur:shell/execute'] = {
      run: (binary: string, args: string[], env: Array<[string, string]>) => fallible('shell')({ binary, args, env }),
    };
    imports['murmur:message/send'] = {
      send: (peerUrl: string, message: { messageId: string; contextId?: string; text: string }) => fallible('send')({ peer_url: peerUrl, message }),
    };
    imports['murmur:artifact-manager/manage'] = {
      list: () => call('manage-list', {}),
      describe: (name: string) => fallible('manage-describe')({ name }),
      search: (query: string) => fallible('manage-search')({ query }),
      pull: (name: string, version: string) => fallible('manage-pull')({ name, version }),
      remove: (name: string) => fallible('manage-remove')({ name }),
      diagnostics: () => fallible('manage-diagnostics')({}),
    };
  }
  return imports;
}
