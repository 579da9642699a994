import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { promises as fs, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NODE_FLAGS, buildSnapshot } from '../../scripts/snapshot.mjs';
import { capsuleProject } from '../../test/support/artifacts.js';
import { tempDir } from '../../test/support/fs.js';
import { capsuleWat, printingCapsuleWat } from '../../test/support/guests.js';
import { startNatsServer } from '../../test/support/nats-server.js';
import { murBin, repositoryRoot, runMur, startService, stopAfterFile, untilSaid } from '../../test/support/processes.js';

let scratch: { dir: string; cleanup: () => Promise<void> };

beforeEach(async () => {
  scratch = await tempDir('murmur-snapshot-');
});

afterEach(async () => {
  await scratch.cleanup();
});

/** Builds a snapshot from `source` (an ES module) in the scratch directory. */
async function snapshotOf(source: string): Promise<{ blob: string | undefined; reason: string | undefined }> {
  const entry = path.join(scratch.dir, 'entry.mjs');
  await fs.writeFile(entry, source);
  return buildSnapshot({ entry, outDir: path.join(scratch.dir, 'out'), name: 'probe' });
}

/**
 * Starts `mur roost` through `launcher` and returns the node command line the launcher exec'd
 * (`/proc/<pid>/cmdline`: the launcher execs node in its own process), then stops it.
 */
async function launchedCommandLine(launcher: string, env: Record<string, string> = {}): Promise<string[]> {
  const child: ChildProcess = stopAfterFile(
    spawn(launcher, ['roost', '--port', '0', '--registry-path', path.join(scratch.dir, 'registry')], {
      env: { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'home'), ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    }),
  );
  try {
    await untilSaid(child, 'stderr', (stderr) => stderr.includes('listening on') || undefined);
    return readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } finally {
    child.kill('SIGKILL');
  }
}

/** A copy of `cli/bin` beside the build's bundle and snapshots, with `.node` records that say `builtBy`. */
async function launcherCopy(builtBy: string): Promise<{ launcher: string; blob: string }> {
  const cli = path.join(scratch.dir, 'cli');
  await fs.mkdir(path.join(cli, 'bin'), { recursive: true });
  await fs.mkdir(path.join(cli, 'dist', 'snapshot'), { recursive: true });
  for (const file of ['mur', 'mur.js']) await fs.copyFile(path.join(repositoryRoot, 'cli', 'bin', file), path.join(cli, 'bin', file));
  await fs.symlink(path.join(repositoryRoot, 'cli', 'dist', 'bundle'), path.join(cli, 'dist', 'bundle'));
  for (const name of ['mur.blob', 'mur-client.blob']) {
    const copy = path.join(cli, 'dist', 'snapshot', name);
    await fs.copyFile(path.join(repositoryRoot, 'cli', 'dist', 'snapshot', name), copy);
    await fs.writeFile(`${copy}.node`, `${builtBy}\n`);
  }
  return { launcher: path.join(cli, 'bin', 'mur'), blob: path.join(cli, 'dist', 'snapshot', 'mur.blob') };
}

/**
 * A `node` for the launcher to find first on PATH: it notes the snapshot it is started from in
 * `noted`, then runs as this node. Its file is older than any snapshot, as an installed node is.
 */
async function notingNode(): Promise<{ bin: string; noted: string }> {
  const bin = path.join(scratch.dir, 'noting-bin');
  const noted = path.join(scratch.dir, 'noted-snapshot');
  await fs.mkdir(bin);
  const node = path.join(bin, 'node');
  await fs.writeFile(
    node,
    `#!/bin/sh\nblob=none\nprevious=\nfor argument in "$@"; do [ "$previous" = --snapshot-blob ] && blob=$argument; previous=$argument; done\necho "\${blob##*/}" > '${noted}'\nexec '${process.execPath}' "$@"\n`,
    { mode: 0o755 },
  );
  const longAgo = new Date('2001-01-01T00:00:00Z');
  await fs.utimes(node, longAgo, longAgo);
  return { bin, noted };
}

const thisNode = (): string => readFileSync(path.join(repositoryRoot, 'cli', 'dist', 'snapshot', 'mur.blob.node'), 'utf8').trim();

describe('the snapshot build', () => {
  it('refuses code that reads the environment or the working directory while it is evaluated, naming what it read', async () => {
    await expect(
      snapshotOf(
        "import v8 from 'node:v8';\nconst home = process.env.MURMUR_SNAPSHOT_PROBE ?? process.cwd();\nv8.startupSnapshot.setDeserializeMainFunction(() => console.log(home));\n",
      ),
    ).rejects.toThrow(/\(process\.env\.MURMUR_SNAPSHOT_PROBE, process\.cwd\(\)\): read it when it is used/);
    expect(await fs.readdir(path.join(scratch.dir, 'out'))).not.toContain('probe.blob');
  });

  it("lets a warmed call read yaml's debugging switches, which it reads afresh on every parse, and still refuses anything read beside them", async () => {
    const reading = (names: string[]): string =>
      `import v8 from 'node:v8';\nconst read = () => [${names.map((name) => `process.env.${name}`).join(', ')}];\nread();\nv8.startupSnapshot.setDeserializeMainFunction(() => console.log(read().length));\n`;
    expect((await snapshotOf(reading(['LOG_TOKENS', 'LOG_STREAM']))).blob).toBeDefined();
    await fs.rm(path.join(scratch.dir, 'out'), { recursive: true, force: true });
    await expect(snapshotOf(reading(['LOG_TOKENS', 'MURMUR_SNAPSHOT_PROBE']))).rejects.toThrow(
      /read the process it runs in \(process\.env\.MURMUR_SNAPSHOT_PROBE\): read it when it is used/,
    );
  });

  it('gives code the environment of the run it is started for, and loads deferred built-ins on their first use', async () => {
    const built = await snapshotOf(
      [
        "import { execFileSync } from 'node:child_process';",
        "import v8 from 'node:v8';",
        'v8.startupSnapshot.setDeserializeMainFunction(() => {',
        "  process.stdout.write(`${process.env.MURMUR_SNAPSHOT_PROBE} ${execFileSync('sh', ['-c', 'echo from-a-child'], { encoding: 'utf8' })}`);",
        '});',
      ].join('\n'),
    );
    expect(built.reason).toBeUndefined();
    const run = spawnSync(process.execPath, [...NODE_FLAGS, '--snapshot-blob', built.blob as string], {
      env: { PATH: process.env.PATH ?? '', MURMUR_SNAPSHOT_PROBE: 'given-at-run-time' },
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('given-at-run-time from-a-child\n');
  });
});

describe('cli/bin/mur', () => {
  it('starts node from the snapshot the build made for it', async () => {
    const commandLine = await launchedCommandLine(murBin);
    expect(commandLine).toContain('--snapshot-blob');
    expect(commandLine[commandLine.indexOf('--snapshot-blob') + 1]).toMatch(/cli\/bin\/\.\.\/dist\/snapshot\/mur\.blob$/);
  });

  it('reads its environment when it runs, not when its snapshot was built', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    const timed = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--explain-scope'], { env: { ...env, MURMUR_TIMING: '1' } });
    expect(timed.code, timed.stderr).toBe(0);
    expect(timed.stderr).toMatch(/^\[timing\] run command loaded \d+ms$/m);
    const quiet = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--explain-scope'], { env });
    expect(quiet.stderr).not.toContain('[timing]');
  });

  it('gives every run its own random session id', async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    const ids = new Set<string>();
    for (let run = 0; run < 2; run += 1) {
      const result = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--json'], { env });
      expect(result.code, result.stderr).toBe(0);
      // The uuid v7's last 16 hex digits are random; its first ones are the time.
      ids.add((JSON.parse(result.stdout) as { session_id: string }).session_id.slice(-16));
    }
    expect(ids.size).toBe(2);
  });

  it('runs the bundle when the snapshot was built by another node', async () => {
    const { launcher } = await launcherCopy('/opt/another/node');
    const commandLine = await launchedCommandLine(launcher);
    expect(commandLine).not.toContain('--snapshot-blob');
    expect(commandLine).toContain(path.join(await fs.realpath(scratch.dir), 'cli', 'bin', 'mur.js'));
  });

  it('runs the bundle, without a word, when the record of the node that built the snapshot is missing', async () => {
    const { launcher, blob } = await launcherCopy(thisNode());
    await fs.rm(`${blob}.node`);
    expect(await launchedCommandLine(launcher)).not.toContain('--snapshot-blob');
    const version = spawnSync(launcher, ['--version'], { env: { PATH: process.env.PATH ?? '' }, encoding: 'utf8' });
    expect({ status: version.status, stdout: version.stdout, stderr: version.stderr }).toEqual({ status: 0, stdout: '0.1.0\n', stderr: '' });
  });

  it('runs the bundle when node is newer than the snapshot, and when MURMUR_SNAPSHOT=off', async () => {
    const { launcher, blob } = await launcherCopy(thisNode());
    expect(await launchedCommandLine(launcher)).toContain('--snapshot-blob');
    expect(await launchedCommandLine(launcher, { MURMUR_SNAPSHOT: 'off' })).not.toContain('--snapshot-blob');
    const longAgo = new Date('2001-01-01T00:00:00Z');
    await fs.utimes(blob, longAgo, longAgo);
    expect(await launchedCommandLine(launcher)).not.toContain('--snapshot-blob');
  });

  it("starts a run or a stage against a stack from the thin client's snapshot, and everything else from the in-process one", async () => {
    const node = await notingNode();
    const { launcher } = await launcherCopy(path.join(node.bin, 'node'));
    const stack = 'nats://127.0.0.1:4222';
    const started = (args: string[], natsUrl?: string): string => {
      // `--help` answers without a bus, from whichever snapshot was started.
      const result = spawnSync(launcher, args, {
        env: { PATH: `${node.bin}:${process.env.PATH ?? ''}`, ...(natsUrl === undefined ? {} : { MURMUR_NATS_URL: natsUrl }) },
        encoding: 'utf8',
      });
      expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
      return readFileSync(node.noted, 'utf8').trim();
    };
    expect(started(['run', '--help'], stack)).toBe('mur-client.blob');
    expect(started(['stage', '--help'], stack)).toBe('mur-client.blob');
    expect(started(['run', '--help'])).toBe('mur.blob');
    // Blank, as runtime.ts reads it, is no stack: the run is in-process.
    expect(started(['run', '--help'], ' \t')).toBe('mur.blob');
    expect(started(['ps', '--help'], stack)).toBe('mur.blob');
    expect(started(['--version'], stack)).toBe('mur.blob');
  });

  it("gives every run from the thin client's snapshot its own NATS ids: two capsules run in a row against a stack reach it whole", async () => {
    // nats.js draws inboxes and object-store chunk ids from one generator, seeded at its first use.
    // A snapshot built after that use (a build that rehearsed a connection once did) makes every
    // run draw the same ids, and two uploads of files of one size write their chunks into one
    // object, which the stager then refuses.
    const nats = await startNatsServer();
    const stackEnv = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'stack-home') };
    const services = [await startService('stager', stackEnv), await startService('executor', stackEnv)];
    try {
      // Manifests of one length, so a shared chunk is read as an object of the wrong size; and two
      // components, so the second run uploads as many files as the first, drawing ids as it did.
      for (const [name, component] of [
        ['first', await capsuleWat()],
        ['other', await printingCapsuleWat()],
      ] as const) {
        const project = await capsuleProject(path.join(scratch.dir, name), `name: ${name}\nversion: 0.1.0\n`, component.bytes);
        const ran = await runMur(['run', '--manifest', path.join(project, 'murmur.yaml'), '--json'], {
          cwd: project,
          env: { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') },
        });
        expect({ name, code: ran.code, stderr: ran.stderr }).toEqual({ name, code: 0, stderr: '' });
      }
    } finally {
      for (const service of services.reverse()) await service.stop();
      await nats.stop();
    }
  });

  it("fails as a bug in mur, naming the missing service, if the thin client's snapshot were ever asked to run a capsule in-process", async () => {
    const project = await capsuleProject(path.join(scratch.dir, 'hello'), 'name: hello\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const client = path.join(repositoryRoot, 'cli', 'dist', 'snapshot', 'mur-client.blob');
    const run = spawnSync(process.execPath, [...NODE_FLAGS, '--snapshot-blob', client, '--', 'run', '--manifest', path.join(project, 'murmur.yaml')], {
      env: { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'home') },
      encoding: 'utf8',
    });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(
      /^error\[E-IO-003\]: unexpected failure: Error: @murmur\/(stager|executor|watcher) is not in mur-client\.blob, mur's snapshot for a thin client of a stack/m,
    );
    expect(run.stderr).toContain('hint: this is a bug in mur');
  });
});
