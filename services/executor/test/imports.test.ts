import { existsSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BridgeClient, createSignal } from '../src/host/bridge.js';
import { GuestExit, buildImports } from '../src/host/imports.js';
import { tempDir } from '../../../test/support/fs.js';
import { MessageChannel } from 'node:worker_threads';

const EVERYTHING = [
  'wasi:cli/environment',
  'wasi:cli/exit',
  'wasi:cli/stdin',
  'wasi:cli/stdout',
  'wasi:cli/stderr',
  'wasi:clocks/monotonic-clock',
  'wasi:filesystem/types',
  'wasi:filesystem/preopens',
  'wasi:http/types',
  'wasi:http/outgoing-handler',
  'wasi:io/streams',
  'wasi:random/random',
];

describe('a guest’s import object', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let channel: MessageChannel;
  const written: Array<[string, string]> = [];

  beforeEach(async () => {
    scratch = await tempDir('murmur-imports-');
    channel = new MessageChannel();
    written.length = 0;
  });

  afterEach(async () => {
    channel.port1.close();
    await scratch.cleanup();
  });

  async function imports(needed: string[] = EVERYTHING, capsuleImports = true): Promise<Record<string, Record<string, (...args: never[]) => unknown>>> {
    return (await buildImports(
      {
        preopen: scratch.dir,
        env: [
          ['GREETING', 'hello'],
          ['MURMUR_SESSION_ID', 'ses_x'],
        ],
        grant: 'capsule',
        stdout: (bytes) => written.push(['stdout', Buffer.from(bytes).toString()]),
        stderr: (bytes) => written.push(['stderr', Buffer.from(bytes).toString()]),
        bridge: new BridgeClient(channel.port2, createSignal()),
        capsuleImports,
      },
      needed,
    )) as Record<string, Record<string, (...args: never[]) => unknown>>;
  }

  it('holds exactly the environment it was granted, no arguments and no working directory', async () => {
    const cli = (await imports())['wasi:cli/environment'] as Record<string, () => unknown>;
    expect(cli.getEnvironment?.()).toEqual([
      ['GREETING', 'hello'],
      ['MURMUR_SESSION_ID', 'ses_x'],
    ]);
    expect(cli.getArguments?.()).toEqual([]);
    expect(cli.initialCwd?.()).toBeUndefined();
  });

  it('contains exit: it throws to the runner instead of ending the process', async () => {
    const exit = (await imports())['wasi:cli/exit'] as Record<string, (value: never) => unknown>;
    expect(() => exit.exit?.({ tag: 'err' } as never)).toThrow(GuestExit);
    try {
      exit.exitWithCode?.(7 as never);
    } catch (error) {
      expect((error as GuestExit).code).toBe(7);
    }
  });

  it('gives no stdin: reading it reports the stream closed', async () => {
    const stdin = ((await imports())['wasi:cli/stdin'] as { getStdin(): { read(length: bigint): Uint8Array } }).getStdin();
    expect(() => stdin.read(10n)).toThrow(expect.objectContaining({ tag: 'closed' }) as never);
  });

  it('captures stdout and stderr instead of writing to the host’s', async () => {
    const built = await imports();
    const stdout = (built['wasi:cli/stdout'] as { getStdout(): { blockingWriteAndFlush(bytes: Uint8Array): void } }).getStdout();
    const stderr = (built['wasi:cli/stderr'] as { getStderr(): { blockingWriteAndFlush(bytes: Uint8Array): void } }).getStderr();
    stdout.blockingWriteAndFlush(Buffer.from('out'));
    stderr.blockingWriteAndFlush(Buffer.from('err'));
    expect(written).toEqual([
      ['stdout', 'out'],
      ['stderr', 'err'],
    ]);
  });

  it('preopens the granted directory, and only it, as "."', async () => {
    const directories = ((await imports())['wasi:filesystem/preopens'] as { getDirectories(): Array<[unknown, string]> }).getDirectories();
    expect(directories.map(([, name]) => name)).toEqual(['.']);
    expect(existsSync(scratch.dir)).toBe(true);
  });

  it('offers no wasi:sockets interface at all', async () => {
    const built = await imports([...EVERYTHING, 'wasi:sockets/tcp', 'wasi:sockets/instance-network']);
    expect(Object.keys(built).filter((key) => key.startsWith('wasi:sockets'))).toEqual([]);
  });

  it('builds only what the component imports', async () => {
    const built = await imports([], false);
    expect(Object.keys(built).sort()).toEqual(['murmur:task/task', 'murmur:text/chunks']);
  });

  it('gives a hook only what its world imports: inference, and never the task’s stream or its request for input', async () => {
    const built = (await buildImports(
      {
        preopen: '',
        env: [],
        grant: 'hook:audit',
        stdout: () => {},
        stderr: () => {},
        bridge: new BridgeClient(channel.port2, createSignal()),
        capsuleImports: false,
        hookImports: true,
      },
      [],
    )) as Record<string, unknown>;
    expect(built['murmur:runtime/inference']).toBeDefined();
    for (const name of ['murmur:text/chunks', 'murmur:task/task', 'murmur:tool-registry/invoke', 'murmur:shell/execute'])
      expect(built[name], name).toBeUndefined();
    // A tool and a driver keep them: a driver streams its reply, a tool may ask for input.
    const tool = await imports(EVERYTHING, false);
    expect(tool['murmur:text/chunks']).toBeDefined();
    expect(tool['murmur:task/task']).toBeDefined();
  });

  it('gives tools no capsule-only murmur interfaces', async () => {
    const built = await imports(EVERYTHING, false);
    for (const name of ['murmur:tool-registry/invoke', 'murmur:shell/execute', 'murmur:message/send', 'murmur:artifact-manager/manage'])
      expect(built[name]).toBeUndefined();
  });
});
