import { type MessagePort, receiveMessageOnPort } from 'node:worker_threads';

/**
 * Synchronous calls from a guest's worker thread to the host's main thread.
 *
 * WebAssembly calls its imports synchronously, but what some imports do is asynchronous (an HTTP
 * request relayed to the executor, a tool run in another worker, a subprocess). The guest's worker
 * posts the call on a private port and sleeps on a shared word (`Atomics.wait`); the main thread,
 * whose event loop is free, does the work, posts the reply and wakes it; the worker takes the reply
 * off the port synchronously. One call is outstanding at a time, because the caller is asleep.
 * A deadline that terminates the worker ends a sleeping call with it.
 */

interface BridgeReply {
  ok: boolean;
  value?: unknown;
  error?: string;
}

/** An error the main thread answered with: its message is what the guest should see. */
export class BridgeError extends Error {}

const WAITING = 0;
const ANSWERED = 1;

export function createSignal(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(4));
}

/** The worker's end. */
export class BridgeClient {
  constructor(
    private readonly port: MessagePort,
    private readonly signal: Int32Array,
  ) {}

  call<T>(op: string, payload: unknown): T {
    Atomics.store(this.signal, 0, WAITING);
    this.port.postMessage({ op, payload });
    // Only the word says this call was answered, never a wake alone: the main thread stores and
    // then notifies, and the notify of the previous call's answer can land after this call began
    // waiting (the worker saw that answer stored, took it, and went on), waking it with nothing.
    while (Atomics.load(this.signal, 0) === WAITING) Atomics.wait(this.signal, 0, WAITING);
    const received = receiveMessageOnPort(this.port);
    if (!received) throw new BridgeError(`the host did not answer '${op}'`);
    const reply = received.message as BridgeReply;
    if (!reply.ok) throw new BridgeError(reply.error ?? `'${op}' failed`);
    return reply.value as T;
  }
}

export type BridgeHandler = (op: string, payload: unknown) => Promise<unknown>;

/** The main thread's end: answers each call with `handler`'s value or error message. */
export function serveBridge(port: MessagePort, signal: Int32Array, handler: BridgeHandler): void {
  port.on('message', (message: { op: string; payload: unknown }) => {
    void (async () => {
      let reply: BridgeReply;
      try {
        reply = { ok: true, value: await handler(message.op, message.payload) };
      } catch (error) {
        reply = { ok: false, error: error instanceof Error ? error.message : String(error) };
      }
      port.postMessage(reply);
      Atomics.store(signal, 0, ANSWERED);
      Atomics.notify(signal, 0);
    })();
  });
}
