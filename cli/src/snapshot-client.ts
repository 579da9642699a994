import './zod-jitless.js';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import * as shared from '@murmur/shared';
import * as natsBus from '@murmur/shared/bus/nats';
import * as run from './commands/run.js';
import { startFromSnapshot, warmObjectSchemas } from './snapshot-main.js';
import { rehearseRunStart } from './snapshot-rehearsal.js';

/**
 * The entry of `mur`'s thin-client snapshot, `mur-client.blob`: what `cli/bin/mur` starts for
 * `mur run` and `mur stage` when `MURMUR_NATS_URL` names a stack. Such a run asks the stack's
 * services over NATS and runs none of them, so the services' packages are not in this snapshot at
 * all: the build puts a module in their place whose every export throws (the launcher never
 * starts this snapshot for a command that would reach one).
 *
 * Evaluated: the run command, the NATS transport, and every object schema of the contracts once
 * (`warmObjectSchemas`). Compiled as well: the first steps of a run, rehearsed once at build time
 * (`snapshot-rehearsal.ts`).
 */
warmObjectSchemas(Object.values(shared));
startFromSnapshot([run, natsBus]);
// NATS draws inboxes, requests and object-store chunks from one generator, seeded at its first use
// — which the rehearsal below was. Kept as the snapshot holds it, every run would name its objects'
// chunks as every other did, and two uploads would write into each other's objects (the stager
// refused them as the wrong size: how this was found). Each run reseeds it as it starts.
v8.startupSnapshot.addDeserializeCallback(natsBus.reseedNatsIds);
// After the evaluation (and the build's check of it); the snapshot is taken once the event loop is
// empty, so after the rehearsal has closed all it opened. A failed rehearsal fails the build.
setImmediate(() => {
  rehearseRunStart(path.dirname(fileURLToPath(import.meta.url)), process.argv[2]).catch((error: unknown) => {
    process.exitCode = 1;
    process.stderr.write(`Error: the rehearsal of a run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  });
});
