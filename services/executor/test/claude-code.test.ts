import { describe, expect, it } from 'vitest';
import { capsuleToolName, claudeCodeArguments, isUnknownSession, readClaudeCodeLine } from '../src/host/claude-code.js';
import { stderrTail } from '../src/host/harness-loop.js';

/** Claude Code's headless dialect, as the runtime writes its command line and reads its stream-json. */
describe("Claude Code's dialect", () => {
  const invocation = { systemPromptFile: '/tmp/h/system-prompt.md', model: 'm', maxTurns: 4, mcpConfigFile: '/tmp/h/mcp.json' };

  it('offers a fresh conversation under --session-id and resumes a known one with --resume, never both, each joined to its value', () => {
    const fresh = claudeCodeArguments({ ...invocation, session: { fresh: '0191d6b2-7c4e-7000-8000-000000000001' } });
    expect(fresh).toContain('--session-id=0191d6b2-7c4e-7000-8000-000000000001');
    expect(fresh.some((arg) => arg.startsWith('--resume'))).toBe(false);
    const resumed = claudeCodeArguments({ ...invocation, session: { resume: '0191d6b2-7c4e-7000-8000-000000000002' } });
    expect(resumed).toContain('--resume=0191d6b2-7c4e-7000-8000-000000000002');
    expect(resumed.some((arg) => arg.startsWith('--session-id'))).toBe(false);
  });

  it("turns the harness's own tools and configuration off and allows only the capsule's MCP server", () => {
    const args = claudeCodeArguments({ ...invocation, session: { fresh: 'uuid-1' } });
    expect(args.slice(args.indexOf('--tools'), args.indexOf('--tools') + 2)).toEqual(['--tools', '']);
    expect(args.slice(args.indexOf('--allowedTools'), args.indexOf('--allowedTools') + 2)).toEqual(['--allowedTools', 'mcp__murmur']);
    for (const flag of ['--strict-mcp-config', '--bare', '--restricted', '--verbose']) expect(args).toContain(flag);
    expect(args.join(' ')).not.toMatch(/dangerously|bypassPermissions/);
  });

  it('puts nothing a client or a capsule wrote on the command line: the task goes on stdin, the prompt and the MCP token in files', () => {
    const args = claudeCodeArguments({ ...invocation, session: { fresh: 'uuid-1' } });
    expect(args.slice(0, 3)).toEqual(['-p', '--input-format', 'text']);
    expect(args.slice(args.indexOf('--append-system-prompt-file'), args.indexOf('--append-system-prompt-file') + 2)).toEqual([
      '--append-system-prompt-file',
      '/tmp/h/system-prompt.md',
    ]);
    expect(args.slice(args.indexOf('--mcp-config'), args.indexOf('--mcp-config') + 2)).toEqual(['--mcp-config', '/tmp/h/mcp.json']);
    expect(args).not.toContain('--append-system-prompt');
  });

  it('reads the session a run started, each message, and the result by key, whatever the key order', () => {
    expect(readClaudeCodeLine('{"type":"system","subtype":"init","session_id":"0191d6b2-7c4e-7000-8000-000000000001"}')).toEqual({
      kind: 'started',
      sessionId: '0191d6b2-7c4e-7000-8000-000000000001',
    });
    // An id that is no UUID is not taken: it would go back on the command line to resume.
    expect(readClaudeCodeLine('{"type":"system","subtype":"init","session_id":"--settings=/tmp/x"}')).toEqual({ kind: 'other' });
    expect(readClaudeCodeLine('{"type":"system","subtype":"ui_invalidate"}')).toEqual({ kind: 'other' });
    expect(
      readClaudeCodeLine(
        '{"message":{"id":"m1","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"cache_read_input_tokens":2,"output_tokens":1}},"type":"assistant"}',
      ),
    ).toEqual({ kind: 'message', id: 'm1', blocks: [{ type: 'text', text: 'hi' }], usage: { inputTokens: 5, outputTokens: 1 } });
    expect(
      readClaudeCodeLine(
        '{"is_error":true,"subtype":"success","result":"API Error: 401","session_id":"0191d6b2-7c4e-7000-8000-000000000001","type":"result","num_turns":1,"usage":{"input_tokens":0}}',
      ),
    ).toEqual({
      kind: 'result',
      isError: true,
      subtype: 'success',
      text: 'API Error: 401',
      errors: [],
      sessionId: '0191d6b2-7c4e-7000-8000-000000000001',
      usage: { inputTokens: 0, outputTokens: 0 },
      turns: 1,
    });
    expect(readClaudeCodeLine('not json')).toEqual({ kind: 'other' });
  });

  it("names a capsule tool back from the harness's name, and knows a session the harness has lost", () => {
    expect(capsuleToolName('mcp__murmur__echo')).toBe('echo');
    expect(capsuleToolName('Bash')).toBe('Bash');
    expect(isUnknownSession('No conversation found with session ID: 1111')).toBe(true);
    expect(isUnknownSession('API Error: 500')).toBe(false);
  });

  it("quotes at most the last 2000 bytes of a harness's stderr, from a line's start", () => {
    expect(stderrTail('  short  ')).toBe('short');
    const long = Array.from({ length: 400 }, (_, index) => `line ${index}`).join('\n');
    const tail = stderrTail(long);
    expect(Buffer.byteLength(tail)).toBeLessThanOrEqual(2003);
    expect(tail.endsWith('line 399')).toBe(true);
    expect(tail.split('\n')[0]).toMatch(/^…line \d+$/);
  });
});
