import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { createSignal, serveBridge } from '../src/host/bridge.js';

/**
 * The guest's end of the bridge blocks its thread, so it runs in a worker of its own here (loading
 * the built module: a worker cannot load TypeScript), and this thread plays the host's main thread.
 */
const built = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'host', 'bridge.js');

/** Makes `ops.length` bridge calls in a worker, one after the other, and reports their answers or the first error. */
function callsInWorker(port: MessagePort, signal: Int32Array, ops: string[]): { outcome: Promise<{ answers?: unknown[]; error?: string }>; worker: Worker } {
  const source = `
    const { parentPort, workerData } = require('node:worker_threads');
    import(${JSON.stringify(pathToFileURL(built).href)}).then(({ BridgeClient }) => {
      const client = new BridgeClient(workerData.port, workerData.signal);
      const answers = [];
      try {
        for (const op of workerData.ops) answers.push(client.call(op, null));
        parentPort.postMessage({ answers });
      } catch (error) {
        parentPort.postMessage({ error: error.message });
      }
    });
  `;
  const worker = new Worker(source, { eval: true, workerData: { port, signal, ops }, transferList: [port] });
  const outcome = new Promise<{ answers?: unknown[]; error?: string }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return { outcome, worker };
}

describe('the bridge between a guest’s worker and the host', () => {
  const workers: Worker[] = [];

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((worker) => worker.terminate()));
  });

  it('answers each call with its own reply, in order', async () => {
    const { port1, port2 } = new MessageChannel();
    const signal = createSignal();
    serveBridge(port1, signal, async (op) => `${op} done`);
    const { outcome, worker } = callsInWorker(port2, signal, ['first', 'second', 'third']);
    workers.push(worker);
    expect(await outcome).toEqual({ answers: ['first done', 'second done', 'third done'] });
    port1.close();
  });

  it('is not fooled by the previous answer’s wake-up landing after the next call began waiting', async () => {
    // The host's end, as serveBridge answers, plus one more wake-up after the first answer: what a
    // main thread descheduled between storing an answer and notifying does, when the worker saw
    // the stored answer without being woken, took it, and made its next call meanwhile.
    const { port1, port2 } = new MessageChannel();
    const signal = createSignal();
    let calls = 0;
    port1.on('message', ({ op }: { op: string }) => {
      calls += 1;
      const answer = (): void => {
        port1.postMessage({ ok: true, value: `${op} done` });
        Atomics.store(signal, 0, 1);
      };
      if (calls === 1) {
        answer();
        Atomics.notify(signal, 0);
        setTimeout(() => Atomics.notify(signal, 0), 30);
      } else {
        // The second answer comes well after the stale wake-up.
        setTimeout(() => {
          answer();
          Atomics.notify(signal, 0);
        }, 120);
      }
    });
    const { outcome, worker } = callsInWorker(port2, signal, ['first', 'second']);
    workers.push(worker);
    expect(await outcome).toEqual({ answers: ['first done', 'second done'] });
    port1.close();
  });
});
