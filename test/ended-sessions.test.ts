import { promises as fs, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commands } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import type { ExecutorService } from '@murmur/executor';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type InProcessStack, launchToEnd, startInProcessStack } from './support/in-process-stack.js';
import { eventually } from './support/processes.js';

/**
 * What a long-running executor holds of the sessions that ended on it. It outlives thousands of
 * them, so whatever each leaves behind adds up: a descriptor, its host's process handle and pipes.
 * The executor runs in this process, so its descriptors are this process's.
 */
describe('an executor, after a session ended on it', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let stack: InProcessStack;
  let bus: Bus;
  let executor: ExecutorService;

  beforeAll(async () => {
    scratch = await tempDir('murmur-ended-');
    stack = startInProcessStack(scratch.dir);
    ({ bus, executor } = stack);
  });

  afterAll(async () => {
    await stack.close();
    await scratch.cleanup();
  });

  /** Runs the probe capsule with `actions` to its end; where its workdir is. `whileRunning` is called once it has launched. */
  async function runToEnd(
    name: string,
    actions: unknown[],
    whileRunning?: (sessionId: string, workdir: string) => Promise<void>,
  ): Promise<{ sessionId: string; workdir: string }> {
    const project = await probeProject(path.join(scratch.dir, name));
    const { sessionId, sessionDir } = await launchToEnd(bus, project, JSON.stringify(actions), whileRunning);
    return { sessionId, workdir: sessionDir };
  }

  /** The files this process holds a descriptor of. */
  function openFiles(): string[] {
    return readdirSync('/proc/self/fd').flatMap((fd) => {
      try {
        return [readlinkSync(path.join('/proc/self/fd', fd))];
      } catch {
        return [];
      }
    });
  }

  it('keeps no descriptor of its trace, which the executor wrote to while it ran', async () => {
    const { workdir } = await runToEnd('egress', [{ op: 'fetch', url: 'http://127.0.0.1:9/denied' }]);
    const trace = path.join(workdir, 'trace.jsonl');
    // The executor's own record of the denied request is in it: it did open the file.
    const egress = readFileSync(trace, 'utf8')
      .split('\n')
      .filter((line) => line.includes('"event_type":"egress"'));
    expect(egress.length).toBeGreaterThan(0);
    expect(openFiles()).not.toContain(await fs.realpath(trace));
  });

  it('lets go of the session itself, with its host’s process handle and pipes', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    let running: WeakRef<object> | undefined;
    await runToEnd('let-go', [{ op: 'waitfor', path: 'out/go', seconds: 30 }], async (sessionId, workdir) => {
      const session = executor.sessions().find((candidate) => candidate.id === sessionId);
      expect(session).toBeDefined();
      running = new WeakRef(session as object);
      await fs.mkdir(path.join(workdir, 'out'), { recursive: true });
      await fs.writeFile(path.join(workdir, 'out', 'go'), '');
    });
    // What the end set going (its announcement, the group's removal) lets go of it in a moment;
    // a session the executor kept is never collected, and this runs out.
    await eventually(
      async () => {
        gc();
        // A WeakRef is cleared after the job that collected its target.
        await new Promise((resolve) => setImmediate(resolve));
        return running?.deref() === undefined || undefined;
      },
      5_000,
      'the ended session collected',
    );
    expect(running?.deref()).toBeUndefined();
  });

  it('still reads its workdir for `mur files`', async () => {
    const { sessionId } = await runToEnd('files', [{ op: 'write', path: 'out/kept.txt', text: 'still here' }]);
    const file = await bus.request(commands.sessionFiles.at(executor.instanceId), { session_id: sessionId, path: 'out/kept.txt' }, { timeoutMs: 10_000 });
    expect(file.type === 'file' && Buffer.from(file.data, 'base64').toString()).toBe('still here');
  });

  it("refuses to read a workdir that a link has since replaced (a delegated child's, swapped by its parent's guest), reading nothing where it leads", async () => {
    const { sessionId, workdir } = await runToEnd('swapped', [{ op: 'write', path: 'out/kept.txt', text: 'the session wrote this' }]);
    const elsewhere = path.join(scratch.dir, 'host-secrets');
    await fs.mkdir(path.join(elsewhere, 'out'), { recursive: true });
    await fs.writeFile(path.join(elsewhere, 'out', 'kept.txt'), 'a secret of the host');
    await fs.rename(workdir, `${workdir}-away`);
    await fs.symlink(elsewhere, workdir);
    const refusal = await bus
      .request(commands.sessionFiles.at(executor.instanceId), { session_id: sessionId, path: 'out/kept.txt' }, { timeoutMs: 10_000 })
      .then(
        () => undefined,
        (error: unknown) => error as Error,
      );
    expect(refusal?.message).toContain('now resolves to');
    expect(refusal?.message).toContain('so something replaced it with a link; nothing was read');
    expect(refusal?.message).not.toContain('a secret of the host');
  });
});
