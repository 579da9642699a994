import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { Role, TaskState } from '@a2a-js/sdk';
import { Client, ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { LegacyJsonRpcTransport } from '@a2a-js/sdk/compat/v0_3/client';
import { TaskNotFoundError } from '@a2a-js/sdk/errors';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, startAgent } from './support/agents.js';
import { tempDir } from './support/fs.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * The official A2A client, `@a2a-js/sdk` 1.3 — its 1.x client and its `compat/v0_3` transport —
 * against a running agent capsule's door: find the card, send, stream, get the task.
 */

type AnyClient = Pick<Client, 'getAgentCard' | 'sendMessage' | 'sendMessageStream' | 'getTask'>;

function message(text: string) {
  // The SDK's own message model (it writes the wire itself, in whichever generation it speaks).
  return { message: { messageId: randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: text } }] } } as unknown as Parameters<
    Client['sendMessage']
  >[0];
}

function textOf(task: { artifacts?: Array<{ name?: string; parts: Array<{ content?: { $case?: string; value?: unknown } }> }> }): string | undefined {
  const response = task.artifacts?.find((artifact) => artifact.name === 'response');
  return response?.parts[0]?.content?.value as string | undefined;
}

describe('the @a2a-js/sdk client', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  let agent: RunningAgent;

  beforeAll(async () => {
    scratch = await tempDir('murmur-sdk-');
    inference = await startScriptedInference({
      stream: true,
      script: (body) => {
        const last = (body.messages as Array<{ content: Array<{ text?: string }> }>).at(-1);
        return { text: `echo: ${last?.content[0]?.text ?? ''}` };
      },
    });
    const project = await agentProject(
      path.join(scratch.dir, 'agent'),
      agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4' }),
    );
    agent = await startAgent(project, { MURMUR_HOME: path.join(scratch.dir, 'home') });
  });

  afterAll(async () => {
    await agent?.stop();
    await inference?.close();
    await scratch?.cleanup();
  });

  async function exercise(client: AnyClient): Promise<void> {
    const card = await client.getAgentCard();
    expect(card.name).toBe('agent');

    const sent = (await client.sendMessage(message('hello sdk'))) as { id: string; status?: { state: number } } & Parameters<typeof textOf>[0];
    expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(textOf(sent)).toBe('echo: hello sdk');

    const kinds: string[] = [];
    let streamed = '';
    let finalState: number | undefined;
    for await (const event of client.sendMessageStream(message('stream sdk'))) {
      const payload = event.payload as {
        $case: string;
        value: { status?: { state: number }; artifact?: { name?: string; parts: Array<{ content?: { value?: unknown } }> } };
      };
      kinds.push(payload.$case);
      if (payload.value.artifact?.name === 'response') streamed += String(payload.value.artifact.parts[0]?.content?.value ?? '');
      if (payload.value.status) finalState = payload.value.status.state;
    }
    expect(kinds[0]).toBe('task');
    expect(kinds).toContain('statusUpdate');
    expect(kinds).toContain('artifactUpdate');
    expect(streamed).toBe('echo: stream sdk');
    expect(finalState).toBe(TaskState.TASK_STATE_COMPLETED);

    const got = (await client.getTask({ id: sent.id, tenant: '' } as never)) as { id: string; status?: { state: number } };
    expect(got.id).toBe(sent.id);
    expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    await expect(client.getTask({ id: 'tsk_not_here', tenant: '' } as never)).rejects.toBeInstanceOf(TaskNotFoundError);
  }

  it('1.x: finds the card at the session URL, sends, streams and gets the task', async () => {
    const client = await new ClientFactory().createFromUrl(agent.url);
    await exercise(client);
  });

  it('1.x: lists the tasks, newest first, as its caller asks without naming a status', async () => {
    const client = await new ClientFactory().createFromUrl(agent.url);
    await client.sendMessage(message('to be listed'));
    // The SDK writes a status the caller left out as `UNRECOGNIZED`: it must read as no filter.
    const listed = (await client.listTasks({ pageSize: 2, tenant: '' } as never)) as { tasks: Array<{ id: string; status?: { state: number } }> };
    expect(listed.tasks).toHaveLength(2);
    expect(listed.tasks.every((task) => task.status?.state === TaskState.TASK_STATE_COMPLETED)).toBe(true);
  });

  it('1.x: a task whose words outgrow one bus message is still answered and read: its history gives way first, then the answer is cut, saying so', async () => {
    const client = await new ClientFactory().createFromUrl(agent.url);
    // 400 KB each way: the task's answer, its history (the message and the answer) held whole were 1.2 MB.
    const large = 'l'.repeat(400_000);
    const sent = (await client.sendMessage(message(large))) as { id: string; status?: { state: number }; history?: unknown[] } & Parameters<typeof textOf>[0];
    expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(textOf(sent)).toBe(`echo: ${large}`);
    expect(sent.history ?? []).toHaveLength(0);
    const got = (await client.getTask({ id: sent.id, historyLength: 10 } as never)) as Parameters<typeof textOf>[0];
    expect(textOf(got)).toBe(`echo: ${large}`);
    // An answer larger than a reply may carry is cut, and the cut says so, rather than the task failing to be read.
    const huge = 'h'.repeat(900_000);
    const cut = (await client.sendMessage(message(huge))) as { id: string; status?: { state: number } } & Parameters<typeof textOf>[0];
    expect(cut.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    const answer = textOf(cut) ?? '';
    expect(answer.startsWith('echo: hhhh')).toBe(true);
    expect(answer.length).toBeLessThan(900_000);
    expect(answer).toMatch(/more characters cut: too long for one reply; the session’s own records hold the task whole\]$/);
    expect(textOf((await client.getTask({ id: cut.id } as never)) as Parameters<typeof textOf>[0])).toBe(answer);
  });

  it('compat/v0_3: the legacy JSON-RPC transport speaks 0.3 to the same door', async () => {
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true } }),
        transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true } })],
      }),
    );
    const card = await (await factory.createFromUrl(agent.url)).getAgentCard();
    const client = new Client(new LegacyJsonRpcTransport({ endpoint: agent.url }) as never, card);
    await exercise(client);
  });
});
