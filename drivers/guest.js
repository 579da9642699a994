// The component entry of every first-party driver. Built as drivers/common.js, then the driver's
// core.js, then this file (one source: componentize-js resolves no relative imports), so the
// functions of both and the driver's `DIALECT` are in scope here. Everything a driver does lives in
// common.js's `drive`, speaking the API of core.js's `DIALECT`; this file only hands it the host:
// the environment, StarlingMonkey's global `fetch` and the chunk sinks.
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { emitChunk, emitThinkingChunk } from 'murmur:text/chunks@0.1.0';

export const run = {
  async run(input) {
    try {
      return await drive(
        input?.data,
        {
          getEnvironment,
          // Called as a plain function: a web `fetch` may refuse another `this`.
          fetch: (url, init) => fetch(url, init),
          emitChunk,
          emitThinkingChunk,
        },
        DIALECT,
      );
    } catch (error) {
      // drive never rejects; this is the last guard, since a throw out of `run` traps.
      return errorResult(`driver: ${describeError(error)}`);
    }
  },
};
