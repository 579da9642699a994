import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type RunningRecord, commands, silentLog, topics } from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { listRunningRecords, writeRunningRecord } from '@murmur/shared/node';
import { type WatcherService, startWatcherService } from '../src/service.js';

const SESSION = 'ses_0199c4e2f1b7712a9d3e4f5061728399';
const EXECUTOR = 'executor-0199c4e2f1b7';

/**
 * A watcher that starts after a session did (restarted, or a new replica): it never heard the
 * session start, and its own process table — another container's, on a stack — holds no pid of
 * the session's. Here the record's pid is one no process of this machine holds.
 */
describe('a watcher that did not see a session start', () => {
  let home: string;
  let env: NodeJS.ProcessEnv;
  let bus: Bus;
  let watcher: WatcherService;

  beforeEach(() => {
    home = mkdtempSync(path.join(os.tmpdir(), 'murmur-watcher-'));
    env = { MURMUR_HOME: home };
    const record: RunningRecord = {
      session_id: SESSION,
      url: 'http://localhost:1/',
      pid: 2 ** 22 + 17,
      process_start: '12345',
      capsule_name: 'agent',
      capsule_version: '0.1.0',
      workdir: home,
      outlives_launcher: false,
      started_at: new Date().toISOString(),
    };
    writeRunningRecord(record, env);
    bus = createBus(new InProcessTransport(), silentLog);
    // The executor that holds it: its process is alive there, and its card answers.
    bus.serve(commands.probeProcess.at(EXECUTOR), () => ({ state: 'alive' as const }));
    const card = {
      name: 'agent',
      description: 'an agent',
      version: '0.1.0',
      session_id: SESSION,
      capsule_name: 'agent',
      capsule_version: '0.1.0',
      tools: [],
      shell: false,
      network: false,
      task_acceptance: 'queue' as const,
      conversation: 'stateless' as const,
    };
    bus.serve(commands.sessionRpc.at(SESSION), () => ({ card }));
    watcher = startWatcherService({ bus, log: silentLog, env: { ...env, MURMUR_EXECUTOR_LOST_MS: '5000' } });
  });

  afterEach(async () => {
    await watcher.close();
    await bus.close();
    rmSync(home, { recursive: true, force: true });
  });

  const listed = async () => (await bus.request(commands.listSessions, {}, { timeoutMs: 10_000 })).sessions.find((session) => session.session_id === SESSION);

  it('does not judge it gone by its own process table before the executors have been heard, and keeps its record', async () => {
    const first = await listed();
    expect(first).toMatchObject({ liveness: 'unreachable' });
    expect(first?.reason).toContain('has not yet heard which executor holds it');
    expect(listRunningRecords(env).map((record) => record.session_id)).toEqual([SESSION]);
  });

  it("asks the executor a heartbeat names as the session's holder, and lists it live there", async () => {
    bus.publish(topics.executorHeartbeat, {
      executor_id: EXECUTOR,
      sent_at: new Date().toISOString(),
      interval_ms: 1_000,
      sessions: [
        {
          session_id: SESSION,
          capsule_name: 'agent',
          capsule_version: '0.1.0',
          pid: 2 ** 22 + 17,
          process_start: '12345',
          started_at: new Date().toISOString(),
        },
      ],
    });
    await bus.flush();
    const live = await listed();
    expect(live, JSON.stringify(live)).toMatchObject({ liveness: 'live', executor_id: EXECUTOR });
  });
});
