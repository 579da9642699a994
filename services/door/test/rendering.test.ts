import type { A2aVersion, CapsuleCard, SessionEvent, TaskState, TaskView } from '@murmur/shared';
import { describe, expect, it } from 'vitest';
import { renderAgentCard, renderSendResult, renderStreamEvent, renderTask } from '../src/rendering.js';

/** An event as a stream that has sent nothing yet renders it. */
const fresh = (version: A2aVersion, event: SessionEvent): Record<string, unknown> | undefined => renderStreamEvent(version, event, new Set());

const UPDATED = '2025-01-02T03:04:05.000Z';
const EVENT_TIME = '2025-06-07T08:09:10.000Z';

function taskView(overrides: Partial<TaskView> = {}): TaskView {
  return {
    id: 'tsk_1',
    context_id: 'ctx_1',
    state: 'working',
    message: 'inference turn 1',
    artifacts: [],
    history: [{ role: 'user', message_id: 'msg_u1', text: 'hello' }],
    updated_at: UPDATED,
    ...overrides,
  };
}

function event(overrides: Partial<SessionEvent> & Pick<SessionEvent, 'type' | 'data'>): SessionEvent {
  return { id: 7, task_id: 'tsk_1', context_id: 'ctx_1', final: false, time: EVENT_TIME, ...overrides };
}

type Rendered = Record<string, unknown>;
const at = (value: unknown, key: string): unknown => (value as Rendered)[key];

describe('rendering a task for A2A 0.3', () => {
  it('writes a working task with kind fields, lower-case state and its status message', () => {
    expect(renderTask('0.3', taskView())).toEqual({
      kind: 'task',
      id: 'tsk_1',
      contextId: 'ctx_1',
      status: {
        state: 'working',
        message: {
          kind: 'message',
          role: 'agent',
          messageId: 'tsk_1-status',
          parts: [{ kind: 'text', text: 'inference turn 1' }],
          taskId: 'tsk_1',
          contextId: 'ctx_1',
        },
        timestamp: UPDATED,
      },
      artifacts: [],
      history: [{ kind: 'message', role: 'user', messageId: 'msg_u1', parts: [{ kind: 'text', text: 'hello' }], taskId: 'tsk_1', contextId: 'ctx_1' }],
    });
  });

  it('writes the agent’s history lines with role agent', () => {
    const rendered = renderTask(
      '0.3',
      taskView({
        history: [
          { role: 'user', message_id: 'm1', text: 'q' },
          { role: 'agent', message_id: 'm2', text: 'a' },
        ],
      }),
    );
    expect((at(rendered, 'history') as Rendered[]).map((entry) => entry.role)).toEqual(['user', 'agent']);
  });

  it('leaves the status message out when the task has none', () => {
    const { message: _message, ...withoutMessage } = taskView({ state: 'submitted' });
    const status = at(renderTask('0.3', withoutMessage), 'status');
    expect(status).toEqual({ state: 'submitted', timestamp: UPDATED });
  });

  it('shows the prompt as status message and a prompt artifact while input is required', () => {
    const rendered = renderTask(
      '0.3',
      taskView({ state: 'input-required', message: 'Which file?', prompt: 'Which file?', artifacts: [{ name: 'read', text: 'contents' }] }),
    );
    expect(at(at(rendered, 'status'), 'state')).toBe('input-required');
    expect(at(at(at(rendered, 'status'), 'message'), 'parts')).toEqual([{ kind: 'text', text: 'Which file?' }]);
    expect(at(rendered, 'artifacts')).toEqual([
      { artifactId: 'tsk_1-artifact-0', name: 'read', parts: [{ kind: 'text', text: 'contents' }] },
      { artifactId: 'prompt', name: 'prompt', parts: [{ kind: 'text', text: 'Which file?' }] },
    ]);
  });

  it('shows the response as status message and a response artifact once completed', () => {
    const rendered = renderTask('0.3', taskView({ state: 'completed', message: 'session ended', response: 'The answer is 42.' }));
    expect(at(at(rendered, 'status'), 'state')).toBe('completed');
    expect(at(at(at(rendered, 'status'), 'message'), 'parts')).toEqual([{ kind: 'text', text: 'The answer is 42.' }]);
    expect(at(rendered, 'artifacts')).toEqual([{ artifactId: 'response', name: 'response', parts: [{ kind: 'text', text: 'The answer is 42.' }] }]);
  });

  it('shows no prompt artifact for a task that is no longer waiting for input, even when the view still carries a prompt', () => {
    const rendered = renderTask('0.3', taskView({ state: 'working', message: 'resumed', prompt: 'stale question' }));
    expect(at(rendered, 'artifacts')).toEqual([]);
    expect(at(at(at(rendered, 'status'), 'message'), 'parts')).toEqual([{ kind: 'text', text: 'resumed' }]);
  });

  it('leaves the status message out for an empty response but still shows the response artifact', () => {
    const rendered = renderTask('0.3', taskView({ state: 'completed', message: 'session ended', response: '' }));
    expect(at(rendered, 'status')).toEqual({ state: 'completed', timestamp: UPDATED });
    expect(at(rendered, 'artifacts')).toEqual([{ artifactId: 'response', name: 'response', parts: [{ kind: 'text', text: '' }] }]);
  });

  it('shows a failed task’s message and no prompt or response artifact', () => {
    const rendered = renderTask('0.3', taskView({ state: 'failed', message: 'input-timeout' }));
    expect(at(at(rendered, 'status'), 'state')).toBe('failed');
    expect(at(at(at(rendered, 'status'), 'message'), 'parts')).toEqual([{ kind: 'text', text: 'input-timeout' }]);
    expect(at(rendered, 'artifacts')).toEqual([]);
  });

  it('keeps each artifact’s number when the oldest have been let go', () => {
    const rendered = renderTask('0.3', taskView({ artifacts: [{ name: 'late', text: '1', seq: 140 }] }));
    expect((at(rendered, 'artifacts') as Rendered[])[0]?.artifactId).toBe('tsk_1-artifact-140');
  });

  it('numbers the task’s own artifacts in order', () => {
    const rendered = renderTask(
      '0.3',
      taskView({
        artifacts: [
          { name: 'a', text: '1' },
          { name: 'b', text: '2' },
        ],
      }),
    );
    expect((at(rendered, 'artifacts') as Rendered[]).map((artifact) => [artifact.artifactId, artifact.name])).toEqual([
      ['tsk_1-artifact-0', 'a'],
      ['tsk_1-artifact-1', 'b'],
    ]);
  });

  it('is the message/send result as is', () => {
    const view = taskView({ state: 'rejected', message: 'task rejected: capsule is busy' });
    expect(renderSendResult('0.3', view)).toEqual(renderTask('0.3', view));
    expect(at(renderSendResult('0.3', view), 'kind')).toBe('task');
  });
});

describe('rendering a task for A2A 1.0', () => {
  it('writes a working task in proto-JSON: TASK_STATE_*, ROLE_*, and no kind fields', () => {
    expect(renderTask('1.0', taskView())).toEqual({
      id: 'tsk_1',
      contextId: 'ctx_1',
      status: {
        state: 'TASK_STATE_WORKING',
        message: { messageId: 'tsk_1-status', role: 'ROLE_AGENT', parts: [{ text: 'inference turn 1' }], taskId: 'tsk_1', contextId: 'ctx_1' },
        timestamp: UPDATED,
      },
      artifacts: [],
      history: [{ messageId: 'msg_u1', role: 'ROLE_USER', parts: [{ text: 'hello' }], taskId: 'tsk_1', contextId: 'ctx_1' }],
    });
  });

  it.each<[TaskState, string]>([
    ['submitted', 'TASK_STATE_SUBMITTED'],
    ['working', 'TASK_STATE_WORKING'],
    ['input-required', 'TASK_STATE_INPUT_REQUIRED'],
    ['completed', 'TASK_STATE_COMPLETED'],
    ['failed', 'TASK_STATE_FAILED'],
    ['rejected', 'TASK_STATE_REJECTED'],
    ['canceled', 'TASK_STATE_CANCELED'],
  ])('writes the state %s as %s, and as itself in 0.3', (state, v10) => {
    expect(at(at(renderTask('1.0', taskView({ state })), 'status'), 'state')).toBe(v10);
    expect(at(at(renderTask('0.3', taskView({ state })), 'status'), 'state')).toBe(state);
  });

  it('writes the agent’s history lines with ROLE_AGENT', () => {
    const rendered = renderTask(
      '1.0',
      taskView({
        history: [
          { role: 'user', message_id: 'm1', text: 'q' },
          { role: 'agent', message_id: 'm2', text: 'a' },
        ],
      }),
    );
    expect((at(rendered, 'history') as Rendered[]).map((entry) => entry.role)).toEqual(['ROLE_USER', 'ROLE_AGENT']);
  });

  it('shows the prompt artifact while input is required, with bare text parts', () => {
    const rendered = renderTask('1.0', taskView({ state: 'input-required', prompt: 'Name?', message: 'Name?' }));
    expect(at(rendered, 'artifacts')).toEqual([{ artifactId: 'prompt', name: 'prompt', parts: [{ text: 'Name?' }] }]);
    expect(at(at(rendered, 'status'), 'message')).toEqual({
      messageId: 'tsk_1-status',
      role: 'ROLE_AGENT',
      parts: [{ text: 'Name?' }],
      taskId: 'tsk_1',
      contextId: 'ctx_1',
    });
  });

  it('shows the response artifact once completed', () => {
    const rendered = renderTask('1.0', taskView({ state: 'completed', message: 'session ended', response: 'done' }));
    expect(at(rendered, 'artifacts')).toEqual([{ artifactId: 'response', name: 'response', parts: [{ text: 'done' }] }]);
    expect(at(at(at(rendered, 'status'), 'message'), 'parts')).toEqual([{ text: 'done' }]);
  });

  it('wraps the SendMessage result as {task}', () => {
    const view = taskView({ state: 'submitted', message: 'accepted' });
    expect(renderSendResult('1.0', view)).toEqual({ task: renderTask('1.0', view) });
  });
});

describe('rendering a stream event', () => {
  it('writes a status event in 0.3 as a status-update with final', () => {
    const status = event({
      type: 'status',
      state: 'working',
      data: { id: 'tsk_1', context_id: 'ctx_1', status: { state: 'working', message: 'started' }, final: false },
    });
    expect(fresh('0.3', status)).toEqual({
      kind: 'status-update',
      taskId: 'tsk_1',
      contextId: 'ctx_1',
      status: {
        state: 'working',
        message: {
          kind: 'message',
          role: 'agent',
          messageId: 'tsk_1-status-7',
          parts: [{ kind: 'text', text: 'started' }],
          taskId: 'tsk_1',
          contextId: 'ctx_1',
        },
        timestamp: EVENT_TIME,
      },
      final: false,
    });
  });

  it('writes a status event in 1.0 as {statusUpdate}, without kind or final', () => {
    const status = event({ type: 'status', state: 'failed', final: true, data: { status: { state: 'failed', message: 'input-timeout' } } });
    expect(fresh('1.0', status)).toEqual({
      statusUpdate: {
        taskId: 'tsk_1',
        contextId: 'ctx_1',
        status: {
          state: 'TASK_STATE_FAILED',
          message: { messageId: 'tsk_1-status-7', role: 'ROLE_AGENT', parts: [{ text: 'input-timeout' }], taskId: 'tsk_1', contextId: 'ctx_1' },
          timestamp: EVENT_TIME,
        },
      },
    });
  });

  it('carries final: true on a terminal 0.3 status-update', () => {
    const done = event({
      type: 'status',
      state: 'completed',
      final: true,
      data: { status: { state: 'completed', message: 'session ended', response: 'answer' } },
    });
    expect(at(fresh('0.3', done), 'final')).toBe(true);
  });

  it('uses the response as a completed status’s message, falling back to the message', () => {
    const done = event({
      type: 'status',
      state: 'completed',
      final: true,
      data: { status: { state: 'completed', message: 'session ended', response: 'answer' } },
    });
    expect(at(at(at(at(fresh('1.0', done), 'statusUpdate'), 'status'), 'message'), 'parts')).toEqual([{ text: 'answer' }]);
    const bare = event({ type: 'status', state: 'completed', final: true, data: { status: { state: 'completed', message: 'session ended' } } });
    expect(at(at(at(fresh('0.3', bare), 'status'), 'message'), 'parts')).toEqual([{ kind: 'text', text: 'session ended' }]);
  });

  it('does not show a response on a status that is not completed', () => {
    const odd = event({ type: 'status', state: 'working', data: { status: { state: 'working', message: 'turn 2', response: 'not yet' } } });
    expect(at(at(at(fresh('0.3', odd), 'status'), 'message'), 'parts')).toEqual([{ kind: 'text', text: 'turn 2' }]);
  });

  it('reads a status event without a state as working, and without a message leaves the message out', () => {
    const rendered = fresh('0.3', event({ type: 'status', data: {} }));
    expect(at(rendered, 'status')).toEqual({ state: 'working', timestamp: EVENT_TIME });
  });

  it('gives every rendering of one event the same timestamp and message id, the host’s', () => {
    const status = event({ type: 'status', state: 'working', data: { status: { message: 'x' } } });
    expect(fresh('0.3', status)).toEqual(fresh('0.3', status));
    expect(at(at(fresh('0.3', status), 'status'), 'timestamp')).toBe(EVENT_TIME);
  });

  it('writes a tool artifact as a whole artifact-update in 0.3', () => {
    const tool = event({ id: 12, type: 'artifact', data: { id: 'tsk_1', artifact: { tool_name: 'read_file', content: 'bytes' } } });
    expect(fresh('0.3', tool)).toEqual({
      kind: 'artifact-update',
      taskId: 'tsk_1',
      contextId: 'ctx_1',
      artifact: { artifactId: 'tsk_1-event-12', name: 'read_file', parts: [{ kind: 'text', text: 'bytes' }] },
      append: false,
      lastChunk: true,
    });
  });

  it('writes a tool artifact as {artifactUpdate} in 1.0', () => {
    const tool = event({ id: 12, type: 'artifact', data: { id: 'tsk_1', artifact: { tool_name: 'read_file', content: 'bytes' } } });
    expect(fresh('1.0', tool)).toEqual({
      artifactUpdate: {
        taskId: 'tsk_1',
        contextId: 'ctx_1',
        artifact: { artifactId: 'tsk_1-event-12', name: 'read_file', parts: [{ text: 'bytes' }] },
        append: false,
        lastChunk: true,
      },
    });
  });

  it('names a numbered tool artifact in a stream as the task names it, so a client joining a stream and GetTask holds it once', () => {
    const streamed = fresh('1.0', event({ id: 12, type: 'artifact', data: { id: 'tsk_1', artifact: { tool_name: 'sh', content: 'out', seq: 3 } } }));
    const task = renderTask('1.0', taskView({ artifacts: [{ name: 'sh', text: 'out', seq: 3 }] }));
    const inStream = at(at(streamed, 'artifactUpdate'), 'artifact') as Rendered;
    expect(inStream.artifactId).toBe('tsk_1-artifact-3');
    expect((at(task, 'artifacts') as Rendered[])[0]).toEqual(inStream);
  });

  it('names an artifact without a tool name “tool” with empty content', () => {
    const rendered = fresh('1.0', event({ type: 'artifact', data: {} }));
    expect(at(at(rendered, 'artifactUpdate'), 'artifact')).toEqual({ artifactId: 'tsk_1-event-7', name: 'tool', parts: [{ text: '' }] });
  });

  it('writes text chunks as pieces of the response stream: the first this stream sends opens it, the rest append, the last one marked', () => {
    const sent = new Set<string>();
    const first = renderStreamEvent('0.3', event({ type: 'text', data: { id: 'tsk_1', text: 'Hel', final: false } }), sent);
    expect(first).toEqual({
      kind: 'artifact-update',
      taskId: 'tsk_1',
      contextId: 'ctx_1',
      artifact: { artifactId: 'response-stream', name: 'response', parts: [{ kind: 'text', text: 'Hel' }] },
      append: false,
      lastChunk: false,
    });
    const last = renderStreamEvent('1.0', event({ type: 'text', data: { id: 'tsk_1', text: 'lo', final: true } }), sent);
    expect(last).toEqual({
      artifactUpdate: {
        taskId: 'tsk_1',
        contextId: 'ctx_1',
        artifact: { artifactId: 'response-stream', name: 'response', parts: [{ text: 'lo' }] },
        append: true,
        lastChunk: true,
      },
    });
    // Another stream (another client, or one that resubscribed) has sent nothing of it yet.
    expect(at(renderStreamEvent('0.3', event({ type: 'text', data: { text: 'lo' } }), new Set()), 'append')).toBe(false);
  });

  it('writes thinking chunks to the thinking stream, an artifact of its own', () => {
    const sent = new Set<string>(['response-stream']);
    const thinking = renderStreamEvent('1.0', event({ type: 'thinking', data: { text: 'hmm' } }), sent);
    expect(at(thinking, 'artifactUpdate')).toEqual({
      taskId: 'tsk_1',
      contextId: 'ctx_1',
      artifact: { artifactId: 'thinking-stream', name: 'thinking', parts: [{ text: 'hmm' }] },
      append: false,
      lastChunk: false,
    });
    expect(at(at(renderStreamEvent('1.0', event({ type: 'thinking', data: { text: '…' } }), sent), 'artifactUpdate'), 'append')).toBe(true);
  });

  it('renders nothing for an event that belongs to no task', () => {
    for (const version of ['0.3', '1.0'] as const) {
      expect(fresh(version, event({ type: 'status', task_id: null, state: 'working', data: { status: { message: 'x' } } }))).toBeUndefined();
      expect(fresh(version, event({ type: 'text', task_id: null, context_id: null, data: { text: 'x' } }))).toBeUndefined();
    }
  });

  it('renders nothing for an error event, which A2A streams do not carry', () => {
    expect(fresh('0.3', event({ type: 'error', data: { message: 'x' } }))).toBeUndefined();
    expect(fresh('1.0', event({ type: 'error', data: { message: 'x' } }))).toBeUndefined();
  });

  it('writes an empty context id when the event has none', () => {
    expect(at(fresh('0.3', event({ type: 'text', context_id: null, data: { text: 'x' } })), 'contextId')).toBe('');
  });
});

describe('rendering the agent card', () => {
  const card: CapsuleCard = {
    name: 'helper',
    description: 'Helps.',
    version: '1.2.3',
    session_id: 'ses_1',
    capsule_name: 'acme/helper',
    capsule_version: '1.2.3',
    tools: [
      { name: 'read', description: 'Reads a file' },
      { name: 'bash', description: 'Runs bash' },
    ],
    shell: true,
    network: false,
    task_acceptance: 'queue',
    conversation: 'stateless',
  };

  it('serves both generations: 1.0 interfaces and 0.3 url, transport and version', () => {
    const rendered = renderAgentCard(card, 'http://127.0.0.1:7730/sessions/ses_1');
    expect(rendered.supportedInterfaces).toEqual([
      { url: 'http://127.0.0.1:7730/sessions/ses_1', protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      { url: 'http://127.0.0.1:7730/sessions/ses_1', protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
    ]);
    expect(rendered.url).toBe('http://127.0.0.1:7730/sessions/ses_1');
    expect(rendered.preferredTransport).toBe('JSONRPC');
    expect(rendered.protocolVersion).toBe('0.3.0');
  });

  it('lists the tools as skills and in capabilities, with shell and network', () => {
    const rendered = renderAgentCard(card, 'http://door');
    expect(rendered.skills).toEqual([
      { id: 'read', name: 'read', description: 'Reads a file', tags: ['tool'] },
      { id: 'bash', name: 'bash', description: 'Runs bash', tags: ['tool'] },
    ]);
    expect(rendered.capabilities).toEqual({ streaming: true, pushNotifications: false, tools: ['read', 'bash'], shell: true, network: false });
  });

  it('carries the name, description, version, text modes and Murmur’s own identity fields', () => {
    const rendered = renderAgentCard(card, 'http://door');
    expect(rendered).toMatchObject({
      name: 'helper',
      description: 'Helps.',
      version: '1.2.3',
      defaultInputModes: ['text/plain'],
      defaultOutputModes: ['text/plain'],
      session_id: 'ses_1',
      capsule_name: 'acme/helper',
      capsule_version: '1.2.3',
    });
    expect(rendered).not.toHaveProperty('task_acceptance');
  });

  it('describes a capsule without tools as one skill of its own, since a card must have at least one', () => {
    const rendered = renderAgentCard({ ...card, tools: [] }, 'http://door');
    expect(rendered.skills).toEqual([{ id: 'acme/helper', name: 'helper', description: 'Helps.', tags: ['capsule'] }]);
    expect(at(rendered.capabilities, 'tools')).toEqual([]);
    const undescribed = renderAgentCard({ ...card, description: '  ', tools: [] }, 'http://door');
    expect(undescribed.skills).toEqual([{ id: 'acme/helper', name: 'helper', description: 'acme/helper 1.2.3, a Murmur capsule', tags: ['capsule'] }]);
  });
});
