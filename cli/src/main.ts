import './zod-jitless.js';
import path from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { type Output, UsageError, formatFailure, ignoreClosedStdout, processOutput } from './output.js';

// Each command's module is imported only when that command runs: `mur --help` should not pay for
// NATS, jco or hono, and `mur run`'s start-up time is part of every capsule's.
/**
 * `mur`. Exit codes: 0 success, 1 a refusal or failure (printed as `error[CODE]: …` with a hint),
 * 2 a usage error (unknown flag, missing argument, flags that contradict each other: `UsageError`).
 */
export async function main(argv: string[], output: Output = processOutput): Promise<number> {
  if (output === processOutput) ignoreClosedStdout();
  // A commander program keeps what it parsed, so one built ahead serves one invocation.
  const program = programAhead ?? murProgram();
  programAhead = undefined;
  return program.parse(argv, output);
}

/** `mur`'s commands, ready to parse one command line: its actions print to the `output` it is parsed with. */
interface MurProgram {
  parse(argv: string[], output: Output): Promise<number>;
}

let programAhead: MurProgram | undefined;

/**
 * Builds the program the next `main` parses, ahead of it: `mur`'s startup snapshot does, so a run
 * does not define its ~30 commands and their options (~2.5 ms) before it begins its work. Building
 * it reads nothing of the process (the snapshot's build checks).
 */
export function buildProgramAhead(): void {
  programAhead = murProgram();
}

/** `mur build`'s flags; `--skill` alone is `true`, with a name its name. */
interface BuildOptions {
  output?: string;
  json?: boolean;
  skill?: string | true;
  version?: string;
  description?: string;
}

function murProgram(): MurProgram {
  let output: Output = processOutput;
  let exitCode = 0;
  const run =
    // biome-ignore lint/suspicious/noConfusingVoidType: an action that prints and returns nothing means exit 0
      <A extends unknown[]>(action: (...args: A) => Promise<number | void>) =>
      async (...args: A): Promise<void> => {
        exitCode = (await action(...args)) ?? 0;
      };

  const program = new Command('mur')
    .description('Build, publish, install, stage and run Murmur capsules')
    .version('0.1.0')
    // mur's own options (`--version`, `--help`) only before a command: after one they are the
    // command's, so `mur build --version 1.0.0` is build's flag (upstream's), where it printed
    // mur's version, built nothing and exited 0.
    .enablePositionalOptions()
    .exitOverride()
    .configureOutput({
      writeOut: (text) => process.stdout.write(text),
      writeErr: (text) => process.stderr.write(text),
      // A usage error reads as every other refusal does: its code, then what to do (`usageHints`).
      outputError: (text, write) => write(text.replace(/^error: /, 'error[E-IO-003]: ')),
    });

  program
    .command('build')
    .description('pack a capsule or artifact source directory into a .mur.zip; with --skill, a folder or .zip holding SKILL.md')
    .argument('[source]', 'directory holding murmur.yaml (with --skill: the folder or .zip holding SKILL.md; default ".")')
    .option('-o, --output <path>', 'output .mur.zip, or a directory to write it into')
    .option('--skill [name]', 'package a folder or .zip holding SKILL.md as a skill artifact, no murmur.yaml needed (name inferred from the path unless given)')
    .option('--version <version>', "with --skill: the artifact's version (default 0.1.0)")
    .option('--description <text>', "with --skill: the artifact's description")
    .option('--json', 'print the result as one JSON line')
    .action(
      run((source: string | undefined, options: BuildOptions) => {
        if (options.skill !== undefined)
          return import('./commands/build-skill.js').then((module) => module.buildSkillCommand(options.skill as string | true, source, options, output));
        // A capsule's or an artifact's version and description are its murmur.yaml's: a flag would be ignored.
        const flag = options.version !== undefined ? '--version' : options.description !== undefined ? '--description' : undefined;
        if (flag)
          throw new UsageError(`${flag} is for a skill packaged with --skill; a build from murmur.yaml takes its ${flag.slice(2)} from the manifest`, {
            path: flag,
            hint: `set ${flag.slice(2)}: in ${path.join(source ?? '.', 'murmur.yaml')}, or package a SKILL.md folder: mur build --skill <path> ${flag} …`,
          });
        return import('./commands/build.js').then((module) => module.buildCommand(source ?? '.', options, output));
      }),
    );

  program
    .command('publish')
    .description('publish a .mur.zip into the global store, or to a roost with --registry <url>')
    .argument('[zip]', 'the artifact (default: ./<name>-<version>.mur.zip)')
    .option('--registry <url|local>', "'local' (the global store) or a roost URL")
    .option('--platform <os-arch>', 'publish as a native variant for this platform')
    .action(
      run((zip: string | undefined, options: { registry?: string; platform?: string }) =>
        import('./commands/publish.js').then((module) => module.publishCommand(zip, options, output)),
      ),
    );

  program
    .command('install')
    .description('install an artifact into the project store and pin it in murmur.lock')
    .argument('[ref]', 'name@version, or a path to a .mur.zip (default: every artifact the manifest declares)')
    .option('-g, --global', 'install into the global store instead (no lock)')
    .option('--registry <url|local>', "where to look: 'local' (the global store, then the artifacts this runtime ships) or a roost URL")
    .action(
      run((ref: string | undefined, options: { global?: boolean; registry?: string }) =>
        import('./commands/install.js').then((module) => module.installCommand(ref, options, output)),
      ),
    );

  program
    .command('list')
    .description('list installed artifacts')
    .option('-g, --global', 'the global store')
    .addOption(new Option('--all', 'the project and the global store').conflicts('global'))
    .option('--registry <url>', "a roost's index ('local': the global store)")
    .option('--json', 'print JSON')
    .action(
      run((options: { global?: boolean; all?: boolean; registry?: string; json?: boolean }) =>
        import('./commands/list.js').then((module) => module.listCommand(options, output)),
      ),
    );

  program
    .command('stage')
    .description('resolve, verify and transpile a capsule, and print the staged plan')
    .argument('[dir]', 'the capsule directory (holding murmur.yaml)')
    .option('--capsule <name>', 'stage a capsule from a registry instead')
    .option('--capsule-version <version>', 'the version of --capsule')
    .option('--json', 'print the staged plan as JSON')
    .option('--no-env-file', "do not load the project's .env")
    .option('-v, --verbose', 'log what the services do')
    .action(
      run((dir: string | undefined, options: { capsule?: string; capsuleVersion?: string; json?: boolean; verbose?: boolean; envFile?: boolean }) =>
        import('./commands/stage.js').then((module) => module.stageCommand(dir, options, output)),
      ),
    );

  program
    .command('run')
    .description('stage a capsule, run it in a sandbox, and wait for it to end')
    .option('--manifest <path>', 'the capsule manifest (default: ./murmur.yaml)')
    .option('--capsule <name>', 'run a capsule from a registry instead')
    .option('--capsule-version <version>', 'the version of --capsule')
    .option(
      '--workdir <dir>',
      "an existing directory to run in, on the executor's machine (default: <manifest dir>/workdir/<session>; on the stack, one on the executor)",
    )
    .option('--task <file|text>', 'the task: a file copied to task.md, or the text itself')
    .option('--json', 'print one launch line as JSON, and nothing else on stdout')
    .option('--no-env-file', "do not load the project's .env")
    .option('-v, --verbose', 'also print the workdir and what the session runs with')
    .option('--bind <address>', "the address an agent capsule's door binds in an in-process run (default: 127.0.0.1)")
    .option('--system-prompt <text>', "replace the manifest's system prompt (empty clears it)")
    .option('--context <id>', 'the context the task belongs to: a threaded capsule continues the conversation recorded for it')
    .option('--resume <id>', 'continue the conversation recorded for this context (refused when there is none)')
    .option('--forget-session', "transport: process: drop the context's harness session, so its next task starts a new conversation")
    .option('--lifecycle-task-acceptance <mode>', 'override lifecycle.task_acceptance (none|single|queue)')
    .option('--lifecycle-after-task <mode>', 'override lifecycle.after_task (exit|sleep)')
    .option(
      '--containment <class>',
      'a containment floor for this run (advisory|scoped|sealed); the strongest of it, the manifest and the workspace config wins',
    )
    .option(
      '--explain-scope',
      "print the containment (declared, achieved, floor met, mechanism) and the effective grants, and start nothing (--json: the trace's effective_grants)",
    )
    .action(run((options: Record<string, unknown>) => import('./commands/run.js').then((module) => module.runCommand(options, output))));

  program
    .command('search')
    .description('find artifacts by name, description or tag in a registry')
    .argument('<query>', 'text to look for (any case)')
    .option('--registry <url|local|path>', "'local' (the global store), a roost URL, or an artifact index (.json file or URL)")
    .option('--limit <n>', 'at most this many results', '10')
    .option('--json', 'print the matches as JSON')
    .action(
      run((query: string, options: { registry?: string; limit?: string; json?: boolean }) =>
        import('./commands/search.js').then((module) => module.searchCommand(query, options, output)),
      ),
    );

  const evaluation = program.command('eval').description("read, compare and produce the scores murmur-hook-eval writes to a session's eval.jsonl");
  evaluation
    .command('show')
    .description("summarise one session's eval.jsonl: each scorer's pass rate, the overall result, the failing events")
    .argument(
      '[session]',
      'a session id, an ending of one that names only it (4+ characters usually do), @N (the N-th newest), or a path to an eval.jsonl (default: the newest session)',
    )
    .option('--workdir <dir>', 'the directory holding the ses_* sessions', './workdir')
    .option('--json', 'print one JSON document instead')
    .action(
      run((session: string | undefined, options: { workdir?: string; json?: boolean }) =>
        import('./commands/eval.js').then((module) => module.evalShowCommand(session, options, output)),
      ),
    );
  evaluation
    .command('diff')
    .description("compare two sessions' eval.jsonl, scorer by scorer")
    .argument('<a>', 'run A: a session id, a suffix of one, @N, or a path to an eval.jsonl')
    .argument('<b>', 'run B, likewise')
    .option('--workdir <dir>', 'the directory holding the ses_* sessions', './workdir')
    .action(
      run((a: string, b: string, options: { workdir?: string }) =>
        import('./commands/eval.js').then((module) => module.evalDiffCommand(a, b, options, output)),
      ),
    );
  evaluation
    .command('run')
    .description('run a capsule once per case of a dataset and summarise the scores of each session')
    .argument('[capsule]', 'the capsule directory (holding murmur.yaml)', '.')
    .option('--dataset <jsonl>', 'one case a line: {"case_id", "task_path", "expected"?} (default: ./eval.jsonl)')
    .option('--no-env-file', "do not load the project's .env")
    .action(
      run((capsule: string, options: { dataset?: string; envFile?: boolean }) =>
        import('./commands/eval.js').then((module) => module.evalRunCommand(capsule, options, output)),
      ),
    );

  program
    .command('watch')
    .description("observe a running session's events through its door (stream/watch) until the session ends")
    .argument('<url>', 'the session door URL mur run printed')
    .action(run((url: string) => import('./commands/watch.js').then((module) => module.watchCommand(url, output))));

  const trace = program.command('trace').description("read sessions' trace.jsonl: a summary, the steps, two runs compared, or statistics over many");
  const workdirOption = (): Option =>
    new Option('--workdir <dir>', 'the directory holding the sessions (ses_… directories, or .murmur/ses_… under a mur run --workdir)').default(
      undefined,
      './workdir',
    );
  const selectorHelp =
    'a session: an ending of its id that names only it (4+ characters usually do), the full id, @N (@1 = newest), or a path (trace.jsonl or a session directory); default: the newest';
  trace
    .command('show')
    .description('a summary of one session: status, turns, tokens, tool, skill and shell calls, compaction')
    .argument('[session]', selectorHelp)
    .addOption(workdirOption())
    .action(
      run((session: string | undefined, options: { workdir?: string }) =>
        import('./commands/trace.js').then((module) => module.traceShowCommand(session, options, output)),
      ),
    );
  trace
    .command('steps')
    .description('what the agent did, turn by turn')
    .argument('[session]', selectorHelp)
    .option('--verbose', "add the start of each turn's tool input")
    .addOption(workdirOption())
    .action(
      run((session: string | undefined, options: { workdir?: string; verbose?: boolean }) =>
        import('./commands/trace.js').then((module) => module.traceStepsCommand(session, options, output)),
      ),
    );
  trace
    .command('diff')
    .description('compare two sessions side by side (default: @2 @1, the two newest)')
    .argument('[before]', 'run A: an ending of a session id that names only it, the full id, @N or path')
    .argument('[after]', 'run B: the same forms')
    .addOption(workdirOption())
    .action(
      run((before: string | undefined, after: string | undefined, options: { workdir?: string }) =>
        import('./commands/trace.js').then((module) => module.traceDiffCommand(before, after, options, output)),
      ),
    );
  trace
    .command('report')
    .description("statistics over sessions: all of the workdir's, the newest --last N, those --since a while ago, or the ones named")
    .argument('[sessions...]', 'sessions to include (id suffixes, full ids, @N or paths); not with --last or --since')
    .option('--last <n>', 'only the N newest sessions', (value: string) => {
      if (!/^\d+$/.test(value)) throw new InvalidArgumentError('expected a whole number of sessions');
      return Number(value);
    })
    .option('--since <duration>', 'only sessions started within this long: 30m, 2h, 1d')
    .addOption(workdirOption())
    .action(
      run((sessions: string[], options: { workdir?: string; last?: number; since?: string }) =>
        import('./commands/trace.js').then((module) => module.traceReportCommand(sessions, options, output)),
      ),
    );

  const config = program.command('config').description("read and write mur's configuration (~/.murmur/config.yaml, .murmur/config.yaml)");
  config
    .command('set')
    .description('set a key in the project config (<cwd>/.murmur/config.yaml), or with -g the global one')
    .argument('<key>', 'registry.default, registry.index_url, inference.provider, inference.model, inference.api_key or inference.endpoint')
    .argument('<value>', 'the value to write')
    .option('-g, --global', 'write $MURMUR_HOME/config.yaml (~/.murmur/config.yaml) instead')
    .action(
      run((key: string, value: string, options: { global?: boolean }) =>
        import('./commands/config.js').then((module) => module.configSetCommand(key, value, options, output)),
      ),
    );
  config
    .command('get')
    .description("print a key's effective value (the project config over the global one); exit 1 when unset")
    .argument('<key>', 'one of the keys mur config set takes')
    .option('-g, --global', 'only the global config')
    .action(
      run((key: string, options: { global?: boolean }) => import('./commands/config.js').then((module) => module.configGetCommand(key, options, output))),
    );

  program
    .command('doctor')
    .description("check that the project's artifacts are installed and match murmur.lock, and what this machine gives a capsule; exit 1 if a check fails")
    .action(run(() => import('./commands/doctor.js').then((module) => module.doctorCommand(output))));

  program
    .command('ps')
    .description("list the machine's running sessions, each verified (pid, start time, door)")
    .option('--json', 'print an array of the running records, each with its liveness')
    .action(run((options: { json?: boolean }) => import('./commands/ps.js').then((module) => module.psCommand(options, output))));

  program
    .command('stop')
    .description('stop a running session: SIGTERM, then SIGKILL after a grace period, never signalling a reused pid')
    .argument('<session>', 'the session id (ses_…)')
    .action(run((session: string) => import('./commands/ps.js').then((module) => module.stopCommand(session, output))));

  program
    .command('files')
    .description("list or copy files out of a session's workdir, through the executor that holds it (MURMUR_NATS_URL)")
    .argument('<session>', 'the session id (ses_…)')
    .argument('[path]', 'a directory (listed) or a file (written to stdout), relative to the workdir', '')
    .option('-o, --out <path>', 'copy the file, or the whole directory, to this local path instead')
    .option('--json', 'print a directory listing as JSON')
    .action(
      run((session: string, relative: string, options: { out?: string; json?: boolean }) =>
        import('./commands/files.js').then((module) => module.filesCommand(session, relative, options, output)),
      ),
    );

  program
    .command('events')
    .description("tail the stack's events (MURMUR_NATS_URL): every event subject, or those a pattern covers")
    .argument('[pattern]', "a subject pattern, e.g. 'session.>'", '>')
    .option('--json', 'one JSON object per line: {subject, payload}')
    .action(
      run((pattern: string, options: { json?: boolean }) => import('./commands/events.js').then((module) => module.eventsCommand(pattern, options, output))),
    );

  program
    .command('health')
    .description('ask every service on the bus (MURMUR_NATS_URL) for its health check')
    .option('--json', 'print JSON')
    .action(run((options: { json?: boolean }) => import('./commands/health.js').then((module) => module.healthCommand(options, output))));

  program
    .command('roost')
    .description('run roost (the registry, sessions and spawn approvals over HTTP) on 127.0.0.1')
    .option('--port <port>', 'port to listen on (0: any free port)', '7700')
    .option('--registry-path <dir>', 'the store to serve (default: the global store)')
    .option(
      '--spawn-allow <name>',
      'a capsule anyone may spawn without a session credential; repeat for more (default: MURMUR_ROOST_SPAWN_ALLOW, comma-separated)',
      (name: string, previous: string[] | undefined) => [...(previous ?? []), name],
    )
    .action(
      run((options: { port?: string; registryPath?: string; spawnAllow?: string[] }) =>
        import('./commands/roost.js').then((module) => module.roostCommand(options, output)),
      ),
    );

  usageHints(program, 'mur');
  refuseRepeatedValues(program);

  return {
    async parse(argv, given) {
      output = given;
      try {
        // commander answers `mur help <what is no command>` with the whole help on stderr and
        // nothing that names what it did not know.
        const [first, asked] = argv.slice(2);
        if (first === 'help' && asked !== undefined && !program.commands.some((command) => command.name() === asked || command.aliases().includes(asked)))
          throw new UsageError(`unknown command '${asked}'`, { path: asked, hint: 'run mur --help for usage' });
        await program.parseAsync(argv);
        return exitCode;
      } catch (error) {
        if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
        output.err(formatFailure(error));
        return error instanceof UsageError ? 2 : 1;
      }
    },
  };
}

/**
 * An option that takes one value may be given once, as upstream's (clap's) refuse a second: commander
 * keeps the last, so `mur run --manifest a.yaml --manifest b.yaml` ran b in silence. An option whose
 * parser folds the previous value in (`--spawn-allow`, "repeat for more") is meant to be repeated.
 */
function refuseRepeatedValues(command: Command): void {
  for (const option of command.options) {
    const takesOne = (option.required || option.optional) && !option.variadic && (option.parseArg?.length ?? 0) < 2;
    if (!takesOne) continue;
    let given = 0;
    command.on(`option:${option.name()}`, () => {
      given += 1;
      if (given > 1) command.error(`error: option '${option.flags}' was given more than once; give it once`, { code: 'murmur.repeatedOption', exitCode: 2 });
    });
  }
  for (const sub of command.commands) refuseRepeatedValues(sub);
}

/** A usage error names the help of the command it was made in (`mur config set --help`), not only `mur`'s. */
function usageHints(command: Command, name: string): void {
  command.showHelpAfterError(`  hint: run ${name} --help for usage`);
  for (const sub of command.commands) usageHints(sub, `${name} ${sub.name()}`);
}
