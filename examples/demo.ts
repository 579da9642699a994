/**
 * `npm run demo`: the whole path a capsule takes before it runs, on the embedded default (every
 * service inside `mur`, on the in-process bus, no NATS needed).
 *
 *   1. build the example capsule's component from JavaScript (componentize-js)
 *   2. mur build    → a .mur.zip
 *   3. mur publish  → the global store
 *   4. mur stage    → resolve, verify, transpile; print the staged plan
 *   5. mur stage    → again: the transpiled component comes from the cache
 *   6. mur run      → an agent capsule (examples/hello-agent) with the first-party Anthropic
 *                     driver, against a scripted model on loopback (no API key needed), asked
 *                     a question over A2A while its answer streams back
 *
 * Everything it writes goes to .cache/demo/ in this repository (its own MURMUR_HOME), which it
 * clears first, so it can be run again and again; the compiled component goes to the guest build
 * cache the tests share (.cache/guests/, or MURMUR_GUEST_CACHE), so it is compiled once.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentFromJs } from '@murmur/guest-kit';
import { startScriptedInference } from '../test/support/scripted-inference.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const example = path.join(root, 'examples', 'hello-capsule');
const demoDir = path.join(root, '.cache', 'demo');
const home = path.join(demoDir, 'home');
const capsuleDir = path.join(demoDir, 'hello-capsule');
const mur = path.join(root, 'cli', 'bin', 'mur');

function step(title: string): void {
  process.stdout.write(`\n\u001b[1m== ${title}\u001b[0m\n`);
}

function runMur(...args: string[]): void {
  process.stdout.write(`$ mur ${args.join(' ')}\n`);
  const result = spawnSync(mur, args, { stdio: 'inherit', env: { ...process.env, MURMUR_HOME: home, MURMUR_NATS_URL: '' } });
  if (result.status !== 0) {
    process.stderr.write(`\nthe demo stopped: 'mur ${args[0]}' exited with ${result.status}\n`);
    process.exit(result.status ?? 1);
  }
}

await fs.rm(demoDir, { recursive: true, force: true });
await fs.mkdir(capsuleDir, { recursive: true });

step('1. the capsule component, from examples/hello-capsule/capsule.js');
const started = Date.now();
process.stdout.write('componentize-js: building a WebAssembly component from JavaScript (a few seconds the first time)...\n');
const guest = await componentFromJs({
  source: await fs.readFile(path.join(example, 'capsule.js'), 'utf8'),
  world: await fs.readFile(path.join(example, 'capsule.wit'), 'utf8'),
  worldName: 'capsule',
});
process.stdout.write(
  `${guest.cacheHit ? 'reused' : 'built'} ${(guest.bytes.byteLength / 1e6).toFixed(1)} MB component in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
);
await fs.copyFile(path.join(example, 'murmur.yaml'), path.join(capsuleDir, 'murmur.yaml'));
await fs.writeFile(path.join(capsuleDir, 'capsule.wasm'), guest.bytes);

step('2. package it');
runMur('build', capsuleDir);

step('3. publish it to the global store');
runMur('publish', path.join(capsuleDir, 'hello-0.1.0.mur.zip'));
runMur('list', '-g');

step('4. stage it from the registry: resolve, verify sha256, transpile with jco');
runMur('stage', '--capsule', 'hello', '--capsule-version', '0.1.0');

step('5. stage it again: the transpiled component is a cache hit');
runMur('stage', '--capsule', 'hello', '--capsule-version', '0.1.0');

step('6. run an agent capsule and talk to it over A2A');
// The model is scripted: it looks around with the shell first, then answers with what it saw.
const model = await startScriptedInference({
  stream: true,
  script: (body, index) => {
    if (index === 0) return { toolCalls: [{ name: 'sh', input: { command: 'echo "$(id -un) in $(pwd)"; ls' } }] };
    const messages = body.messages as Array<{ content: Array<{ type: string; content?: Array<{ text: string }> }> }>;
    const seen = messages.at(-1)?.content.find((block) => block.type === 'tool_result')?.content?.[0]?.text ?? '';
    const lines = seen.split('\n');
    const whoami = lines[lines.indexOf('Stdout:') + 1] ?? 'someone';
    return {
      text: `Hello! I am running as ${whoami}, and my workdir holds: ${lines
        .slice(lines.indexOf('Stdout:') + 2, lines.indexOf('Stderr:'))
        .filter(Boolean)
        .join(', ')}.`,
    };
  },
});
const agentDir = path.join(demoDir, 'hello-agent');
await fs.mkdir(agentDir, { recursive: true });
const template = await fs.readFile(path.join(root, 'examples', 'hello-agent', 'murmur.yaml'), 'utf8');
await fs.writeFile(path.join(agentDir, 'murmur.yaml'), template.replaceAll('__ENDPOINT__', model.endpoint).replaceAll('__AUTHORITY__', model.authority));
process.stdout.write(`$ mur run --json   (in ${path.relative(process.cwd(), agentDir)}; the model is scripted at ${model.endpoint})\n`);
const agent = spawn(mur, ['run', '--json'], {
  cwd: agentDir,
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, MURMUR_HOME: home, MURMUR_NATS_URL: '' },
});
const launchLine = await new Promise<string>((resolve) => {
  // Its refusal is on the terminal already (stderr is inherited): the demo stops as at any other step.
  const refused = async (code: number | null): Promise<void> => {
    process.stderr.write(`\nthe demo stopped: 'mur run' exited with ${code} before it launched\n`);
    await model.close();
    process.exit(code || 1);
  };
  agent.once('exit', refused);
  createInterface({ input: agent.stdout }).once('line', (line) => {
    agent.off('exit', refused);
    resolve(line);
  });
});
process.stdout.write(`${launchLine}\n`);
const { url } = JSON.parse(launchLine) as { url: string };
const card = (await (await fetch(new URL('.well-known/agent-card.json', url))).json()) as { name: string; skills: Array<{ id: string }> };
process.stdout.write(`agent card: ${card.name}, skills: ${card.skills.map((skill) => skill.id).join(', ') || 'none'}\n`);
process.stdout.write('message/stream "who are you, and where?"\n');
const stream = await fetch(url, {
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
  body: JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'message/stream',
    params: { message: { kind: 'message', messageId: 'demo-1', role: 'user', parts: [{ kind: 'text', text: 'who are you, and where?' }] } },
  }),
});
let buffered = '';
for await (const chunk of stream.body as unknown as AsyncIterable<Uint8Array>) {
  buffered += Buffer.from(chunk).toString();
  for (let end = buffered.indexOf('\n\n'); end >= 0; end = buffered.indexOf('\n\n')) {
    const frame = buffered.slice(0, end);
    buffered = buffered.slice(end + 2);
    const id = /^id: (.*)$/m.exec(frame)?.[1];
    const data = /^data: (.*)$/m.exec(frame)?.[1];
    if (!data) continue;
    const result = (
      JSON.parse(data) as {
        result: {
          kind: string;
          status?: { state: string; message?: { parts: Array<{ text: string }> } };
          artifact?: { name: string; parts: Array<{ text: string }> };
        };
      }
    ).result;
    const detail = result.status
      ? `${result.status.state}${result.status.message ? `: ${result.status.message.parts[0]?.text}` : ''}`
      : `${result.artifact?.name}: ${JSON.stringify(result.artifact?.parts[0]?.text)}`;
    process.stdout.write(`  [${id ?? '-'}] ${result.kind} ${detail}\n`);
  }
}
// A sleeping agent waits for its next task until its launcher stops it, as Ctrl-C would.
process.stdout.write('stopping the sleeping agent, as Ctrl-C would:\n');
agent.kill('SIGTERM');
await new Promise((resolve) => agent.once('exit', resolve));
await model.close();

process.stdout.write(`\nDone. The demo's store, cache and workdirs are in ${path.relative(process.cwd(), demoDir) || demoDir}.\n`);
