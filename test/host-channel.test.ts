import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SessionEnded, commands, newSessionId, topics } from '@murmur/shared';
import { requestStaging, uploadProject } from '@murmur/shared/node';
import { agentManifest, agentProject } from './support/agents.js';
import { componentArtifact, publishInto } from './support/artifacts.js';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type InProcessStack, launchToEnd, startInProcessStack } from './support/in-process-stack.js';
import { probeTool } from './support/probe-guests.js';
import { repositoryRoot } from './support/processes.js';
import { rejectionOf } from './support/refusals.js';

/**
 * A capsule host runs a capsule's code, so the executor treats what its host writes as a stranger's:
 * a host that breaks its channel ends its own session, never the executor every session shares.
 * The executor runs in this process, so if a host could end it, this test file would end with it.
 * The host here is `support/hostile-host.mjs`, which does to its channels what a capsule that broke
 * out of WebAssembly could.
 */
describe('an executor whose capsule host breaks its channel', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let stack: InProcessStack;

  beforeAll(async () => {
    scratch = await tempDir('murmur-hostile-');
    stack = startInProcessStack(scratch.dir, { hostEntry: path.join(repositoryRoot, 'test', 'support', 'hostile-host.mjs') });
  });

  afterAll(async () => {
    await stack.close();
    await scratch.cleanup();
  });

  /** Runs a capsule named `how` (the hostile host breaks its channels that way) to its end. */
  async function runToEnd(how: string, env: Record<string, string> = {}): Promise<{ ended: SessionEnded; sessionDir: string }> {
    return launchToEnd(stack.bus, await probeProject(path.join(scratch.dir, how), '', how), '[]', undefined, env);
  }

  it('a frame announcing more than a host may send ends that session, naming what the host did', async () => {
    const { ended } = await runToEnd('announces-too-much');
    expect(ended.exit_status).toBe('failed');
    expect(ended.error?.code).toBe('E-RUN-001');
    expect(ended.error?.message).toContain('the capsule host broke its channel to the executor');
    expect(ended.error?.message).toContain('announced a message of 4294967295 bytes');
    expect(ended.error?.hint).toMatch(/do not run this capsule again/);
  });

  it('a host that says ok and then breaks its channel ends failed: the executor’s verdict stands over its result', async () => {
    const { ended, sessionDir } = await runToEnd('ok-then-breaks');
    expect(ended.exit_status).toBe('failed');
    expect(ended.error?.message).toContain('the capsule host broke its channel to the executor');
    const ends = (await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as { event_type: string; exit_status?: string })
      .filter((record) => record.event_type === 'session_end');
    expect(ends.at(-1)?.exit_status).toBe('failed');
  });

  it('a host error of megabytes is cut, and the session’s end is still announced', async () => {
    const { ended } = await runToEnd('huge-error');
    expect(ended.exit_status).toBe('failed');
    expect(ended.error?.message.length).toBeLessThan(9_000);
    expect(ended.error?.message).toMatch(/^x+… \(cut from 2097152 characters\)$/);
    expect(ended.error?.hint?.length).toBeLessThan(2_200);
  });

  it('a request it refuses as malformed is still answered, so the guest call waiting on it fails instead of hanging', async () => {
    const { ended, sessionDir } = await runToEnd('malformed-request');
    expect(ended.exit_status).toBe('ok');
    expect(await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8')).toMatch(
      /request 7 answered ok=false: the executor refused a malformed request: Too big/,
    );
  });

  it('a launch that reaches the executor after its launcher stopped waiting is refused, and starts nothing', async () => {
    const project = await probeProject(path.join(scratch.dir, 'late'), '', 'waits-for-end');
    const plan = await requestStaging(stack.bus, { source: { kind: 'project', project: await uploadProject(stack.bus, project) } });
    const sessionId = newSessionId();
    const started: string[] = [];
    const subscription = stack.bus.subscribe(topics.sessionStarted, (event) => void started.push(event.session_id));
    try {
      const refusal = await rejectionOf(
        stack.bus.request(
          commands.launch,
          { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' }, launch_by: Date.now() - 7_000 },
          { timeoutMs: 10_000 },
        ),
      );
      expect(refusal.code).toBe('E-EXE-002');
      expect(refusal.message).toMatch(
        new RegExp(`^the launch of session ${sessionId} reached executor \\S+ [56]s after its launcher stopped waiting; nothing was started$`),
      );
      await stack.bus.flush();
      expect(started).toEqual([]);
    } finally {
      subscription.unsubscribe();
    }
  });

  it('a launch naming a session its executor already ran is refused, and starts nothing in its workdir', async () => {
    const project = await probeProject(path.join(scratch.dir, 'replayed'), '', 'waits-for-end');
    const { ended, sessionId, sessionDir } = await launchToEnd(stack.bus, project, '[]');
    expect(ended.exit_status).toBe('ok');
    const before = await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8');
    const plan = await requestStaging(stack.bus, { source: { kind: 'project', project: await uploadProject(stack.bus, project) } });
    const refusal = await rejectionOf(
      stack.bus.request(commands.launch, { session_id: sessionId, plan, env: { PATH: process.env.PATH ?? '' } }, { timeoutMs: 10_000 }),
    );
    expect(refusal.code).toBe('E-EXE-003');
    expect(refusal.message).toMatch(new RegExp(`^session ${sessionId} ran on executor \\S+ already; a launch naming it again starts nothing$`));
    expect(await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8')).toBe(before);
  });

  it('pulls of one tool at once are taken in turn: each answered, the tool pinned and announced once', async () => {
    await publishInto(path.join(scratch.dir, 'home', 'artifacts'), await componentArtifact('probe-tool', '2.0.0', (await probeTool()).bytes));
    const pinned: string[] = [];
    const subscription = stack.bus.subscribe(topics.sessionPinned, (event) => {
      pinned.push(`${event.session_id} ${event.artifact.name}@${event.artifact.resolved_version}`);
    });
    try {
      const { ended, sessionId, sessionDir } = await launchToEnd(
        stack.bus,
        await probeProject(path.join(scratch.dir, 'pulls-at-once'), '', 'pulls-at-once'),
        '[]',
      );
      expect(ended.exit_status).toBe('ok');
      const answers = Array.from({ length: 8 }, (_, index) => `${501 + index} ok=true`).join(', ');
      expect(await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8')).toContain(`pulls answered ${answers}`);
      await stack.bus.flush();
      expect(pinned).toEqual([`${sessionId} probe-tool@2.0.0`]);
    } finally {
      subscription.unsubscribe();
    }
  });

  it('a host that asks for many slow things at once has only so many worked on, and the rest refused at once, naming the bound', async () => {
    const { ended, sessionDir } = await runToEnd('floods-pulls');
    expect(ended.exit_status).toBe('ok');
    const said = /(\d+) pulls answered, (\d+) refused as too many: (.*)/.exec(await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8'));
    expect(said?.[1]).toBe('40');
    // All 40 arrive together; at most 16 are worked on, however fast the others are answered.
    expect(Number(said?.[2])).toBeGreaterThanOrEqual(1);
    expect(said?.[3]).toContain(
      "refused this pull: the executor is already working on 16 of this session's requests to send, delegate or pull, the most it takes at once",
    );
  });

  it('keeps no message nested past what a model writes, and answers a flood of record requests one at a time, refusing past the bound', async () => {
    // An agent with a threaded conversation, whose records the host may read and write; its model is never called.
    const dir = await agentProject(
      path.join(scratch.dir, 'deep-conversation'),
      agentManifest({ endpoint: 'http://127.0.0.1:9/v1', authority: '127.0.0.1:9' }, { name: 'deep-conversation', lifecycle: '  conversation: threaded' }),
    );
    const { ended, sessionDir } = await launchToEnd(stack.bus, dir, 'hello');
    expect(ended.exit_status).toBe('ok');
    const log = await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8');
    expect(log).toContain('hostile host: 100 deep loaded ok=true messages=0');
    expect(log).toContain('hostile host: 10 deep loaded ok=true messages=1');
    const flood = /hostile host: 100 loads answered, (\d+) refused: (.*)/.exec(log);
    // Sent together, answered one at a time: 8 are held at most, the rest are refused at once.
    expect(Number(flood?.[1])).toBeGreaterThanOrEqual(100 - 8 - 1);
    expect(flood?.[2]).toContain("refused this conversation-load: the executor holds 8 of this session's requests of its records already");
  });

  it('records at most a thousand of a host’s egress decisions, then one line saying later ones are not', async () => {
    const { ended, sessionDir } = await runToEnd('floods-egress');
    expect(ended.exit_status).toBe('ok');
    const egress = (await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8'))
      .split('\n')
      .filter((line) => line.includes('"event_type":"egress"'))
      .map((line) => JSON.parse(line) as { decision: string; target?: string; reason?: string });
    expect(egress).toHaveLength(1_001);
    expect(egress.slice(0, 1_000).every((record) => record.decision === 'denied' && record.target === 'http://denied.example')).toBe(true);
    expect(egress[1_000]).toMatchObject({
      decision: 'suppressed',
      reason: 'more than 1000 egress decisions of the capsule host in this session; later ones are not recorded',
    });
  });

  it('keeps records for no more contexts than it was sent messages, and the launch’s own: made-up ones are refused', async () => {
    const { ended, sessionDir } = await runToEnd('floods-contexts');
    expect(ended.exit_status).toBe('ok');
    const said = (await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8')).split('\n').filter((line) => line.includes('hostile host: context'));
    expect(said).toHaveLength(5);
    expect(said[0]).toContain('context 200 answered ok=true');
    for (const line of said.slice(1)) {
      expect(line).toContain('ok=false');
      expect(line).toContain('a session keeps records for at most one context per message it was sent, and its launch');
    }
  });

  it('is given, for subprocesses, only the environment a subprocess is made from, its baseline the executor’s own: nothing of the launcher’s reaches the sandbox', async () => {
    const { ended, sessionDir } = await runToEnd('tells-its-env', { LAUNCHER_ONLY_VALUE: 'kept-outside', LANG: 'launcher-lang', PATH: '/launcher-only/bin' });
    expect(ended.exit_status).toBe('ok');
    const told = /subprocess_env (\{.*\})/.exec(await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8'))?.[1];
    const env = JSON.parse(told ?? 'null') as Record<string, string>;
    // The executor here was started with a PATH and no LANG (in-process-stack.ts).
    expect(env.PATH).toBe(process.env.PATH);
    expect(env).not.toHaveProperty('LANG');
    expect(env).not.toHaveProperty('LAUNCHER_ONLY_VALUE');
  });

  it('a frame that is not JSON ends that session, and the executor runs the next one', async () => {
    const first = await runToEnd('not-json');
    expect(first.ended.exit_status).toBe('failed');
    expect(first.ended.error?.message).toMatch(/sent a message that is not JSON/);
    const second = await runToEnd('not-json');
    expect(second.ended.error?.message).toMatch(/sent a message that is not JSON/);
    expect(stack.executor.sessions().map((session) => session.id)).not.toContain(second.ended.session_id);
  });

  it('an empty frame, the last bytes it wrote, ends that session as a frame that is not JSON', async () => {
    const { ended } = await runToEnd('empty-frame');
    expect(ended.exit_status).toBe('failed');
    expect(ended.error?.message).toMatch(/broke its channel to the executor \(it sent a message that is not JSON/);
  });

  it('ends the channel once it has read a host’s result, so a host that waits for that exits at once', async () => {
    const { ended, sessionDir } = await runToEnd('waits-for-end');
    expect(ended.exit_status, JSON.stringify(ended.error)).toBe('ok');
    expect(await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8')).toContain('the executor ended the channel after the result');
  });

  it('ends the channel on a result it refuses as malformed too, so its host does not linger', async () => {
    const { ended, sessionDir } = await runToEnd('malformed-result');
    expect(ended.exit_status).toBe('failed');
    expect(ended.error?.message).toMatch(/the capsule host ended without a result \(exit status 0\)/);
    expect(await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8')).toContain('the executor ended the channel after the result');
    expect(await fs.readFile(path.join(sessionDir, 'logs', 'bootstrap.log'), 'utf8')).toMatch(
      /refused a malformed 'result' message from the capsule host: status/,
    );
  });

  it('a host that exits 0 without a result fails its session, and the session’s record says what was heard of it', async () => {
    const { ended, sessionDir } = await runToEnd('exits-without-result');
    expect(ended.exit_status).toBe('failed');
    expect(ended.error?.message).toMatch(/the capsule host ended without a result \(exit status 0\)/);
    const bootstrap = await fs.readFile(path.join(sessionDir, 'logs', 'bootstrap.log'), 'utf8');
    // `ready`, then its two lines: the channel closed with nothing left unread, so the host never sent one.
    expect(bootstrap).toContain('[host] ended without a result: 3 messages read from it (the last: ready, output, output); its channel had closed');
  });

  it('finds the IPC channel the sandbox’s sockets came over already closed once its session has started', async (context) => {
    if (!stack.executor.isolation.containment.startsWith('sealed')) {
      const why = `only a sealed sandbox hands sockets over, and this host gives '${stack.executor.isolation.containment}'`;
      console.warn(`skipped: ${why}`);
      context.skip(why);
    }
    const { ended, sessionDir } = await runToEnd('ipc-after-start');
    expect(ended.exit_status, JSON.stringify(ended.error)).toBe('ok');
    const hostLog = await fs.readFile(path.join(sessionDir, 'logs', 'host.log'), 'utf8');
    expect(hostLog).toMatch(/the hand-over channel refused the line \((EPIPE|EBADF)\)/);
  });
});
