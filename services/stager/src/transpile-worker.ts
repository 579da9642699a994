import { parentPort } from 'node:worker_threads';
import { transpile } from '@bytecodealliance/jco';
import type { TRANSPILE_OPTIONS } from '@murmur/shared';

/**
 * Runs jco's transpiler off the stager's event loop: a 12 MB component takes about a second of
 * synchronous work, during which a stager on the main thread could answer nothing else (not even
 * its health check). Nothing here touches preview2-shim's preopens; transpiling bytes needs none.
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

if (parentPort) {
  const port = parentPort;
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
