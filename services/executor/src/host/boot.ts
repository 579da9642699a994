#!/usr/bin/env node
import { startFirstGuestWorker } from './first-worker.js';
import { handOverFromArguments } from './hand-over-argument.js';

// The capsule host's entry (`main.ts`): its first guest worker is begun before the host's own
// modules are loaded, so the worker's boot and their evaluation overlap (`first-worker.ts`).
startFirstGuestWorker();
// A sealed host's sockets go to the executor while its modules load (`hand-over-argument.ts`),
// whichever of this and the executor's ask comes first; a failure is said by `main.ts`, whose
// answer to the ask is this same hand-over.
const sockets = handOverFromArguments(process.argv);
if (sockets) void import('./sandbox-sockets.js').then(({ handOverSandboxSockets }) => handOverSandboxSockets(sockets)).catch(() => {});
await import('./main.js');
