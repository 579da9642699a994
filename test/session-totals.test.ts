import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentManifest, agentProject, traceOf } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * The totals a session's `session_end` carries agree with the events the trace holds, on a failed
 * exit as on a good one (upstream's `trace.rs`): a driver call that made no inference is no turn.
 */
describe('session totals', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference | undefined;

  beforeAll(async () => {
    scratch = await tempDir('murmur-totals-');
  });

  afterAll(async () => {
    await inference?.close();
    await scratch.cleanup();
  });

  it('counts in session_end.total_turns exactly the inference events written when the second driver call cannot connect', async () => {
    // One reply (a shell call), then the endpoint goes away: turn 2's request finds nobody listening.
    const endpoint = await startScriptedInference({
      script: (_body, index) => {
        if (index === 0) setTimeout(() => void endpoint.close(), 20);
        return { toolCalls: [{ name: 'bash', input: { command: 'echo hi' } }] };
      },
    });
    inference = endpoint;
    const project = await agentProject(path.join(scratch.dir, 'cut'), agentManifest(endpoint, { capabilities: '  shell:\n    allow: [bash]\n' }));
    const result = await runMur(['run', '--json', '--task', 'Echo something.'], { cwd: project, env: { MURMUR_HOME: path.join(scratch.dir, 'home') } });
    const launch = JSON.parse(result.stdout.trim().split('\n')[0] as string) as { workdir: string };
    const events = await traceOf(launch.workdir);
    const types = events.map((event) => event.event_type);
    expect(types[0]).toBe('task_start');
    expect(types.at(-1)).toBe('task_end');
    const end = events.find((event) => event.event_type === 'session_end') as Record<string, unknown>;
    expect(end.exit_status).not.toBe('ok');
    expect(types.filter((type) => type === 'inference')).toHaveLength(1);
    expect(end.total_turns).toBe(1);
    expect(end.total_tool_calls).toBe(types.filter((type) => type === 'tool_call').length);
    expect(end.total_shell_calls).toBe(types.filter((type) => type === 'shell').length);
  });
});
