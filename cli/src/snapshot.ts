import './zod-jitless.js';
import * as executor from '@murmur/executor';
import * as stager from '@murmur/stager';
import * as watcher from '@murmur/watcher';
import * as run from './commands/run.js';
import { startFromSnapshot, warmManifestParser } from './snapshot-main.js';

/**
 * The entry of `mur`'s in-process snapshot, `mur.blob`: what `mur` uses when it runs everything
 * itself (no `MURMUR_NATS_URL`), and for every command but a run or a stage against a stack.
 * Evaluating these modules — most of it building the contracts' zod schemas — took ~100 ms of
 * every `mur run` before its first line of work; here they are evaluated once, at build time.
 *
 * Evaluated: the run command and the services an in-process run starts; the manifest's parser
 * warmed (`warmManifestParser`). Left as code, evaluated when first used: the door (only an agent
 * capsule is reached through one), the other commands.
 * Left out altogether: the NATS client (`nats` is loaded from node_modules if a command other
 * than a run needs it; a run against a stack starts from `snapshot-client.ts`).
 */
warmManifestParser();
startFromSnapshot([run, executor, stager, watcher]);
