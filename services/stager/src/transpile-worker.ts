import { parentPort } from 'node:worker_threads';
import { transpile } from '@bytecodealliance/jco';
import type { TRANSPILE_OPTIONS } from '@murmur/shared';

/**
 * Runs jco's transpiler off the stager's event loop: a 12 MB component takes about a second of
 * synchronous work, during which a stager on the main thread could answer nothing else (not even
 * its health check). Nothing here touches preview2-shim's preopens; transpiling bytes needs none.
 *
 * It says `ready` once jco has transpiled an empty component: jco compiles its own WebAssembly on
 * its first call (~0.1 s), which would otherwise count against the first component's deadline
 * (`transpile-queue.ts`). It is given one job at a time.
 */

export interface TranspileJob {
  id: number;
  name: string;
  bytes: Uint8Array;
  /** `TRANSPILE_OPTIONS`, sent by the stager: this worker loads jco and nothing of the contracts. */
  options: typeof TRANSPILE_OPTIONS;
}

export type TranspileReply =
  | { id: number; ok: true; files: Record<string, Uint8Array>; imports: string[]; exports: string[] }
  | { id: number; ok: false; message: string };

export type TranspileWorkerMessage = { type: 'ready' } | TranspileReply;

/** The smallest component there is: a header and nothing else. */
const EMPTY_COMPONENT = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]);

if (parentPort) {
  const port = parentPort;
  await transpile(EMPTY_COMPONENT, { name: 'warm-up' }).catch(() => {});
  port.postMessage({ type: 'ready' } satisfies TranspileWorkerMessage);
  port.on('message', (job: TranspileJob) => {
    void (async () => {
      try {
        const result = await transpile(job.bytes, { ...job.options, name: job.name });
        const files = Object.fromEntries(Object.entries(result.files).filter(([file]) => !file.endsWith('.d.ts')));
        const reply: TranspileReply = { id: job.id, ok: true, files, imports: result.imports, exports: result.exports.map(([name]) => name) };
        port.postMessage(
          reply,
          Object.values(files).map((file) => file.buffer as ArrayBuffer),
        );
      } catch (error) {
        const reply: TranspileReply = { id: job.id, ok: false, message: error instanceof Error ? error.message : String(error) };
        port.postMessage(reply);
      }
    })();
  });
}
