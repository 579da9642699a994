import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import {
  type DatasetRunRecord,
  EVAL_FILE,
  EVAL_HOOK,
  type EvalOverall,
  type LaunchReply,
  MurmurError,
  type SessionEnded,
  type StagedPlan,
  commands,
  newSessionId,
  parseCapsuleManifest,
} from '@murmur/shared';
import { pinFirstRun } from '@murmur/shared/artifacts';
import { environmentWithEnvFile } from '../env-file.js';
import { readDataset } from '../eval-dataset.js';
import { type EvalFileContents, overallOf, readEvalFile, selectEvalFile, skippedWarning, tallyByScorer } from '../eval-records.js';
import { type Output, oneLine } from '../output.js';
import { type Runtime, openRuntime } from '../runtime.js';
import { fetchSessionFile } from '../session-files.js';
import { stageThroughBus } from '../staging.js';
import { launchEnvironment, sessionDoor, watchSessionEnd } from '../session-launch.js';
import { readManifestTextSync } from '@murmur/shared/node';
import { STOP_SIGNALS } from '../stop-signals.js';

/**
 * `mur eval show|diff|run`: reading the scores `murmur-hook-eval` writes to a session's
 * `eval.jsonl`, comparing two sessions', and running a capsule once per case of a dataset.
 * Layouts, section rules and column widths are upstream's, character for character.
 */

const SECTION = {
  scorers: '── Scorers ──────────────────────────────────────',
  overall: '── Overall ──────────────────────────────────────',
  scoreSummary: '── Score summary ────────────────────────────────',
  worstEvents: '── Worst events ─────────────────────────────────',
  summary: '── Summary ──────────────────────────────────────',
};
const NAME_COLUMN = 24;
const RATE_COLUMN = 14;
const DELTA_RULE = 26;
/** How many failing events `show` lists. */
const WORST_EVENTS = 5;

/** `./workdir` unless `--workdir` names another directory of sessions. */
function sessionsDir(workdir: string | undefined): string {
  return path.resolve(workdir ?? 'workdir');
}

async function readSelected(selector: string | undefined, workdir: string | undefined, output: Output): Promise<EvalFileContents> {
  const contents = await readEvalFile(await selectEvalFile(selector, sessionsDir(workdir)));
  const warning = skippedWarning(contents);
  if (warning) output.err(warning);
  return contents;
}

function percent(tally: { pass: number; fail: number }): string {
  const total = tally.pass + tally.fail;
  return total === 0 ? '—' : `${((100 * tally.pass) / total).toFixed(1)}%`;
}

// ── show ────────────────────────────────────────────────────────────────────

function showText(contents: EvalFileContents): string[] {
  const lines = [`── Eval: ${contents.file} ─────────────────────────────────────`];
  const tallies = tallyByScorer(contents);
  const run = contents.datasetRun;
  if (tallies.size === 0 && run === undefined) return [...lines, '  (no scored events)'];
  lines.push('', SECTION.scorers);
  for (const [name, tally] of tallies) {
    lines.push(`  ${name.padEnd(NAME_COLUMN)} ${tally.pass}/${tally.pass + tally.fail} pass  (${percent(tally)})`);
  }
  lines.push('', SECTION.overall, `  result:  ${overallOf(contents)}`);
  if (run) {
    if (run.case_id) lines.push(`  case:    ${run.case_id}`);
    if (run.dataset_id) lines.push(`  dataset: ${run.dataset_id}`);
    const names = Object.keys(run.scores).sort();
    if (names.length > 0) {
      lines.push('', SECTION.scoreSummary);
      for (const name of names) lines.push(`  ${name.padEnd(NAME_COLUMN)} ${(run.scores[name] as number).toFixed(4)}`);
    }
  }
  if (contents.eventScores.length > 0) {
    lines.push('', SECTION.worstEvents);
    const failing = failingEvents(contents);
    for (const score of failing.slice(0, WORST_EVENTS)) {
      lines.push(
        `  turn ${String(score.turn).padStart(3)}  ${score.event_type.padEnd(12)}  ${score.scorer.padEnd(NAME_COLUMN)} ${score.result}  score=${(score.score ?? 0).toFixed(2)}${score.reason ? `  ${score.reason}` : ''}`,
      );
    }
    if (failing.length === 0) lines.push('  (no failing events)');
  }
  return lines;
}

/** The events a scorer failed, by scorer and then turn: what `show` lists, and why each failed where the hook said. */
function failingEvents(contents: EvalFileContents): EvalFileContents['eventScores'] {
  return contents.eventScores
    .filter((score) => score.result === 'fail')
    .sort((left, right) => (left.scorer < right.scorer ? -1 : left.scorer > right.scorer ? 1 : left.turn - right.turn));
}

/**
 * Upstream's `--json` document: the verdict, each scorer's tally, and the `dataset_run` summary as
 * recorded (null without one); and, as the text lists them, the failing events (every one, with
 * its reason), which a script judging a run reads first.
 */
function showJson(contents: EvalFileContents): Record<string, unknown> {
  const scorers: Record<string, unknown> = {};
  for (const [name, tally] of tallyByScorer(contents)) {
    const total = tally.pass + tally.fail;
    scorers[name] = { pass: tally.pass, fail: tally.fail, total, pass_rate: total > 0 ? tally.pass / total : 0 };
  }
  const run = contents.datasetRun;
  const datasetRun = run ? { ts: run.ts, dataset_id: run.dataset_id ?? null, case_id: run.case_id ?? null, overall: run.overall, scores: run.scores } : null;
  return {
    overall: overallOf(contents),
    scorers,
    dataset_run: datasetRun,
    failing_events: failingEvents(contents).map(({ turn, event_type, scorer, score, reason }) => ({
      turn,
      event_type,
      scorer,
      score: score ?? null,
      reason: reason ?? null,
    })),
    ...(contents.skipped.length > 0 ? { skipped_lines: contents.skipped.length } : {}),
  };
}

export async function evalShowCommand(selector: string | undefined, options: { workdir?: string; json?: boolean }, output: Output): Promise<void> {
  const contents = await readSelected(selector, options.workdir, output);
  if (options.json) output.out(JSON.stringify(showJson(contents), null, 2));
  else for (const line of showText(contents)) output.out(oneLine(line));
}

// ── diff ────────────────────────────────────────────────────────────────────

function delta(a: { pass: number; fail: number } | undefined, b: { pass: number; fail: number } | undefined): string {
  if (a === undefined && b === undefined) return '—';
  if (a === undefined) return '(B only)';
  if (b === undefined) return '(A only)';
  const totalA = a.pass + a.fail;
  const totalB = b.pass + b.fail;
  if (totalA === 0 || totalB === 0) return '—';
  const difference = b.pass / totalB - a.pass / totalA;
  if (Math.abs(difference) < 0.001) return '=';
  const points = `${difference > 0 ? '+' : ''}${(difference * 100).toFixed(1)}pp`;
  return `${points} (${difference > 0 ? 'B' : 'A'} better)`;
}

export async function evalDiffCommand(a: string, b: string, options: { workdir?: string }, output: Output): Promise<void> {
  const runA = await readSelected(a, options.workdir, output);
  const runB = await readSelected(b, options.workdir, output);
  const talliesA = tallyByScorer(runA);
  const talliesB = tallyByScorer(runB);
  const row = (first: string, second: string, third: string, last: string): string =>
    `${first.padEnd(NAME_COLUMN)} ${second.padEnd(RATE_COLUMN)} ${third.padEnd(RATE_COLUMN)} ${last}`;
  output.out(row('Scorer', 'Run A', 'Run B', 'Delta'));
  output.out(['─'.repeat(NAME_COLUMN), '─'.repeat(RATE_COLUMN), '─'.repeat(RATE_COLUMN), '─'.repeat(DELTA_RULE)].join(' '));
  const names = [...new Set([...talliesA.keys(), ...talliesB.keys()])].sort();
  for (const name of names) {
    const tallyA = talliesA.get(name);
    const tallyB = talliesB.get(name);
    output.out(oneLine(row(name, percent(tallyA ?? { pass: 0, fail: 0 }), percent(tallyB ?? { pass: 0, fail: 0 }), delta(tallyA, tallyB))));
  }
  output.out('');
  // Upstream pads the last column too.
  output.out(`${'overall'.padEnd(NAME_COLUMN)} ${overallOf(runA).padEnd(RATE_COLUMN)} ${overallOf(runB).padEnd(RATE_COLUMN)}`);
}

// ── run ─────────────────────────────────────────────────────────────────────

/** One case's outcome, as the summary prints it. */
interface CaseOutcome {
  caseId: string;
  result: EvalOverall | 'stage_failed';
  /** The case could not be staged, or its session launched: it has no score to report. */
  didNotRun?: boolean;
  /** The session's directory on this machine (where its eval.jsonl was read); the capsule directory's workdir when it never started. */
  workdir: string;
  datasetRun: DatasetRunRecord | undefined;
}

/** A failure's first line, for the indented per-case notes. */
function failureText(error: unknown): string {
  return error instanceof MurmurError ? `error[${error.code}]: ${error.message.split('\n')[0]}` : error instanceof Error ? error.message : String(error);
}

/** `mur eval run`'s capsule: a directory holding murmur.yaml, or the manifest file itself. */
function manifestOf(capsule: string | undefined): string {
  const given = path.resolve(capsule ?? '.');
  const manifest = existsSync(given) && statSync(given).isFile() ? given : path.join(given, 'murmur.yaml');
  if (!existsSync(manifest)) {
    throw new MurmurError('E-IO-001', `murmur.yaml not found at ${manifest}`, {
      path: manifest,
      hint: 'mur eval run <capsule-dir> --dataset <dataset.jsonl>: the capsule directory holds murmur.yaml',
    });
  }
  return manifest;
}

interface CaseContext {
  runtime: Runtime;
  projectDir: string;
  env: Record<string, string>;
  datasetId: string | undefined;
  lockPath: string;
  /** The capsule's staging, shared by every case: the same project, so the same plan. */
  staging: Promise<{ plan: StagedPlan } | { error: unknown }> | undefined;
  /** The run was interrupted: its session in flight is stopped, and no later case runs. */
  interrupted: NodeJS.Signals | undefined;
  /** The session in flight, which an interrupt stops. */
  current: { sessionId: string; caseId: string } | undefined;
}

/** Asks the session's executor to stop it, as an interrupted `mur run` does; one already gone is left be. */
async function stopInterrupted(runtime: Runtime, sessionId: string): Promise<void> {
  await runtime.bus.request(commands.stopSession.at(sessionId), { reason: 'mur eval run was interrupted' }, { timeoutMs: 10_000 }).catch(() => undefined);
}

/**
 * The capsule staged once for the whole dataset: its warnings said once, and — when it has no
 * lock yet — the lock written from what it resolved, so that the run is reproducible as one.
 */
function stagedOnce(context: CaseContext, output: Output): Promise<{ plan: StagedPlan } | { error: unknown }> {
  context.staging ??= (async () => {
    try {
      const plan = await stageThroughBus(
        context.runtime.bus,
        { kind: 'directory', dir: context.projectDir },
        { env_names: Object.keys(context.env), honour_pins: true },
      );
      for (const warning of plan.warnings) output.warn(warning);
      if (plan.lock.status === 'absent' && plan.lock.entries.length > 0) await pinFirstRun(context.lockPath, plan.lock.entries);
      return { plan };
    } catch (error) {
      return { error };
    }
  })();
  return context.staging;
}

/** Launches one staged session with the case's task and ids, and waits for it to end. */
async function runSession(
  context: CaseContext,
  plan: StagedPlan,
  caseId: string,
  task: string,
  sessionId: string,
): Promise<{ launched: LaunchReply; end: SessionEnded }> {
  const { runtime } = context;
  const { ended, subscription } = watchSessionEnd(runtime.bus, sessionId);
  try {
    await runtime.bus.flush();
    const url = (await sessionDoor(runtime, plan, sessionId))?.url;
    context.current = { sessionId, caseId };
    const launched = await runtime.bus.request(
      commands.launch,
      {
        session_id: sessionId,
        plan,
        ...(runtime.inProcess ? { default_workdir_base: context.projectDir } : {}),
        task,
        env: launchEnvironment(plan, context.env),
        ...(url ? { url } : {}),
        eval_case: { case_id: caseId, ...(context.datasetId ? { dataset_id: context.datasetId } : {}) },
      },
      { timeoutMs: 60_000 },
    );
    // Interrupted while it was being launched, when there was nothing yet to stop.
    if (context.interrupted) await stopInterrupted(runtime, sessionId);
    return { launched, end: await ended };
  } finally {
    context.current = undefined;
    subscription.unsubscribe();
  }
}

/**
 * The session's eval.jsonl on this machine: where it is in-process, fetched from its executor on
 * the stack. A fetch that fails is said: the case would otherwise score no_scores with nothing to
 * tell it from a session that wrote no scores.
 */
async function localEvalFile(runtime: Runtime, launched: LaunchReply, projectDir: string, output: Output): Promise<string | undefined> {
  if (runtime.inProcess) return path.join(launched.workdir, EVAL_FILE);
  const local = path.join(projectDir, 'workdir', launched.session_id, EVAL_FILE);
  const fetched = await fetchSessionFile(runtime.bus, launched, EVAL_FILE, local).catch((error: unknown) => {
    output.err(`    warning: could not fetch ${EVAL_FILE} from executor ${launched.executor_id}: ${failureText(error)}; this case has no scores here`);
    return false;
  });
  return fetched ? local : undefined;
}

async function runCase(context: CaseContext, caseId: string, task: string, output: Output): Promise<CaseOutcome> {
  const { runtime, projectDir } = context;
  output.out(oneLine(`  case: ${caseId}`));
  const staged = await stagedOnce(context, output);
  if ('error' in staged) {
    output.err(`    stage failed: ${failureText(staged.error)}`);
    return { caseId, result: 'stage_failed', workdir: path.join(projectDir, 'workdir'), datasetRun: undefined, didNotRun: true };
  }
  const { plan } = staged;
  let session: { launched: LaunchReply; end: SessionEnded };
  const sessionId = newSessionId();
  try {
    session = await runSession(context, plan, caseId, task, sessionId);
  } catch (error) {
    output.err(`    session failed: ${failureText(error)}`);
    // A launch stopped while under way (an interrupt) had made the session, and its records: it is
    // named, as any other case's is, rather than said to be none.
    const made = runtime.inProcess ? path.join(projectDir, 'workdir', sessionId) : undefined;
    const exists = made !== undefined ? existsSync(made) : error instanceof MurmurError && error.code === 'E-SES-005';
    output.out(`    result: no_scores  session: ${exists ? sessionId : 'n/a'}`);
    return {
      caseId,
      result: 'no_scores',
      workdir: made !== undefined && exists ? made : path.join(projectDir, 'workdir'),
      datasetRun: undefined,
      didNotRun: true,
    };
  }
  const { launched, end } = session;
  // Stopped by this run's own interrupt (asked of its executor, or a terminal's Ctrl-C that reached
  // its host too): the session did not fail, it was stopped, as `mur run` says of its own.
  if (context.interrupted && end.exit_status === 'failed') output.err(`    session stopped: mur eval run was interrupted (${context.interrupted})`);
  else if (end.exit_status === 'trapped') output.err(`    session trapped: ${end.error?.message ?? 'the capsule trapped'}`);
  else if (end.error) output.err(`    session failed: error[${end.error.code}]: ${end.error.message.split('\n')[0]}`);
  // Only the eval hook's file is a score: a capsule with none that wrote an eval.jsonl itself (its
  // guest writes its workdir) scored whatever it liked.
  const scored = plan.capsule.kind === 'agent' && plan.artifacts.some((artifact) => artifact.name === EVAL_HOOK && artifact.hook !== undefined);
  const file = scored ? await localEvalFile(runtime, launched, projectDir, output) : undefined;
  let datasetRun: DatasetRunRecord | undefined;
  if (file !== undefined && existsSync(file)) {
    try {
      const contents = await readEvalFile({ file });
      const warning = skippedWarning(contents);
      if (warning) output.err(`    ${warning}`);
      datasetRun = contents.datasetRun;
    } catch (error) {
      output.err(`    warning: failed to read ${EVAL_FILE}: ${failureText(error)}`);
    }
  }
  const result = datasetRun?.overall ?? 'no_scores';
  output.out(`    result: ${result}  session: ${launched.session_id}`);
  return { caseId, result, workdir: file !== undefined ? path.dirname(file) : launched.workdir, datasetRun };
}

/**
 * `mur eval run [capsule] --dataset <jsonl>`: one session per case, in order, each with the case's
 * task as its `task.md` and the case's ids for its hooks; then upstream's summary. Exit 0 once every
 * case has run, whatever the cases scored (as upstream): the scores are the result. A case that
 * could not be staged or launched has no score, so a run with any such case exits 1, saying so.
 */
export async function evalRunCommand(capsule: string | undefined, options: { dataset?: string; envFile?: boolean }, output: Output): Promise<number> {
  const manifestPath = manifestOf(capsule);
  const projectDir = path.dirname(manifestPath);
  const env = environmentWithEnvFile(options.envFile === false ? undefined : projectDir);
  const { manifest } = parseCapsuleManifest(readManifestTextSync(manifestPath), { env, file: path.basename(manifestPath) });
  const dataset = await readDataset(options.dataset);
  if (!manifest.artifacts.some((artifact) => artifact.name === EVAL_HOOK)) {
    output.err(
      `warning: ${manifest.name} declares no murmur-hook-eval in its artifacts, so its sessions write no ${EVAL_FILE} and every case scores no_scores`,
    );
  }
  const runtime = await openRuntime({ executor: true });
  const context: CaseContext = {
    runtime,
    projectDir,
    env,
    datasetId: manifest.observability?.eval?.dataset_id,
    lockPath: path.join(projectDir, 'murmur.lock'),
    staging: undefined,
    interrupted: undefined,
    current: undefined,
  };
  // An interrupt stops the session in flight, as `mur run`'s does (left to its default, mur left
  // at once and the session ran on to its end, unseen), and runs no later case; again, mur leaves.
  const onStop = (signal: NodeJS.Signals): void => {
    if (context.interrupted) process.exit(130);
    context.interrupted = signal;
    const current = context.current;
    output.err(
      `mur: ${signal}: ${current ? `stopping session ${current.sessionId} of case ${oneLine(current.caseId)}; ` : ''}no later case runs (again to leave at once)`,
    );
    if (current) void stopInterrupted(runtime, current.sessionId);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, onStop);
  try {
    output.out(`Running ${dataset.cases.length} case(s) …`);
    const outcomes: CaseOutcome[] = [];
    for (const { caseId, task } of dataset.cases) {
      if (context.interrupted) break;
      outcomes.push(await runCase(context, caseId, task, output));
    }
    output.out('');
    output.out(SECTION.summary);
    output.out(`pass: ${outcomes.filter((outcome) => outcome.result === 'pass').length}/${outcomes.length}`);
    output.out('');
    for (const outcome of outcomes) {
      const scores = Object.entries(outcome.datasetRun?.scores ?? {})
        .map(([name, score]) => `${name}=${score.toFixed(2)}`)
        .sort()
        .join(' ');
      output.out(oneLine(`  ${outcome.caseId.padEnd(NAME_COLUMN)} ${outcome.result}  ${scores}  (${outcome.workdir})`));
    }
    if (context.interrupted) {
      output.err(`mur: interrupted: ${outcomes.length} of ${dataset.cases.length} case(s) ran; no later case did`);
      return 130;
    }
    const unrun = outcomes.filter((outcome) => outcome.didNotRun);
    if (unrun.length === 0) return 0;
    output.err(
      `error: ${unrun.length} of ${outcomes.length} case(s) did not run (${unrun.map((outcome) => outcome.caseId).join(', ')}); why is said under each case above`,
    );
    return 1;
  } finally {
    await runtime.close();
    for (const signal of STOP_SIGNALS) process.off(signal, onStop);
  }
}
