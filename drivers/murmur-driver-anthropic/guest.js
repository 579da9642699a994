// murmur-driver-anthropic: the component entry. Built as drivers/common.js, then core.js, then
// this file (one source: componentize-js resolves no relative imports), so the functions of both
// are in scope here. Everything the driver does lives in core.js's `driveAnthropic`; this file only
// hands it the host: the environment, StarlingMonkey's global `fetch` and the chunk sinks.
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { emitChunk, emitThinkingChunk } from 'murmur:text/chunks@0.1.0';

export const run = {
  async run(input) {
    try {
      return await driveAnthropic(input?.data, {
        getEnvironment,
        // Called as a plain function: a web `fetch` may refuse another `this`.
        fetch: (url, init) => fetch(url, init),
        emitChunk,
        emitThinkingChunk,
      });
    } catch (error) {
      // driveAnthropic never rejects; this is the last guard, since a throw out of `run` traps.
      return errorResult(`driver: ${describeError(error)}`);
    }
  },
};
