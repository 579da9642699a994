import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LaunchReply, type SessionEnded, commands, newSessionId, silentLog, topics } from '@murmur/shared';
import { InProcessTransport, createBus } from '@murmur/shared/bus';
import { locateSession, requestStaging, uploadProject } from '@murmur/shared/node';
import { startExecutorService } from '@murmur/executor';
import { startStagerService } from '@murmur/stager';
import { removeExpiredWorkdirs } from '../services/executor/src/workdir-retention.js';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { eventually } from './support/processes.js';
import { RecordingLog } from './support/recording-log.js';

/**
 * `MURMUR_SESSION_RETENTION_HOURS` (`services/executor/src/workdir-retention.ts`): a long-running
 * executor removes the workdirs of sessions that ended longer ago than its operator's retention,
 * and only those.
 */
describe('workdir retention', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };

  beforeAll(async () => {
    scratch = await tempDir('murmur-retention-');
  });

  afterAll(async () => {
    await scratch?.cleanup();
  });

  const sessionDir = async (root: string, files: Record<string, string> = {}): Promise<string> => {
    const dir = path.join(root, newSessionId());
    await fs.mkdir(path.join(dir, 'out'), { recursive: true });
    for (const [name, text] of Object.entries(files)) await fs.writeFile(path.join(dir, name), text);
    return dir;
  };

  it('removes only ended sessions’ workdirs past the retention, by change times a guest cannot set', async () => {
    const root = path.join(scratch.dir, 'sweep', 'workdir');
    const old = await sessionDir(root, { 'trace.jsonl': '{}\n' });
    // A guest that dated its files in the future is not kept for ever by them.
    const future = new Date(Date.now() + 365 * 24 * 3600 * 1000);
    const forged = await sessionDir(root, { 'result.txt': 'x' });
    await fs.utimes(path.join(forged, 'result.txt'), future, future);
    await fs.utimes(forged, future, future);
    const running = await sessionDir(root);
    // Not a session's workdir: never the executor's to remove, whatever its age.
    await fs.mkdir(path.join(root, 'notes'), { recursive: true });
    const elsewhere = path.join(scratch.dir, 'sweep', 'elsewhere');
    await fs.mkdir(elsewhere, { recursive: true });
    const linked = path.join(root, newSessionId());
    await fs.symlink(elsewhere, linked);
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Changed just now, directly in it: its end wrote its last record.
    const recent = await sessionDir(root);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await fs.appendFile(path.join(recent, 'trace.jsonl'), '{"event_type":"session_end"}\n');

    const said: string[] = [];
    const removed = await removeExpiredWorkdirs({
      root,
      retentionMs: 250,
      runsHere: (sessionId) => sessionId === path.basename(running),
      removed: (sessionId) => said.push(sessionId),
      log: silentLog,
    });
    expect(removed.sort()).toEqual([path.basename(old), path.basename(forged)].sort());
    expect(said.sort()).toEqual(removed);
    expect((await fs.readdir(root)).sort()).toEqual([path.basename(linked), path.basename(recent), path.basename(running), 'notes'].sort());
    // The link was not followed.
    expect((await fs.lstat(linked)).isSymbolicLink()).toBe(true);
    await expect(fs.access(elsewhere)).resolves.toBeUndefined();
  });

  it('a workdir root not made yet is no failure', async () => {
    const removed = await removeExpiredWorkdirs({
      root: path.join(scratch.dir, 'never-made', 'workdir'),
      retentionMs: 1,
      runsHere: () => false,
      removed: () => {},
      log: silentLog,
    });
    expect(removed).toEqual([]);
  });

  it('an executor given a retention removes an ended session’s workdir and says so to whoever asks for it, and keeps those of sessions still running, here or on another executor sharing its base', async () => {
    const home = path.join(scratch.dir, 'executor-home');
    const log = new RecordingLog();
    // 1.5 s, looked at every second (the first look once other executors have been heard).
    const env = { ...process.env, MURMUR_HOME: home, MURMUR_EXECUTOR_POOL: '0', MURMUR_SESSION_RETENTION_HOURS: String(1.5 / 3600) };
    const bus = createBus(new InProcessTransport(), silentLog);
    const stager = startStagerService({ bus, log: silentLog, env });
    const executor = startExecutorService({ bus, log, env, sweepAtStartAndHourly: true });
    // Another executor on the same machine and MURMUR_HOME, with no retention of its own.
    const other = startExecutorService({ bus, log: silentLog, env: { ...env, MURMUR_SESSION_RETENTION_HOURS: '' } });
    try {
      const project = await probeProject(path.join(scratch.dir, 'probe'), '');
      const plan = await requestStaging(bus, { source: { kind: 'project', project: await uploadProject(bus, project) } });
      const ends = new Map<string, SessionEnded>();
      bus.subscribe(topics.sessionEnded, (event) => void ends.set(event.session_id, event));
      await bus.flush();
      const launch = async (actions: unknown[], on: { instanceId: string }): Promise<LaunchReply> =>
        bus.request(
          commands.launchOn.at(on.instanceId),
          { session_id: newSessionId(), plan, env: { PATH: process.env.PATH ?? '' }, task: JSON.stringify(actions) },
          { timeoutMs: 60_000 },
        );
      const done = await launch([{ op: 'write', path: 'out/result.txt', text: 'the answer' }], executor);
      await eventually(() => ends.get(done.session_id), 20_000, 'the first session’s end');
      const spinning = await launch([{ op: 'spin' }], executor);
      const spinningElsewhere = await launch([{ op: 'spin' }], other);
      expect(path.dirname(spinningElsewhere.workdir)).toBe(path.dirname(done.workdir));

      await eventually(
        async () =>
          await fs.access(done.workdir).then(
            () => undefined,
            () => true,
          ),
        20_000,
        'the ended session’s workdir removed',
      );
      const refusal = await locateSession(bus, done.session_id).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refusal).toMatchObject({ code: 'E-SES-001' });
      expect((refusal as Error).message).toMatch(
        new RegExp(
          `^the workdir of session '${done.session_id}', which ended at \\S+, was removed at \\S+ by executor ${executor.instanceId}, past the retention its operator set \\(MURMUR_SESSION_RETENTION_HOURS\\)$`,
        ),
      );
      expect(
        log.entries.some((entry) => entry.message?.includes('removed the workdirs of sessions that ended longer ago than MURMUR_SESSION_RETENTION_HOURS')),
      ).toBe(true);
      // Running past the retention, here and on the other executor: still there after looks that
      // would have removed them (their workdirs unchanged longer than the retention and two looks).
      const oldest = Math.max(...(await Promise.all([spinning, spinningElsewhere].map(async (running) => (await fs.stat(running.workdir)).ctimeMs))));
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, oldest + 1_500 + 2_500 - Date.now())));
      for (const running of [spinning, spinningElsewhere]) {
        await expect(fs.access(running.workdir)).resolves.toBeUndefined();
        expect((await locateSession(bus, running.session_id)).workdir_removed_at).toBeUndefined();
      }
      expect([...ends.keys()]).toEqual([done.session_id]);
    } finally {
      await other.close();
      await executor.close();
      await stager.close();
      await bus.close();
    }
  }, 90_000);
});
