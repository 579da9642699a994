// The peer `npm run bench:door` measures the door against: a plain @a2a-js/sdk server (express,
// the SDK's default request handler and in-memory task store) with an in-process executor that
// echoes the message text as an artifact and completes the task. No sandbox, no bus, no records.
// Usage: node bench/sdk-echo-server.mjs — prints `listening <base url>` once it serves.
import { randomUUID } from 'node:crypto';
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';
import express from 'express';

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  const card = {
    name: 'sdk-echo',
    description: 'echoes what it is sent',
    version: '1.0.0',
    supportedInterfaces: [{ url: `${base}/rpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' }],
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'echo', name: 'echo', description: 'echoes', tags: ['echo'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
  const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
  const executor = {
    async execute(context, events) {
      const { taskId, contextId, userMessage } = context;
      const said = userMessage.parts.map((part) => (part.content?.$case === 'text' ? part.content.value : '')).join('\n');
      if (!context.task) {
        events.publish(
          AgentEvent.task({
            id: taskId,
            contextId,
            status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString() },
            artifacts: [],
            history: [userMessage],
            metadata: undefined,
          }),
        );
      }
      events.publish(
        AgentEvent.artifactUpdate({
          taskId,
          contextId,
          append: false,
          lastChunk: true,
          metadata: undefined,
          artifact: { artifactId: randomUUID(), name: 'response', description: '', parts: [text(said)], metadata: undefined, extensions: [] },
        }),
      );
      events.publish(
        AgentEvent.statusUpdate({
          taskId,
          contextId,
          metadata: undefined,
          status: {
            state: TaskState.TASK_STATE_COMPLETED,
            timestamp: new Date().toISOString(),
            message: {
              messageId: randomUUID(),
              role: Role.ROLE_AGENT,
              parts: [text(said)],
              taskId,
              contextId,
              metadata: undefined,
              extensions: [],
              referenceTaskIds: [],
            },
          },
        }),
      );
    },
    async cancelTask() {},
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
  app.use('/rpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  process.stdout.write(`listening ${base}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
