import type { AgentHost, ToolDispatch } from './contracts.js';
import type { HookRuntime } from './hooks.js';
import type { Task, TaskRegistry } from './task-registry.js';

/** Where a tool call of the agent happens: the task it serves and the turn it was asked in. */
export interface ToolCallScene {
  host: AgentHost;
  hooks: HookRuntime;
  registry: TaskRegistry;
  task: Task | undefined;
  turn: number;
}

/**
 * One tool call the model asked for, whichever loop asked (a driver's turn or a harness's MCP
 * call): the capsule host dispatches it through its policy checks, its text reaches the task's
 * observers as an artifact, and on-tool-call (and, for a shell binary that ran, on-shell) is told.
 */
export async function callTool(scene: ToolCallScene, name: string, input: string): Promise<ToolDispatch> {
  const { host, hooks, registry, task, turn } = scene;
  const dispatched = await host.dispatchForAgent(name, { data: input });
  if (task) registry.artifact(task, name, dispatched.text);
  await hooks.dispatch('on-tool-call', () => ({
    turn,
    toolName: name,
    inputBytes: BigInt(Buffer.byteLength(input)),
    outputBytes: BigInt(Buffer.byteLength(dispatched.text)),
    durationMs: BigInt(dispatched.durationMs),
    status: dispatched.isError ? 'error' : 'ok',
  }));
  const shell = dispatched.shell;
  // The streams are already cut at 16 KiB by the shell runner, as upstream hands them to on-shell.
  if (shell) {
    await hooks.dispatch('on-shell', () => ({
      turn,
      binary: shell.binary,
      // Whole, as upstream hands it: only the OTel attribute is cut (to 200 characters).
      command: shell.command,
      exitCode: shell.exitCode,
      stdout: shell.stdout,
      stderr: shell.stderr,
      stdoutBytes: BigInt(Buffer.byteLength(shell.stdout)),
      stderrBytes: BigInt(Buffer.byteLength(shell.stderr)),
      durationMs: BigInt(shell.durationMs),
    }));
  }
  return dispatched;
}
