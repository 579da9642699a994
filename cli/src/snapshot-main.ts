import './zod-jitless.js';
import v8 from 'node:v8';
import { Command } from 'commander';
import { capabilityPolicy, parseCapsuleManifest } from '@murmur/shared';
import { buildProgramAhead, main } from './main.js';

/**
 * What both of `mur`'s V8 startup snapshots share (`scripts/snapshot.mjs` builds them with
 * `npm run build`; `cli/bin/mur` starts node from one): the check that this code is being built
 * into a snapshot, the main function a snapshot starts with, and the schema warm-up.
 *
 * There are two snapshots because a run has two paths that share little but the contracts.
 * In-process (`cli/src/snapshot.ts`, `mur.blob`), `mur` runs the stager, the executor and the
 * watcher itself; against a stack (`cli/src/snapshot-client.ts`, `mur-client.blob`), it is a thin
 * client over NATS and runs none of them. Node keeps the whole blob it read in memory for the
 * life of the process, beside the heap it restored from it, so code one path never runs costs
 * that path twice over in peak RSS; and a smaller blob is restored sooner.
 *
 * The invariant every module in a snapshot keeps: evaluating it reads nothing of the process it
 * runs in (environment, working directory, home, terminal), since the build's values would be
 * frozen into every run. The build checks the environment and the working directory, and refuses
 * a snapshot whose evaluation read either.
 */
export function startFromSnapshot(evaluated: readonly unknown[]): void {
  if (!v8.startupSnapshot.isBuildingSnapshot()) {
    throw new Error("this module is the entry of one of mur's V8 startup snapshots: build it with node --build-snapshot (scripts/snapshot.mjs)");
  }
  // The commands are defined once, here: a run parses its command line with them at once.
  buildProgramAhead();
  warmCommandParser();
  v8.startupSnapshot.setDeserializeMainFunction(async () => {
    void evaluated;
    // Started as `node --snapshot-blob <blob> -- <args>`: argv holds node and the arguments, and
    // `main` expects node and a script before them, as a script's argv has.
    const code = await main([process.argv[0] as string, 'mur', ...process.argv.slice(1)]);
    // An exit code set while the command ran (stdout that could not be written) is not taken back.
    process.exitCode = Math.max(code, Number(process.exitCode ?? 0));
  });
}

/**
 * Parses a command line with a program of its own, once, so the snapshot keeps commander's parser
 * compiled (its functions are shared by every program, `mur`'s among them): a run parsed its
 * command line cold, ~0.7 ms of the way to its sandbox's start here. The program has one command
 * that does nothing, and writes nothing.
 */
function warmCommandParser(): void {
  const program = new Command('warm').exitOverride();
  program
    .command('command')
    .argument('[dir]')
    .option('--value <value>')
    .option('--flag')
    .action(() => {});
  program.parse(['command', 'dir', '--value', 'v', '--flag'], { from: 'user' });
}

/**
 * Parses an empty object with every object schema reachable from `roots`, once. `mur`'s zod is
 * jitless (`zod-jitless.ts`), so nothing is compiled from strings; what the snapshot keeps is
 * zod's interpreter with its functions compiled, and each schema's lazily made state (its
 * normalized shape) already made. Without it a run made both the first time each schema parsed:
 * a WAT capsule's run against a stack took 6–20 ms longer (medians of 30 interleaved runs, two
 * sets). In-process the gain was lost in the noise while the 0.3–0.7 MB of peak RSS it costs was
 * not, so only the client's snapshot does this. Nothing else about a schema changes.
 */
export function warmObjectSchemas(roots: unknown[]): void {
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

/**
 * Parses a small capsule manifest once, and makes its capability policy, so the snapshot keeps
 * YAML's lexer, parser and composer compiled: a run reads its manifest before its first request,
 * and parsing it cold compiled them then. From the runtime open to the scope explained, eight
 * interleaved runs of the WAT capsule: against a stack 17–26 ms before, 13–19 after; in-process
 * ~57 ms before, ~50 after (~0.15 MB more snapshot, no more peak RSS to be seen).
 */
export function warmManifestParser(): void {
  const { manifest } = parseCapsuleManifest('name: warm\nversion: 1.0.0\ncapabilities:\n  env:\n    allow: [HOME]\n', { env: {} });
  capabilityPolicy(manifest);
}
