import type { A2aVersion, CapsuleCard, SessionEvent, TaskState, TaskView } from '@murmur/shared';

/**
 * The runtime's neutral tasks, events and card, written in the generation a client speaks:
 * 0.3 (`kind` fields, `completed`, `user`/`agent`) or 1.0 (proto-JSON: `TASK_STATE_COMPLETED`,
 * `ROLE_AGENT`, results wrapped as `{task}`, stream events as `{statusUpdate}`/`{artifactUpdate}`).
 */

const STATE_V10: Record<TaskState, string> = {
  submitted: 'TASK_STATE_SUBMITTED',
  working: 'TASK_STATE_WORKING',
  'input-required': 'TASK_STATE_INPUT_REQUIRED',
  completed: 'TASK_STATE_COMPLETED',
  failed: 'TASK_STATE_FAILED',
  rejected: 'TASK_STATE_REJECTED',
  canceled: 'TASK_STATE_CANCELED',
};

/** 1.0's task states in the proto enum's order, so that a ProtoJSON number names one. */
const STATE_NUMBERS_V10 = [
  'TASK_STATE_UNSPECIFIED',
  'TASK_STATE_SUBMITTED',
  'TASK_STATE_WORKING',
  'TASK_STATE_COMPLETED',
  'TASK_STATE_FAILED',
  'TASK_STATE_CANCELED',
  'TASK_STATE_INPUT_REQUIRED',
  'TASK_STATE_REJECTED',
  'TASK_STATE_AUTH_REQUIRED',
];

/**
 * The task state a `ListTasks` status filter names, in its generation's words (`working`,
 * `TASK_STATE_WORKING`, or 1.0's enum number): `all` for proto3's unset value, `none` for a state
 * the spec has and this runtime never enters (auth-required: its tasks never wait on credentials;
 * 0.3's `unknown`: its tasks' states are always known),
 * null for what is not a state.
 *
 * **Decided:** 1.0's `UNRECOGNIZED` is read as unset too. It is not a state of the spec, but it is
 * what `@a2a-js/sdk`'s client (its ts-proto `toJSON`) writes for a request whose caller gave no
 * status, so refusing it would fail every `listTasks()` of the reference client that does not
 * name a state. Any other name that is not a state is refused.
 */
export function taskStateFilter(version: A2aVersion, named: string | number): TaskState | 'all' | 'none' | null {
  const name = typeof named === 'number' ? (version === '1.0' ? STATE_NUMBERS_V10[named] : undefined) : named;
  if (name === undefined) return null;
  if (version === '1.0' && (name === 'TASK_STATE_UNSPECIFIED' || name === 'UNRECOGNIZED')) return 'all';
  if (name === (version === '0.3' ? 'auth-required' : 'TASK_STATE_AUTH_REQUIRED') || (version === '0.3' && name === 'unknown')) return 'none';
  for (const [state, v10] of Object.entries(STATE_V10) as Array<[TaskState, string]>) if ((version === '0.3' ? state : v10) === name) return state;
  return null;
}

function textPart(version: A2aVersion, text: string): Record<string, unknown> {
  return version === '0.3' ? { kind: 'text', text } : { text };
}

function message(version: A2aVersion, role: 'user' | 'agent', messageId: string, text: string, taskId: string, contextId: string): Record<string, unknown> {
  return version === '0.3'
    ? { kind: 'message', role, messageId, parts: [textPart(version, text)], taskId, contextId }
    : { messageId, role: role === 'user' ? 'ROLE_USER' : 'ROLE_AGENT', parts: [textPart(version, text)], taskId, contextId };
}

function status(
  version: A2aVersion,
  task: { id: string; contextId: string },
  state: TaskState,
  text: string | undefined,
  timestamp: string,
  messageId: string,
): Record<string, unknown> {
  return {
    state: version === '0.3' ? state : STATE_V10[state],
    ...(text !== undefined && text !== '' ? { message: message(version, 'agent', messageId, text, task.id, task.contextId) } : {}),
    timestamp,
  };
}

function artifact(version: A2aVersion, artifactId: string, name: string, text: string): Record<string, unknown> {
  return { artifactId, name, parts: [textPart(version, text)] };
}

/** A tool result's or hook artifact's A2A id: its number among its task's artifacts. */
function toolArtifactId(taskId: string, seq: number): string {
  return `${taskId}-artifact-${seq}`;
}

/**
 * A task. While it waits for input its prompt is the status message and a `prompt` artifact
 * (upstream's shape); once completed its response is the status message and a `response` artifact.
 */
export function renderTask(version: A2aVersion, task: TaskView): Record<string, unknown> {
  const ids = { id: task.id, contextId: task.context_id };
  const statusText = task.state === 'input-required' ? task.prompt : task.state === 'completed' ? task.response : task.message;
  const artifacts = task.artifacts.map((entry, index) => artifact(version, toolArtifactId(task.id, entry.seq ?? index), entry.name, entry.text));
  if (task.state === 'input-required' && task.prompt !== undefined) artifacts.push(artifact(version, 'prompt', 'prompt', task.prompt));
  if (task.response !== undefined) artifacts.push(artifact(version, 'response', 'response', task.response));
  return {
    ...(version === '0.3' ? { kind: 'task' } : {}),
    ...ids,
    status: status(version, ids, task.state, statusText, task.updated_at, `${task.id}-status`),
    artifacts,
    // Asked for none (`historyLength: 0`), the field is left out, as the spec would have it.
    ...(task.history.length > 0
      ? { history: task.history.map((entry) => message(version, entry.role, entry.message_id, entry.text, task.id, task.context_id)) }
      : {}),
  };
}

/** `message/send`'s result is the task itself in 0.3, `{task}` in 1.0. */
export function renderSendResult(version: A2aVersion, task: TaskView): Record<string, unknown> {
  const rendered = renderTask(version, task);
  return version === '0.3' ? rendered : { task: rendered };
}

/** The artifact a task's streamed reply (`text`) or thinking is sent as, chunk by chunk. */
export function streamedArtifactId(type: 'text' | 'thinking'): string {
  return type === 'text' ? 'response-stream' : 'thinking-stream';
}

/**
 * One feed event as a stream event, or undefined for what A2A streams do not carry. `sent` holds
 * the ids of the streamed artifacts this stream has already carried: a streamed reply's chunks share one
 * artifact, and only a chunk after the first of it this client saw says `append` (a client
 * drops, or refuses, a chunk that appends to an artifact it was never sent).
 */
export function renderStreamEvent(version: A2aVersion, event: SessionEvent, sent: Set<string>): Record<string, unknown> | undefined {
  if (event.task_id === null) return undefined;
  const ids = { taskId: event.task_id, contextId: event.context_id ?? '' };
  const timestamp = event.time;
  const data = event.data as {
    status?: { message?: string; response?: string };
    artifact?: { tool_name?: string; content?: string; seq?: number };
    text?: string;
    final?: boolean;
  };
  switch (event.type) {
    case 'status': {
      const state = event.state ?? 'working';
      const text = state === 'completed' ? (data.status?.response ?? data.status?.message) : data.status?.message;
      const update = {
        ...ids,
        status: status(version, { id: ids.taskId, contextId: ids.contextId }, state, text, timestamp, `${ids.taskId}-status-${event.id}`),
      };
      return version === '0.3' ? { kind: 'status-update', ...update, final: event.final } : { statusUpdate: update };
    }
    case 'artifact':
    case 'text':
    case 'thinking': {
      const streamed = event.type !== 'artifact';
      // A tool's artifact is named as the task names it (GetTask, a resubscription's opening task);
      // streamed text is not the task's `response` artifact, which holds the last turn's answer only.
      const seq = data.artifact?.seq;
      const artifactId = streamed
        ? streamedArtifactId(event.type as 'text' | 'thinking')
        : seq !== undefined
          ? toolArtifactId(ids.taskId, seq)
          : `${ids.taskId}-event-${event.id}`;
      const append = streamed && sent.has(artifactId);
      // Only a streamed artifact is ever appended to: the others' ids would grow the set for the stream's whole life.
      if (streamed) sent.add(artifactId);
      const update = {
        ...ids,
        artifact: streamed
          ? artifact(version, artifactId, event.type === 'text' ? 'response' : 'thinking', data.text ?? '')
          : artifact(version, artifactId, data.artifact?.tool_name ?? 'tool', data.artifact?.content ?? ''),
        append,
        lastChunk: streamed ? data.final === true : true,
      };
      return version === '0.3' ? { kind: 'artifact-update', ...update } : { artifactUpdate: update };
    }
    default:
      return undefined;
  }
}

/**
 * The agent card: a valid A2A card for both generations (1.0's `supportedInterfaces`, 0.3's
 * `url`/`preferredTransport`/`protocolVersion`), the capsule's tools as skills, upstream's
 * `capabilities.tools/shell/network`, and Murmur's own `session_id`, `capsule_name`,
 * `capsule_version`.
 */
export function renderAgentCard(card: CapsuleCard, url: string): Record<string, unknown> {
  return {
    name: card.name,
    description: card.description,
    version: card.version,
    supportedInterfaces: [
      { url, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      { url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
    ],
    url,
    preferredTransport: 'JSONRPC',
    protocolVersion: '0.3.0',
    capabilities: {
      streaming: true,
      pushNotifications: false,
      tools: card.tools.map((tool) => tool.name),
      shell: card.shell,
      network: card.network,
    },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: skillsOf(card),
    session_id: card.session_id,
    capsule_name: card.capsule_name,
    capsule_version: card.capsule_version,
  };
}

/**
 * The card's skills: one per model-visible tool, or — the spec wants at least one — the capsule
 * itself, described from its manifest, when it has none.
 */
function skillsOf(card: CapsuleCard): Array<Record<string, unknown>> {
  if (card.tools.length > 0) return card.tools.map((tool) => ({ id: tool.name, name: tool.name, description: tool.description, tags: ['tool'] }));
  const description = card.description.trim() || `${card.capsule_name} ${card.capsule_version}, a Murmur capsule`;
  return [{ id: card.capsule_name, name: card.name, description, tags: ['capsule'] }];
}
