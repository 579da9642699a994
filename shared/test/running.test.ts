import { spawn } from 'node:child_process';
import { promises as fs, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RunningRecord } from '../src/running-record.js';
// The record's shape (nine fields, nothing more) is held by shared/test/contracts.test.ts.
import { processStartToken, startTokenFromStat } from '../src/node/process.js';
import {
  classifyProcess,
  listRunningRecords,
  processState,
  readRunningRecord,
  refusalBeforeSignal,
  removeRunningRecord,
  runningDir,
  signalRunningRecord,
  verifyRunningRecord,
  writeRunningRecord,
} from '../src/node/running.js';

/** Running records and their verification, as `seeds/running.rs` specifies them. */

function record(pid: number, processStart: string, sessionId = 'ses_0199c4e2f1b7712a9d3e4f5061728394'): RunningRecord {
  return {
    session_id: sessionId,
    url: '127.0.0.1:1',
    pid,
    process_start: processStart,
    capsule_name: 'demo',
    capsule_version: '0.1.0',
    workdir: '/tmp/demo',
    outlives_launcher: true,
    started_at: '2026-01-01T00:00:00Z',
  };
}

describe('layers 1 and 2', () => {
  it('read this process as alive', () => {
    const token = processStartToken(process.pid) as string;
    expect(processState(record(process.pid, token))).toEqual({ state: 'alive' });
  });

  it('read a start time that disagrees as gone, saying the pid belongs to another process now', () => {
    const state = processState(record(process.pid, 'not-this-process'));
    expect(state.state).toBe('gone');
    expect((state as { reason: string }).reason).toContain('another time');
  });

  it('read a pid nothing holds as gone, whatever the token', () => {
    expect(processState(record(0, '42')).state).toBe('gone');
    expect(processState(record(-1, '42')).state).toBe('gone');
  });

  it('read the same start token twice for one process', () => {
    expect(processStartToken(process.pid)).toBe(processStartToken(process.pid));
    expect(processStartToken(process.pid)).toMatch(/^\d+$/);
  });

  it('do not read a zombie as alive', async () => {
    const child = spawn('sh', ['-c', 'exit 0'], { stdio: 'ignore' });
    const pid = child.pid as number;
    const token = processStartToken(pid) ?? '';
    // Not waited on: node reaps a child only when its 'exit' event is handled, so poll until the
    // pid is a zombie (or already reaped) — both must read as gone.
    const deadline = Date.now() + 10_000;
    while (processState(record(pid, token)).state !== 'gone') {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  });

  it('classify a dead pid as gone, a matching token as alive, another token as gone, no token as unverified', () => {
    for (const token of [undefined, '123', ''])
      expect(classifyProcess(record(4242, '123'), false, token)).toEqual({ state: 'gone', reason: 'no process holds pid 4242' });
    expect(classifyProcess(record(4242, '123'), true, '123')).toEqual({ state: 'alive' });
    expect(classifyProcess(record(4242, '123'), true, '456')).toEqual({ state: 'gone', reason: 'pid 4242 is held by a process that started at another time' });
    expect(classifyProcess(record(4242, '123'), true, undefined)).toEqual({ state: 'unverified', reason: "pid 4242's start time could not be read" });
  });

  it('never match a recorded empty token against a fresh one', () => {
    expect(classifyProcess(record(4242, ''), true, '123').state).toBe('gone');
  });

  it('take field 22 of a stat line, counted from the last close paren', () => {
    const fields = Array.from({ length: 19 }, (_, index) => String(index + 3)).join(' ');
    expect(startTokenFromStat(`1234 (sleep) ${fields} 987654 23 24\n`)).toBe('987654');
    expect(startTokenFromStat(`1234 (a) (b c) ${fields} 987654 23 24\n`)).toBe('987654');
    expect(startTokenFromStat('1234 sleep S 1 2 3')).toBeUndefined();
    expect(startTokenFromStat(`1234 (sleep) ${fields}`)).toBeUndefined();
  });
});

describe('signals', () => {
  it('are never sent at a mismatched start time: this process would die of the SIGKILL', () => {
    expect(signalRunningRecord(record(process.pid, 'not-this-process'), 'SIGKILL')).toEqual({ outcome: 'already-gone' });
    expect(signalRunningRecord(record(process.pid, 'not-this-process'), 'SIGTERM')).toEqual({ outcome: 'already-gone' });
  });

  it('at a pid nothing holds are already gone rather than refused', () => {
    expect(signalRunningRecord(record(0, '42'), 'SIGTERM')).toEqual({ outcome: 'already-gone' });
  });

  it('are refused for an unverified process and sent for a confirmed one', () => {
    expect(refusalBeforeSignal({ state: 'alive' })).toBeUndefined();
    expect(refusalBeforeSignal({ state: 'gone', reason: 'x' })).toEqual({ outcome: 'already-gone' });
    expect(refusalBeforeSignal({ state: 'unverified', reason: 'why' })).toEqual({ outcome: 'refused', reason: 'why' });
  });

  it('reach a live process that is the one recorded', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    const exited = new Promise<string | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    const pid = child.pid as number;
    expect(signalRunningRecord(record(pid, processStartToken(pid) as string), 'SIGTERM')).toEqual({ outcome: 'sent' });
    expect(await exited).toBe('SIGTERM');
  });
});

describe('layer 3', () => {
  it('finds a live process behind a silent port unreachable, not gone', async () => {
    const port = await new Promise<number>((resolve) => {
      const server = net.createServer();
      server.listen(0, '127.0.0.1', () => {
        const { port: bound } = server.address() as net.AddressInfo;
        server.close(() => resolve(bound));
      });
    });
    const liveness = await verifyRunningRecord({ ...record(process.pid, processStartToken(process.pid) as string), url: `127.0.0.1:${port}` });
    expect(liveness.liveness).toBe('unreachable');
  });

  it('answers unreachable for an unverified process without probing, and gone for a gone one', async () => {
    expect(await verifyRunningRecord(record(1, '1'), { state: 'unverified', reason: 'unread' })).toEqual({ liveness: 'unreachable', reason: 'unread' });
    expect(await verifyRunningRecord(record(1, '1'), { state: 'gone', reason: 'gone' })).toEqual({ liveness: 'gone', reason: 'gone' });
  });
});

describe('the records directory', () => {
  let home: string;
  let env: NodeJS.ProcessEnv;

  beforeEach(async () => {
    home = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-running-'));
    env = { MURMUR_HOME: path.join(home, '.murmur') };
  });

  afterEach(async () => {
    await fs.rm(home, { recursive: true, force: true });
  });

  it('is held at 0700 inside a MURMUR_HOME held at 0700, with each record 0600', async () => {
    await fs.mkdir(env.MURMUR_HOME as string, { mode: 0o755 });
    await fs.chmod(env.MURMUR_HOME as string, 0o755);
    const file = writeRunningRecord(record(1, '42'), env);
    expect(statSync(env.MURMUR_HOME as string).mode & 0o777).toBe(0o700);
    expect(statSync(runningDir(env)).mode & 0o777).toBe(0o700);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  it('lists the newest session first and prunes what does not parse', async () => {
    writeRunningRecord(record(1, '1', 'ses_0199c4e2f1b7712a9d3e4f5061728394'), env);
    writeRunningRecord(record(1, '1', 'ses_0299c4e2f1b7712a9d3e4f5061728394'), env);
    const broken = path.join(runningDir(env), 'ses_0399c4e2f1b7712a9d3e4f5061728394.json');
    await fs.writeFile(broken, '{"session_id": "half');
    expect(listRunningRecords(env).map((each) => each.session_id)).toEqual(['ses_0299c4e2f1b7712a9d3e4f5061728394', 'ses_0199c4e2f1b7712a9d3e4f5061728394']);
    await expect(fs.stat(broken)).rejects.toThrow();
  });

  it('writes and removes nothing outside its directory, whatever id it is given', async () => {
    const victim = path.join(home, 'victim.json');
    await fs.writeFile(victim, '{}');
    const climbing = path.relative(runningDir(env), path.join(home, 'victim'));
    expect(() => writeRunningRecord(record(1, '1', climbing), env)).toThrow(
      expect.objectContaining({ code: 'E-SES-001', message: expect.stringContaining("cannot name a running session's record") }),
    );
    removeRunningRecord(climbing, env);
    expect(await fs.readFile(victim, 'utf8')).toBe('{}');
    expect(await fs.readdir(home)).toEqual(['.murmur', 'victim.json']);
  });

  it('leaves no staging file behind, and removes a record on request', () => {
    writeRunningRecord(record(1, '1'), env);
    expect(readRunningRecord(record(1, '1').session_id, env)).toEqual(record(1, '1'));
    removeRunningRecord(record(1, '1').session_id, env);
    expect(readRunningRecord(record(1, '1').session_id, env)).toBeUndefined();
    expect(listRunningRecords(env)).toEqual([]);
  });
});
