import './zod-jitless.js';
import v8 from 'node:v8';
import * as door from '@murmur/door';
import * as natsBus from '@murmur/shared/bus/nats';
import * as run from './commands/run.js';
import { main } from './main.js';

/**
 * The entry of `mur`'s V8 startup snapshot (`scripts/snapshot.mjs`, run by `npm run build`, makes
 * `cli/dist/snapshot/mur.blob`; `cli/bin/mur` starts node from it). Evaluating `mur`'s modules —
 * most of it building the contracts' zod schemas — took ~100 ms of every `mur run` before its
 * first line of work; in the snapshot they are evaluated once, at build time, and a run starts
 * with them already in its heap.
 *
 * What is evaluated here is what a run uses: the run command with the in-process services it
 * starts, the door an agent is reached through, and the NATS transport `mur` uses against a
 * stack. Other commands are in the snapshot's code but evaluated when they run, as from the
 * bundle. The invariant every module keeps for this: evaluating it reads nothing of the process
 * it runs in (environment, working directory, home, terminal) — the build's values would be
 * frozen into every run. The build checks the environment and the working directory, and refuses
 * a snapshot whose evaluation read either.
 */
const evaluated = [run, door, natsBus];

if (!v8.startupSnapshot.isBuildingSnapshot()) {
  throw new Error('cli/src/snapshot.ts is the entry of a V8 startup snapshot: build it with node --build-snapshot (scripts/snapshot.mjs)');
}

v8.startupSnapshot.setDeserializeMainFunction(async () => {
  void evaluated;
  // Started as `node --snapshot-blob mur.blob -- <args>`: argv holds node and the arguments, and
  // `main` expects node and a script before them, as a script's argv has.
  process.exitCode = await main([process.argv[0] as string, 'mur', ...process.argv.slice(1)]);
});
