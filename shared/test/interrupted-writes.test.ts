import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs, watch } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const repositoryRoot = fileURLToPath(new URL('../..', import.meta.url));

/**
 * A command's long write into the user's directory, interrupted while its temporary file is being
 * written: run in a child (the interrupt ends a process), which is sent SIGINT the moment the
 * temporary file appears. 256 MiB keep the write going for far longer than that takes.
 */
async function interruptedWhileWriting(dir: string, script: string): Promise<{ signal: NodeJS.Signals | null; left: string[] }> {
  const appeared = new Promise<void>((resolve) => {
    const watcher = watch(dir, (_event, name) => {
      if (name?.endsWith('.tmp')) {
        watcher.close();
        resolve();
      }
    });
  });
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: repositoryRoot, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  const first = await Promise.race([appeared.then(() => 'appeared' as const), exited.then(() => 'exited' as const)]);
  expect(first, `the child ended before it began writing: ${stderr}`).toBe('appeared');
  child.kill('SIGINT');
  const [, signal] = await exited;
  return { signal, left: await fs.readdir(dir) };
}

describe('a long write interrupted', () => {
  const dirs: string[] = [];
  afterEach(async () => {
    for (const dir of dirs.splice(0)) await fs.rm(dir, { recursive: true, force: true });
  });
  const scratch = async (): Promise<string> => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-interrupted-'));
    dirs.push(dir);
    return dir;
  };

  it('leaves no temporary file of an archive mur build was writing, nor the archive, and ends on the signal', async () => {
    const dir = await scratch();
    const target = path.join(dir, 'big-0.1.0.mur.zip');
    const { signal, left } = await interruptedWhileWriting(
      dir,
      `import { writeFileAtomic } from '@murmur/shared/node';
       await writeFileAtomic(${JSON.stringify(target)}, new Uint8Array(256 * 1024 * 1024), { interruptible: true });`,
    );
    expect(signal).toBe('SIGINT');
    expect(left).toEqual([]);
  });

  it('leaves no temporary file in a command’s store of an install it was writing, nor its turn, and ends on the signal', async () => {
    const dir = await scratch();
    const store = path.join(dir, 'store');
    const version = path.join(store, 'big', '0.1.0');
    await fs.mkdir(version, { recursive: true });
    const { signal, left } = await interruptedWhileWriting(
      version,
      `import { ArtifactStore, sha256Hex } from '@murmur/shared/artifacts';
       const bytes = new Uint8Array(256 * 1024 * 1024);
       const meta = { name: 'big', version: '0.1.0', runtime: 'static', artifact_runtime: 'skill', platforms: [], description: null, tags: [] };
       await new ArtifactStore(${JSON.stringify(store)}, 'project', { interruptible: true }).install(bytes, meta, sha256Hex(bytes));`,
    );
    expect(signal).toBe('SIGINT');
    // No archive, whole or partial, and not the version's publish turn either (a later writer would take over a dead one's, but it is litter).
    expect(left).toEqual([]);
  });
});
