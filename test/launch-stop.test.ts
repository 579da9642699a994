import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LaunchReply, type MurmurError, commands, newSessionId } from '@murmur/shared';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type InProcessStack, endOf, startInProcessStack } from './support/in-process-stack.js';
import { eventually } from './support/processes.js';

/**
 * A stop that reaches the executor while the session is still being launched — a launcher that gave
 * up waiting for the launch's answer (`mur run` on its own timeout) asks exactly then. The session
 * must not be left running with nobody attached. The stack runs in this process, without a warm
 * pool, so a launch takes a fresh host's start-up: the window the stop lands in.
 */
describe('a session asked to stop while its launch is still under way', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let stack: InProcessStack;

  beforeAll(async () => {
    scratch = await tempDir('murmur-launch-stop-');
    stack = startInProcessStack(scratch.dir);
  });

  let closed = false;

  afterAll(async () => {
    if (!closed) await stack.close();
    await scratch.cleanup();
  });

  it('is stopped as soon as its host is there, rather than left to run to its deadline', async () => {
    const { bus } = stack;
    const project = await probeProject(path.join(scratch.dir, 'spinning'), 'capabilities:\n  limits:\n    deadline_seconds: 120\n');
    const plan = await requestStaging(bus, { source: { kind: 'project', project: await uploadProject(bus, project) } });
    const sessionId = newSessionId();
    const ended = endOf(bus, sessionId);
    await bus.flush();
    let settledAt = Number.POSITIVE_INFINITY;
    const launching = bus
      .request(
        commands.launch,
        { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, task: JSON.stringify([{ op: 'spin' }]) },
        { timeoutMs: 60_000 },
      )
      .then(
        (reply: LaunchReply) => ({ reply }),
        (error: MurmurError) => ({ error }),
      )
      .finally(() => {
        settledAt = performance.now();
      });
    // Asked once, as soon as anyone answers for the session: from the moment the executor has taken the launch.
    let stop: { stopping: boolean } | undefined;
    let stopAnsweredAt = Number.POSITIVE_INFINITY;
    for (let tries = 0; tries < 2_000 && stop === undefined; tries += 1) {
      stop = await bus.request(commands.stopSession.at(sessionId), { reason: 'its launcher stopped waiting' }, { timeoutMs: 1_000 }).catch(() => undefined);
      if (stop) stopAnsweredAt = performance.now();
      else await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(stop).toEqual({ stopping: true });
    const launched = await launching;
    expect(stopAnsweredAt).toBeLessThan(settledAt);
    // Its host stopped either before the launch was answered (the launch is refused, naming the
    // stop) or just after (the session ends, stopped): either way, well before its deadline.
    if ('error' in launched) {
      expect(launched.error.message).toContain('the session was stopped: its launcher stopped waiting');
    } else {
      const end = await Promise.race([ended, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 20_000))]);
      expect(end, 'the session ended within 20 s of a stop, not at its 120 s deadline').toBeDefined();
      expect(end?.error?.message).toContain('the session was stopped: its launcher stopped waiting');
    }
    await eventually(() => stack.executor.sessions().length === 0 || undefined, 20_000, 'the executor to hold no session');
    // A refused launch's host was killed, not waited for: the executor's close waits for its exit
    // and the records it leaves, so nothing writes into the workdir once the executor has closed.
    await stack.close();
    closed = true;
    const bootstrap = await fs.readFile(path.join(scratch.dir, 'home', 'workdir', sessionId, 'logs', 'bootstrap.log'), 'utf8');
    expect(bootstrap).toContain('[bootstrap] session ended: failed (E-SES-005: the session was stopped: its launcher stopped waiting)');
  });
});
