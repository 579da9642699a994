import { closeSync, fstatSync, promises as fs, openSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import type { TransferListItem, Worker } from 'node:worker_threads';
import { parse as parseWat, transpile } from '@bytecodealliance/jco';
import { describe, expect, it } from 'vitest';
import { TRANSPILE_OPTIONS } from '@murmur/shared';
import { prewarmGuestWorker } from '../src/host/first-worker.js';
import { GuestRunner, type GuestSpec, precompileCoreModules, preloadInWorker } from '../src/host/guest-runner.js';
import type { GuestMessage } from '../src/host/guest-worker.js';
import type { HostComponent } from '../src/host/protocol.js';
import { OUTPUT_IN_FLIGHT_BYTES } from '../src/host/output-gate.js';
import { LogFile } from '../src/records.js';
import { tempDir } from '../../../test/support/fs.js';
import { floodingCapsuleWat, printingCapsuleWat, toolComponentWat } from '../../../test/support/guests.js';
import { probeTool } from '../../../test/support/probe-guests.js';
import { eventually } from '../../../test/support/processes.js';

/** `component` transpiled as `name` into `bundleDir` (made when missing), as a stager leaves a bundle: its core modules and imports. */
async function writeBundle(component: Uint8Array, name: string, bundleDir: string): Promise<{ coreModules: string[]; imports: string[] }> {
  await fs.mkdir(bundleDir, { recursive: true });
  const { files, imports } = await transpile(component, { ...TRANSPILE_OPTIONS, name });
  for (const [file, bytes] of Object.entries(files)) if (!file.endsWith('.d.ts')) await fs.writeFile(path.join(bundleDir, file), bytes);
  return { coreModules: Object.keys(files).filter((file) => file.endsWith('.wasm')), imports };
}

describe('compiling a component ahead of its run (a pooled host told what to expect)', () => {
  it('a head start the memory cap refuses is dropped without an unhandled rejection', async () => {
    // The failure must surface from the run that uses the module, never from the head start: an
    // unhandled rejection ends the capsule host before its session has even started.
    const scratch = await tempDir('murmur-precompile-');
    const unhandled: unknown[] = [];
    const listen = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', listen);
    try {
      await fs.writeFile(path.join(scratch.dir, 'core.wasm'), await parseWat('(module (memory 4))'));
      const component = { bundle_dir: scratch.dir, entry: 'component.js', core_modules: ['core.wasm'], imports: [], exports: [] } as unknown as HostComponent;
      precompileCoreModules(component, { memoryBytes: 2 * 65_536, tableElements: 100_000 });
      // Long enough for the file to be read and the cap to refuse the 4-page minimum.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', listen);
      await scratch.cleanup();
    }
  });
});

describe('a worker told ahead what its job will load (a pooled host’s anticipation)', () => {
  /** The printing capsule transpiled into `bundleDir`: its core modules and imports. */
  const writePrintingBundle = async (bundleDir: string): Promise<{ coreModules: string[]; imports: string[] }> =>
    writeBundle((await printingCapsuleWat()).bytes, 'printing', bundleDir);

  /** Runs the printing capsule from `bundleDir` on `worker`: its outcome and what it printed. */
  const runPrinting = async (worker: Worker, dir: string, bundle: { coreModules: string[]; imports: string[] }) => {
    let printed = '';
    const runner = new GuestRunner({
      memoryLimitBytes: 64 * 1024 * 1024,
      tableElementsLimit: 100_000,
      instancesLimit: 1_000,
      deadlineMs: 60_000,
      sessionLog: new LogFile(dir, 'session.log'),
      capsuleOutput: (_stream, text) => {
        printed += text;
      },
      answer: async (op) => {
        throw new Error(`the capsule asked the host for ${op}, which this test does not offer`);
      },
      prewarmed: worker,
    });
    const outcome = await runner.run({
      role: 'capsule',
      label: 'printing',
      bundleDir: path.join(dir, 'bundle'),
      entry: 'printing.js',
      ...bundle,
      preopen: dir,
      env: [],
      grant: 'capsule',
    });
    runner.releaseIdleWorkers();
    return { outcome, printed };
  };

  const printingComponent = (bundleDir: string): HostComponent =>
    ({ bundle_dir: bundleDir, entry: 'printing.js', core_modules: [], imports: [], exports: [] }) as unknown as HostComponent;

  /** Runs `body` with a worker born early and a scratch directory (`bundle/` in it for the glue), both gone after. */
  const withEarlyWorker = async (body: (worker: Worker, dir: string, bundleDir: string) => Promise<void>): Promise<void> => {
    const scratch = await tempDir('murmur-preload-');
    const worker = prewarmGuestWorker();
    try {
      await body(worker, scratch.dir, path.join(scratch.dir, 'bundle'));
    } finally {
      await worker.terminate();
      await scratch.cleanup();
    }
  };

  it('runs the job when what it was told to load was not there yet and is by the job', async () => {
    // A failed head start must not be remembered: the job loads, and would report, afresh.
    await withEarlyWorker(async (worker, dir, bundleDir) => {
      await preloadInWorker(worker, printingComponent(bundleDir));
      const bundle = await writePrintingBundle(bundleDir);
      expect(await runPrinting(worker, dir, bundle)).toEqual({ outcome: { kind: 'returned' }, printed: 'first output\n' });
    });
  });

  it('answers a preload while a job runs, and the job takes the answer for nothing', async () => {
    // A pooled host's worker may be given its job while it still preloads (the launch came
    // first): the answer then reaches the job's listener, which must not read it as the end.
    await withEarlyWorker(async (worker, dir, bundleDir) => {
      const bundle = await writePrintingBundle(bundleDir);
      const heard: string[] = [];
      worker.on('message', (message: GuestMessage) => {
        if (message.type !== 'output') heard.push(message.type);
      });
      // The preload is asked for right behind the job, as the job is posted (its listener is on):
      // asked any later, a job this quick can be over, and its worker let go, before the worker reads it.
      let preloaded: Promise<'preloaded' | 'exited'> | undefined;
      const post = worker.postMessage.bind(worker);
      worker.postMessage = (message: { role?: string }, transfer?: readonly TransferListItem[]) => {
        post(message, transfer);
        if (message.role !== undefined && preloaded === undefined) preloaded = preloadInWorker(worker, printingComponent(bundleDir));
      };
      const running = runPrinting(worker, dir, bundle);
      expect(await running).toEqual({ outcome: { kind: 'returned' }, printed: 'first output\n' });
      expect(await preloaded).toBe('preloaded');
      expect(heard).toEqual(['preloaded', 'done']);
    });
  });

  it('answers each preload under its own id: an earlier answer settles only its own', async () => {
    await withEarlyWorker(async (worker, dir, bundleDir) => {
      await writePrintingBundle(bundleDir);
      const asked: number[] = [];
      const post = worker.postMessage.bind(worker);
      worker.postMessage = (message: { preload?: { id?: number } }, transfer?: readonly TransferListItem[]) => {
        if (message.preload?.id !== undefined) asked.push(message.preload.id);
        post(message, transfer);
      };
      const answered: number[] = [];
      worker.on('message', (message: GuestMessage) => {
        if (message.type === 'preloaded') answered.push(message.id);
      });
      // The one loads a glue, the other fails at once: their answers come in either order.
      const first = preloadInWorker(worker, printingComponent(bundleDir)).then(() => [...answered]);
      const second = preloadInWorker(worker, printingComponent(path.join(dir, 'missing'))).then(() => [...answered]);
      const [heardByFirst, heardBySecond] = await Promise.all([first, second]);
      expect(asked).toHaveLength(2);
      expect(heardByFirst).toContain(asked[0]);
      expect(heardBySecond).toContain(asked[1]);
    });
  });
});

/** The names of the files under `dir` this process holds open, from its descriptor table. */
function openFilesUnder(dir: string): string[] {
  const names: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // the directory listing's own descriptor, closed by now
    }
    if (target.startsWith(`${dir}${path.sep}`)) names.push(path.relative(dir, target));
  }
  return names.sort();
}

describe('files a guest left open when its worker is ended', () => {
  it('are closed once the worker is gone, and a file the host opened meanwhile stays open', async () => {
    // A terminated worker never runs the code that closes what its instance opened (in-thread-io's
    // closeAll runs at an instance's clean end), and descriptors belong to the host's process. What
    // closes them is Node itself: a descriptor opened through `fs` in a worker is the worker's, and
    // is closed when the worker exits. The host relies on that — an agent whose tasks keep being
    // canceled mid-call would otherwise run out of descriptors — so this holds it to it, and holds
    // any future design that opens a guest's files in a thread that outlives the guest to it too.
    const scratch = await tempDir('murmur-file-ledger-');
    try {
      const bundleDir = path.join(scratch.dir, 'bundle');
      const preopen = path.join(scratch.dir, 'workdir');
      await fs.mkdir(preopen);
      const bundle = await writeBundle((await probeTool()).bytes, 'probe', bundleDir);
      const sessionLog = new LogFile(scratch.dir, 'session.log');
      const runner = new GuestRunner({
        memoryLimitBytes: 512 * 1024 * 1024,
        tableElementsLimit: 100_000,
        instancesLimit: 1_000,
        deadlineMs: 120_000,
        sessionLog,
        capsuleOutput: () => {},
        answer: async (op) => {
          throw new Error(`the probe asked the host for ${op}, which this test does not offer`);
        },
      });
      const running = runner.run({
        role: 'tool',
        label: 'probe',
        bundleDir,
        entry: 'probe.js',
        ...bundle,
        preopen,
        env: [],
        grant: 'tool:probe',
        toolInput: {
          data: JSON.stringify({
            actions: [
              { op: 'write', path: 'closed.txt', text: 'closed by the guest' },
              { op: 'hold', path: 'held-1.txt' },
              { op: 'hold', path: 'held-2.txt' },
              { op: 'spin' },
            ],
          }),
        },
      });
      await eventually(() => (readFileSync(sessionLog.file, 'utf8').includes('"op":"spin"') ? true : undefined), 60_000, 'the probe to spin');
      expect(openFilesUnder(preopen)).toEqual(['held-1.txt', 'held-2.txt']);
      // The host opens a file of its own meanwhile: it is likely given the number the guest's write closed,
      // which nothing may close for it.
      const hostsOwn = openSync(path.join(scratch.dir, 'the-host-s-own.txt'), 'w');
      try {
        expect(runner.abandonRunning('the test ends it')).toBe(1);
        expect(await running).toEqual({ kind: 'abandoned', message: 'the test ends it' });
        await eventually(() => (openFilesUnder(preopen).length === 0 ? true : undefined), 10_000, 'the held files to be closed');
        expect(fstatSync(hostsOwn).isFile()).toBe(true);
      } finally {
        closeSync(hostsOwn);
      }
    } finally {
      await scratch.cleanup();
    }
  });
});

describe('the instance a kept worker makes ahead for its component’s next call (an agent’s driver between turns)', () => {
  /**
   * A tool that counts its calls in a global of its instance and answers the count: a fresh
   * instance answers 1, whatever ran before it.
   */
  const COUNTING_TOOL_WAT = toolComponentWat(`(core module $m
    (memory (export "memory") 1)
    (global $calls (mut i32) (i32.const 0))
    (global $heap (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at (global.get $heap))
      (global.set $heap (i32.add (global.get $heap) (i32.and (i32.add (local.get 3) (i32.const 7)) (i32.const -8))))
      (local.get $at))
    (func (export "run") (param i32 i32 i32 i32 i32 i32) (result i32)
      (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
      ;; data: one digit, the count; the result record at 600 (status passed, data some(512, 1))
      (i32.store8 (i32.const 512) (i32.add (i32.const 48) (global.get $calls)))
      (i32.store8 (i32.const 616) (i32.const 1))
      (i32.store (i32.const 620) (i32.const 512))
      (i32.store (i32.const 624) (i32.const 1))
      (i32.const 600)))`);

  /** A runner that keeps its workers (as an agent's does) and a spec for the counting tool, in a scratch directory gone after. */
  const withCountingTool = async (
    body: (runner: GuestRunner, spec: GuestSpec) => Promise<void>,
    warm: (runner: GuestRunner, spec: GuestSpec) => void = (runner) => runner.keepWorkersWarm(),
  ): Promise<void> => {
    const scratch = await tempDir('murmur-made-ahead-');
    const bundleDir = path.join(scratch.dir, 'bundle');
    const bundle = await writeBundle(await parseWat(COUNTING_TOOL_WAT), 'counting', bundleDir);
    const runner = new GuestRunner({
      memoryLimitBytes: 16 * 1024 * 1024,
      tableElementsLimit: 100_000,
      instancesLimit: 1_000,
      deadlineMs: 60_000,
      sessionLog: new LogFile(scratch.dir, 'session.log'),
      capsuleOutput: () => {},
      answer: async (op) => {
        throw new Error(`the counting tool asked the host for ${op}, which this test does not offer`);
      },
    });
    const spec: GuestSpec = {
      role: 'tool',
      label: 'counting',
      bundleDir,
      entry: 'counting.js',
      ...bundle,
      preopen: scratch.dir,
      env: [['TURN', 'any']],
      grant: 'tool:counting',
    };
    warm(runner, spec);
    try {
      await body(runner, spec);
    } finally {
      runner.releaseIdleWorkers();
      await scratch.cleanup();
    }
  };

  const call = (runner: GuestRunner, spec: GuestSpec) => runner.run({ ...spec, toolInput: { data: '{}' } });

  /** The counting tool as the component a session calls most (an agent's driver). */
  const likely = (spec: GuestSpec): HostComponent =>
    ({ bundle_dir: spec.bundleDir, entry: spec.entry, core_modules: spec.coreModules, imports: spec.imports, exports: [] }) as unknown as HostComponent;

  /** How many workers a session holds after one call of its likely component took the reserve: its own, and the reserve if one was started again. */
  const heldAfterLikelyCall = async (othersToCall: boolean): Promise<number> => {
    let held = 0;
    await withCountingTool(
      async (runner, spec) => {
        expect(await call(runner, spec)).toMatchObject({ kind: 'returned', value: { data: '1' } });
        held = runner.releaseIdleWorkers();
      },
      (runner, spec) => runner.keepWorkersWarm(likely(spec), { othersToCall }),
    );
    return held;
  };

  it('leaves no worker in reserve once the likely component took it, when the session calls nothing else', async () => {
    expect(await heldAfterLikelyCall(false)).toBe(1);
  });

  it('starts a worker in reserve again after the likely component took it, when the session has others to call', async () => {
    expect(await heldAfterLikelyCall(true)).toBe(2);
  });

  it('is fresh, and is the one the next call runs', async () => {
    await withCountingTool(async (runner, spec) => {
      expect(await call(runner, spec)).toMatchObject({ kind: 'returned', value: { status: 'passed', data: '1' } });
      runner.prepareNext(spec);
      const next = await call(runner, spec);
      expect(next).toMatchObject({ kind: 'returned', value: { status: 'passed', data: '1' }, madeAhead: true });
      // And once more: each call's instance is made for it, ahead or not, never carried over.
      runner.prepareNext(spec);
      expect(await call(runner, spec)).toMatchObject({ kind: 'returned', value: { data: '1' }, madeAhead: true });
    });
  });

  it('is let go unused by a call that names anything else than what it was made for', async () => {
    await withCountingTool(async (runner, spec) => {
      await call(runner, spec);
      runner.prepareNext({ ...spec, env: [['TURN', 'other']] });
      const next = await call(runner, spec);
      expect(next).toMatchObject({ kind: 'returned', value: { data: '1' } });
      expect(next).not.toHaveProperty('madeAhead');
    });
  });

  it('is not made unless asked: a call finds none and makes its own', async () => {
    await withCountingTool(async (runner, spec) => {
      await call(runner, spec);
      const next = await call(runner, spec);
      expect(next).toMatchObject({ kind: 'returned', value: { data: '1' } });
      expect(next).not.toHaveProperty('madeAhead');
    });
  });
});

describe('a guest that writes without pause', () => {
  it('is held while a megabyte of its output has not left the host, goes on as it leaves, and is still stopped at its deadline', async () => {
    // Before the gate a flooding guest's writes queued in the host without bound: past a gigabyte
    // in seconds, and the host's thread, behind them, ended the guest at its deadline seconds late.
    const scratch = await tempDir('murmur-flood-');
    try {
      const bundleDir = path.join(scratch.dir, 'bundle');
      const bundle = await writeBundle((await floodingCapsuleWat()).bytes, 'flood', bundleDir);
      let received = 0;
      const notCarried: Array<() => void> = [];
      const runner = new GuestRunner({
        memoryLimitBytes: 64 * 1024 * 1024,
        tableElementsLimit: 100_000,
        instancesLimit: 1_000,
        deadlineMs: 5_000,
        sessionLog: new LogFile(scratch.dir, 'session.log'),
        // A channel that carries nothing away until told to: the executor behind it not reading.
        capsuleOutput: (_stream, text, carried) => {
          received += Buffer.byteLength(text);
          notCarried.push(carried);
        },
        answer: async (op) => {
          throw new Error(`the flood asked the host for ${op}, which this test does not offer`);
        },
      });
      const running = runner.run({
        role: 'capsule',
        label: 'flood',
        bundleDir,
        entry: 'flood.js',
        ...bundle,
        preopen: scratch.dir,
        env: [],
        grant: 'capsule',
      });
      const WRITE = 16 * 1024;
      await eventually(() => (received > OUTPUT_IN_FLIGHT_BYTES ? true : undefined), 5_000, 'the flood to reach the gate');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const held = received;
      // One write past the bound is let in (it is counted as it enters), none after it.
      expect(held).toBeLessThanOrEqual(OUTPUT_IN_FLIGHT_BYTES + WRITE);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(received).toBe(held);
      for (const carried of notCarried.splice(0)) carried();
      await eventually(() => (received >= held + OUTPUT_IN_FLIGHT_BYTES ? true : undefined), 5_000, 'the flood to go on once its output left');
      // Held at the gate again when its deadline comes: ended all the same.
      expect(await running).toEqual({ kind: 'deadline' });
      // Its line never ends: the log holds it in pieces, never the whole of it at once.
      const logged = readFileSync(path.join(scratch.dir, 'logs', 'session.log'), 'utf8')
        .split('\n')
        .filter((line) => line !== '');
      expect(logged.length).toBeGreaterThan(100);
      expect(logged.every((line) => line.startsWith('[stdout] x') && line.length <= '[stdout] '.length + 16 * 1024 + ' …'.length)).toBe(true);
    } finally {
      await scratch.cleanup();
    }
  }, 20_000);
});
