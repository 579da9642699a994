import { execFileSync, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, runMur, spawnMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * Evaluation end to end: real `mur eval run`s and `mur run`s of an agent capsule on the scripted
 * model, scored by the first-party `murmur-hook-eval` (our own JavaScript, built into the default
 * artifacts by `npm run build`, so the capsule names it without installing it), and the real
 * `mur eval show` and `diff` reading what it wrote. A task that says "use the shell" makes the
 * model call bash once and then answer; any other task is answered at once.
 */

interface EventScore {
  record_type: 'event_score';
  ts: number;
  turn: number;
  event_type: string;
  scorer: string;
  result: 'pass' | 'fail';
  score: number;
  reason: string;
}

interface DatasetRun {
  record_type: 'dataset_run';
  ts: number;
  dataset_id: string | null;
  case_id: string | null;
  overall: string;
  scores: Record<string, number>;
}

const EVAL_HOOK_ENTRY = [
  '  - name: murmur-hook-eval',
  '    version: 0.1.0',
  '    runtime: hook',
  '    capabilities:',
  '      filesystem:',
  '        scope: .',
].join('\n');

/** observability.eval with the given scorers (YAML list items indented six spaces). */
function evalBlock(scorers: string[], datasetId?: string): string {
  return ['observability:', '  eval:', ...(datasetId ? [`    dataset_id: ${datasetId}`] : []), '    scorers:', ...scorers].join('\n');
}

const SESSION_ID = /^ses_[0-9a-f]{32}$/;

async function readEval(file: string): Promise<Array<EventScore | DatasetRun>> {
  return (await fs.readFile(file, 'utf8'))
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as EventScore | DatasetRun);
}

async function sessionsIn(workdir: string): Promise<string[]> {
  return (await fs.readdir(workdir)).filter((name) => name.startsWith('ses_')).sort();
}

/** An eval.jsonl whose session scored these verdicts (true: pass), as the hook writes one. */
function evalFixture(verdicts: Record<string, boolean>, caseId: string | null = null): string {
  const lines: Array<EventScore | DatasetRun> = Object.entries(verdicts).map(([scorer, pass]) => ({
    record_type: 'event_score',
    ts: 1000,
    turn: 2,
    event_type: 'session_end',
    scorer,
    result: pass ? 'pass' : 'fail',
    score: pass ? 1 : 0,
    reason: `fixture ${scorer}`,
  }));
  const scores = Object.fromEntries(Object.entries(verdicts).map(([scorer, pass]) => [scorer, pass ? 1 : 0]));
  const overall = Object.values(verdicts).every(Boolean) ? 'pass' : 'fail';
  lines.push({ record_type: 'dataset_run', ts: 1001, dataset_id: 'fixtures', case_id: caseId, overall, scores });
  return lines.map((line) => `${JSON.stringify(line)}\n`).join('');
}

/** What a capsule's shell writes to make up a passing score of its own. */
const FORGE_COMMAND = `printf '%s' '${evalFixture({ success_check: true }, 'forged')}' > eval.jsonl`;

describe('mur eval', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let inference: ScriptedInference;

  beforeAll(async () => {
    scratch = await tempDir('murmur-eval-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    inference = await startScriptedInference({
      script: (body) => {
        const messages = body.messages as Array<{ role: string; content: unknown }>;
        const task = JSON.stringify(messages[0]?.content ?? '');
        const answered = messages.some((message) => message.role === 'user' && JSON.stringify(message.content).includes('tool_result'));
        if (task.includes('forge the score') && !answered) return { toolCalls: [{ name: 'bash', input: { command: FORGE_COMMAND } }] };
        // A case still at work when it is interrupted.
        if (task.includes('take your time') && !answered) return { toolCalls: [{ name: 'bash', input: { command: 'sleep 60' } }] };
        return task.includes('use the shell') && !answered ? { toolCalls: [{ name: 'bash', input: { command: 'echo hi' } }] } : { text: 'done' };
      },
    });
  });

  afterAll(async () => {
    await inference.close();
    await scratch.cleanup();
  });

  async function project(name: string, scorers: string[], datasetId?: string): Promise<string> {
    const dir = path.join(scratch.dir, name);
    const manifest = agentManifest(inference, {
      artifacts: EVAL_HOOK_ENTRY,
      capabilities: '  shell:\n    allow: [bash]',
      extra: evalBlock(scorers, datasetId),
    });
    await agentProject(dir, manifest, { 'shell-task.md': 'use the shell, then answer', 'plain-task.md': 'just answer' });
    return dir;
  }

  describe('run', () => {
    let dir: string;
    let result: Awaited<ReturnType<typeof runMur>>;

    beforeAll(async () => {
      dir = await project(
        'dataset',
        [
          '      - type: exit_ok',
          '        name: success_check',
          '      - type: max_turns',
          '        name: turn_limit',
          '        max: 2',
          '      - type: tool_sequence',
          '        name: tool_order',
          '        expected: [bash]',
          '      - type: max_tokens',
          '        name: budget',
          '        max: 1000000',
          '      - type: llm_judge',
          '        name: judge',
          '      - type: vibes',
        ],
        'smoke',
      );
      await fs.writeFile(
        path.join(dir, 'cases.jsonl'),
        [
          '{"case_id": "uses-shell", "task_path": "shell-task.md"}',
          '',
          '{"case_id": "answers-only", "task_path": "plain-task.md", "expected": "done"}',
          '',
        ].join('\n'),
      );
      result = await runMur(['eval', 'run', dir, '--dataset', 'cases.jsonl'], { cwd: dir, env, timeoutMs: 240_000 });
    }, 300_000);

    it("runs the capsule once per case and prints upstream's progress lines and summary, the scorers passing and failing", async () => {
      expect(result.code, result.stderr).toBe(0);
      const sessions = await sessionsIn(path.join(dir, 'workdir'));
      expect(sessions).toHaveLength(2);
      const [first, second] = sessions as [string, string];
      expect(result.stdout).toBe(
        [
          'Running 2 case(s) …',
          '  case: uses-shell',
          `    result: pass  session: ${first}`,
          '  case: answers-only',
          `    result: fail  session: ${second}`,
          '',
          '── Summary ──────────────────────────────────────',
          'pass: 1/2',
          '',
          `  ${'uses-shell'.padEnd(24)} pass  budget=1.00 success_check=1.00 tool_order=1.00 turn_limit=1.00  (${path.join(dir, 'workdir', first)})`,
          `  ${'answers-only'.padEnd(24)} fail  budget=1.00 success_check=1.00 tool_order=0.00 turn_limit=1.00  (${path.join(dir, 'workdir', second)})`,
          '',
        ].join('\n'),
      );
      // Both cases stage the same capsule: its warning is said once.
      expect(result.stderr.match(/warning\[W-SEC-019\]: murmur\.yaml: unknown scorer type 'vibes'/g)).toHaveLength(1);
      // The first case pinned what it resolved.
      expect(await fs.readFile(path.join(dir, 'murmur.lock'), 'utf8')).toContain('murmur-hook-eval');
    });

    it("writes each session's eval.jsonl beside its trace: one event_score per scorer at session_end, then the dataset_run with the case and dataset ids", async () => {
      const [first, second] = (await sessionsIn(path.join(dir, 'workdir'))) as [string, string];
      const shell = await readEval(path.join(dir, 'workdir', first, 'eval.jsonl'));
      await fs.access(path.join(dir, 'workdir', first, 'trace.jsonl'));
      expect(shell.map((record) => (record.record_type === 'event_score' ? record.scorer : record.record_type))).toEqual([
        'success_check',
        'turn_limit',
        'tool_order',
        'budget',
        'dataset_run',
      ]);
      const scores = shell.filter((record): record is EventScore => record.record_type === 'event_score');
      for (const score of scores) expect(score).toMatchObject({ event_type: 'session_end', turn: 2, result: 'pass', score: 1 });
      expect(scores.map((score) => score.reason)).toEqual([
        'exit_status=ok',
        'turns=2 max=2',
        'expected=[bash] observed=[bash]',
        expect.stringMatching(/^tokens=\d+ max=1000000$/),
      ]);
      expect(shell.at(-1)).toMatchObject({
        record_type: 'dataset_run',
        dataset_id: 'smoke',
        case_id: 'uses-shell',
        overall: 'pass',
        scores: { success_check: 1, turn_limit: 1, tool_order: 1, budget: 1 },
      });
      const plain = await readEval(path.join(dir, 'workdir', second, 'eval.jsonl'));
      expect(plain.find((record) => record.record_type === 'event_score' && record.scorer === 'tool_order')).toMatchObject({
        result: 'fail',
        score: 0,
        reason: 'expected=[bash] observed=[]',
        turn: 1,
      });
      expect(plain.at(-1)).toMatchObject({ case_id: 'answers-only', overall: 'fail' });
      // llm_judge is not implemented: it scores nothing, and the hook says so in its log.
      expect(JSON.stringify(plain)).not.toContain('judge');
      expect(await fs.readFile(path.join(dir, 'workdir', second, 'logs', 'hook-murmur-hook-eval.log'), 'utf8')).toContain(
        "scorer 'judge' (llm_judge) is not implemented: it emits no score",
      );
    });

    it('shows the newest session by default, and one by its id suffix', async () => {
      const [first, second] = (await sessionsIn(path.join(dir, 'workdir'))) as [string, string];
      const newest = await runMur(['eval', 'show'], { cwd: dir, env });
      expect(newest.code, newest.stderr).toBe(0);
      expect(newest.stdout).toBe(
        [
          `── Eval: ${path.join(dir, 'workdir', second, 'eval.jsonl')} ─────────────────────────────────────`,
          '',
          '── Scorers ──────────────────────────────────────',
          `  ${'budget'.padEnd(24)} 1/1 pass  (100.0%)`,
          `  ${'success_check'.padEnd(24)} 1/1 pass  (100.0%)`,
          `  ${'tool_order'.padEnd(24)} 0/1 pass  (0.0%)`,
          `  ${'turn_limit'.padEnd(24)} 1/1 pass  (100.0%)`,
          '',
          '── Overall ──────────────────────────────────────',
          '  result:  fail',
          '  case:    answers-only',
          '  dataset: smoke',
          '',
          '── Score summary ────────────────────────────────',
          `  ${'budget'.padEnd(24)} 1.0000`,
          `  ${'success_check'.padEnd(24)} 1.0000`,
          `  ${'tool_order'.padEnd(24)} 0.0000`,
          `  ${'turn_limit'.padEnd(24)} 1.0000`,
          '',
          '── Worst events ─────────────────────────────────',
          `  turn   1  session_end   ${'tool_order'.padEnd(24)} fail  score=0.00  expected=[bash] observed=[]`,
          '',
        ].join('\n'),
      );
      const bySuffix = await runMur(['eval', 'show', first.slice(-6).toUpperCase()], { cwd: dir, env });
      expect(bySuffix.code, bySuffix.stderr).toBe(0);
      expect(bySuffix.stdout).toContain(`── Eval: ${path.join(dir, 'workdir', first, 'eval.jsonl')} `);
      expect(bySuffix.stdout).toContain('  (no failing events)');
    });

    it('shows a session as JSON: the verdict, each scorer tallied, the dataset_run as recorded', async () => {
      const [first] = (await sessionsIn(path.join(dir, 'workdir'))) as [string];
      const shown = await runMur(['eval', 'show', '--json', '@2'], { cwd: dir, env });
      expect(shown.code, shown.stderr).toBe(0);
      const document = JSON.parse(shown.stdout) as Record<string, unknown>;
      const recorded = (await readEval(path.join(dir, 'workdir', first, 'eval.jsonl'))).at(-1) as DatasetRun;
      expect(document).toEqual({
        overall: 'pass',
        scorers: {
          budget: { pass: 1, fail: 0, total: 1, pass_rate: 1 },
          success_check: { pass: 1, fail: 0, total: 1, pass_rate: 1 },
          tool_order: { pass: 1, fail: 0, total: 1, pass_rate: 1 },
          turn_limit: { pass: 1, fail: 0, total: 1, pass_rate: 1 },
        },
        dataset_run: { ts: recorded.ts, dataset_id: 'smoke', case_id: 'uses-shell', overall: 'pass', scores: recorded.scores },
        failing_events: [],
      });
      // Pretty-printed, as upstream prints it.
      expect(shown.stdout.split('\n')[1]).toBe('  "overall": "pass",');
    });

    it('diffs two sessions scorer by scorer, saying which run did better', async () => {
      const diffed = await runMur(['eval', 'diff', '@2', '@1'], { cwd: dir, env });
      expect(diffed.code, diffed.stderr).toBe(0);
      const row = (a: string, b: string, c: string, d: string) => `${a.padEnd(24)} ${b.padEnd(14)} ${c.padEnd(14)} ${d}`;
      expect(diffed.stdout).toBe(
        [
          row('Scorer', 'Run A', 'Run B', 'Delta'),
          `${'─'.repeat(24)} ${'─'.repeat(14)} ${'─'.repeat(14)} ${'─'.repeat(26)}`,
          row('budget', '100.0%', '100.0%', '='),
          row('success_check', '100.0%', '100.0%', '='),
          row('tool_order', '100.0%', '0.0%', '-100.0pp (A better)'),
          row('turn_limit', '100.0%', '100.0%', '='),
          '',
          `${'overall'.padEnd(24)} ${'pass'.padEnd(14)} ${'fail'.padEnd(14)}`,
          '',
        ].join('\n'),
      );
    });
  });

  it('scores a plain mur run too: failing turn and token budgets, no case id, the dataset id from the manifest', async () => {
    const dir = await project(
      'budgets',
      ['      - type: max_turns', '        max: 1', '      - type: max_tokens', '        name: tiny_budget', '        max: 1', '      - type: exit_ok'],
      'budgets',
    );
    const run = await runMur(['run', '--task', 'use the shell, then answer'], { cwd: dir, env });
    expect(run.code, run.stderr).toBe(0);
    const [session] = (await sessionsIn(path.join(dir, 'workdir'))) as [string];
    expect(session).toMatch(SESSION_ID);
    const records = await readEval(path.join(dir, 'workdir', session, 'eval.jsonl'));
    // A scorer without a name is keyed by its type.
    expect(
      records.filter((record): record is EventScore => record.record_type === 'event_score').map(({ scorer, result, reason }) => ({ scorer, result, reason })),
    ).toEqual([
      { scorer: 'max_turns', result: 'fail', reason: 'turns=2 max=1' },
      { scorer: 'tiny_budget', result: 'fail', reason: expect.stringMatching(/^tokens=\d+ max=1$/) },
      { scorer: 'exit_ok', result: 'pass', reason: 'exit_status=ok' },
    ]);
    expect(records.at(-1)).toMatchObject({ dataset_id: 'budgets', case_id: null, overall: 'fail', scores: { max_turns: 0, tiny_budget: 0, exit_ok: 1 } });
  }, 120_000);

  it('warns about a scorer type no scorer has, and leaves it out of what the hook is given', async () => {
    const dir = await project('unknown-scorer', ['      - type: vibes', '        name: mood', '      - type: exit_ok']);
    const run = await runMur(['run', '--task', 'just answer'], { cwd: dir, env });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toContain("warning[W-SEC-019]: murmur.yaml: unknown scorer type 'vibes' at observability.eval.scorers[0] (line");
    const [session] = (await sessionsIn(path.join(dir, 'workdir'))) as [string];
    const records = await readEval(path.join(dir, 'workdir', session, 'eval.jsonl'));
    expect(records.at(-1)).toMatchObject({ dataset_id: null, overall: 'pass', scores: { exit_ok: 1 } });
  }, 120_000);

  it('records a case that cannot be staged as stage_failed, which does not count as a pass, and exits 1 saying which case did not run', async () => {
    const dir = path.join(scratch.dir, 'unstageable');
    const artifacts = `${EVAL_HOOK_ENTRY}\n  - name: not-installed\n    version: 1.0.0\n    runtime: tool`;
    await agentProject(dir, agentManifest(inference, { artifacts, extra: evalBlock(['      - type: exit_ok']) }), {
      'task.md': 'just answer',
      'eval.jsonl': '{"case_id": "never-runs", "task_path": "task.md"}\n',
    });
    const result = await runMur(['eval', 'run'], { cwd: dir, env });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toMatch(/^ {4}stage failed: error\[E-RUN-008\]: .*not-installed/m);
    expect(result.stderr).toContain('error: 1 of 1 case(s) did not run (never-runs); why is said under each case above');
    expect(result.stdout).toBe(
      [
        'Running 1 case(s) …',
        '  case: never-runs',
        '',
        '── Summary ──────────────────────────────────────',
        'pass: 0/1',
        '',
        `  ${'never-runs'.padEnd(24)} stage_failed    (${path.join(dir, 'workdir')})`,
        '',
      ].join('\n'),
    );
  });

  it('scores nothing and says why when the hook is given no directory to write in', async () => {
    const dir = path.join(scratch.dir, 'no-scope');
    const entry = '  - name: murmur-hook-eval\n    version: 0.1.0\n    runtime: hook';
    await agentProject(dir, agentManifest(inference, { artifacts: entry, extra: evalBlock(['      - type: exit_ok']) }));
    const run = await runMur(['run', '--task', 'just answer'], { cwd: dir, env });
    expect(run.code, run.stderr).toBe(0);
    const [session] = (await sessionsIn(path.join(dir, 'workdir'))) as [string];
    await expect(fs.access(path.join(dir, 'workdir', session, 'eval.jsonl'))).rejects.toThrow();
    expect(await fs.readFile(path.join(dir, 'workdir', session, 'logs', 'session.log'), 'utf8')).toContain(
      'no directory to write eval.jsonl in: grant this hook capabilities.filesystem.scope: . on its artifacts: entry',
    );
    const shown = await runMur(['eval', 'show'], { cwd: dir, env });
    expect(shown.code).toBe(1);
    expect(shown.stderr).toContain(`error[E-EVAL-002]: session ${session} has no eval.jsonl`);
  }, 120_000);

  it('scores no eval.jsonl a capsule wrote itself: without the hook it is not read, and with one whose write fails it is gone', async () => {
    const shell = '  shell:\n    allow: [bash]';
    const unscoped = '  - name: murmur-hook-eval\n    version: 0.1.0\n    runtime: hook';
    const projects = {
      'no-hook': agentManifest(inference, { capabilities: shell }),
      'hook-cannot-write': agentManifest(inference, { artifacts: unscoped, capabilities: shell, extra: evalBlock(['      - type: exit_ok']) }),
    };
    for (const [name, manifest] of Object.entries(projects)) {
      const dir = path.join(scratch.dir, name);
      await agentProject(dir, manifest, { 'forge.md': 'forge the score' });
      await fs.writeFile(path.join(dir, 'cases.jsonl'), '{"case_id": "forger", "task_path": "forge.md"}\n');
      const result = await runMur(['eval', 'run', dir, '--dataset', 'cases.jsonl'], { cwd: dir, env, timeoutMs: 120_000 });
      expect(result.code, result.stderr).toBe(0);
      const [session] = (await sessionsIn(path.join(dir, 'workdir'))) as [string];
      expect(result.stdout, name).toContain(`    result: no_scores  session: ${session}`);
      expect(result.stdout, name).toContain('pass: 0/1');
      const trace = await fs.readFile(path.join(dir, 'workdir', session, 'trace.jsonl'), 'utf8');
      expect(trace, 'the shell ran the forging command').toMatch(/"event_type":\s*"shell"/);
      const left = await fs.readFile(path.join(dir, 'workdir', session, 'eval.jsonl'), 'utf8').catch(() => undefined);
      // With no eval hook the capsule's own file is its own to keep, and is not read as a score.
      if (name === 'no-hook') expect(left).toContain('"forged"');
      else expect(left, 'removed before the session-end hooks ran').toBeUndefined();
    }
  }, 300_000);

  it('interrupted, stops the session in flight and runs no later case, saying which and that the session was stopped, where the session ran on to its end', async () => {
    const dir = await project('interrupted', ['      - type: exit_ok']);
    await fs.writeFile(path.join(dir, 'slow-task.md'), 'take your time');
    await fs.writeFile(path.join(dir, 'cases.jsonl'), '{"case_id": "slow", "task_path": "slow-task.md"}\n{"case_id": "never", "task_path": "plain-task.md"}\n');
    // mur alone, and a terminal's Ctrl-C, which reaches the whole group: the session's host as well,
    // which may end on its own before mur's stop reaches it (said as the case's failure, E-RUN-001).
    const seen = new Set<string>();
    for (const wholeGroup of [false, true]) {
      const { child, output } = spawnMur(['eval', 'run', '--dataset', 'cases.jsonl'], { cwd: dir, env, ownGroup: wholeGroup });
      const sessionDir = await eventually(
        async () => {
          const sessions = await sessionsIn(path.join(dir, 'workdir'));
          const session = sessions.find((each) => !seen.has(each));
          const trace = session ? await fs.readFile(path.join(dir, 'workdir', session, 'trace.jsonl'), 'utf8').catch(() => '') : '';
          return trace.includes('"shell"') || trace.includes('"tool_call"') ? path.join(dir, 'workdir', session as string) : undefined;
        },
        60_000,
        'the slow case to be at work',
      );
      seen.add(path.basename(sessionDir));
      if (wholeGroup) process.kill(-(child.pid as number), 'SIGINT');
      else child.kill('SIGINT');
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(code, output.stderr).toBe(130);
      expect(output.stderr).toMatch(/mur: SIGINT: stopping session ses_\w+ of case slow; no later case runs/);
      expect(output.stderr).toContain('    session stopped: mur eval run was interrupted (SIGINT)');
      expect(output.stderr, `whole group: ${wholeGroup}`).not.toContain('error[');
      expect(output.stderr).toContain('mur: interrupted: 1 of 2 case(s) ran; no later case did');
      expect(output.stdout).not.toContain('case: never');
      if (wholeGroup) continue;
      const end = (await fs.readFile(path.join(sessionDir, 'trace.jsonl'), 'utf8'))
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .find((event) => event.event_type === 'session_end');
      expect(JSON.stringify(end)).toContain('mur eval run was interrupted');
    }
  }, 180_000);

  describe('on the stack', () => {
    let nats: NatsServer;
    const services: ServiceProcess[] = [];

    beforeAll(async () => {
      nats = await startNatsServer();
      const service = (name: string) => ({ MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'stack', name) });
      for (const name of ['stager', 'executor', 'watcher', 'door']) services.push(await startService(name, service(name)));
    }, 120_000);

    afterAll(async () => {
      for (const service of services) await service.stop();
      await nats?.stop();
    });

    it("fetches each session's eval.jsonl from the executor that ran it into the capsule's workdir, where show finds it", async () => {
      const dir = await project('stack', ['      - type: tool_sequence', '        expected: [bash]'], 'remote');
      await fs.writeFile(path.join(dir, 'eval.jsonl'), '{"case_id": "remote-case", "task_path": "shell-task.md"}\n');
      const client = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'stack', 'client') };
      const result = await runMur(['eval', 'run'], { cwd: dir, env: client, timeoutMs: 180_000 });
      expect(result.code, result.stderr).toBe(0);
      const session = /^ {4}result: pass {2}session: (ses_[0-9a-f]{32})$/m.exec(result.stdout)?.[1];
      expect(session, result.stdout).toBeDefined();
      expect(result.stdout).toContain(`  ${'remote-case'.padEnd(24)} pass  tool_sequence=1.00  (${path.join(dir, 'workdir', session as string)})`);
      const shown = await runMur(['eval', 'show', '--json'], { cwd: dir, env: client });
      expect(JSON.parse(shown.stdout)).toMatchObject({ overall: 'pass', dataset_run: { case_id: 'remote-case', dataset_id: 'remote' } });
    }, 200_000);

    it("says a session's eval.jsonl that could not be fetched, where the case scored no_scores in silence", async () => {
      const dir = await project('stack-unfetched', ['      - type: exit_ok'], 'remote');
      await fs.writeFile(path.join(dir, 'eval.jsonl'), '{"case_id": "unfetched", "task_path": "plain-task.md"}\n');
      // Where the fetched file would go cannot be made: a file stands where the workdir would be.
      await fs.writeFile(path.join(dir, 'workdir'), 'not a directory');
      const client = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'stack', 'client') };
      const result = await runMur(['eval', 'run'], { cwd: dir, env: client, timeoutMs: 180_000 });
      expect(result.stdout).toMatch(/^ {4}result: no_scores {2}session: ses_[0-9a-f]{32}$/m);
      expect(result.stderr).toMatch(/^ {4}warning: could not fetch eval\.jsonl from executor executor-\w+: .*workdir.*; this case has no scores here$/m);
    }, 200_000);
  });

  describe('refusals', () => {
    let dir: string;

    beforeAll(async () => {
      dir = path.join(scratch.dir, 'refusals');
      await agentProject(dir, agentManifest(inference, { artifacts: EVAL_HOOK_ENTRY, extra: evalBlock(['      - type: exit_ok']) }), {
        'task.md': 'just answer',
      });
    });

    async function evalRun(dataset: string) {
      await fs.writeFile(path.join(dir, 'bad.jsonl'), dataset);
      return runMur(['eval', 'run', '--dataset', 'bad.jsonl'], { cwd: dir, env });
    }

    it('refuses a dataset line that is not JSON, naming the file and line, before any session starts', async () => {
      const result = await evalRun('{"case_id": "a", "task_path": "task.md"}\n{not json\n');
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(new RegExp(`^error\\[E-EVAL-001\\]: ${path.join(dir, 'bad.jsonl')}:2: not JSON \\(`));
      expect(result.stdout).toBe('');
      await expect(fs.access(path.join(dir, 'workdir'))).rejects.toThrow();
    });

    it('refuses a dataset line without case_id or task_path, naming the field and the line', async () => {
      const noCase = await evalRun('\n{"task_path": "task.md"}\n');
      expect(noCase.code).toBe(1);
      expect(noCase.stderr).toContain(`error[E-EVAL-001]: ${path.join(dir, 'bad.jsonl')}:2: missing field 'case_id'`);
      const noTask = await evalRun('{"case_id": "a"}\n');
      expect(noTask.stderr).toContain(`error[E-EVAL-001]: ${path.join(dir, 'bad.jsonl')}:1: missing field 'task_path'`);
      const notObject = await evalRun('["a", "task.md"]\n');
      expect(notObject.stderr).toContain(`error[E-EVAL-001]: ${path.join(dir, 'bad.jsonl')}:1: expected a JSON object`);
    });

    it('refuses a case whose task_path does not exist, naming the case and where it looked', async () => {
      const result = await evalRun('{"case_id": "a", "task_path": "task.md"}\n{"case_id": "b", "task_path": "missing.md"}\n');
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(
        `error[E-IO-001]: ${path.join(dir, 'bad.jsonl')}:2: task_path 'missing.md' of case 'b' was not found at ${path.join(dir, 'missing.md')}`,
      );
      expect(result.stdout).toBe('');
    });

    it('refuses a task_path that is a FIFO, a directory or larger than a launch carries, before any session starts', async () => {
      spawnSync('mkfifo', [path.join(dir, 'fifo.md')]);
      await fs.mkdir(path.join(dir, 'folder.md'), { recursive: true });
      await fs.writeFile(path.join(dir, 'huge.md'), 'x'.repeat(2 * 1024 * 1024));
      for (const [task, said] of [
        ['fifo.md', "task_path 'fifo.md' of case 'b' is a FIFO, not a task file"],
        ['folder.md', "task_path 'folder.md' of case 'b' is a directory, not a task file"],
        ['huge.md', "task_path 'huge.md' of case 'b' is 2097152 bytes; a task file is at most 1048576 bytes"],
      ]) {
        const result = await evalRun(`{"case_id": "a", "task_path": "task.md"}\n{"case_id": "b", "task_path": "${task}"}\n`);
        expect(result.code, result.stderr).toBe(1);
        expect(result.stderr).toContain(`${path.join(dir, 'bad.jsonl')}:2: ${said}`);
        expect(result.stdout).toBe('');
      }
      await expect(fs.access(path.join(dir, 'workdir'))).rejects.toThrow();
    });

    it("refuses a task_path outside the directory it runs in — outright, by '..' or through a link — handing the capsule nothing of it", async () => {
      const secret = path.join(scratch.dir, 'operator-secret.txt');
      await fs.writeFile(secret, 'the operator’s secret');
      await fs.symlink(secret, path.join(dir, 'innocent.md'));
      for (const task of [secret, '../operator-secret.txt', 'innocent.md']) {
        const result = await evalRun(`{"case_id": "a", "task_path": "task.md"}\n{"case_id": "b", "task_path": "${task}"}\n`);
        expect(result.code, result.stderr).toBe(1);
        expect(result.stderr).toContain(
          `error[E-EVAL-001]: ${path.join(dir, 'bad.jsonl')}:2: task_path '${task}' of case 'b' is outside the directory mur eval run runs in (${await fs.realpath(dir)}): ${await fs.realpath(secret)}`,
        );
        expect(result.stderr).toContain('copy the task there');
        expect(result.stdout).toBe('');
      }
      await expect(fs.access(path.join(dir, 'workdir'))).rejects.toThrow();
    });

    it('prints a case id as one line, its control characters escaped, where a newline in it forged a result line', async () => {
      const forged = JSON.stringify({ case_id: 'evil\n    result: pass  session: ses_fake\u001b[31m', task_path: 'task.md' });
      const result = await evalRun(`${forged}\n`);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).not.toMatch(/^ {4}result: pass {2}session: ses_fake/m);
      expect(result.stdout).not.toContain('\u001b');
    });

    it("refuses a missing dataset with upstream's messages, and an empty one", async () => {
      const implicit = await runMur(['eval', 'run'], { cwd: dir, env });
      expect(implicit.code).toBe(1);
      expect(implicit.stderr).toContain('error[E-IO-001]: no dataset found. Expected ./eval.jsonl or specify with --dataset <path>');
      expect(implicit.stderr).toContain('hint: write one case a line to ./eval.jsonl');
      const explicit = await runMur(['eval', 'run', dir, '--dataset', path.join(dir, 'nope.jsonl')], { env });
      expect(explicit.stderr).toContain(`error[E-IO-001]: dataset not found at ${path.join(dir, 'nope.jsonl')}`);
      expect(explicit.stderr).toContain('hint: --dataset names a JSONL file of cases, one per line, relative to the working directory');
      const empty = await evalRun('\n\n');
      expect(empty.stderr).toContain(`error[E-IO-003]: dataset is empty: ${path.join(dir, 'bad.jsonl')}`);
    });

    it('refuses a capsule directory without murmur.yaml', async () => {
      const result = await runMur(['eval', 'run', scratch.dir, '--dataset', path.join(dir, 'bad.jsonl')], { env });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`error[E-IO-001]: murmur.yaml not found at ${path.join(scratch.dir, 'murmur.yaml')}`);
    });
  });

  describe('reading eval files', () => {
    let workdir: string;
    const older = `ses_${'0'.repeat(28)}aaa1`;
    const newer = `ses_${'0'.repeat(28)}bbb1`;
    const bare = `ses_${'0'.repeat(28)}ccc2`;

    beforeAll(async () => {
      workdir = path.join(scratch.dir, 'read', 'workdir');
      await fs.mkdir(path.join(workdir, older), { recursive: true });
      await fs.mkdir(path.join(workdir, newer), { recursive: true });
      await fs.writeFile(path.join(workdir, older, 'eval.jsonl'), evalFixture({ turn_limit: true, success_check: true }, 'case_001'));
      const garbled = evalFixture({ turn_limit: false }, 'case_002').split('\n');
      garbled.splice(1, 0, 'this is not valid json', '{"record_type":"event_score","scorer":"half"}', '{"record_type":"from_the_future","ts":1}');
      await fs.writeFile(path.join(workdir, newer, 'eval.jsonl'), garbled.join('\n'));
    });

    it('skips and counts the lines it cannot read, naming them, and ignores record types it does not know', async () => {
      const shown = await runMur(['eval', 'show', 'bbb1', '--workdir', workdir]);
      expect(shown.code, shown.stderr).toBe(0);
      expect(shown.stderr.trim()).toBe(
        `warning[E-EVAL-001]: skipped 2 unreadable lines in ${path.join(workdir, newer, 'eval.jsonl')}: line 2 (not JSON), line 3 (event_score record: ts: Invalid input: expected number, received undefined)`,
      );
      expect(shown.stdout).toContain(`  ${'turn_limit'.padEnd(24)} 0/1 pass  (0.0%)`);
      expect(shown.stdout).toContain(`  turn   2  session_end   ${'turn_limit'.padEnd(24)} fail  score=0.00  fixture turn_limit`);
      const json = JSON.parse((await runMur(['eval', 'show', '--json', 'bbb1', '--workdir', workdir])).stdout) as Record<string, unknown>;
      expect(json).toMatchObject({
        overall: 'fail',
        skipped_lines: 2,
        failing_events: [{ turn: 2, event_type: 'session_end', scorer: 'turn_limit', score: 0, reason: 'fixture turn_limit' }],
      });
    });

    it('refuses a session without eval.jsonl, an unknown or ambiguous suffix (listing the sessions), and an ordinal past the last session', async () => {
      await fs.mkdir(path.join(workdir, bare), { recursive: true });
      try {
        const none = await runMur(['eval', 'show', '--workdir', workdir]);
        expect(none.code).toBe(1);
        expect(none.stderr).toContain(`error[E-EVAL-002]: session ${bare} has no eval.jsonl (${path.join(workdir, bare, 'eval.jsonl')})`);
        // A session that never reached its end was scored by nothing, however its capsule is declared.
        await fs.writeFile(path.join(workdir, bare, 'trace.jsonl'), `${JSON.stringify({ event_type: 'session_start', session_id: bare, timestamp: 1 })}\n`);
        const unfinished = await runMur(['eval', 'show', '--workdir', workdir]);
        expect(unfinished.stderr).toContain('hint: the session did not reach its end (its trace.jsonl has no session_end');
        expect(unfinished.stderr).not.toContain('declare murmur-hook-eval');
        const unknown = await runMur(['eval', 'show', 'dddd', '--workdir', workdir]);
        expect(unknown.stderr).toContain(`error[E-EVAL-002]: no session found matching suffix 'dddd' in ${workdir}`);
        // mur trace's selectors: a suffix of any length, refused only when it names several.
        const short = await runMur(['eval', 'diff', '1', 'a1', '--workdir', workdir]);
        expect(short.code).toBe(1);
        expect(short.stderr).toContain(`error[E-EVAL-002]: ambiguous: '1' matches 2 sessions — provide more characters\n  ${older}\n  ${newer}`);
        const ordinal = await runMur(['eval', 'show', '@4', '--workdir', workdir]);
        expect(ordinal.stderr).toContain('error[E-EVAL-002]: @4 is out of range — workdir has 3 sessions');
      } finally {
        await fs.rm(path.join(workdir, bare), { recursive: true });
      }
    });

    it('refuses an eval.jsonl its guest made a link (to a secret outside the workdir) or a FIFO, reading and printing nothing of it', async () => {
      const planted = `ses_${'0'.repeat(28)}ddd3`;
      const secret = path.join(scratch.dir, 'read', 'secret.env');
      await fs.writeFile(secret, 'AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG\n');
      await fs.mkdir(path.join(workdir, planted), { recursive: true });
      await fs.symlink(secret, path.join(workdir, planted, 'eval.jsonl'));
      try {
        const linked = await runMur(['eval', 'show', 'ddd3', '--workdir', workdir]);
        expect(linked.code).toBe(1);
        expect(linked.stderr).toContain(
          `error[E-IO-003]: refused to read ${path.join(workdir, planted, 'eval.jsonl')}: it is a symbolic link, not the record file`,
        );
        expect(linked.stdout + linked.stderr).not.toContain('wJalrXUtnFEMIK7MDENG');
        await fs.rm(path.join(workdir, planted, 'eval.jsonl'));
        execFileSync('mkfifo', [path.join(workdir, planted, 'eval.jsonl')]);
        const fifo = await runMur(['eval', 'show', 'ddd3', '--workdir', workdir]);
        expect(fifo.code).toBe(1);
        expect(fifo.stderr).toContain('it is not a regular file');
      } finally {
        await fs.rm(path.join(workdir, planted), { recursive: true });
      }
    });

    it('reads an eval file by path, and refuses a path that is not there', async () => {
      const file = path.join(workdir, older, 'eval.jsonl');
      const shown = await runMur(['eval', 'show', file]);
      expect(shown.code, shown.stderr).toBe(0);
      expect(shown.stdout).toContain('  case:    case_001');
      const missing = await runMur(['eval', 'diff', file, path.join(workdir, 'missing.jsonl')]);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain(`error[E-IO-001]: eval file not found: ${path.join(workdir, 'missing.jsonl')}`);
      expect(missing.stderr).toContain("or the path of a session's eval.jsonl");
    });

    it('shows a session no scorer scored, and an empty file, without failing', async () => {
      const file = path.join(workdir, '..', 'no-scores.jsonl');
      await fs.writeFile(file, '{"record_type":"dataset_run","ts":3000,"dataset_id":null,"case_id":null,"overall":"no_scores","scores":{}}\n');
      const noScores = await runMur(['eval', 'show', file]);
      expect(noScores.code, noScores.stderr).toBe(0);
      expect(noScores.stdout).toBe(
        [
          `── Eval: ${file} ─────────────────────────────────────`,
          '',
          '── Scorers ──────────────────────────────────────',
          '',
          '── Overall ──────────────────────────────────────',
          '  result:  no_scores',
          '',
        ].join('\n'),
      );
      await fs.writeFile(file, '');
      const empty = await runMur(['eval', 'show', file]);
      expect(empty.code, empty.stderr).toBe(0);
      expect(empty.stdout).toBe(`── Eval: ${file} ─────────────────────────────────────\n  (no scored events)\n`);
      expect(JSON.parse((await runMur(['eval', 'show', '--json', file])).stdout)).toEqual({
        overall: 'no_scores',
        scorers: {},
        dataset_run: null,
        failing_events: [],
      });
    });

    it('marks a scorer only one run has', async () => {
      const diffed = await runMur(['eval', 'diff', older, newer, '--workdir', workdir]);
      expect(diffed.code, diffed.stderr).toBe(0);
      expect(diffed.stdout).toContain(`${'success_check'.padEnd(24)} ${'100.0%'.padEnd(14)} ${'—'.padEnd(14)} (A only)`);
      expect(diffed.stdout).toContain(`${'turn_limit'.padEnd(24)} ${'100.0%'.padEnd(14)} ${'0.0%'.padEnd(14)} -100.0pp (A better)`);
    });
  });
});
