#!/usr/bin/env node
import { startFirstGuestWorker } from './first-worker.js';
import { handOverFromArguments } from './hand-over-argument.js';

// The capsule host's entry (`main.ts`): its first guest worker is begun before the host's own
// modules are loaded, so the worker's boot and their evaluation overlap (`first-worker.ts`).
// Bundled, this is a CommonJS file of its own (`scripts/bundle.mjs`), so the worker is begun
// before Node's ES module loader starts, and the modules it shares with `main.ts` are copies:
// what they hold for the host is kept process-wide (`host-slot.ts`).
// SIGUSR1 makes Node open its inspector, a debugger on 127.0.0.1:9229 that evaluates any code in
// this process: a tool of the session runs as this host's user among its processes, and could
// send it, then act as the host towards the executor and read what the host keeps from tools.
// A listener of our own replaces Node's, so the signal does nothing. It is set first, before any
// tool can exist. (Node 20 has no `--disable-sigusr1`.)
let signalSaid = false;
process.on('SIGUSR1', () => {
  // Said once in `host.log`: a process of the sandbox tried it.
  if (!signalSaid) process.stderr.write('[capsule-host] SIGUSR1 ignored: this host opens no inspector\n');
  signalSaid = true;
});
startFirstGuestWorker();
// A sealed host's sockets go to the executor while its modules load (`hand-over-argument.ts`),
// whichever of this and the executor's ask comes first; a failure is said by `main.ts`, whose
// answer to the ask is this same hand-over.
const sockets = handOverFromArguments(process.argv);
if (sockets) void import('./sandbox-sockets.js').then(({ handOverSandboxSockets }) => handOverSandboxSockets(sockets)).catch(() => {});
import('./main.js').catch((error: unknown) => {
  process.stderr.write(`[capsule-host] the host's modules could not be loaded: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
