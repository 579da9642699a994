import { spawnSync } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject } from './support/agents.js';
import { capsuleProject } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { capsuleWat } from './support/guests.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { murBin, runMur } from './support/processes.js';

/**
 * What a new user types by mistake, and what `mur` says back: an `error[CODE]` naming what was
 * refused, a hint that says what to do instead, and never a stack trace or a wait for ever.
 */
describe('mur, given what a new user gets wrong', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let capsule: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    scratch = await tempDir('murmur-cli-input-');
    capsule = path.join(scratch.dir, 'capsule');
    await fs.mkdir(capsule);
    await fs.writeFile(path.join(capsule, 'murmur.yaml'), 'name: typo\nversion: 0.1.0\n');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  /** A refusal as the README promises it: the code and the words, a hint, exit 1 (2 for a usage error), and nothing of mur's insides. */
  function refused(result: { code: number | null; stderr: string }, code: string, words: string, hint: string, exitCode = 1): void {
    expect(result.code, result.stderr).toBe(exitCode);
    expect(result.stderr).toContain(`error[${code}]: ${words}`);
    expect(result.stderr).toContain(`hint: ${hint}`);
    expect(result.stderr).not.toMatch(/\n\s+at |this is a bug in mur/);
  }

  /** A command line mur cannot take as written (flags that contradict each other, a value no flag takes): a usage error, exit 2. */
  function misused(result: { code: number | null; stderr: string }, words: string, hint: string): void {
    refused(result, 'E-IO-003', words, hint, 2);
  }

  it('refuses a file this user may not read as E-IO-002, permission denied, saying what to check', async () => {
    // Root reads any file: run as root, mur is started as nobody, who may not read a root file of mode 600.
    const asRoot = process.getuid?.() === 0;
    const dir = path.join(scratch.dir, 'closed');
    await fs.mkdir(dir, { mode: 0o755 });
    const dataset = path.join(dir, 'dataset.jsonl');
    await fs.writeFile(dataset, '{"task": "a"}\n', { mode: asRoot ? 0o600 : 0o000 });
    await fs.chmod(scratch.dir, 0o755);
    const result = await runMur(['eval', 'run', capsule, '--dataset', dataset], {
      env: { MURMUR_HOME: path.join(dir, 'home') },
      ...(asRoot ? { user: { uid: 65_534, gid: 65_534 } } : {}),
    });
    refused(result, 'E-IO-002', `failed to read dataset ${dataset}: EACCES`, 'this user may not do that there: check the permissions along the path');
  });

  it('refuses a directory given as --manifest, naming the manifest in it', async () => {
    const result = await runMur(['run', '--manifest', capsule], { env });
    refused(
      result,
      'E-IO-001',
      `--manifest names a directory, not a manifest: ${capsule}`,
      `pass the manifest in it: --manifest ${path.join(capsule, 'murmur.yaml')}`,
    );
  });

  it('names the murmur.yaml it looked for, not a flag, when the one here is a directory; and refuses an empty --workdir', async () => {
    const here = path.join(capsule, '..', 'manifest-is-a-directory');
    await fs.mkdir(path.join(here, 'murmur.yaml'), { recursive: true });
    const result = await runMur(['run'], { cwd: here, env });
    refused(result, 'E-IO-001', `murmur.yaml here is a directory, not a manifest: ${path.join(here, 'murmur.yaml')}`, 'pass the murmur.yaml file');
    const empty = await runMur(['run', '--manifest', path.join(capsule, 'murmur.yaml'), '--workdir', ''], { env });
    misused(empty, '--workdir is empty', 'name the directory the session works in');
  });

  it('refuses a murmur.yaml that is a FIFO at once in every command that reads it, where each waited for a writer for ever', async () => {
    const project = path.join(scratch.dir, 'fifo-project');
    await fs.mkdir(project);
    const manifest = path.join(project, 'murmur.yaml');
    spawnSync('mkfifo', [manifest]);
    const words = `murmur.yaml at ${manifest} is a FIFO, not a regular file: nothing was read from it`;
    for (const command of [['run', '--manifest', manifest], ['stage', project], ['build', project], ['doctor']]) {
      // runMur's own timeout would end a command that waits; each must answer long before it.
      const result = await runMur(command, { cwd: project, env });
      refused(result, 'E-IO-003', words, `put the file itself at ${manifest}`);
    }
    // The project's .env, which mur run reads beside the manifest, the same.
    await fs.rm(manifest);
    await fs.writeFile(manifest, 'name: fifo-env\nversion: 0.1.0\n');
    spawnSync('mkfifo', [path.join(project, '.env')]);
    const run = await runMur(['run', '--manifest', manifest], { cwd: project, env });
    refused(run, 'E-IO-003', `.env at ${path.join(project, '.env')} is a FIFO, not a regular file: nothing was read from it`, 'put the file itself at');
  });

  it('refuses the manifest file where stage and build want its directory, naming the directory', async () => {
    const manifest = path.join(capsule, 'murmur.yaml');
    for (const command of ['stage', 'build']) {
      const result = await runMur([command, manifest], { env });
      refused(result, 'E-IO-001', `${manifest} is a file, not a capsule directory`, `pass the directory that holds murmur.yaml: ${capsule}`);
    }
    // Another file of a directory without a manifest: that directory is not the one to pass.
    const notes = path.join(scratch.dir, 'notes.txt');
    await fs.writeFile(notes, 'not a capsule\n');
    refused(
      await runMur(['build', notes], { env }),
      'E-IO-001',
      `${notes} is a file, not a capsule directory`,
      `pass a capsule directory, one that holds a murmur.yaml (${scratch.dir} holds none)`,
    );
  });

  it('refuses a lifecycle override that is not one of its modes, naming the flag, before anything runs', async () => {
    const acceptance = await runMur(['run', '--manifest', path.join(capsule, 'murmur.yaml'), '--lifecycle-task-acceptance', 'quee'], { env });
    misused(acceptance, "--lifecycle-task-acceptance must be one of: none, single, queue; got 'quee'", 'e.g. mur run --lifecycle-task-acceptance none');
    const after = await runMur(['run', '--manifest', path.join(capsule, 'murmur.yaml'), '--lifecycle-after-task', 'bogus'], { env });
    misused(after, "--lifecycle-after-task must be one of: exit, sleep; got 'bogus'", 'e.g. mur run --lifecycle-after-task exit');
    expect(after.stderr).not.toContain('E-BUS-001');
  });

  it("takes --version after a command as the command's, never mur's own: mur build --version 1.0.0 built nothing and printed mur's version", async () => {
    misused(
      await runMur(['build', '--version', '1.0.0'], { cwd: capsule, env }),
      '--version is for a skill packaged with --skill; a build from murmur.yaml takes its version from the manifest',
      'set version: in murmur.yaml',
    );
    for (const args of [
      ['run', '--version'],
      ['list', '--version', '--json'],
    ]) {
      const result = await runMur(args, { cwd: capsule, env });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stdout, args.join(' ')).toBe('');
      expect(result.stderr, args.join(' ')).toContain("error[E-IO-003]: unknown option '--version'");
    }
    expect((await runMur(['--version'], { env })).stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it('refuses --capsule-version without --capsule rather than run the manifest here instead', async () => {
    const result = await runMur(['run', '--capsule-version', '0.1.0'], { cwd: capsule, env });
    misused(result, '--capsule-version needs --capsule', 'e.g. mur run --capsule <name> --capsule-version 0.1.0');
  });

  it('refuses two flags that each name the same thing, rather than silently follow one of them', async () => {
    const manifest = path.join(capsule, 'murmur.yaml');
    misused(
      await runMur(['run', '--manifest', manifest, '--capsule', 'hello', '--capsule-version', '0.1.0'], { env }),
      '--manifest and --capsule each name the capsule to run: give one',
      `mur run --manifest ${manifest} runs a project`,
    );
    misused(
      await runMur(['run', '--manifest', manifest, '--context', 'a', '--resume', 'b'], { env }),
      '--context and --resume each name the context of the task: give one',
      '--resume <id> is --context <id> refused when no conversation is recorded for it',
    );
    misused(
      await runMur(['stage', '--capsule-version', '0.1.0'], { cwd: capsule, env }),
      '--capsule-version needs --capsule',
      'e.g. mur stage --capsule <name> --capsule-version 0.1.0',
    );
    misused(
      await runMur(['stage', capsule, '--capsule', 'hello', '--capsule-version', '0.1.0'], { env }),
      `a directory ('${capsule}') and --capsule each name the capsule to stage: give one`,
      `mur stage ${capsule} stages a project`,
    );
    refused(
      await runMur(['list', '-g', '--registry', 'http://127.0.0.1:9'], { env }),
      'E-IO-003',
      "-g chooses among this machine's stores, and --registry http://127.0.0.1:9 lists a roost: give one",
      'mur list --registry <url> lists what a roost holds',
    );
  });

  it('refuses an option of one value given twice, as upstream does, rather than run whichever came last', async () => {
    const other = path.join(scratch.dir, 'other.yaml');
    await fs.writeFile(other, 'name: other\nversion: 0.1.0\n');
    misused(
      await runMur(['run', '--manifest', path.join(capsule, 'murmur.yaml'), '--manifest', other], { env }),
      "option '--manifest <path>' was given more than once; give it once",
      'run mur run --help for usage',
    );
    const [first, second] = [path.join(scratch.dir, 'a.mur.zip'), path.join(scratch.dir, 'b.mur.zip')];
    misused(
      await runMur(['build', capsule, '-o', first, `--output=${second}`], { env }),
      "option '-o, --output <path>' was given more than once; give it once",
      'run mur build --help for usage',
    );
    // Nothing was run or built for either: each would have made its own.
    expect(existsSync(path.join(capsule, 'workdir')) || existsSync(path.join(scratch.dir, 'workdir'))).toBe(false);
    expect(existsSync(first) || existsSync(second)).toBe(false);
  });

  it('refuses an empty --context or --resume, naming the flag, before anything is staged', async () => {
    const manifest = path.join(capsule, 'murmur.yaml');
    misused(
      await runMur(['run', '--manifest', manifest, '--context', ''], { env }),
      '--context is empty',
      'name the context, e.g. mur run --context support-42',
    );
    misused(await runMur(['run', '--manifest', manifest, '--resume', ''], { env }), '--resume is empty', 'name the context, e.g. mur run --resume support-42');
  });

  it('gives every refusal of a mistyped path, reference or option a hint', async () => {
    const odd = path.join(scratch.dir, 'odd');
    await fs.mkdir(path.join(odd, 'murmur.yaml'), { recursive: true });
    refused(
      await runMur(['build', odd], { env }),
      'E-IO-003',
      `${path.join(odd, 'murmur.yaml')} is a directory, not a manifest`,
      'a capsule directory holds its manifest as a file named murmur.yaml',
    );
    refused(
      await runMur(['publish', scratch.dir], { env }),
      'E-IO-003',
      `failed to read artifact at ${scratch.dir}`,
      'pass the .mur.zip file, not a directory',
    );
    misused(
      await runMur(['install', 'hello'], { cwd: capsule, env }),
      "artifact reference 'hello' must be in the format <name@version> or a path to a .mur.zip",
      'e.g. mur install hello@0.1.0',
    );
    // A source prefix: GitHub releases are not built here (said, with what to do), any other is unknown.
    refused(
      await runMur(['install', '-g', 'github:acme/tool@1.0.0'], { env }),
      'E-IO-003',
      "'github:acme/tool@1.0.0': installing from GitHub releases (github:) is not built in this runtime",
      "download the release's .mur.zip and install its path",
    );
    misused(
      await runMur(['install', '-g', 'gitlab:acme/tool@1.0.0'], { env }),
      "'gitlab:acme/tool@1.0.0': unknown install source 'gitlab:'",
      'give name@version',
    );
    const garbage = path.join(scratch.dir, 'garbage.jsonl');
    await fs.writeFile(garbage, 'not json\nnor this\n');
    refused(await runMur(['trace', 'show', garbage], { env }), 'E-TRC-001', `${garbage}: holds no trace event`, "a session's trace is trace.jsonl");
    refused(
      await runMur(['trace', 'report', '@1', '--last', '2'], { cwd: capsule, env }),
      'E-TRC-002',
      '--last cannot be combined',
      'name the sessions to report',
      2,
    );
  });

  it('gives hints that work where they are given: outside a project, install -g names what to install, and a capsule not installed can be installed globally', async () => {
    const nowhere = path.join(scratch.dir, 'no-project');
    await fs.mkdir(nowhere, { recursive: true });
    refused(
      await runMur(['install', '-g'], { cwd: nowhere, env }),
      'E-IO-001',
      'no project root found (no murmur.yaml in current or parent directories) for mur install -g to install the artifacts of',
      'name what to install into the global store: mur install -g <name>@<version>, or mur install -g <file>.mur.zip',
    );
    const missing = await runMur(['stage', '--capsule', 'nosuch', '--capsule-version', '1.0.0'], { cwd: nowhere, env });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('error[E-RUN-008]: capsule nosuch@1.0.0 is not installed');
    expect(missing.stderr).toContain("'mur install -g nosuch@1.0.0' anywhere");
  });

  it('refuses a project or a runtime directory whose path no sandbox rule can name before anything is made, where it crashed or left a session behind', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'line\nbreak'), 'name: broken\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    refused(
      await runMur(['run'], { cwd: project, env }),
      'E-IO-003',
      `the workdir ${JSON.stringify(path.join(project, 'workdir'))} holds a control character (a line break, a tab), which the sandbox's rules cannot name; nothing was made or run`,
      'move the capsule to a path without control characters, or pass --workdir such a path',
    );
    expect(existsSync(path.join(project, 'workdir'))).toBe(false);
    const tiny = await capsuleProject(path.join(scratch.dir, 'plain'), 'name: plain\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const home = path.join(scratch.dir, 'home\twith-tab');
    refused(
      await runMur(['run'], { cwd: tiny, env: { MURMUR_HOME: home } }),
      'E-IO-003',
      `the sandbox's rules would name the path ${JSON.stringify(path.join(home, 'cache', 'runtime')).slice(0, -1)}`,
      "give the runtime's directories paths without control characters",
    );
    // mur doctor reports it as what keeps this host from sealing, rather than stopping at it.
    const doctor = await runMur(['doctor'], { cwd: scratch.dir, env: { MURMUR_HOME: home } });
    expect(doctor.stdout).toMatch(/why: .*not sealed: the sandbox's rules would name the path/);
    expect(doctor.stderr).not.toMatch(/\n\s+at |this is a bug in mur/);
  });

  it('exits 1 when what it writes on stdout is lost to a full disk, saying so, where the command exited 0', async () => {
    // A run writes its session line first and then waits for the session, which ends well.
    const project = await capsuleProject(path.join(scratch.dir, 'stdout-full'), 'name: full\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const full = await fs.open('/dev/full', 'w');
    try {
      const result = spawnSync(murBin, ['run'], {
        cwd: project,
        env: { PATH: process.env.PATH ?? '', ...env },
        stdio: ['ignore', full.fd, 'pipe'],
        encoding: 'utf8',
      });
      expect(result.status, result.stderr).toBe(1);
      expect(result.stderr).toContain('error[E-IO-003]: could not write to stdout: ENOSPC; what was left to write there is lost');
      expect(result.stderr).toContain('hint: the disk stdout is written to is full');
    } finally {
      await full.close();
    }
  });

  it('refuses a registry or door URL that carries a user or password without repeating it, and one that is no http(s) URL', async () => {
    const secret = 's3cr3t-in-the-url';
    for (const args of [
      ['install', 'tool1@1.0.0', '-g', '--registry', `http://user:${secret}@127.0.0.1:9`],
      ['search', 'x', '--registry', `http://user:${secret}@127.0.0.1:9`],
    ]) {
      const result = await runMur(args, { env });
      refused(
        result,
        'E-ROOST-001',
        'the registry URL http://127.0.0.1:9/ carries a user or password, which is never sent',
        "give roost's token in MURMUR_ROOST_TOKEN",
      );
      expect(result.stderr).not.toContain(secret);
    }
    const query = await runMur(['install', 'tool1@1.0.0', '-g', '--registry', `http://127.0.0.1:9/?token=${secret}`], { env });
    refused(query, 'E-ROOST-001', 'the registry URL http://127.0.0.1:9/ has a query or a fragment', 'name roost by its URL');
    expect(query.stderr).not.toContain(secret);
    const watched = await runMur(['watch', `http://user:${secret}@127.0.0.1:9/`], { env });
    refused(watched, 'E-IO-003', 'the URL http://127.0.0.1:9/ carries a user or password, which is never sent', 'pass the door URL alone', 2);
    expect(watched.stderr).not.toContain(secret);
    refused(
      await runMur(['watch', 'ftp://127.0.0.1:1234'], { env }),
      'E-IO-003',
      "ftp://127.0.0.1:1234/ is not an http(s) URL, which a door's is",
      'pass the url mur run printed',
      2,
    );
  });

  it('refuses a roost whose --registry-path is a file or empty, or whose --port is empty, before it listens', async () => {
    const file = path.join(capsule, 'murmur.yaml');
    refused(
      await runMur(['roost', '--port', '0', '--registry-path', file], { env }),
      'E-IO-002',
      `--registry-path names ${file}, which is not a directory`,
      'name the directory roost keeps its artifacts in',
    );
    refused(await runMur(['roost', '--port', '0', '--registry-path', ''], { env }), 'E-IO-003', '--registry-path is empty', 'give --registry-path a value', 2);
    refused(await runMur(['roost', '--port', ''], { env }), 'E-IO-003', '--port is empty', 'give --port a value', 2);
    refused(
      await runMur(['roost', '--port', 'abc'], { env }),
      'E-IO-003',
      "invalid --port: 'abc' is not a port number (0-65535)",
      'give a whole number from 0 to 65535 (0 picks a free port)',
      2,
    );
  });

  it('refuses an empty --bind, or a bare number, which would put the door on every interface, and what is no host name at all', async () => {
    for (const bind of ['', ' ', '0', '127.1', 'not an address', 'host/path', 'user@host']) {
      const result = await runMur(['run', '--manifest', path.join(capsule, 'murmur.yaml'), '--bind', bind], { env });
      misused(result, `--bind takes an IP address or a host name: '${bind}'`, 'e.g. --bind 127.0.0.1 (the default)');
    }
  });

  it('runs the manifest --manifest names, not the murmur.yaml beside it', async () => {
    const wasm = (await capsuleWat()).bytes;
    const project = await capsuleProject(path.join(scratch.dir, 'two-manifests'), 'name: beside\nversion: 0.1.0\n', wasm);
    await fs.writeFile(path.join(project, 'other.yaml'), 'name: named\nversion: 9.9.9\n');
    const result = await runMur(['run', '--manifest', path.join(project, 'other.yaml'), '--json'], { env });
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout.split('\n')[0] as string)).toMatchObject({ name: 'named', version: '9.9.9' });
    const missing = await runMur(['run', '--manifest', path.join(project, 'nope.yaml')], { env });
    expect(missing.stderr).toContain(`error[E-IO-001]: the manifest --manifest names was not found: ${path.join(project, 'nope.yaml')}`);
  });

  it('names the file --manifest gave in a refusal of its contents, not a murmur.yaml the user never wrote', async () => {
    const project = path.join(scratch.dir, 'named-refusals');
    await fs.mkdir(project);
    const cases = [
      { file: 'broken.yaml', text: 'name: [unclosed\n', code: 'E-MAN-002', words: 'broken.yaml: YAML syntax error at line 2' },
      { file: 'nameless.yaml', text: "name: ''\nversion: 1.0.0\n", code: 'E-MAN-001', words: "nameless.yaml: missing required field 'name'" },
      {
        file: 'reach.yaml',
        text: 'name: x\nversion: 1.0.0\ncapabilities:\n  network:\n    allow: ["http://"]\n',
        code: 'E-CAP-001',
        words: "reach.yaml: invalid network allow entry 'http://'",
      },
    ];
    for (const { file, text, code, words } of cases) {
      await fs.writeFile(path.join(project, file), text);
      const result = await runMur(['run', '--manifest', path.join(project, file)], { env });
      expect(result.code, result.stderr).toBe(1);
      expect(result.stderr).toContain(`error[${code}]: ${words}`);
    }
  });

  it('refuses an agent whose network.internal_port is taken with E-RUN-010, naming the port, and pins nothing', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as net.AddressInfo).port;
    try {
      const manifest = agentManifest(
        { endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' },
        { name: 'busy-port', extra: `network:\n  internal_port: ${port}` },
      );
      const project = await agentProject(path.join(scratch.dir, 'busy-port'), manifest);
      const result = await runMur(['run', '--json'], { cwd: project, env });
      refused(
        result,
        'E-RUN-010',
        `network.internal_port ${port} is already in use on 127.0.0.1`,
        'stop what holds the port, or set network.internal_port to another port',
      );
      expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });

  it('refuses an agent whose network.internal_port is one fetch clients will not connect to, with E-RUN-010 naming the port, and pins nothing', async () => {
    const manifest = agentManifest(
      { endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' },
      { name: 'blocked-port', extra: 'network:\n  internal_port: 6666' },
    );
    const project = await agentProject(path.join(scratch.dir, 'blocked-port'), manifest);
    const result = await runMur(['run', '--json'], { cwd: project, env });
    refused(
      result,
      'E-RUN-010',
      "network.internal_port 6666 is a port fetch clients will not connect to (the Fetch standard's blocked ports)",
      'set network.internal_port to another port (0 or unset picks a free one)',
    );
    expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
  });

  it('warns of a mur_version it is not and of a workdir that holds the project, and explains the scope before it looks at --system-prompt', async () => {
    const project = await capsuleProject(
      path.join(scratch.dir, 'versioned'),
      'name: versioned\nversion: 0.1.0\nmur_version: 9.9.9\n',
      (await capsuleWat()).bytes,
    );
    const run = await runMur(['run', '--json', '--workdir', project], { cwd: project, env });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain('warning: murmur.yaml names mur_version 9.9.9, and this is mur 0.1.0; running it with this one');
    expect(run.stderr).toContain(`warning: --workdir ${project} holds the project ${project}: the capsule can read and change its files`);
    const explained = await runMur(['run', '--explain-scope', '--json', '--system-prompt', 'be brief'], { cwd: project, env });
    expect(explained.code, explained.stderr).toBe(0);
    expect(JSON.parse(explained.stdout)).toHaveProperty('achieved_containment');
  });

  it('refuses a --task that is there but is no file it can read, before anything is staged', async () => {
    const runnable = await capsuleProject(path.join(scratch.dir, 'task-dir'), 'name: taskdir\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    await fs.mkdir(path.join(runnable, 'notes.md'));
    const result = await runMur(['run', '--task', 'notes.md', '--json'], { cwd: runnable, env });
    refused(result, 'E-IO-001', "--task 'notes.md' is a directory, not a task file", 'name a file whose content is the task');
    expect(result.stdout).toBe('');
    expect(existsSync(path.join(runnable, 'workdir'))).toBe(false);
  });

  it('refuses an address and a port given to --bind, saying where the port is set', async () => {
    for (const bind of ['127.0.0.1:36469', '[::1]:8080']) {
      const result = await runMur(['run', '--manifest', path.join(capsule, 'murmur.yaml'), '--bind', bind], { env });
      misused(
        result,
        `--bind takes an address, not an address and a port: '${bind}'`,
        "e.g. --bind 127.0.0.1; the door's port is the manifest's network.internal_port",
      );
    }
  });

  it('says --bind changes nothing for a script capsule, which has no door, rather than warn of a door it never opens', async () => {
    const script = await capsuleProject(path.join(scratch.dir, 'doorless'), 'name: doorless\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    // A documentation address (TEST-NET-1): nothing here could listen on it, whatever mur did with it.
    const result = await runMur(['run', '--bind', '192.0.2.1'], { cwd: script, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('status:  ok');
    expect(result.stderr).toContain('warning: --bind changes nothing here: doorless is a script capsule (no inference:), which has no door');
    expect(result.stderr).not.toContain('beyond this machine');
  });

  it('refuses to build an archive no reader would take: two files whose names differ only in case', async () => {
    const casey = path.join(scratch.dir, 'casey');
    await fs.mkdir(casey);
    await fs.writeFile(path.join(casey, 'murmur.yaml'), 'name: casey\nversion: 0.1.0\nruntime: skill\nrequires_files: [skill.md, README.md, readme.md]\n');
    for (const file of ['skill.md', 'README.md', 'readme.md']) await fs.writeFile(path.join(casey, file), `# ${file}\n`);
    refused(
      await runMur(['build', casey], { env }),
      'E-BLD-002',
      "requires_files entries 'README.md' and 'readme.md' differ only in case or Unicode form",
      'give each packaged file a distinct path inside the artifact',
    );
    expect((await fs.readdir(casey)).filter((name) => name.endsWith('.mur.zip'))).toEqual([]);
    // …nor one no registry would index: a description past a paragraph.
    await fs.writeFile(
      path.join(casey, 'murmur.yaml'),
      `name: casey\nversion: 0.1.0\nruntime: skill\ndescription: ${'d'.repeat(5000)}\nrequires_files: [skill.md]\n`,
    );
    refused(
      await runMur(['build', casey], { env }),
      'E-BLD-001',
      'the description is 5000 characters; a packaged one is at most 4096',
      'registries index the description and tags for search: keep them to a paragraph and a few words',
    );
    expect((await fs.readdir(casey)).filter((name) => name.endsWith('.mur.zip'))).toEqual([]);
  });

  it('says, for a session that ran on a stack, where its trace is and how to fetch it', async () => {
    // What `mur run` against a stack leaves in the capsule's directory: the answer it fetched, no records.
    const project = path.join(scratch.dir, 'ran-on-a-stack');
    const session = 'ses_019c0000000070008000000000000001';
    await fs.mkdir(path.join(project, 'workdir', session, 'out'), { recursive: true });
    await fs.writeFile(path.join(project, 'murmur.yaml'), 'name: stacked\nversion: 0.1.0\n');
    await fs.writeFile(path.join(project, 'workdir', session, 'out', 'result.txt'), 'the answer');
    refused(
      await runMur(['trace', 'show', '@1'], { cwd: project, env }),
      'E-IO-001',
      `trace file not found: ${path.join(project, 'workdir', session, 'trace.jsonl')}`,
      `session ${session} ran on a stack's executor, which keeps its records: fetch the trace with 'mur files ${session} trace.jsonl --out <file>'`,
    );
  });

  it('says what a bad manifest value is and that the field is to be corrected', async () => {
    const bad = path.join(scratch.dir, 'bad');
    await fs.mkdir(bad);
    await fs.writeFile(path.join(bad, 'murmur.yaml'), 'name: bad\nversion: 0.1.0\nlifecycle:\n  task_acceptance: quee\n');
    const result = await runMur(['stage', bad], { env });
    refused(result, 'E-MAN-003', '', 'correct the field the message names in the manifest');
    expect(result.stderr).toMatch(/error\[E-MAN-003\]: .*lifecycle\.task_acceptance.*must be one of: .*got 'quee'/);
  });

  it('says when a --task that reads as a path is no file, and runs that text as the task, as upstream does', async () => {
    const runnable = await capsuleProject(path.join(scratch.dir, 'runnable'), 'name: runnable\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['run', '--manifest', path.join(runnable, 'murmur.yaml'), '--task', './tsk-typo.md', '--json'], { env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("warning: --task './tsk-typo.md' is not a file here, so the task is that text as written");
    const { workdir } = JSON.parse(result.stdout.split('\n')[0] as string) as { workdir: string };
    expect(await fs.readFile(path.join(workdir, 'task.md'), 'utf8')).toBe('./tsk-typo.md');
    const prose = await runMur(['run', '--manifest', path.join(runnable, 'murmur.yaml'), '--task', 'summarise the notes', '--json'], { env });
    expect(prose.code, prose.stderr).toBe(0);
    expect(prose.stderr).not.toContain('warning: --task');
  });

  it('says a lifecycle flag changes nothing for a script capsule, which runs its task once all the same', async () => {
    const script = await capsuleProject(path.join(scratch.dir, 'script-lifecycle'), 'name: scripted\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['run', '--lifecycle-after-task', 'sleep', '--lifecycle-task-acceptance', 'queue', '--task', 'once'], { cwd: script, env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain(
      'warning: --lifecycle-task-acceptance and --lifecycle-after-task change nothing here: scripted is a script capsule (no inference:), which runs its task once',
    );
    expect(result.stdout.trim().split('\n').at(-1)).toBe('status:  ok');
  });

  describe('against a stack', () => {
    let nats: NatsServer;
    beforeAll(async () => {
      nats = await startNatsServer();
    });
    afterAll(async () => {
      await nats.stop();
    });

    it('refuses a subject pattern the bus cannot take, and exits rather than waiting on the bus', async () => {
      const result = await runMur(['events', 'bad pattern'], { env: { ...env, MURMUR_NATS_URL: nats.url }, timeoutMs: 20_000 });
      refused(
        result,
        'E-BUS-001',
        "'bad pattern' is not a valid subject pattern",
        "use dot-separated tokens, '*' for one token and '>' for the rest, e.g. 'session.>'",
      );
    });
  });
});
