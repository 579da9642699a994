import path from 'node:path';
import { type LaunchReply, type SessionEnded, commands, newSessionId, silentLog, topics } from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { type ExecutorService, type ExecutorServiceOptions, startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';

/** A stager and an executor in this process, on the in-process bus, with no warm pool. */
export interface InProcessStack {
  bus: Bus;
  executor: ExecutorService;
  close(): Promise<void>;
}

export function startInProcessStack(scratch: string, options: Pick<ExecutorServiceOptions, 'hostEntry'> = {}): InProcessStack {
  const env = { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch, 'home'), MURMUR_EXECUTOR_POOL: '0' };
  const bus = createBus(new InProcessTransport(), silentLog);
  const stager = startStagerService({ bus, log: silentLog, env });
  const executor = startExecutorService({ bus, log: silentLog, env, ...options });
  return {
    bus,
    executor,
    async close() {
      await executor.close();
      await stager.close();
      await bus.close();
    },
  };
}

/** The session's `session.ended`, listened for from now (flush the bus before launching it). */
export function endOf(bus: Bus, sessionId: string): Promise<SessionEnded> {
  return new Promise<SessionEnded>((resolve) => {
    const subscription = bus.subscribe(topics.sessionEnded, (event) => {
      if (event.session_id !== sessionId) return;
      subscription.unsubscribe();
      resolve(event);
    });
  });
}

/**
 * Stages `project`, launches it with `task` and waits for its end; `whileRunning` is called once
 * it has launched.
 */
export async function launchToEnd(
  bus: Bus,
  project: string,
  task: string,
  whileRunning: (sessionId: string, sessionDir: string) => Promise<void> = async () => {},
  env: Record<string, string> = {},
): Promise<{ ended: SessionEnded; sessionId: string; sessionDir: string }> {
  const plan = await requestStaging(bus, { source: { kind: 'project', project: await uploadProject(bus, project) } });
  const sessionId = newSessionId();
  const ended = endOf(bus, sessionId);
  await bus.flush();
  const launched: LaunchReply = await bus.request(
    commands.launch,
    { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '', ...env }, task },
    { timeoutMs: 60_000 },
  );
  await whileRunning(sessionId, launched.session_dir);
  return { ended: await ended, sessionId, sessionDir: launched.session_dir };
}
