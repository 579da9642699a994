import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConversationRecords } from '../src/conversations.js';
import { HarnessSessions } from '../src/harness-sessions.js';

/** The context → harness session map (`seeds/harness_session.rs`), on a scratch `MURMUR_HOME`. */
describe('harness sessions', () => {
  let home: string;
  let reports: string[];

  beforeEach(async () => {
    home = await fs.mkdtemp(path.join(os.tmpdir(), 'murmur-harness-sessions-'));
    reports = [];
  });
  afterEach(async () => {
    await fs.rm(home, { recursive: true, force: true });
  });

  const sessionsIn = (root: string, record?: string) =>
    new HarnessSessions(
      ConversationRecords.of(root, 'capsule', record, (line) => reports.push(line)),
      { harness: 'claude-code', driver: 'claude' },
    );
  const fileOf = (context: string) => path.join(home, 'conversations', 'capsule', context, 'harness-session.json');

  it('writes one entry per context, 0600 under 0700, that a later launch reads with no memory of its own', async () => {
    await sessionsIn(home).put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000001');
    const entry = JSON.parse(await fs.readFile(fileOf('ctx_1'), 'utf8'));
    expect(entry).toMatchObject({
      type: 'murmur.harness-session',
      session_id: '0191d6b2-7c4e-7000-8000-000000000001',
      harness: 'claude-code',
      driver: 'claude',
    });
    expect(entry.created_ms).toBe(entry.updated_ms);
    expect(((await fs.stat(fileOf('ctx_1'))).mode & 0o777).toString(8)).toBe('600');
    for (const dir of [path.dirname(fileOf('ctx_1')), path.join(home, 'conversations', 'capsule'), path.join(home, 'conversations')])
      expect(((await fs.stat(dir)).mode & 0o777).toString(8)).toBe('700');
    expect(await sessionsIn(home).get('ctx_1')).toBe('0191d6b2-7c4e-7000-8000-000000000001');
    expect(await sessionsIn(home).recorded('ctx_1')).toBe(true);
  });

  it('keeps when the context first got a session across later writes', async () => {
    const sessions = sessionsIn(home);
    await sessions.put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000001');
    const first = JSON.parse(await fs.readFile(fileOf('ctx_1'), 'utf8'));
    await new Promise((resolve) => setTimeout(resolve, 5));
    await sessionsIn(home).put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000002');
    const later = JSON.parse(await fs.readFile(fileOf('ctx_1'), 'utf8'));
    expect(later.session_id).toBe('0191d6b2-7c4e-7000-8000-000000000002');
    expect(later.created_ms).toBe(first.created_ms);
    expect(later.updated_ms).toBeGreaterThan(first.created_ms);
  });

  it('forgets from memory and from the file, and says which session it dropped', async () => {
    const sessions = sessionsIn(home);
    await sessions.put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000001');
    expect(await sessions.forget('ctx_1')).toBe('0191d6b2-7c4e-7000-8000-000000000001');
    await expect(fs.stat(fileOf('ctx_1'))).rejects.toThrow();
    expect(await sessions.get('ctx_1')).toBeUndefined();
    expect(await sessionsIn(home).get('ctx_1')).toBeUndefined();
    expect(await sessions.forget('ctx_1')).toBeUndefined();
  });

  it('reads a file that is not a map entry as no session', async () => {
    await fs.mkdir(path.dirname(fileOf('ctx_1')), { recursive: true });
    for (const content of [
      '{ not json',
      JSON.stringify({ type: 'something.else', session_id: 's' }),
      JSON.stringify({ type: 'murmur.harness-session', session_id: '', harness: 'h', driver: 'd', created_ms: 1, updated_ms: 1 }),
    ]) {
      await fs.writeFile(fileOf('ctx_1'), content);
      expect(await sessionsIn(home).get('ctx_1')).toBeUndefined();
      expect(await sessionsIn(home).recorded('ctx_1')).toBe(false);
    }
  });

  it('remembers in memory only for a capsule that keeps no record, or a context id that is not a path segment', async () => {
    const off = sessionsIn(home, 'off');
    await off.put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000001');
    expect(await off.get('ctx_1')).toBe('0191d6b2-7c4e-7000-8000-000000000001');
    await expect(fs.stat(path.join(home, 'conversations'))).rejects.toThrow();
    const sessions = sessionsIn(home);
    await sessions.put('../escape', '0191d6b2-7c4e-7000-8000-000000000002');
    expect(await sessions.get('../escape')).toBe('0191d6b2-7c4e-7000-8000-000000000002');
    await expect(fs.stat(path.join(home, 'conversations', 'escape'))).rejects.toThrow();
  });

  it('ignores an empty session id', async () => {
    const sessions = sessionsIn(home);
    await sessions.put('ctx_1', '');
    expect(await sessions.get('ctx_1')).toBeUndefined();
  });

  it('reports an unwritable root once and goes on remembering in memory', async () => {
    // A file where `conversations/` has to be a directory: every write beneath it fails.
    await fs.writeFile(path.join(home, 'conversations'), 'not a directory');
    const sessions = sessionsIn(home);
    await sessions.put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000001');
    await sessions.put('ctx_1', '0191d6b2-7c4e-7000-8000-000000000002');
    expect(await sessions.get('ctx_1')).toBe('0191d6b2-7c4e-7000-8000-000000000002');
    expect(reports).toHaveLength(1);
    expect(reports[0]).toContain("[harness-session] the session id for context 'ctx_1' could not be written");
  });
});
