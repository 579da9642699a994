import { readFileSync } from 'node:fs';
import type { DriverTool } from './driver-wire.js';
import type { AgentHost } from './contracts.js';
import type { AgentStart, HostTool, StartMessage } from './protocol.js';
import { shellToolDescription } from './subprocess.js';

/**
 * The tools the model is offered, as upstream builds them once per task: every tool and skill
 * installed for the session and every `shell.allow` binary, sorted by name; never the driver or a
 * hook (they are not tools), nor the skill that already is the system prompt. A tool's parameters
 * are its manifest's `input_schema`; a skill takes none.
 */

/** A schema that takes no arguments; a fresh object each time, so no two tools share one. */
function emptySchema(): Record<string, unknown> {
  return { type: 'object', properties: {} };
}

function parametersOf(tool: HostTool): Record<string, unknown> {
  if (tool.kind === 'skill' || tool.info.input_schema === undefined) return emptySchema();
  try {
    const schema: unknown = JSON.parse(tool.info.input_schema);
    return schema !== null && typeof schema === 'object' && !Array.isArray(schema) ? (schema as Record<string, unknown>) : emptySchema();
  } catch {
    return emptySchema();
  }
}

function descriptionOf(tool: HostTool): string | undefined {
  const declared = tool.info.description.trim();
  if (declared !== '') return declared;
  if (tool.kind !== 'skill' || !tool.path) return undefined;
  try {
    return readFileSync(tool.path, 'utf8')
      .split('\n')
      .map((line) => line.trim())
      .find((line) => line !== '');
  } catch {
    return undefined;
  }
}

/** The built-in tool a capsule with `capabilities.spawn.allow` has: hand a task to a child capsule. */
export const DELEGATE_TOOL: DriverTool = {
  name: 'delegate-task',
  description:
    'Hand a task to another capsule (one named in capabilities.spawn.allow) and wait for it to finish. The result names where the child wrote its answer; read that file to see it.',
  parameters: {
    type: 'object',
    properties: { capsule: { type: 'string' }, version: { type: 'string' }, task: { type: 'string' } },
    required: ['capsule', 'version', 'task'],
  },
};

export function toolInventory(
  tools: Iterable<HostTool>,
  shellAllow: readonly string[],
  promptSkill: string | undefined,
  canDelegate = false,
  shellDescriptions: ReadonlyMap<string, string> = new Map(),
): DriverTool[] {
  const offered = new Map<string, DriverTool>();
  for (const tool of tools) {
    if (tool.name === promptSkill) continue;
    const description = descriptionOf(tool);
    offered.set(tool.name, { name: tool.name, parameters: parametersOf(tool), ...(description ? { description } : {}) });
  }
  for (const binary of shellAllow) {
    if (offered.has(binary)) continue;
    offered.set(binary, {
      name: binary,
      parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
      description: shellDescriptions.get(binary) ?? shellToolDescription(binary),
    });
  }
  if (canDelegate) offered.set(DELEGATE_TOOL.name, DELEGATE_TOOL);
  return [...offered.values()].sort((left, right) => (left.name < right.name ? -1 : left.name > right.name ? 1 : 0));
}

/** What an agent's model is offered, by a driver's turn or through the harness's MCP server alike. */
export function agentTools(source: {
  host: Pick<AgentHost, 'tools'>;
  start: Pick<StartMessage, 'policy'>;
  agent: Pick<AgentStart, 'system_prompt_artifact'>;
  shellDescriptions: ReadonlyMap<string, string>;
}): DriverTool[] {
  const { policy } = source.start;
  return toolInventory(
    source.host.tools.values(),
    policy.shell_allow,
    source.agent.system_prompt_artifact,
    policy.spawn_allow.length > 0,
    source.shellDescriptions,
  );
}
