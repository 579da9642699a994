import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { capabilityPolicy, parseCapsuleManifest } from '@murmur/shared';
import { STREAM_LIMIT_BYTES, type SubprocessContext, runHarness, runShell } from '../src/host/subprocess.js';

/**
 * A shell tool's command as the capsule host runs it (unsealed here: the sealed sandbox's suites
 * run the same calls through `murmur-confine`): real bash, real processes, the call's own bounds.
 */
describe('a shell call', () => {
  let workdir: string;
  const leftBehind: number[] = [];

  beforeEach(async () => {
    workdir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-subprocess-'));
  });

  afterEach(async () => {
    for (const pid of leftBehind.splice(0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await fs.rm(workdir, { recursive: true, force: true });
  });

  function context(deadlineMs: number): SubprocessContext {
    const manifest = 'name: local/shell\nversion: 0.1.0\ncapabilities:\n  shell:\n    allow: [bash]\n';
    return {
      policy: capabilityPolicy(parseCapsuleManifest(manifest).manifest),
      accessibleWorkdir: workdir,
      baseEnv: { PATH: '/usr/local/bin:/usr/bin:/bin' },
      identityEnv: [],
      deadlineMs,
    };
  }

  it('runs only a binary capabilities.shell.allow names: another is refused before anything runs, whatever the sandbox would allow', async () => {
    const marker = path.join(workdir, 'ran');
    for (const binary of ['sh', 'touch', '/bin/bash', 'bash ']) {
      await expect(runShell(context(30_000), binary, ['-c', `touch ${marker}`], [])).rejects.toThrow(
        `shell binary '${binary}' is not in capabilities.shell.allow`,
      );
    }
    await expect(fs.access(marker)).rejects.toThrow();
  });

  it('gives the command the variables it was given, and refuses a name that would define another before the runtime’s own', async () => {
    const given = await runShell(context(30_000), 'bash', ['-c', 'echo "$GREETING $HOME"'], [['GREETING', 'hello']]);
    expect(given.stdout.trim()).toBe(`hello ${path.join(workdir, '.capsule-home')}`);
    for (const name of ['HOME=/', '', 'A=B=C'])
      await expect(runShell(context(30_000), 'bash', ['-c', 'echo "$HOME"'], [[name, 'x']])).rejects.toThrow(
        `environment variable name ${JSON.stringify(name)} is refused: a name is not empty and holds no '=' or NUL`,
      );
  });

  it('refuses, before anything runs and with its code, an argument no program can be given: a NUL byte, one past 128 KiB, all of them past what the kernel passes', async () => {
    const refusals: Array<[args: string[], env: Array<[string, string]>, said: string]> = [
      [['-c', 'echo a\0b'], [], "E-RUN-015: argument 2 holds a NUL byte, which no program's argument can hold; nothing was run"],
      [['-c', `echo ${'é'.repeat(70_000)}`], [], "E-RUN-015: argument 2 is 140005 bytes, more than the 131071 a program's one argument may hold on Linux"],
      [['-c', 'true'], [['GREETING', 'a\0b']], "E-RUN-015: environment variable GREETING's value holds a NUL byte"],
      [
        ['-c', 'true', ...Array.from({ length: 40 }, () => 'x'.repeat(120 * 1024))],
        [],
        'bytes, are more than the system passes to a program at once (E2BIG); nothing was run',
      ],
    ];
    for (const [args, env, said] of refusals) {
      const refused = runShell(context(30_000), 'bash', args, env);
      await expect(refused).rejects.toThrow(said);
      await expect(refused).rejects.not.toThrow('args[');
    }
  });

  const alive = (pid: number): boolean => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };

  it('returns when its command exits, ending a background job that still holds its output', async () => {
    const result = await runShell(context(30_000), 'bash', ['-c', 'sleep 600 & echo $!'], []);
    const pid = Number(result.stdout.trim());
    leftBehind.push(pid);
    expect(result.exitCode).toBe(0);
    expect(result.stderr).not.toContain('deadline');
    // What it forked went with it (it was still in the command's process group).
    for (let tries = 0; tries < 100 && alive(pid); tries += 1) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(alive(pid)).toBe(false);
  });

  it('ends a background job that let go of its output with its command, though nothing held the call open', async () => {
    const result = await runShell(context(30_000), 'bash', ['-c', 'sleep 600 >/dev/null 2>&1 </dev/null & echo $!'], []);
    const pid = Number(result.stdout.trim());
    leftBehind.push(pid);
    expect(result.exitCode).toBe(0);
    for (let tries = 0; tries < 100 && alive(pid); tries += 1) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(alive(pid)).toBe(false);
  });

  it('returns at its deadline even when what it forked left its process group holding its output', async () => {
    // `set -m`: the background job leads a process group of its own, out of reach of the group's kill.
    const result = await runShell(context(1_000), 'bash', ['-c', 'set -m; sleep 600 & echo $!; sleep 600'], []);
    leftBehind.push(Number(result.stdout.trim()));
    expect(result.exitCode).toBe(124);
    expect(result.stderr).toContain('[killed: the command outlived its 1s deadline]');
  });

  it('keeps a bounded part of an output of any size: the model gets its start, the log its first 8 MiB a stream', async () => {
    const result = await runShell(context(60_000), 'bash', ['-c', 'head -c 40000000 /dev/zero | tr "\\0" x; echo done >&2'], []);
    expect(result.exitCode).toBe(0);
    expect(result.truncated).toBe(true);
    expect(result.stdout.length).toBe(STREAM_LIMIT_BYTES);
    expect(result.stderr).toBe('done\n');
    const log = result.fullOutputPath as string;
    expect(path.dirname(log)).toBe(path.join(workdir, 'logs'));
    const logged = await fs.readFile(log, 'utf8');
    expect(logged).toContain(`[${40_000_000 - 8 * 1024 * 1024} more bytes, not kept]`);
    expect(logged.length).toBeLessThan(8 * 1024 * 1024 + 4096);
    expect(logged.endsWith('Stderr:\ndone\n\n')).toBe(true);
  });

  it('reads a harness line by line however its output is cut, passes over a line longer than any it reads, and keeps a last line without a newline', async () => {
    const lines: string[] = [];
    // Lines cut mid-way and mid-character by the pauses; then 40 MiB without a newline, then two more.
    const script = [
      'printf \'{"a":1}\\n{"b":\'',
      'sleep 0.05',
      "printf '2}\\n\\303'",
      'sleep 0.05',
      "printf '\\251t\\351\\n'",
      "head -c 41943040 /dev/zero | tr '\\0' x",
      "printf '\\nafter\\nlast'",
    ].join('; ');
    const exit = await runHarness(
      context(30_000),
      '/bin/sh',
      ['-c', script],
      { PATH: '/usr/bin:/bin' },
      {
        input: '',
        deadlineMs: 30_000,
        onLine: (line) => lines.push(line.length > 100 ? `${line.length} characters` : line),
        signal: new AbortController().signal,
      },
    );
    expect(exit.exitCode, exit.stderr).toBe(0);
    expect(lines).toEqual(['{"a":1}', '{"b":2}', '\u00e9t\ufffd', 'after', 'last']);
  });

  it('reports a harness that exits without reading a task larger than a pipe as its exit, never as a broken pipe that ends the host', async () => {
    const lines: string[] = [];
    const exit = await runHarness(
      context(30_000),
      '/bin/sh',
      ['-c', 'echo refused >&2; exit 3'],
      { PATH: '/usr/bin:/bin' },
      {
        input: 'a task, '.repeat(128 * 1024),
        deadlineMs: 30_000,
        onLine: (line) => lines.push(line),
        signal: new AbortController().signal,
      },
    );
    expect(exit).toMatchObject({ exitCode: 3, stderr: 'refused\n', timedOut: false });
    expect(lines).toEqual([]);
  });
});
