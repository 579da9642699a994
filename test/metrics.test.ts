import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningAgent, agentManifest, agentProject, rpc, startAgent, textMessage } from './support/agents.js';
import { capsuleProject } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { capsuleWat } from './support/guests.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, runMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';

/**
 * Every service serves Prometheus' `GET /metrics` (prom-client): a real nats-server and real
 * service processes, an agent answering through a door on the bus, and the counters read back
 * as a scraper reads them.
 */

/** One sample's value from Prometheus' text format, by name and the labels given (others may be present). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((pair) => [pair[1], pair[2]]));
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) return Number(match[3]);
  }
  return undefined;
}

describe('metrics', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let inference: ScriptedInference;
  const services: ServiceProcess[] = [];
  const byName = new Map<string, ServiceProcess>();
  let env: Record<string, string>;
  let agent: RunningAgent | undefined;

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-metrics-');
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') };
    for (const name of ['stager', 'executor', 'watcher', 'door', 'roost'] as const) {
      const service = await startService(name, env);
      services.push(service);
      byName.set(name, service);
    }
    inference = await startScriptedInference({ script: () => ({ text: 'counted' }) });
  });

  afterAll(async () => {
    await agent?.stop();
    for (const service of services.reverse()) await service.stop();
    await inference?.close();
    await nats?.stop();
    await scratch?.cleanup();
  });

  const scrape = async (name: string): Promise<string> => {
    const response = await fetch(`${byName.get(name)?.url}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/plain');
    return response.text();
  };

  it("counts a launch, the live session, a task and its latency, and the driver's egress by the rule that admitted it", async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'counted'),
      agentManifest(inference, { lifecycle: '  task_acceptance: queue\n  after_task: sleep' }),
    );
    agent = await startAgent(project, env);
    expect(sample(await scrape('executor'), 'murmur_launches_total', { outcome: 'launched' })).toBe(1);
    expect(sample(await scrape('executor'), 'murmur_sessions_live')).toBe(1);
    const sent = await rpc(agent.url, 'message/send', textMessage('count me'));
    const id = sent.body.result?.id;
    await eventually(
      async () => ((await rpc(agent?.url as string, 'tasks/get', { id })).body.result?.status as { state?: string })?.state === 'completed' || undefined,
      30_000,
    );
    const executor = await eventually(async () => {
      const text = await scrape('executor');
      return sample(text, 'murmur_tasks_total', { state: 'completed' }) === 1 ? text : undefined;
    });
    expect(sample(executor, 'murmur_task_duration_seconds_count', { state: 'completed' })).toBe(1);
    expect(sample(executor, 'murmur_task_duration_seconds_sum', { state: 'completed' })).toBeGreaterThan(0);
    expect(sample(executor, 'murmur_egress_decisions_total', { kind: 'http', decision: 'allowed', rule: inference.authority })).toBeGreaterThanOrEqual(1);
    await agent.stop();
    agent = undefined;
    await eventually(async () => (sample(await scrape('executor'), 'murmur_sessions_live') === 0 ? true : undefined));
    // The door asked the session over the bus: its requests are counted under the topic's pattern, never a session id.
    const door = await scrape('door');
    expect(sample(door, 'murmur_bus_request_duration_seconds_count', { topic: 'session.*.rpc', outcome: 'ok' })).toBeGreaterThanOrEqual(2);
    expect(door).not.toMatch(/topic="session\.ses_/);
  }, 120_000);

  it('counts a refused egress under no rule, and a refused launch', async () => {
    const project = await agentProject(
      path.join(scratch.dir, 'refused'),
      agentManifest(inference, { name: 'walled' }).replace(`allow: [${inference.authority}]`, 'allow: []'),
    );
    const run = await runMur(['run', '--task', 'hello'], { cwd: project, env });
    expect(run.code).toBe(1);
    const executor = await scrape('executor');
    expect(sample(executor, 'murmur_egress_decisions_total', { kind: 'http', decision: 'denied', rule: '(none)' })).toBeGreaterThanOrEqual(1);
    const before = sample(executor, 'murmur_launches_total', { outcome: 'refused' }) ?? 0;
    // The executor refuses this one itself: no conversation is recorded for the context to resume.
    const threaded = await agentProject(
      path.join(scratch.dir, 'threaded'),
      agentManifest(inference, { name: 'threaded', lifecycle: '  conversation: threaded' }),
    );
    const resumed = await runMur(['run', '--resume', 'ctx-never-recorded', '--task', 'hello'], { cwd: threaded, env });
    expect(resumed.stderr).toContain('error[E-CTX-001]');
    expect(sample(await scrape('executor'), 'murmur_launches_total', { outcome: 'refused' })).toBe(before + 1);
  }, 120_000);

  it("counts the stager's transpile cache, a miss and then a hit, and every service serves its process metrics", async () => {
    // A script capsule of its own: the agents' driver ships transpiled, a hit from the start.
    const project = await capsuleProject(path.join(scratch.dir, 'staged'), 'name: staged\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    for (let index = 0; index < 2; index += 1) expect((await runMur(['stage', project], { env })).code).toBe(0);
    const stager = await scrape('stager');
    expect(sample(stager, 'murmur_stage_components_total', { cache: 'hit' })).toBeGreaterThanOrEqual(1);
    expect(sample(stager, 'murmur_stage_components_total', { cache: 'miss' })).toBeGreaterThanOrEqual(1);
    for (const name of byName.keys()) expect(sample(await scrape(name), 'process_resident_memory_bytes')).toBeGreaterThan(0);
  }, 120_000);
});
