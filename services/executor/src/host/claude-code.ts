import { HarnessSessionIdSchema } from '@murmur/shared';
import { TOOL_SERVER_NAME } from './tool-server.js';

/**
 * Claude Code's headless dialect: the command line of one run (`-p`, `--output-format stream-json
 * --verbose`, a new conversation under `--session-id` or an old one under `--resume`) and what its
 * stdout says, one JSON object a line.
 *
 * The run is given the capsule's tools and nothing else: `--tools ""` turns the harness's own
 * tools off (its Bash would be a shell the capsule's allowlist never granted), `--strict-mcp-config`
 * ignores any MCP server a configuration file names, and `--allowedTools mcp__murmur` lets the
 * capsule's tools run without a prompt nobody is there to answer.
 *
 * Nothing a capsule can write steers the harness either: the workdir and the harness's home in it are
 * writable from inside the sandbox, so `--bare` skips `CLAUDE.md` discovery, settings hooks,
 * plugins and auto-memory, and `--restricted` ignores the user, project and local settings files.
 *
 * Nor does the text a run is given: the task (from any A2A client, or a delegating parent's model)
 * goes on the harness's stdin, never on its command line, where one that begins with `-` was read
 * as options (`--` alone ended them, and every restriction above with them). The system prompt and
 * the MCP configuration, which holds the tool server's bearer token, are files only the sandbox's
 * user may read (the configuration removed before the first tool runs, as the tools are that user
 * too): on a command line, every local user could read the token in `/proc/<pid>/cmdline`,
 * and an argument over 128 KiB would not start the harness at all (`E2BIG`).
 */

export interface HarnessInvocation {
  /** A file holding the capsule's `[Capsule]` header and system prompt, added to the harness's own. */
  systemPromptFile: string;
  model: string | undefined;
  maxTurns: number;
  /** A file holding the `--mcp-config` JSON of the session's tool server. */
  mcpConfigFile: string;
  /** A session the harness already holds (`--resume`), else the fresh id it is offered (`--session-id`). */
  session: { resume: string } | { fresh: string };
}

export function claudeCodeArguments(run: HarnessInvocation): string[] {
  return [
    '-p',
    '--input-format',
    'text',
    '--output-format',
    'stream-json',
    '--verbose',
    // Joined to its flag: a value of its own is never read as another option, whatever it holds.
    ...('resume' in run.session ? [`--resume=${run.session.resume}`] : [`--session-id=${run.session.fresh}`]),
    ...(run.model ? ['--model', run.model] : []),
    '--max-turns',
    String(run.maxTurns),
    '--append-system-prompt-file',
    run.systemPromptFile,
    '--mcp-config',
    run.mcpConfigFile,
    '--strict-mcp-config',
    '--tools',
    '',
    '--allowedTools',
    `mcp__${TOOL_SERVER_NAME}`,
    '--bare',
    '--restricted',
  ];
}

/** The environment the harness needs beyond the capsule's own (no telemetry, no update checks, its scratch files kept in `tmp`). */
export function claudeCodeEnvironment(tmp: string): Record<string, string> {
  return { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', CLAUDE_CODE_TMPDIR: tmp, DISABLE_AUTOUPDATER: '1' };
}

export interface HarnessBlock {
  type: string;
  text?: string;
  thinking?: string;
  name?: string;
}

export interface HarnessUsage {
  inputTokens: number;
  outputTokens: number;
}

/** One line of stream-json, as far as the runtime cares. */
export type HarnessLine =
  | { kind: 'started'; sessionId: string }
  | { kind: 'message'; id: string; blocks: HarnessBlock[]; usage: HarnessUsage | undefined }
  | {
      kind: 'result';
      isError: boolean;
      /** The result's `subtype` (`success`, `error_max_turns`, `error_during_execution`, …). */
      subtype: string | undefined;
      text: string;
      errors: string[];
      sessionId: string | undefined;
      usage: HarnessUsage | undefined;
      turns: number | undefined;
    }
  | { kind: 'other' };

/** A tool of the capsule as the harness names it, back to the capsule's name. */
export function capsuleToolName(harnessName: string): string {
  const prefix = `mcp__${TOOL_SERVER_NAME}__`;
  return harnessName.startsWith(prefix) ? harnessName.slice(prefix.length) : harnessName;
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : 0;
}

/** Tokens as the harness reports them: input counts what the model read, cached or not. */
function usageOf(raw: unknown): HarnessUsage | undefined {
  if (raw === null || typeof raw !== 'object') return undefined;
  const usage = raw as Record<string, unknown>;
  return {
    inputTokens: count(usage.input_tokens) + count(usage.cache_creation_input_tokens) + count(usage.cache_read_input_tokens),
    outputTokens: count(usage.output_tokens),
  };
}

/** Reads one stdout line; anything that is not a line the runtime acts on is `other` (the harness may add kinds at will). */
export function readClaudeCodeLine(line: string): HarnessLine {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return { kind: 'other' };
  }
  if (value === null || typeof value !== 'object') return { kind: 'other' };
  const record = value as Record<string, unknown>;
  // An id that is no UUID is not kept: it would be passed back on the command line to resume.
  const sessionId = HarnessSessionIdSchema.safeParse(record.session_id).success ? (record.session_id as string) : undefined;
  if (record.type === 'system' && record.subtype === 'init' && sessionId) return { kind: 'started', sessionId };
  if (record.type === 'assistant' && record.message && typeof record.message === 'object') {
    const message = record.message as Record<string, unknown>;
    const blocks = Array.isArray(message.content) ? (message.content.filter((block) => block && typeof block === 'object') as HarnessBlock[]) : [];
    return { kind: 'message', id: typeof message.id === 'string' ? message.id : '', blocks, usage: usageOf(message.usage) };
  }
  if (record.type === 'result') {
    const errors = Array.isArray(record.errors) ? record.errors.filter((error): error is string => typeof error === 'string') : [];
    return {
      kind: 'result',
      // A failed API call still says `subtype: success`: only `is_error` tells.
      isError: record.is_error === true,
      subtype: typeof record.subtype === 'string' ? record.subtype : undefined,
      text: typeof record.result === 'string' ? record.result : '',
      errors,
      sessionId,
      usage: usageOf(record.usage),
      turns: typeof record.num_turns === 'number' ? record.num_turns : undefined,
    };
  }
  return { kind: 'other' };
}

/** Claude Code's words for a `--resume` of a session its home does not hold. */
export function isUnknownSession(text: string): boolean {
  return /No conversation found with session ID/i.test(text);
}
