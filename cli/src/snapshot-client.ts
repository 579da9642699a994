import './zod-jitless.js';
import * as shared from '@murmur/shared';
import * as natsBus from '@murmur/shared/bus/nats';
import * as run from './commands/run.js';
import { startFromSnapshot, warmManifestParser, warmObjectSchemas } from './snapshot-main.js';

/**
 * The entry of `mur`'s thin-client snapshot, `mur-client.blob`: what `cli/bin/mur` starts for
 * `mur run` and `mur stage` when `MURMUR_NATS_URL` names a stack. Such a run asks the stack's
 * services over NATS and runs none of them, so the services' packages are not in this snapshot at
 * all: the build puts a module in their place whose every export throws (the launcher never
 * starts this snapshot for a command that would reach one).
 *
 * Evaluated: the run command, the NATS transport, and every object schema of the contracts once
 * (`warmObjectSchemas`); the manifest's parser warmed (`warmManifestParser`).
 */
warmObjectSchemas(Object.values(shared));
warmManifestParser();
startFromSnapshot([run, natsBus]);
