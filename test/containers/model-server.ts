/**
 * The stand-in model endpoint of the container suite, run as a container on the stack's own
 * network (`https://model:8443`), so the executor reaches it as it would a provider — over TLS
 * (an inference endpoint off this machine must be https://), through its egress policy — and
 * nothing in the stack has to reach the host. Its certificate is the suite's own, made at test
 * time, and the executors trust that CA (`NODE_EXTRA_CA_CERTS` in the override). Bundled by the suite into its cache and
 * started with the runtime image's node. Its script: a tool result is echoed back as the answer (a
 * delegated child's completion becomes the task's answer), `delegate {…}` calls `delegate-task`,
 * anything else is answered `answer: <text>`.
 */
import { readFileSync } from 'node:fs';
import { startScriptedInference } from '../support/scripted-inference.js';

type Block = { type: string; text?: string; content?: Array<{ text?: string }> };

const model = await startScriptedInference({
  host: '0.0.0.0',
  port: Number(process.env.PORT ?? 8443),
  tls: { key: readFileSync('/opt/tls/model.key', 'utf8'), cert: readFileSync('/opt/tls/model.pem', 'utf8') },
  script: (body) => {
    const last = (body.messages as Array<{ content: Block[] | string }>).at(-1);
    const blocks = typeof last?.content === 'string' ? [{ type: 'text', text: last.content }] : (last?.content ?? []);
    const result = blocks.find((block) => block.type === 'tool_result');
    if (result) return { text: result.content?.map((part) => part.text ?? '').join('') ?? '' };
    const text = blocks.find((block) => block.type === 'text')?.text ?? '';
    if (text.startsWith('delegate '))
      return { toolCalls: [{ name: 'delegate-task', input: JSON.parse(text.slice('delegate '.length)) as Record<string, unknown> }] };
    return { text: `answer: ${text}` };
  },
});
process.stdout.write(`${JSON.stringify({ msg: 'model ready', endpoint: model.endpoint })}\n`);
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void model.close().then(() => process.exit(0)));
