import './zod-jitless.js';
import v8 from 'node:v8';
import * as door from '@murmur/door';
import * as shared from '@murmur/shared';
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

/**
 * Every object schema of the contracts parses an empty object here, once. `mur`'s zod is jitless
 * (`zod-jitless.ts`), so nothing is compiled from strings; what the snapshot keeps is zod's
 * interpreter with its functions compiled, and each schema's lazily made state (its normalized
 * shape) already made. Without it a run made both the first time each schema parsed: a WAT
 * capsule's run against a stack took 6–20 ms longer (medians of 30 interleaved runs, two sets),
 * in-process about the same; it costs 0.3–0.7 MB of peak RSS. Nothing else about a schema changes.
 */
function warmObjectSchemas(roots: unknown[]): void {
  const seen = new Set<unknown>();
  const isSchema = (value: unknown): value is { _zod: { def: Record<string, unknown> }; safeParse(input: unknown): unknown } =>
    typeof value === 'object' && value !== null && '_zod' in value && typeof (value as { safeParse?: unknown }).safeParse === 'function';
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) {
      value.forEach(visit);
      return;
    }
    if (!isSchema(value) || seen.has(value)) return;
    seen.add(value);
    const def = value._zod.def;
    if (def.type === 'object') value.safeParse({});
    for (const [key, part] of Object.entries(def)) {
      // `shape` is a record of schemas; a lazy schema's getter is not followed (it may recurse without end).
      if (key === 'shape' && part && typeof part === 'object') Object.values(part).forEach(visit);
      else if (key !== 'getter') visit(part);
    }
  };
  roots.forEach(visit);
}

if (!v8.startupSnapshot.isBuildingSnapshot()) {
  throw new Error('cli/src/snapshot.ts is the entry of a V8 startup snapshot: build it with node --build-snapshot (scripts/snapshot.mjs)');
}

warmObjectSchemas(Object.values(shared));

v8.startupSnapshot.setDeserializeMainFunction(async () => {
  void evaluated;
  // Started as `node --snapshot-blob mur.blob -- <args>`: argv holds node and the arguments, and
  // `main` expects node and a script before them, as a script's argv has.
  process.exitCode = await main([process.argv[0] as string, 'mur', ...process.argv.slice(1)]);
});
