import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { ForgetAsker, WireError } from '@murmur/shared';
import { writeFileAtomic } from './atomic-file.js';
import { type AgentLoopRun, type LoopOutcome, composeSystemPrompt, readTaskText } from './agent-loop.js';
import {
  type HarnessBlock,
  type HarnessLine,
  capsuleToolName,
  claudeCodeArguments,
  claudeCodeEnvironment,
  isUnknownSession,
  readClaudeCodeLine,
} from './claude-code.js';
import { countTokens } from './contracts.js';
import { sortedJson } from './compaction.js';
import { handBackTranscript, placeTranscript } from './harness-transcripts.js';
import { capsuleHome } from './subprocess.js';
import type { HarnessStart } from './protocol.js';
import { agentTools } from './tool-inventory.js';
import type { Task } from './task-registry.js';

/**
 * One attempt at one task on `inference.transport: process`: the harness CLI holds the
 * conversation and runs the turns; the runtime runs it once per attempt, offers it the capsule's
 * tools over MCP (each call dispatched, traced and told to the hooks like a driver's), and reads
 * what it says as it says it.
 *
 * - A context with a session is resumed under it (`--resume`); one without is offered a fresh
 *   bare UUID (`--session-id`), and the id the harness says it started (`system/init`) is what the
 *   context keeps.
 * - A session the harness no longer knows fails the turn, saying how to start anew: never a new
 *   conversation behind the person's back.
 * - The harness's home is the session's own (`.capsule-home`); the executor keeps the transcript
 *   of a context the capsule shares across its sessions, and it is in the home only while a run
 *   of that context needs it (`harness-sessions.ts` says why).
 * - A run is capped at 10 minutes (`MURMUR_HARNESS_RUN_CAP_SECS` on the executor); a harness that exits non-zero (or says `is_error`) fails the
 *   task with the tail of its stderr.
 * - Each model message is an `inference` (tokens as the harness reports them on it); the session's
 *   totals take the run's own totals from its `result` line. Compaction is the harness's affair.
 */

/** How much of a failed harness's stderr the failure quotes. */
const STDERR_TAIL_BYTES = 2_000;

export interface HarnessSessionStore {
  get(contextId: string): Promise<string | undefined>;
  put(contextId: string, sessionId: string): Promise<void>;
  forget(contextId: string): Promise<string | undefined>;
  /** The transcript the executor keeps of the context's session; undefined when it keeps none. */
  transcript(contextId: string, sessionId: string): Promise<Buffer | undefined>;
  /** Hands the executor what a run left of the context's session (or its size, when too large to keep); whether it was kept. */
  keepTranscript(contextId: string, sessionId: string, transcript: Buffer | { oversizedBytes: number }): Promise<boolean>;
}

/** What the session's MCP server needs of the attempt a tool call belongs to. */
export interface HarnessScene {
  task: Task | undefined;
  turn(): number;
  /** Awaited before a call is dispatched: the message that asked for it is told to on-inference first, as a driver's turn would be. */
  beforeToolCall(): Promise<void>;
}

export interface HarnessLoopRun extends AgentLoopRun {
  harness: HarnessStart;
  sessions: HarnessSessionStore;
  /** The session's MCP server's `--mcp-config`. */
  mcpConfig: string;
  /** Tells the session's MCP server which task and turn its calls are this attempt's (undefined: none runs). */
  serve(scene: HarnessScene | undefined): void;
  /** Set by a forget request: the context's session is dropped before this attempt runs. */
  forget: ForgetAsker | undefined;
}

export async function runHarnessLoop(run: HarnessLoopRun): Promise<LoopOutcome> {
  const { host, start, agent, task, registry, hooks, harness } = run;
  const sessionDir = start.session_dir;
  const resultFile = path.join(sessionDir, 'out', 'result.txt');
  // What the MCP server offers: the inventory a driver would be given.
  const tools = agentTools(run);
  host.trace.write(
    'session_start',
    host.sessionStartFields({
      model: agent.model === '' ? null : agent.model,
      maxTurns: run.maxTurns,
      toolsDeclared: tools.map((tool) => tool.name),
      promptSource: agent.system_prompt_source,
      promptSha256: agent.system_prompt === null ? null : createHash('sha256').update(agent.system_prompt).digest('hex'),
      prompt: agent.system_prompt,
    }),
  );
  const fail = (message: string, error: WireError = { code: 'E-RUN-007', message: `agent loop failed: ${message}` }): LoopOutcome => {
    writeFileAtomic(resultFile, `error: ${message}`);
    host.writeSessionEnd('failed');
    return { status: 'failed', message, error };
  };
  const breached = host.breachError();
  if (breached) return fail(breached.message, breached);

  const contextId = task?.contextId;
  if (contextId !== undefined && run.forget) {
    const dropped = await run.sessions.forget(contextId);
    host.trace.write('harness_session_forgotten', { context_id: contextId, session_id: dropped ?? null, asked_by: run.forget });
  }
  const known = contextId === undefined ? undefined : await run.sessions.get(contextId);
  const offered = known ?? randomUUID();

  // The harness's home is the session's own. A context the capsule shares across its sessions has
  // its transcript kept by the executor: put in the home for this run, handed back after it, and
  // gone from the home once kept, so a task of another context never finds it here. One kept for
  // this session alone (its task came under the session's own token) stays in the home: only this
  // session can resume it (its map entry is under `<context>@<session>`), which it can only while
  // its token lives, and its transcript stays in the session's workdir, as the rest of the session does.
  const home = capsuleHome(start.accessible_workdir);
  const shared = contextId !== undefined && task?.sessionScoped !== true ? contextId : undefined;
  const projects = path.join(home, '.claude', 'projects');

  let turn = -1;
  let open: { id: string; blocks: HarnessBlock[]; inputTokens: number; outputTokens: number } | undefined;
  let result: Extract<HarnessLine, { kind: 'result' }> | undefined;
  let started: string | undefined;
  // The harness does not wait for the runtime: its messages are told to on-inference in order, one after another.
  let told: Promise<void> = Promise.resolve();
  // The message the harness is writing is done when anything else arrives: trace it then.
  const closeMessage = (): void => {
    if (!open) return;
    const message = open;
    // The turn it was, not the one it will be when the hook is told.
    const at = turn;
    open = undefined;
    const toolUse = message.blocks.find((block) => block.type === 'tool_use');
    const decision = toolUse ? 'tool_call' : 'end_turn';
    const toolName = toolUse?.name ? capsuleToolName(toolUse.name) : null;
    host.trace.write('inference', {
      turn: at,
      input_tokens: message.inputTokens,
      output_tokens: message.outputTokens,
      decision,
      tool_name: toolName,
      model: agent.model === '' ? null : agent.model,
      origin: `harness:${harness.dialect}`,
    });
    told = told.then(async () => {
      const answer = await hooks.dispatch('on-inference', () => ({
        turn: at,
        inputTokens: BigInt(message.inputTokens),
        outputTokens: BigInt(message.outputTokens),
        decision,
        toolName: toolName ?? undefined,
        // The harness holds the prompt; the runtime never sees it.
        prompt: sortedJson([]),
        output: sortedJson(message.blocks),
        tools: sortedJson(tools),
      }));
      // A hook's artifact reaches the task's observers as on-inference makes it.
      if (task) for (const artifact of answer.artifacts) registry.artifact(task, artifact.hook, artifact.payload);
    });
  };
  const onLine = (raw: string): void => {
    const line = readClaudeCodeLine(raw);
    if (line.kind === 'message') {
      if (!open || open.id !== line.id) {
        closeMessage();
        turn += 1;
        host.setTurn(turn);
        host.totals.turns += 1;
        if (task) registry.progress(task, `inference turn ${turn + 1}`);
        open = { id: line.id, blocks: [], inputTokens: 0, outputTokens: 0 };
      }
      open.blocks.push(...line.blocks);
      // Every line of one message repeats its usage so far: the last one is the message's.
      if (line.usage) {
        open.inputTokens = line.usage.inputTokens;
        open.outputTokens = line.usage.outputTokens;
      }
      if (task)
        for (const block of line.blocks) {
          if (block.type === 'text' && block.text) registry.chunk(task, 'text', block.text);
          else if (block.type === 'thinking' && block.thinking) registry.chunk(task, 'thinking', block.thinking);
        }
      return;
    }
    closeMessage();
    if (line.kind === 'started') started = line.sessionId;
    else if (line.kind === 'result') result = line;
  };

  const stopper = new AbortController();
  const watch = setInterval(() => {
    if (task?.abortedWith || host.breach) stopper.abort();
  }, 200);
  let mcpConfigFile: string | undefined;
  run.serve({
    task,
    turn: () => Math.max(turn, 0),
    beforeToolCall: () => {
      // A harness that calls a tool has read its MCP configuration: removed before the tool runs,
      // the server's bearer token is in no file the capsule's tools (the same user, in the same
      // sandbox and its /tmp) could read and then call the server with, past the harness.
      if (mcpConfigFile !== undefined) rmSync(mcpConfigFile, { force: true });
      closeMessage();
      return told;
    },
  });
  let exit: Awaited<ReturnType<typeof host.runHarness>>;
  let given: string | undefined;
  try {
    if (task) registry.progress(task, known ? `resuming harness session ${known}` : 'starting a harness session');
    // This run's own files (and the harness's scratch files), readable by the sandbox's user alone,
    // gone with the run: a directory made afresh under a name no one chose, so nothing a tool left
    // in the sandbox's /tmp stands in its way (a fixed name, planted as a file, failed every task after).
    given = mkdtempSync(path.join('/tmp', 'harness-run-'));
    mkdirSync(home, { recursive: true, mode: 0o700 });
    resetHarnessConfig(home);
    if (shared !== undefined && known !== undefined) {
      const transcript = await run.sessions.transcript(shared, known);
      // None kept (the record off, or not written): what this session's home holds is what resumes.
      if (transcript !== undefined) placeTranscript(projects, start.accessible_workdir, known, transcript);
    }
    const systemPromptFile = path.join(given, 'system-prompt.md');
    mcpConfigFile = path.join(given, 'mcp.json');
    writeFileSync(systemPromptFile, composeSystemPrompt(start, agent.system_prompt), { mode: 0o600, flag: 'wx' });
    writeFileSync(mcpConfigFile, run.mcpConfig, { mode: 0o600, flag: 'wx' });
    const args = claudeCodeArguments({
      systemPromptFile,
      model: agent.model === '' ? undefined : agent.model,
      maxTurns: run.maxTurns,
      mcpConfigFile,
      session: known ? { resume: known } : { fresh: offered },
    });
    exit = await host.runHarness(
      harness.binary,
      args,
      { ...Object.fromEntries(harness.env), ...claudeCodeEnvironment(given), HOME: home, USERPROFILE: home },
      {
        input: readTaskText(start.accessible_workdir),
        deadlineMs: harness.run_cap_ms,
        onLine,
        signal: stopper.signal,
      },
    );
  } catch (error) {
    return fail(`harness '${harness.command}' could not be started: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    clearInterval(watch);
    run.serve(undefined);
    closeMessage();
    // Never a throw from here: a tool may have made the run's files into anything meanwhile.
    if (given !== undefined) {
      try {
        rmSync(given, { recursive: true, force: true });
      } catch {}
    }
  }
  await told;

  if (result?.usage) {
    countTokens(host.totals, result.usage.inputTokens, result.usage.outputTokens);
  }
  // The harness said which session it started (or resumed): that is what the context keeps.
  const holding = started ?? (exit.exitCode === 0 ? result?.sessionId : undefined);
  if (contextId !== undefined && holding !== undefined && holding !== known) await run.sessions.put(contextId, holding);
  if (shared !== undefined && holding !== undefined) await handBackTranscript(run.sessions, projects, shared, holding, harness.transcript_limit_bytes);

  if (task?.abortedWith) return fail(task.abortedWith);
  const ceiling = host.breachError();
  if (ceiling) return fail(ceiling.message, ceiling);
  const said = [result?.text ?? '', ...(result?.errors ?? []), exit.stderr].join('\n');
  if (known && isUnknownSession(said)) {
    return fail(
      `harness session '${known}' of context '${contextId}' is no longer known to ${harness.command}; the turn failed rather than start a new conversation (ask for a new one with mur run --forget-session, or the x-murmur-forget-session header)`,
    );
  }
  if (exit.timedOut) return fail(`harness '${harness.command}' ran past its ${capText(harness.run_cap_ms)} cap on one run and was killed`);
  if (exit.resourceLimit) return fail(`harness '${harness.command}' was killed for exceeding capabilities.resources.${exit.resourceLimit}`);
  if (exit.exitCode !== 0 || !result || result.isError) {
    // Its own words: a result with no text says why in `errors` (Claude Code at its turn limit:
    // "Reached maximum number of turns (10)"), which the message left out.
    const words = result?.isError ? [result.text, ...result.errors].filter((said) => said.trim() !== '').join('; ') : '';
    const why = !result ? ' without a result line' : words !== '' ? `: ${words}` : '';
    const tail = stderrTail(exit.stderr);
    const message = `harness '${harness.command}' ${result?.isError && exit.exitCode === 0 ? 'ended its run failed' : `exited with code ${exit.exitCode}`}${why}${tail ? `; stderr: ${tail}` : ''}`;
    if (result?.subtype === 'error_max_turns')
      return fail(message, {
        code: 'E-RUN-007',
        message: `agent loop failed: ${message}`,
        hint: `the harness stopped at the turn limit the capsule gives it (inference.max_turns): raise it in murmur.yaml, or ask for less in one task`,
      });
    return fail(message);
  }
  writeFileAtomic(resultFile, result.text);
  if (task) registry.chunk(task, 'text', '', true);
  host.writeSessionEnd('ok');
  return { status: 'ok', response: result.text };
}

/** `10-minute`, or `3-second` for a cap under a minute. */
function capText(ms: number): string {
  return ms >= 60_000 && ms % 60_000 === 0 ? `${ms / 60_000}-minute` : `${Math.round(ms / 1000)}-second`;
}

/** The last lines of what the harness wrote to stderr, at most 2 000 bytes of them. */
export function stderrTail(stderr: string): string {
  const trimmed = stderr.trim();
  if (Buffer.byteLength(trimmed) <= STDERR_TAIL_BYTES) return trimmed;
  const tail = Buffer.from(trimmed).subarray(-STDERR_TAIL_BYTES).toString('utf8');
  return `…${tail.slice(tail.indexOf('\n') + 1 || 0)}`;
}

/**
 * The harness's own configuration in its home (`.claude.json`), made empty before each run,
 * whatever was there: the home is writable by the capsule's tools, and Claude Code takes the `env`
 * of that file even under `--bare --restricted` — a tool that wrote `ANTHROPIC_BASE_URL` into it
 * had every later run send the model key to a host the capsule chose. (Empty, not absent: absent,
 * Claude Code says so on every run.) The legacy place is removed.
 */
function resetHarnessConfig(home: string): void {
  const config = path.join(home, '.claude.json');
  for (const file of [config, path.join(home, '.claude', '.config.json')]) rmSync(file, { recursive: true, force: true });
  writeFileSync(config, '{}\n', { mode: 0o600, flag: 'wx' });
}
