#!/usr/bin/env node
import { startFirstGuestWorker } from './first-worker.js';

// The capsule host's entry (`main.ts`): its first guest worker is begun before the host's own
// modules are loaded, so the worker's boot and their evaluation overlap (`first-worker.ts`).
startFirstGuestWorker();
await import('./main.js');
