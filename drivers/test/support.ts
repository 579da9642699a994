import { loadCommon, loadCore } from '../load-core.mjs';

/** A driver's core.js, evaluated after common.js as the build does: the top-level functions of both by name. */
export function core(driver: 'anthropic' | 'openai') {
  return loadCore(coreUrl(driver));
}

type Sink = (chunk: string) => void;

/**
 * A driver's core, loaded as `core` does, with common.js's generic `parseResponse` and `drive`
 * bound to the driver's `DIALECT`: `parse(status, body, onText?, onThinking?)` and
 * `run(inputData, host)` are what the driver does with an HTTP response and with a tool input.
 */
export function driver(name: 'anthropic' | 'openai'): Record<string, any> & {
  parse(status: number, body: string, onText?: Sink, onThinking?: Sink): any;
  run(inputData: string | undefined, host: object): Promise<any>;
} {
  const loaded = core(name);
  return {
    ...loaded,
    parse: (status: number, body: string, onText?: Sink, onThinking?: Sink) => loaded.parseResponse(status, body, onText, onThinking, loaded.DIALECT),
    run: (inputData: string | undefined, host: object) => loaded.drive(inputData, host, loaded.DIALECT),
  };
}

/** drivers/common.js alone, evaluated: the shared helpers by name. */
export function common() {
  return loadCommon();
}

/** The file URL of a driver's core.js. */
export function coreUrl(driver: 'anthropic' | 'openai'): URL {
  return new URL(`../murmur-driver-${driver}/core.js`, import.meta.url);
}

export interface FetchCall {
  url: string;
  init: { method: string; headers: Record<string, string>; body: string };
}

/** A fake `fetch` answering every request with `status` and `body`, recording the calls. */
export function fakeFetch(status: number, body: string) {
  const calls: FetchCall[] = [];
  const fetch = async (url: string, init: FetchCall['init']) => {
    calls.push({ url, init });
    return { status, text: async () => body };
  };
  return { fetch, calls };
}

/**
 * A fake `fetch` whose response body streams: `body`'s UTF-8 bytes in pieces of `pieceBytes`
 * (so cut mid-line and mid-character), read through `response.body.getReader()` as
 * StarlingMonkey's fetch gives it. `log` records each read as `read <n>` (n counting from 1) and,
 * with `sinks(log)`, each chunk as it is emitted, so a test can see what was emitted before what
 * was read. `cancelled` says whether the driver stopped reading early.
 */
export function streamingFetch(status: number, body: string, pieceBytes: number, log: string[] = []) {
  const bytes = new TextEncoder().encode(body);
  const state = { cancelled: false };
  const fetch = async () => {
    let offset = 0;
    let reads = 0;
    const reader = {
      async read() {
        if (state.cancelled || offset >= bytes.length) return { done: true, value: undefined };
        const value = bytes.slice(offset, offset + pieceBytes);
        offset += value.length;
        log.push(`read ${++reads}`);
        return { done: false, value };
      },
      async cancel() {
        state.cancelled = true;
      },
    };
    return {
      status,
      body: { getReader: () => reader },
      text: async () => {
        throw new Error('a streaming body is read through its reader');
      },
    };
  };
  return { fetch, log, state, pieces: Math.ceil(bytes.length / pieceBytes) };
}

/** The chunk sinks of a run, recording what the driver streamed. */
export function sinks(log?: string[]) {
  const text: string[] = [];
  const thinking: string[] = [];
  return {
    text,
    thinking,
    emitChunk: (chunk: string) => {
      text.push(chunk);
      log?.push(`text ${chunk}`);
    },
    emitThinkingChunk: (chunk: string) => {
      thinking.push(chunk);
      log?.push(`thinking ${chunk}`);
    },
  };
}

/** An SSE body from `[event, data]` pairs (`event` empty for data-only streams). */
export function sse(events: Array<[string, unknown]>): string {
  return events.map(([event, data]) => `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`).join('');
}

export const ENV = [
  ['MURMUR_INFERENCE_ENDPOINT', 'https://api.example.test/'],
  ['MURMUR_INFERENCE_API_KEY', 'sk-test'],
  ['HOME', '/'],
] as const;
