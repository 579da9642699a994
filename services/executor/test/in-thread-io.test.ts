import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/support/fs.js';

/**
 * preview2-shim's I/O is answered in the guest's own thread (`host/in-thread-io.ts`). Each case
 * runs in a worker thread of its own, as a guest does, loading the built host modules (a worker
 * cannot load TypeScript), so the shim is evaluated afresh there. The worker counts every thread
 * made in it: the shim's own I/O thread would be one.
 */
const built = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'host');

/** Builds a guest's imports for `needed` in a fresh worker, runs `body` (which may set `result`) against them there, and returns what it reports. */
function inGuestWorker(needed: string[], preopen: string, body: string): { report: Promise<Record<string, unknown>>; worker: Worker } {
  const source = `
    const workerThreads = require('node:worker_threads');
    const { parentPort, MessageChannel } = workerThreads;
    let threadsMade = 0;
    const RealWorker = workerThreads.Worker;
    workerThreads.Worker = function countedWorker(...args) { threadsMade += 1; return new RealWorker(...args); };
    require('node:module').syncBuiltinESMExports();
    (async () => {
      const { buildImports } = await import(${JSON.stringify(pathToFileURL(path.join(built, 'imports.js')).href)});
      const { shimIoInThread, closeGuestFiles } = await import(${JSON.stringify(pathToFileURL(path.join(built, 'in-thread-io.js')).href)});
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
      let result;
      const text = (bytes) => Buffer.from(bytes).toString();
      const openFds = () => require('node:fs').readdirSync('/proc/self/fd').length;
      const caught = (call) => { try { call(); return 'returned'; } catch (error) { return error instanceof Error ? error.message : error; } };
      parentPort.postMessage({ started: true });
      ${body}
      parentPort.postMessage({ threadsMade, inThread: shimIoInThread(), printed, result });
    })().catch((error) => parentPort.postMessage({ error: String(error && error.stack || error) }));
  `;
  const worker = new Worker(source, { eval: true });
  const report = new Promise<Record<string, unknown>>((resolve, reject) => {
    worker.on('message', (message: Record<string, unknown>) => {
      if (message.started) return;
      void worker.terminate();
      if (message.error) reject(new Error(String(message.error)));
      else resolve(message);
    });
    worker.once('error', reject);
  });
  return { report, worker };
}

const FILESYSTEM = ['wasi:cli/stdout', 'wasi:io/streams', 'wasi:io/poll', 'wasi:filesystem/types', 'wasi:filesystem/preopens'];

describe('WASI I/O answered in the guest’s own thread', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let preopen: string;

  beforeEach(async () => {
    scratch = await tempDir('murmur-in-thread-io-');
    preopen = path.join(scratch.dir, 'workdir');
    await import('node:fs/promises').then((fs) => fs.mkdir(preopen));
  });

  afterEach(async () => {
    await scratch.cleanup();
  });

  it('writes, reads, appends and stats files through streams and descriptors, with no thread of the shim’s', async () => {
    writeFileSync(path.join(preopen, 'given.txt'), 'from the host');
    const { report } = inGuestWorker(
      FILESYSTEM,
      preopen,
      `const [[root]] = imports['wasi:filesystem/preopens'].getDirectories();
       const file = root.openAt({ symlinkFollow: false }, 'note.txt', { create: true }, { read: true, write: true });
       const out = file.writeViaStream(0n);
       out.blockingWriteAndFlush(Buffer.from('hello, '));
       out.write(Buffer.from('world'));
       out.blockingFlush();
       out[Symbol.dispose]();
       file.write(Buffer.from('W'), 7n);
       const appended = file.appendViaStream();
       appended.blockingWriteAndFlush(Buffer.from('!'));
       appended[Symbol.dispose]();
       const input = file.readViaStream(0n);
       const first = text(input.blockingRead(5n));
       const rest = text(input.read(100n));
       const atEnd = caught(() => input.read(1n));
       input[Symbol.dispose]();
       const [bytes, eof] = file.read(5n, 7n);
       const stat = file.stat();
       const given = root.openAt({ symlinkFollow: false }, 'given.txt', {}, { read: true });
       const givenText = text(given.readViaStream(0n).blockingRead(100n));
       result = { first, rest, atEnd, read: text(bytes), eof, type: stat.type, size: Number(stat.size), givenText };`,
    );
    expect(await report).toMatchObject({
      threadsMade: 0,
      inThread: true,
      result: {
        first: 'hello',
        rest: ', World!',
        atEnd: { tag: 'closed' },
        read: 'World',
        eof: false,
        type: 'regular-file',
        size: 13,
        givenText: 'from the host',
      },
    });
    expect(readFileSync(path.join(preopen, 'note.txt'), 'utf8')).toBe('hello, World!');
  });

  it('closes the files an instance left open when it ends and forgets its pollables, and a late drop of one is harmless', async () => {
    const { report } = inGuestWorker(
      [...FILESYSTEM, 'wasi:clocks/monotonic-clock'],
      preopen,
      `const [[root]] = imports['wasi:filesystem/preopens'].getDirectories();
       const before = openFds();
       const files = ['a.txt', 'b.txt'].map((name) => root.openAt({ symlinkFollow: false }, name, { create: true }, { write: true }));
       const stream = files[0].writeViaStream(0n);
       stream.blockingWriteAndFlush(Buffer.from('kept'));
       const timer = imports['wasi:clocks/monotonic-clock'].subscribeDuration(1n);
       const whileOpen = openFds() - before;
       closeGuestFiles();
       const afterEnd = openFds() - before;
       const lateDrop = caught(() => { stream[Symbol.dispose](); files[0][Symbol.dispose](); files[1][Symbol.dispose](); });
       const timerAfterEnd = caught(() => timer.ready());
       result = { whileOpen, afterEnd, lateDrop, timerAfterEnd };`,
    );
    expect(await report).toMatchObject({ result: { whileOpen: 2, afterEnd: 0, lateDrop: 'returned', timerAfterEnd: expect.stringMatching(/no pollable/) } });
    expect(readFileSync(path.join(preopen, 'a.txt'), 'utf8')).toBe('kept');
  });

  it('still refuses a path outside the preopen, through .. or a symlink', async () => {
    const { symlinkSync } = await import('node:fs');
    symlinkSync(scratch.dir, path.join(preopen, 'escape'));
    const { report } = inGuestWorker(
      FILESYSTEM,
      preopen,
      `const [[root]] = imports['wasi:filesystem/preopens'].getDirectories();
       result = {
         parent: caught(() => root.openAt({ symlinkFollow: false }, '../outside.txt', { create: true }, { write: true })),
         absolute: caught(() => root.openAt({ symlinkFollow: false }, ${JSON.stringify(path.join(scratch.dir, 'outside.txt'))}, { create: true }, { write: true })),
         symlink: caught(() => root.openAt({ symlinkFollow: true }, 'escape/outside.txt', { create: true }, { write: true })),
       };`,
    );
    const { result } = await report;
    for (const [how, outcome] of Object.entries(result as Record<string, unknown>)) expect(outcome, how).not.toBe('returned');
    expect(existsSync(path.join(scratch.dir, 'outside.txt'))).toBe(false);
  });

  it('opens nothing outside the preopen when a checked directory is swapped for a link between the shim’s check and the open', async () => {
    const { mkdirSync, realpathSync } = await import('node:fs');
    const root = realpathSync(preopen);
    const outside = path.join(realpathSync(scratch.dir), 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'secret.txt'), 'the host’s secret');
    for (const dir of ['sub', 'sub2', 'inner']) mkdirSync(path.join(root, dir));
    writeFileSync(path.join(root, 'sub', 'secret.txt'), 'the guest’s own');
    writeFileSync(path.join(root, 'inner', 'deep.txt'), 'deep inside');
    // The race, made certain: as the shim looks at the file's last component (its check of the
    // path), the directory it has just judged is moved aside and a link to outside left there.
    const swapAt = { [path.join(root, 'sub', 'secret.txt')]: path.join(root, 'sub'), [path.join(root, 'sub2', 'new.txt')]: path.join(root, 'sub2') };
    const { report } = inGuestWorker(
      FILESYSTEM,
      preopen,
      `const fs = require('node:fs');
       const swapAt = ${JSON.stringify(swapAt)};
       const realLstat = fs.lstatSync;
       fs.lstatSync = function racingLstat(file, ...rest) {
         const dir = swapAt[file];
         if (dir) { fs.renameSync(dir, dir + '-moved'); fs.symlinkSync(${JSON.stringify(outside)}, dir); }
         return realLstat(file, ...rest);
       };
       require('node:module').syncBuiltinESMExports();
       const [[root]] = imports['wasi:filesystem/preopens'].getDirectories();
       const readAll = (file) => text(file.read(100n, 0n)[0]);
       const tried = (call) => { try { return call(); } catch (error) { return error instanceof Error ? error.message : error; } };
       result = {
         read: tried(() => readAll(root.openAt({ symlinkFollow: true }, 'sub/secret.txt', {}, { read: true }))),
         created: tried(() => root.openAt({ symlinkFollow: true }, 'sub2/new.txt', { create: true }, { write: true })),
         nested: tried(() => readAll(root.openAt({ symlinkFollow: true }, 'inner/deep.txt', {}, { read: true }))),
         moved: tried(() => readAll(root.openAt({ symlinkFollow: false }, 'sub-moved/secret.txt', {}, { read: true }))),
         itself: tried(() => root.openAt({ symlinkFollow: false }, '.', { directory: true }, { read: true }).getType()),
       };`,
    );
    expect(await report).toMatchObject({
      result: { read: 'not-permitted', created: 'not-permitted', nested: 'deep inside', moved: 'the guest’s own', itself: 'directory' },
    });
    expect(existsSync(path.join(outside, 'new.txt'))).toBe(false);
  });

  it('removes, renames, makes, stats and lists nothing outside the preopen when a checked directory is swapped for a link', async () => {
    const { mkdirSync, realpathSync, readdirSync } = await import('node:fs');
    const root = realpathSync(preopen);
    const outside = path.join(realpathSync(scratch.dir), 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'victim.txt'), 'the parent’s file');
    for (const dir of ['d1', 'd2', 'd3', 'd4', 'd5']) mkdirSync(path.join(root, dir));
    writeFileSync(path.join(root, 'd4', 'victim.txt'), 'x');
    const swapAt = Object.fromEntries(
      [
        ['d1', 'victim.txt'],
        ['d2', 'victim.txt'],
        ['d3', 'made'],
        ['d4', 'victim.txt'],
      ].map(([dir, entry]) => [path.join(root, dir as string, entry as string), path.join(root, dir as string)]),
    );
    const { report } = inGuestWorker(
      FILESYSTEM,
      preopen,
      `const fs = require('node:fs');
       const swapAt = ${JSON.stringify(swapAt)};
       const swap = (dir) => { fs.renameSync(dir, dir + '-moved'); fs.symlinkSync(${JSON.stringify(outside)}, dir); };
       const racedLstat = fs.lstatSync;
       fs.lstatSync = function racingLstat(file, ...rest) {
         if (swapAt[file]) swap(swapAt[file]);
         return racedLstat(file, ...rest);
       };
       require('node:module').syncBuiltinESMExports();
       const [[root]] = imports['wasi:filesystem/preopens'].getDirectories();
       const tried = (call) => { try { return call(); } catch (error) { return error instanceof Error ? error.message : error; } };
       const listed = (dir) => { const names = []; const entries = dir.readDirectory(); for (let entry; (entry = entries.readDirectoryEntry()); ) names.push(entry.name); return names.sort(); };
       const d5 = root.openAt({ symlinkFollow: false }, 'd5', { directory: true }, { read: true });
       swap(${JSON.stringify(path.join(root, 'd5'))});
       result = {
         unlinked: tried(() => root.unlinkFileAt('d1/victim.txt')),
         renamed: tried(() => root.renameAt('d2/victim.txt', root, 'stolen.txt')),
         made: tried(() => root.createDirectoryAt('d3/made')),
         statted: tried(() => Number(root.statAt({ symlinkFollow: false }, 'd4/victim.txt').size)),
         listed: tried(() => listed(d5)),
         own: tried(() => { root.createDirectoryAt('fine'); root.renameAt('fine', root, 'finer'); const type = root.statAt({ symlinkFollow: true }, 'finer').type; root.removeDirectoryAt('finer'); return type; }),
         rootListed: tried(() => listed(root.openAt({ symlinkFollow: false }, '.', { directory: true }, { read: true }))),
       };`,
    );
    const { result } = (await report) as { result: Record<string, unknown> };
    expect(result).toMatchObject({ unlinked: 'not-permitted', renamed: 'not-permitted', made: 'not-permitted', statted: 'not-permitted', own: 'directory' });
    // A link where the directory was: not followed (the kernel says ENOTDIR for a directory asked of a link).
    expect(result.listed).toBe('not-directory');
    expect(result.rootListed).toEqual(['d1', 'd1-moved', 'd2', 'd2-moved', 'd3', 'd3-moved', 'd4', 'd4-moved', 'd5', 'd5-moved']);
    expect(readdirSync(outside).sort()).toEqual(['victim.txt']);
  });

  it('waits on timers in place: a pollable blocks until due, and a poll answers the first one ready', async () => {
    const { report } = inGuestWorker(
      ['wasi:io/poll', 'wasi:clocks/monotonic-clock', 'wasi:cli/stdout', 'wasi:io/streams'],
      preopen,
      `const clock = imports['wasi:clocks/monotonic-clock'];
       const { poll } = imports['wasi:io/poll'];
       // Each span is timed from before its timers are made: a timer is due that long after it
       // was made, not after whatever ran between (on a loaded machine, milliseconds).
       let started = clock.now();
       const timer = clock.subscribeDuration(30_000_000n);
       const readyAtOnce = timer.ready();
       timer.block();
       const blockedMs = Number(clock.now() - started) / 1e6;
       started = clock.now();
       const slow = clock.subscribeDuration(500_000_000n);
       const quick = clock.subscribeDuration(20_000_000n);
       const first = Array.from(poll([slow, quick]));
       const polledMs = Number(clock.now() - started) / 1e6;
       const stdoutReady = Array.from(poll([slow, imports['wasi:cli/stdout'].getStdout().subscribe()]));
       result = { readyAtOnce, blockedMs, first, polledMs, stdoutReady, emptyPoll: caught(() => poll([])) };`,
    );
    const { result, threadsMade } = (await report) as { result: Record<string, unknown>; threadsMade: number };
    expect(threadsMade).toBe(0);
    expect(result).toMatchObject({ readyAtOnce: false, first: [1], stdoutReady: [1] });
    expect(result.blockedMs).toBeGreaterThanOrEqual(29);
    expect(result.polledMs).toBeGreaterThanOrEqual(19);
    expect(result.polledMs).toBeLessThan(400);
    expect(String(result.emptyPoll)).toMatch(/empty list/);
  });

  it('has nothing behind the shim’s sockets or stdin: a call that reaches them is refused', async () => {
    const { report } = inGuestWorker(
      ['wasi:cli/stdout', 'wasi:io/streams', 'wasi:clocks/monotonic-clock'],
      preopen,
      `const sockets = await import('@bytecodealliance/preview2-shim/sockets');
       const cli = await import('@bytecodealliance/preview2-shim/cli');
       result = {
         socket: caught(() => sockets.tcpCreateSocket.createTcpSocket('ipv4')),
         stdin: caught(() => cli.stdin.getStdin()),
       };`,
    );
    const { result, threadsMade } = (await report) as { result: Record<string, unknown>; threadsMade: number };
    expect(threadsMade).toBe(0);
    expect(String(result.socket)).toMatch(/SOCKET_TCP_CREATE_HANDLE is not offered in this sandbox/);
    expect(String(result.stdin)).toMatch(/INPUT_STREAM_CREATE of STDIN is not offered in this sandbox/);
  });

  it('lets a worker blocked on a distant timer be ended at once', async () => {
    const { worker } = inGuestWorker(
      ['wasi:io/poll', 'wasi:clocks/monotonic-clock'],
      preopen,
      `imports['wasi:clocks/monotonic-clock'].subscribeDuration(600_000_000_000n).block();`,
    );
    await new Promise<void>((resolve) => worker.on('message', (message: Record<string, unknown>) => message.started && resolve()));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const asked = performance.now();
    await worker.terminate();
    expect(performance.now() - asked).toBeLessThan(1_000);
  });
});
