import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/support/fs.js';

/**
 * preview2-shim's I/O thread is started only for a guest that will call into it. Each case runs in
 * a worker thread of its own, as a guest does, loading the built host modules (a worker cannot load
 * TypeScript), so the shim is evaluated afresh there.
 */
const built = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'host');

/** Builds a guest's imports for `needed` in a fresh worker, runs `body` against them there, and returns what it reports. */
function inGuestWorker(needed: string[], preopen: string, body: string): Promise<Record<string, unknown>> {
  const source = `
    const { parentPort, MessageChannel } = require('node:worker_threads');
    (async () => {
      const { buildImports } = await import(${JSON.stringify(pathToFileURL(path.join(built, 'imports.js')).href)});
      const { ioThreadState } = await import(${JSON.stringify(pathToFileURL(path.join(built, 'io-thread.js')).href)});
      const { BridgeClient, createSignal } = await import(${JSON.stringify(pathToFileURL(path.join(built, 'bridge.js')).href)});
      const printed = [];
      const imports = await buildImports({
        preopen: ${JSON.stringify(preopen)},
        env: [],
        grant: 'capsule',
        stdout: (bytes) => printed.push(Buffer.from(bytes).toString()),
        stderr: () => {},
        bridge: new BridgeClient(new MessageChannel().port2, createSignal()),
        capsuleImports: false,
      }, ${JSON.stringify(needed)});
      const afterImports = ioThreadState();
      ${body}
      parentPort.postMessage({ afterImports, atEnd: ioThreadState(), printed });
    })().catch((error) => parentPort.postMessage({ error: String(error && error.stack || error) }));
  `;
  return new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true });
    worker.once('message', (report: Record<string, unknown>) => {
      void worker.terminate();
      if (report.error) reject(new Error(String(report.error)));
      else resolve(report);
    });
    worker.once('error', reject);
  });
}

describe('the shim’s I/O thread', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };

  beforeEach(async () => {
    scratch = await tempDir('murmur-io-thread-');
  });

  afterEach(async () => {
    await scratch.cleanup();
  });

  it('is never started for a guest that only prints', async () => {
    const report = await inGuestWorker(
      ['wasi:cli/stdout', 'wasi:io/error', 'wasi:io/streams', 'wasi:clocks/monotonic-clock', 'wasi:random/random'],
      scratch.dir,
      `imports['wasi:cli/stdout'].getStdout().blockingWriteAndFlush(Buffer.from('hello'));
       imports['wasi:clocks/monotonic-clock'].now();
       imports['wasi:random/random'].getRandomBytes(8n);`,
    );
    expect(report).toEqual({ afterImports: 'deferred', atEnd: 'deferred', printed: ['hello'] });
  });

  it('is started before the first call of a guest that writes files, and its writes land', async () => {
    const report = await inGuestWorker(
      ['wasi:cli/stdout', 'wasi:io/streams', 'wasi:filesystem/types', 'wasi:filesystem/preopens'],
      scratch.dir,
      `const [[root]] = imports['wasi:filesystem/preopens'].getDirectories();
       const file = root.openAt({ symlinkFollow: false }, 'note.txt', { create: true }, { write: true });
       const stream = file.writeViaStream(0n);
       stream.blockingWriteAndFlush(Buffer.from('written through the shim'));`,
    );
    expect(report).toMatchObject({ afterImports: 'started', atEnd: 'started' });
    expect(readFileSync(path.join(scratch.dir, 'note.txt'), 'utf8')).toBe('written through the shim');
  });

  it('starts at the first call that needs it, when the imports did not say so', async () => {
    // Only streams and stdout: nothing that needs the thread, until the guest subscribes to its stdout.
    const report = await inGuestWorker(
      ['wasi:cli/stdout', 'wasi:io/streams'],
      scratch.dir,
      `const pollable = imports['wasi:cli/stdout'].getStdout().subscribe();
       if (!pollable.ready()) throw new Error('a ready pollable said it was not ready');`,
    );
    expect(report).toMatchObject({ afterImports: 'deferred', atEnd: 'started' });
  });
});
