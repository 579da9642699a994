#!/usr/bin/env node
import { startFirstGuestWorker } from './first-worker.js';
import { handOverFromArguments } from './hand-over-argument.js';

// The capsule host's entry (`main.ts`): its first guest worker is begun before the host's own
// modules are loaded, so the worker's boot and their evaluation overlap (`first-worker.ts`).
// Bundled, this is a CommonJS file of its own (`scripts/bundle.mjs`), so the worker is begun
// before Node's ES module loader starts, and the modules it shares with `main.ts` are copies:
// what they hold for the host is kept process-wide (`host-slot.ts`).
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
