import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject } from './support/agents.js';
import { probeProject } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type MurResult, runMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * `mur trace show|steps|diff|report` over the traces real sessions leave: an agent capsule run
 * twice with `mur run` in its directory against a scripted model (once using the shell, once
 * answering at once), and a script capsule run in a `--workdir` of its own.
 */

const SHELL_COMMAND = 'echo hello from the shell';
/** How upstream prints a duration: `850ms`, `1.2s`. A sandboxed shell call may take either. */
const DURATION = String.raw`(?:\d+ms|\d+\.\ds)`;

/** A session id as if minted `daysAgo` days ago, ending in `suffix` (UUIDv7: 12 hex digits of milliseconds first). */
function mintedDaysAgo(daysAgo: number, suffix: string): string {
  const stamp = (Date.now() - daysAgo * 86_400_000).toString(16).padStart(12, '0');
  return `ses_${stamp}${'7'.repeat(32 - 12 - suffix.length)}${suffix}`;
}

/** A real session's trace under another session directory, its events saying they are that session's. */
async function copySession(from: string, to: string): Promise<void> {
  await fs.mkdir(to, { recursive: true });
  const text = await fs.readFile(path.join(from, 'trace.jsonl'), 'utf8');
  await fs.writeFile(path.join(to, 'trace.jsonl'), text.replaceAll(path.basename(from), path.basename(to)));
}

describe('mur trace', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let inference: ScriptedInference;
  let project: string;
  /** `<project>/workdir`, where a plain `mur run` in the project leaves its sessions. */
  let workdir: string;
  /** The older agent session: a shell tool call, then the answer (2 turns). */
  let shellSession: string;
  /** The newer agent session: the answer at once (1 turn). */
  let plainSession: string;
  /** A `mur run --workdir` of the probe script capsule: its records are under `.murmur/`. */
  let scriptWorkdir: string;

  const trace = (args: string[], cwd = project): Promise<MurResult> => runMur(['trace', ...args], { cwd, env });
  const lines = (result: MurResult): string[] => result.stdout.split('\n');

  beforeAll(async () => {
    scratch = await tempDir('murmur-trace-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    inference = await startScriptedInference({
      script: (body) => {
        const messages = body.messages as Array<{ content: unknown }>;
        const answered = JSON.stringify(messages.at(-1)?.content).includes('tool_result');
        if (!answered && JSON.stringify(messages[0]?.content).includes('use the shell'))
          return { toolCalls: [{ name: 'sh', input: { command: SHELL_COMMAND } }] };
        return { text: 'done' };
      },
    });
    project = await agentProject(path.join(scratch.dir, 'agent'), agentManifest(inference, { capabilities: '  shell:\n    allow: [sh]' }));
    workdir = path.join(project, 'workdir');
    const launch = async (task: string): Promise<string> => {
      const result = await runMur(['run', '--json', '--task', task], { cwd: project, env });
      expect(result.code, result.stderr).toBe(0);
      return (JSON.parse(result.stdout.trim().split('\n')[0] as string) as { session_id: string }).session_id;
    };
    shellSession = await launch('use the shell, then answer');
    plainSession = await launch('answer at once');

    scriptWorkdir = path.join(scratch.dir, 'script-workdir');
    await fs.mkdir(scriptWorkdir);
    const probe = await probeProject(path.join(scratch.dir, 'probe'));
    const result = await runMur(['run', '--json', '--workdir', scriptWorkdir, '--task', JSON.stringify([{ op: 'print', text: 'hi' }])], { cwd: probe, env });
    expect(result.code, result.stderr).toBe(0);
  });

  afterAll(async () => {
    await inference?.close();
    await scratch?.cleanup();
  });

  describe('show', () => {
    it('summarises the newest session a plain mur run left in the current directory, with no selector and no --workdir', async () => {
      const result = await trace(['show']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toBe('');
      expect(lines(result).slice(0, 15)).toEqual([
        '── Session ──────────────────────────────────────',
        `session:    ${plainSession}`,
        'capsule:    agent v0.1.0',
        'model:      test-model',
        'status:     ok',
        expect.stringMatching(/^duration: {3}(\d+ms|\d+\.\ds)$/),
        '',
        '── Turns ────────────────────────────────────────',
        'count:      1  (max: 10)',
        '',
        '── Tokens ───────────────────────────────────────',
        'input:      11  (avg 11/turn)',
        'output:     7  (avg 7/turn)',
        'total:      18',
        '',
      ]);
      expect(result.stdout).toContain('── Tool calls ───────────────────────────────────\ncount:      0\n');
      expect(result.stdout).toContain('── Compaction ───────────────────────────────────\nfired:      no\n');
    });

    it('counts a session still at work on a task up to its last session_end, and says how much it left out', async () => {
      // A queue agent's trace as its host writes it, read while the second task's tool has run
      // and its session_end is not written yet. The first task's task_end, just after its
      // session_end, is the first task's: 5 events are left out, not 6.
      const id = `ses_${'a'.repeat(32)}`;
      const at = (fields: Record<string, unknown>) => JSON.stringify({ session_id: id, timestamp: 1_796_640_678_000, ...fields });
      const task = (taskId: string) => [
        at({ event_type: 'task_start', task_id: taskId, context_id: `ctx_${'c'.repeat(32)}`, source: 'a2a', message_parts_bytes: 4 }),
        at({ event_type: 'session_start', capsule_name: 'queued', capsule_version: '0.1.0', model: 'm', max_turns: 10 }),
        at({ event_type: 'inference', turn: 0, input_tokens: 11, output_tokens: 7, decision: 'tool_call', tool_name: 'sh', model: 'm' }),
        at({ event_type: 'tool_call', turn: 0, tool_name: 'sh', input: { command: 'ls' }, input_bytes: 15, output_bytes: 2, duration_ms: 5, status: 'ok' }),
        at({ event_type: 'shell', turn: 0, binary: '/usr/bin/sh', command: '-c ls', exit_code: 0, stdout_bytes: 2, stderr_bytes: 0, duration_ms: 4 }),
      ];
      const first = `tsk_${'1'.repeat(32)}`;
      const trace$ = [
        ...task(first),
        at({ event_type: 'inference', turn: 1, input_tokens: 11, output_tokens: 7, decision: 'end_turn', tool_name: null, model: 'm' }),
        at({
          event_type: 'session_end',
          total_turns: 2,
          total_input_tokens: 22,
          total_output_tokens: 14,
          total_tool_calls: 1,
          total_shell_calls: 1,
          duration_ms: 600,
          exit_status: 'ok',
        }),
        at({
          event_type: 'task_end',
          task_id: first,
          exit_status: 'ok',
          duration_ms: 583,
          turns: 2,
          input_tokens: 22,
          output_tokens: 14,
          tool_calls: 1,
          shell_calls: 1,
          reopen_count: 0,
        }),
        ...task(`tsk_${'2'.repeat(32)}`),
      ];
      const dir = path.join(scratch.dir, 'mid-task', id);
      await fs.mkdir(dir, { recursive: true });
      await fs.writeFile(path.join(dir, 'trace.jsonl'), `${trace$.join('\n')}\n`);
      const result = await trace(['show', path.join(dir, 'trace.jsonl')]);
      expect(result.code, result.stderr).toBe(0);
      expect(lines(result)).toContain(
        'status:     ok (as of its last session_end: 5 later events are not counted; the session is still running, or its trace was cut short)',
      );
      expect(result.stdout).toContain('── Tool calls ───────────────────────────────────\ncount:      1  (1 ok, 0 error)  success 100.0%\n');
      expect(result.stdout).toMatch(/exit codes: 1 ok/);
    });

    it('lists each turn’s tool calls with their input, and the shell calls with their exit codes', async () => {
      const result = await trace(['show', '@2']);
      expect(result.code, result.stderr).toBe(0);
      const output = lines(result);
      expect(output).toContain('count:      2  (max: 10)');
      expect(output).toContain('input:      22  (avg 11/turn)');
      expect(output).toContainEqual(expect.stringMatching(/^count: {6}1 {2}\(1 ok, 0 error\) {2}success 100\.0%$/));
      expect(output).toContainEqual(expect.stringMatching(new RegExp(`^  turn 0  sh ${DURATION} ✓  \\{"command":"${SHELL_COMMAND}"\\}$`)));
      expect(output).toContain('  turn 1  end_turn');
      const shell = output.indexOf('── Shell calls ──────────────────────────────────');
      expect(output.slice(shell + 1, shell + 3)).toEqual(['count:      1', 'exit codes: 1 ok']);
    });

    it('finds a session by a case-insensitive suffix, its full id, @N, its trace file or its directory', async () => {
      const selectors = [
        shellSession.slice(-6).toUpperCase(),
        shellSession.slice(-4),
        shellSession,
        '@2',
        path.join(workdir, shellSession, 'trace.jsonl'),
        path.join(workdir, shellSession),
      ];
      for (const selector of selectors) {
        const result = await trace(['show', selector]);
        expect(result.code, `${selector}: ${result.stderr}`).toBe(0);
        expect(lines(result)[1], selector).toBe(`session:    ${shellSession}`);
      }
      expect(lines(await trace(['show', '@1']))[1]).toBe(`session:    ${plainSession}`);
      // From elsewhere, --workdir names the directory holding the sessions.
      expect(lines(await trace(['show', '--workdir', workdir, shellSession.slice(-8)], scratch.dir))[1]).toBe(`session:    ${shellSession}`);
    });

    it('reads the records a mur run --workdir keeps under .murmur/, and says a script capsule has no model', async () => {
      const result = await trace(['show', '--workdir', scriptWorkdir], scratch.dir);
      expect(result.code, result.stderr).toBe(0);
      expect(lines(result).slice(2, 5)).toEqual(['capsule:    probe v0.1.0', 'model:      —', 'status:     ok']);
      expect(result.stdout).toContain('count:      0  (max: —)');
    });
  });

  describe('steps', () => {
    it('prints one row per turn: the decision, the tool, and how long its call took', async () => {
      const result = await trace(['steps', shellSession.slice(-5)]);
      expect(result.code, result.stderr).toBe(0);
      expect(lines(result)).toEqual([
        `Session ${shellSession}  (2 turns)`,
        '',
        expect.stringMatching(new RegExp(`^ {2}0 {2}tool_call {4}sh {10}${DURATION}$`)),
        '  1  end_turn     —           —',
        '',
        '',
      ]);
    });

    it('shows each turn its own call’s duration across tasks, whose turns count from 0 again, and a long tool name apart from it', async () => {
      const id = `ses_${'b'.repeat(32)}`;
      const at = (fields: Record<string, unknown>) => JSON.stringify({ session_id: id, timestamp: 1_796_640_678_000, ...fields });
      const turn = (durationMs: number) => [
        at({ event_type: 'inference', turn: 0, input_tokens: 1, output_tokens: 1, decision: 'tool_call', tool_name: 'delegate-task-longer', model: 'm' }),
        at({
          event_type: 'tool_call',
          turn: 0,
          tool_name: 'delegate-task-longer',
          input: {},
          input_bytes: 2,
          output_bytes: 2,
          duration_ms: durationMs,
          status: 'ok',
        }),
        at({ event_type: 'inference', turn: 1, input_tokens: 1, output_tokens: 1, decision: 'end_turn', tool_name: null, model: 'm' }),
      ];
      const file = path.join(scratch.dir, 'two-tasks', id, 'trace.jsonl');
      await fs.mkdir(path.dirname(file), { recursive: true });
      const start = at({ event_type: 'session_start', capsule_name: 'parent', capsule_version: '0.1.0', model: 'm', max_turns: 10 });
      await fs.writeFile(file, `${[start, ...turn(3_797), start, ...turn(871)].join('\n')}\n`);
      const result = await trace(['steps', file]);
      expect(result.code, result.stderr).toBe(0);
      expect(lines(result).slice(2, 6)).toEqual([
        '  0  tool_call    delegate-task-longer  3.8s',
        '  1  end_turn     —                     —',
        '  0  tool_call    delegate-task-longer  871ms',
        '  1  end_turn     —                     —',
      ]);
    });

    it('adds the start of each turn’s tool input with --verbose', async () => {
      const result = await trace(['steps', '--verbose', '@2']);
      expect(result.code, result.stderr).toBe(0);
      // The duration is padded to five characters, then three spaces: a 3-digit "111ms" leaves exactly three.
      expect(lines(result)[2]).toMatch(new RegExp(`^ {2}0 {2}tool_call {4}sh {10}${DURATION} * {3}"${SHELL_COMMAND}"$`));
      expect(lines(result)[3]).toBe('  1  end_turn     —           —');
    });
  });

  describe('diff', () => {
    it('compares two sessions metric by metric, saying which run each difference favours', async () => {
      const result = await trace(['diff', shellSession.slice(-6), '@1']);
      expect(result.code, result.stderr).toBe(0);
      const output = lines(result);
      expect(output[0]).toBe(`${'Metric'.padEnd(22)} ${'Run A'.padEnd(16)} ${'Run B'.padEnd(16)} Delta`);
      const row = (label: string): string | undefined => output.find((line) => line.startsWith(`${label.padEnd(22)} `));
      expect(row('turns')).toBe(`${'turns'.padEnd(22)} ${'2'.padEnd(16)} ${'1'.padEnd(16)} -1 (B better)`);
      expect(row('input tokens')).toBe(`${'input tokens'.padEnd(22)} ${'22'.padEnd(16)} ${'11'.padEnd(16)} -11 (B better)`);
      expect(row('input/turn (avg)')).toBe(`${'input/turn (avg)'.padEnd(22)} ${'11'.padEnd(16)} ${'11'.padEnd(16)} =`);
      expect(row('tool success rate')).toBe(`${'tool success rate'.padEnd(22)} ${'100.0%'.padEnd(16)} ${'—'.padEnd(16)} —`);
      expect(row('shell calls')).toBe(`${'shell calls'.padEnd(22)} ${'1'.padEnd(16)} ${'0'.padEnd(16)} -1 (B better)`);
      expect(row('exit status')).toBe(`${'exit status'.padEnd(22)} ${'ok'.padEnd(16)} ${'ok'.padEnd(16)} —`);
    });

    it('compares the two newest sessions when given none, and refuses one alone', async () => {
      const bare = await trace(['diff']);
      expect(bare.code, bare.stderr).toBe(0);
      const explicit = await trace(['diff', '@2', '@1']);
      expect(bare.stdout).toBe(explicit.stdout);
      const one = await trace(['diff', '@1']);
      // A command line mur cannot take as written, as `diff @1 @2 @3` is: a usage error.
      expect(one.code).toBe(2);
      expect(one.stderr).toContain('error[E-TRC-002]: mur trace diff expects 0 or 2 arguments, got 1');
    });

    it('names which argument it could not resolve, both when both fail', async () => {
      const result = await trace(['diff', '@9', 'zzzz']);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('error[E-TRC-002]: before: @9 is out of range — workdir has 2 sessions');
      expect(result.stderr).toContain(`after: no session found matching suffix 'zzzz' in ${workdir}`);
    });
  });

  describe('report', () => {
    /** A workdir of copies: the two real sessions, one minted two days ago, one with an empty trace. */
    let history: string;
    let oldSession: string;

    beforeAll(async () => {
      history = path.join(scratch.dir, 'history');
      await copySession(path.join(workdir, shellSession), path.join(history, shellSession));
      await copySession(path.join(workdir, plainSession), path.join(history, plainSession));
      oldSession = mintedDaysAgo(2, plainSession.slice(-8));
      await copySession(path.join(workdir, shellSession), path.join(history, oldSession));
      const emptySession = mintedDaysAgo(3, 'e0e0e0e0');
      await fs.mkdir(path.join(history, emptySession));
      await fs.writeFile(path.join(history, emptySession, 'trace.jsonl'), '');
    });

    const sessionsLine = (result: MurResult): string | undefined => lines(result).find((line) => line.startsWith('Sessions: '));

    it('aggregates every complete session of the workdir, and notes the incomplete ones it skipped', async () => {
      const result = await trace(['report', '--workdir', history], scratch.dir);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toContain('note: skipped 1 incomplete session(s)');
      expect(sessionsLine(result)).toBe(`Sessions: 3  (${history})`);
      const output = lines(result);
      expect(output.filter((line) => line.startsWith('Session ses_'))).toEqual([
        expect.stringMatching(new RegExp(`^Session ses_\\.\\.\\.${oldSession.slice(-8)}  \\S+  2 turns$`)),
        expect.stringMatching(new RegExp(`^Session ses_\\.\\.\\.${shellSession.slice(-8)}  \\S+  2 turns$`)),
        expect.stringMatching(new RegExp(`^Session ses_\\.\\.\\.${plainSession.slice(-8)}  \\S+  1 turn$`)),
      ]);
      expect(output).toContainEqual(expect.stringMatching(/^turns {18}1\.7 {12}0\.5 {12}1\.0 {12}2\.0$/));
      expect(output).toContain(`  ${'ok'.padEnd(24)} 3  (100.0%)`);
    });

    it('reports the rest when one session’s trace cannot be read (a link its guest planted), saying which it skipped', async () => {
      const planted = mintedDaysAgo(1, 'f0f0f0f0');
      await fs.mkdir(path.join(history, planted));
      await fs.symlink(path.join(history, shellSession, 'trace.jsonl'), path.join(history, planted, 'trace.jsonl'));
      try {
        const result = await trace(['report', '--workdir', history], scratch.dir);
        expect(result.code, result.stderr).toBe(0);
        expect(result.stderr).toContain(`warning: skipped ${path.join(history, planted, 'trace.jsonl')}: refused to read`);
        expect(sessionsLine(result)).toBe(`Sessions: 3  (${history})`);
      } finally {
        await fs.rm(path.join(history, planted), { recursive: true });
      }
    });

    it('narrows to the newest N with --last, and to those minted within a while with --since', async () => {
      const last = await trace(['report', '--workdir', history, '--last', '1'], scratch.dir);
      expect(last.code, last.stderr).toBe(0);
      expect(sessionsLine(last)).toBe(`Sessions: 1  (${history})`);
      expect(last.stdout).toContain(`Session ses_...${plainSession.slice(-8)}`);
      const recent = await trace(['report', '--workdir', history, '--since', '1d'], scratch.dir);
      expect(recent.code, recent.stderr).toBe(0);
      expect(sessionsLine(recent)).toBe(`Sessions: 2  (${history})`);
      // The old one shares its last characters with plainSession (as the rows show them): counted, not read.
      expect(recent.stdout.split('\n').filter((line) => line.startsWith('Session ses_'))).toHaveLength(2);
      const minutes = await trace(['report', '--workdir', history, '--since', '600m', '--last', '5'], scratch.dir);
      expect(sessionsLine(minutes)).toBe(`Sessions: 2  (${history})`);
    });

    it('says, when --since reaches back to no session, which --since would reach the newest one, and that one does', async () => {
      const aged = path.join(scratch.dir, 'aged');
      const threeDaysOld = mintedDaysAgo(3, 'a9e0a9e0');
      await copySession(path.join(workdir, plainSession), path.join(aged, threeDaysOld));
      const none = await trace(['report', '--workdir', aged, '--since', '2d'], scratch.dir);
      expect(none.code).toBe(1);
      expect(none.stderr).toContain(`error[E-TRC-002]: no sessions matched --since 2d in workdir at ${aged}`);
      // Three days and a minute are 73 hours: more than two days' worth of hours is counted in days.
      expect(none.stderr).toContain('hint: its newest session started before that: --since 4d takes it in, or choose with --last N');
      const suggested = await trace(['report', '--workdir', aged, '--since', '4d'], scratch.dir);
      expect(suggested.code, suggested.stderr).toBe(0);
      expect(sessionsLine(suggested)).toBe(`Sessions: 1  (${aged})`);
    });

    it('says how a report of no complete session can become one', async () => {
      const unfinished = path.join(scratch.dir, 'unfinished');
      const running = path.join(unfinished, mintedDaysAgo(0, 'b1b1b1b1'));
      await fs.mkdir(running, { recursive: true });
      const events = (await fs.readFile(path.join(workdir, plainSession, 'trace.jsonl'), 'utf8')).trimEnd().split('\n');
      await fs.writeFile(path.join(running, 'trace.jsonl'), `${events.filter((line) => !line.includes('"session_end"')).join('\n')}\n`);
      const result = await trace(['report', '--workdir', unfinished], scratch.dir);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('error[E-TRC-001]: no complete sessions to report — all traces are empty or incomplete');
      expect(result.stderr).toContain("hint: a session's trace is complete once it has ended");
    });

    it('takes explicit sessions, but not together with --last or --since', async () => {
      const named = await trace(['report', '@1', shellSession.slice(-6)]);
      expect(named.code, named.stderr).toBe(0);
      expect(sessionsLine(named)).toBe(`Sessions: 2  (${workdir})`);
      const mixed = await trace(['report', '@1', '--since', '2h']);
      expect(mixed.code).toBe(2);
      expect(mixed.stderr).toContain('error[E-TRC-002]: --since cannot be combined with explicit session arguments');
    });

    it('refuses a --since it cannot read, and --last 0, as usage errors (exit 2)', async () => {
      const since = await trace(['report', '--since', '5y']);
      expect(since.code).toBe(2);
      expect(since.stderr).toContain("error[E-TRC-002]: unrecognised --since format '5y' — expected <N>m, <N>h, or <N>d");
      const last = await trace(['report', '--last', '0']);
      // As `--last x`, which commander refuses: the same misuse, the same exit.
      expect(last.code).toBe(2);
      expect(last.stderr).toContain('error[E-TRC-002]: --last must be at least 1');
    });

    it('refuses an ambiguous suffix, listing the sessions it matches', async () => {
      const suffix = plainSession.slice(-8);
      const result = await trace(['show', '--workdir', history, suffix], scratch.dir);
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(
        `error[E-TRC-002]: ambiguous: '${suffix}' matches 2 sessions — provide more characters\n  ${oldSession}\n  ${plainSession}\n`,
      );
    });
  });

  describe('refusals', () => {
    it('refuses a selector that matches nothing with E-TRC-002, listing the sessions there are', async () => {
      const candidates = `\n  ${plainSession}\n  ${shellSession}\n  hint: `;
      const missing = `ses_${'0'.repeat(32)}`;
      for (const [selector, message] of [
        ['zzzz', `no session found matching suffix 'zzzz' in ${workdir}`],
        [missing, `session ${missing} not found in ${workdir}`],
        ['@3', '@3 is out of range — workdir has 2 sessions'],
      ] as const) {
        const result = await trace(['show', selector]);
        expect(result.code, selector).toBe(1);
        expect(result.stdout, selector).toBe('');
        expect(result.stderr, selector).toContain(`error[E-TRC-002]: ${message}${candidates}`);
      }
      // A full id found nowhere here may be a stack's session, whose records are on its executor.
      expect((await trace(['show', missing])).stderr).toContain(
        `hint: a session a stack ran keeps its records on its executor: 'mur files ${missing} trace.jsonl --out <dir>'`,
      );
    });

    it('does not look for sessions in a .murmur that is a link (its guest may have made it one), only in a .murmur that is a directory', async () => {
      const elsewhere = path.join(scratch.dir, 'elsewhere');
      await copySession(path.join(workdir, plainSession), path.join(elsewhere, plainSession));
      const linked = path.join(scratch.dir, 'linked-workdir');
      await fs.mkdir(linked);
      await fs.symlink(elsewhere, path.join(linked, '.murmur'));
      const shown = await trace(['show', '--workdir', linked], scratch.dir);
      expect(shown.code).toBe(1);
      expect(shown.stderr).toContain(`error[E-TRC-002]: no sessions found in workdir at ${linked}`);
      await fs.rm(path.join(linked, '.murmur'));
      await copySession(path.join(workdir, plainSession), path.join(linked, '.murmur', plainSession));
      expect((await trace(['show', '--workdir', linked], scratch.dir)).code).toBe(0);
    });

    it("reads a --workdir's sessions from its .murmur alone: a session directory at its top is its guest's making, whatever it is named", async () => {
      const [real] = (await fs.readdir(path.join(scriptWorkdir, '.murmur'))).filter((name) => name.startsWith('ses_'));
      // What the script session's guest could have written at the top of its workdir: its own
      // session's directory with another capsule's trace, and a session newer than any.
      const forgedNewest = `ses_${'f'.repeat(32)}`;
      await copySession(path.join(workdir, plainSession), path.join(scriptWorkdir, real as string));
      await copySession(path.join(workdir, plainSession), path.join(scriptWorkdir, forgedNewest));
      try {
        for (const selector of [real as string, (real as string).slice(-8), '@1']) {
          const result = await trace(['show', '--workdir', scriptWorkdir, selector], scratch.dir);
          expect(result.code, result.stderr).toBe(0);
          expect(lines(result).slice(1, 3), selector).toEqual([`session:    ${real}`, 'capsule:    probe v0.1.0']);
        }
        const forged = await trace(['show', '--workdir', scriptWorkdir, forgedNewest], scratch.dir);
        expect(forged.code).toBe(1);
        // Said to be there and passed over, with why and how to read one anyway.
        expect(forged.stderr).toContain(
          `error[E-TRC-002]: session ${forgedNewest} not found in ${scriptWorkdir}; 2 session directories at its top are not read: ${scriptWorkdir} holds a .murmur, so it was given to 'mur run --workdir'`,
        );
      } finally {
        await fs.rm(path.join(scriptWorkdir, real as string), { recursive: true });
        await fs.rm(path.join(scriptWorkdir, forgedNewest), { recursive: true });
      }
    });

    it('says so when the workdir holds no sessions, or a report’s workdir does not exist', async () => {
      const empty = path.join(scratch.dir, 'empty');
      await fs.mkdir(empty);
      const show = await trace(['show', '--workdir', empty], scratch.dir);
      expect(show.code).toBe(1);
      expect(show.stderr).toContain(`error[E-TRC-002]: no sessions found in workdir at ${empty}`);
      const report = await trace(['report', '--workdir', path.join(scratch.dir, 'nowhere')], scratch.dir);
      expect(report.code).toBe(1);
      expect(report.stderr).toContain(`error[E-IO-001]: workdir not found: ${path.join(scratch.dir, 'nowhere')}`);
      const file = await trace(['show', path.join(scratch.dir, 'nowhere', 'trace.jsonl')], scratch.dir);
      expect(file.code).toBe(1);
      expect(file.stderr).toContain(`error[E-IO-001]: trace file not found: ${path.join(scratch.dir, 'nowhere', 'trace.jsonl')}`);
      // A path to nothing may have been meant as a session: the hint names every way to give one.
      expect(file.stderr).toContain(
        "hint: give the last characters of a session id (4 or more rarely match two), a full id, @N (@1 = the newest), or the path of a session's trace.jsonl",
      );
      // A directory that is no session's is said to be none, with the same ways to give one.
      const notASession = await trace(['show', empty], scratch.dir);
      expect(notASession.code).toBe(1);
      expect(notASession.stderr).toContain(`error[E-IO-001]: ${empty} is not a session's directory: it holds no trace.jsonl`);
      expect(notASession.stderr).toContain('hint: give the last characters of a session id');
    });

    it('skips and counts garbled and cut-off lines, ignores unknown events and keys, and prints the rest as if they were not there', async () => {
      const original = path.join(workdir, shellSession, 'trace.jsonl');
      const [first, ...rest] = (await fs.readFile(original, 'utf8')).trimEnd().split('\n') as [string, ...string[]];
      const garbled = path.join(scratch.dir, 'garbled.jsonl');
      const annotated = JSON.stringify({ ...JSON.parse(first), a_key_from_the_future: { nested: true } });
      await fs.writeFile(
        garbled,
        [
          annotated,
          'THIS IS NOT JSON',
          JSON.stringify({ event_type: 'an_event_from_the_future', session_id: shellSession, timestamp: 1 }),
          JSON.stringify({ event_type: 'tool_call', tool_name: 'sh' }),
          ...rest,
          (rest.at(-1) as string).slice(0, 40),
        ].join('\n'),
      );
      const intact = await trace(['show', original]);
      const result = await trace(['show', garbled]);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toBe(intact.stdout);
      expect(result.stderr).toContain(`warning: ${garbled}: skipped 3 unreadable lines (line 2: not JSON; line 4: tool_call: `);
      expect(result.stderr).toContain(`; line ${rest.length + 5}: cut off (no newline at its end))`);
      const steps = await trace(['steps', garbled]);
      expect(steps.stdout).toBe((await trace(['steps', original])).stdout);
    });

    it('shows a trace whose tool input is nested thousands deep, and one with tens of thousands of calls in a turn, in a line each and at once', async () => {
      const original = path.join(workdir, shellSession, 'trace.jsonl');
      const events = (await fs.readFile(original, 'utf8')).trimEnd().split('\n');
      const callAt = events.findIndex((line) => line.includes('"event_type":"tool_call"'));
      const call = JSON.parse(events[callAt] as string) as Record<string, unknown>;
      // 5 000 arrays deep: JSON.parse takes it, and mur used to overflow its stack writing it back.
      const deep = JSON.stringify({ ...call, input: 'DEEP' }).replace('"DEEP"', `${'['.repeat(5_000)}"at the bottom"${']'.repeat(5_000)}`);
      const nested = path.join(scratch.dir, 'nested.jsonl');
      await fs.writeFile(nested, `${[...events.slice(0, callAt), deep, ...events.slice(callAt + 1)].join('\n')}\n`);
      const shown = await trace(['show', nested]);
      expect(shown.code, shown.stderr).toBe(0);
      expect(shown.stdout).toContain(`  ${'['.repeat(120)}…`);
      const steps = await trace(['steps', '--verbose', nested]);
      expect(steps.code, steps.stderr).toBe(0);
      expect(steps.stdout).toContain('"at the bottom"');
      // 60 000 calls in one turn: each used to copy the turn's list so far.
      const many = path.join(scratch.dir, 'many.jsonl');
      await fs.writeFile(
        many,
        `${[...events.slice(0, callAt), ...Array.from({ length: 60_000 }, () => events[callAt]), ...events.slice(callAt + 1)].join('\n')}\n`,
      );
      const crowded = await trace(['show', many]);
      expect(crowded.code, crowded.stderr).toBe(0);
      expect(crowded.stdout.split('{"command":"echo hello from the shell"}').length - 1).toBe(60_000);
    }, 60_000);

    it('prints a tool name and input that hold line breaks on their one line, escaped, where they added lines of their choosing', async () => {
      const original = path.join(workdir, shellSession, 'trace.jsonl');
      const text = await fs.readFile(original, 'utf8');
      const forged = path.join(scratch.dir, 'forged-names.jsonl');
      // A model may call a tool by any name, and give it any input: the trace records what it asked.
      await fs.writeFile(forged, text.replaceAll('"sh"', JSON.stringify('sh\nstatus:  ok')).replaceAll('echo hello', 'echo\\n[completed]'));
      for (const command of [['show'], ['steps', '--verbose']]) {
        const result = await trace([...command, forged]);
        expect(result.code, result.stderr).toBe(0);
        const printed = lines(result);
        expect(
          printed.some((line) => line.startsWith('status:  ok') || line.startsWith('[completed]')),
          result.stdout,
        ).toBe(false);
        expect(printed.length, command.join(' ')).toBe(lines(await trace([...command, original])).length);
        expect(result.stdout).toContain('sh\\nstatus:  ok');
      }
    });

    it('refuses a trace with no session_end (a session still running) with E-TRC-001', async () => {
      const original = path.join(workdir, plainSession, 'trace.jsonl');
      const events = (await fs.readFile(original, 'utf8')).trimEnd().split('\n');
      const running = path.join(scratch.dir, 'running.jsonl');
      await fs.writeFile(running, `${events.filter((line) => !line.includes('"session_end"')).join('\n')}\n`);
      const result = await trace(['show', running]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`error[E-TRC-001]: ${running}: no session_end event found`);
      expect(result.stderr).toContain("hint: the session is still running, or its mur was killed before the trace could be closed ('mur ps' says which)");
    });

    it('refuses a trace with no session_start (an agent stopped before its first task) saying why that is', async () => {
      const idle = path.join(scratch.dir, 'idle.jsonl');
      await fs.writeFile(
        idle,
        `${JSON.stringify({ event_type: 'session_end', session_id: 'ses_idle', timestamp: 1, total_turns: 0, total_input_tokens: 0, total_output_tokens: 0, total_tool_calls: 0, total_shell_calls: 0, duration_ms: 5, exit_status: 'failed' })}\n`,
      );
      // steps reads a trace still being written as it is, but one that never started names no session.
      for (const command of ['show', 'steps']) {
        const result = await trace([command, idle]);
        expect(result.code, command).toBe(1);
        expect(result.stderr).toContain(`error[E-TRC-001]: ${idle}: no session_start event found`);
        expect(result.stderr).toContain('hint: an agent writes its session_start when a task begins: this session ran no task');
        expect(result.stdout).toBe('');
      }
    });
  });
});
