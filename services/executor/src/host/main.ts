#!/usr/bin/env node
import { CapsuleHost, type HostChannel, prewarmGuestWorker } from './capsule-host.js';
import type { ExecutorToHost, HostRequest, HostToExecutor } from './protocol.js';

/**
 * The capsule host process: started by an executor inside the session's sandbox with an IPC
 * channel as its only connection to anything. It waits for `start`, runs the session, reports the
 * result and exits. It never reads its own environment or argv on the guest's behalf: everything
 * the guest may see arrives in `start`, already decided by the executor.
 */

const timing = process.env.MURMUR_TIMING ? (label: string): void => void process.stderr.write(`[host timing] ${label} ${performance.now().toFixed(0)}ms\n`) : (): void => {};
timing('host loaded');

if (!process.send) {
  process.stderr.write('the capsule host must be started by an executor, with an IPC channel\n');
  process.exit(2);
}

const send = (message: HostToExecutor): void => {
  process.send?.(message);
};

let nextRequest = 1;
const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();

const channel: HostChannel = {
  request(request: HostRequest) {
    const id = nextRequest++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      send({ type: 'request', id, request });
    });
  },
  output(stream, text) {
    send({ type: 'output', stream, text });
  },
};

const prewarmed = prewarmGuestWorker();
let started = false;
// The executor is trusted and validates everything the host sends it; the host does not pay for a
// schema library to check its one trusted peer, which keeps it small and quick to start.
process.on('message', (raw: unknown) => {
  if (raw === null || typeof raw !== 'object' || typeof (raw as { type?: unknown }).type !== 'string') return;
  const message = raw as ExecutorToHost;
  if (message.type === 'reply') {
    const waiting = pending.get(message.id);
    pending.delete(message.id);
    if (!waiting) return;
    if (message.ok) waiting.resolve(message.value);
    else waiting.reject(new Error(message.error ?? 'the executor refused the request'));
    return;
  }
  if (message.type === 'stop') {
    process.exit(143);
  }
  if (message.type === 'start' && !started) {
    started = true;
    timing('start received');
    const host = new CapsuleHost(message, channel, prewarmed);
    host.run().then(
      (result) => {
        timing('guest finished');
        // Exit as soon as the result is written: nothing is left to do, and a lingering helper
        // thread would only delay the session's end.
        process.send?.({ type: 'result', status: result.status, exit_code: result.exitCode, ...(result.error ? { error: result.error } : {}) }, () => process.exit(0));
      },
      (error: unknown) => {
        send({ type: 'result', status: 'failed', exit_code: 1, error: { code: 'E-RUN-001', message: `the capsule host failed: ${error instanceof Error ? error.message : String(error)}` } });
        process.disconnect?.();
      },
    );
  }
});
send({ type: 'ready' });
