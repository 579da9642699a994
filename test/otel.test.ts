import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ATTRIBUTE_VALUE_CHARACTERS, openOtelTracer } from '../shared/src/node/otel.js';
import { agentManifest, agentProject, rpc, startAgent, textMessage, traceOf } from './support/agents.js';
import { probeToolArtifact, publishInto } from './support/artifacts.js';
import { probeProject, probeResults } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from './support/otlp-receiver.js';
import { freePort } from './support/ports.js';
import { type ServiceProcess, eventually, runMur, startService } from './support/processes.js';
import { type ScriptedInference, startScriptedInference } from './support/scripted-inference.js';
import { type CountingServer, startCountingServer } from './support/servers.js';

/**
 * OpenTelemetry: upstream's session spans and the services' own, exported by the official SDK as
 * OTLP/HTTP JSON and decoded here by a loopback collector — the only stand-in besides the model.
 */
describe('OpenTelemetry export', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let collector: OtlpReceiver;
  const servers: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    scratch = await tempDir('murmur-otel-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    await publishInto(path.join(env.MURMUR_HOME as string, 'artifacts'), await probeToolArtifact());
    collector = await startOtlpReceiver();
  });

  afterAll(async () => {
    for (const server of servers) await server.close();
    await collector?.close();
    await scratch?.cleanup();
  });

  async function model(): Promise<ScriptedInference> {
    const server = await startScriptedInference({
      script: (_body, index) =>
        index === 0
          ? {
              toolCalls: [
                { name: 'probe-tool', input: { actions: [{ op: 'print', text: 'traced' }] } },
                { name: 'sh', input: { command: 'echo traced by the shell' } },
              ],
            }
          : { text: 'done' },
    });
    servers.push(server);
    return server;
  }

  function agentYaml(inference: ScriptedInference, name: string, otelEndpoint: string | undefined, network: string[]): string {
    return agentManifest(inference, {
      name,
      artifacts: '  - name: probe-tool\n    version: 1.0.0\n    runtime: tool',
      capabilities: '  shell:\n    allow: [sh]',
      network,
      ...(otelEndpoint ? { extra: `observability:\n  otel_endpoint: ${otelEndpoint}\n` } : {}),
    });
  }

  const named = (spans: ReceivedSpan[], name: string): ReceivedSpan[] => spans.filter((span) => span.name === name);

  it("exports upstream's spans for an agent session: the session at the root, its inference, tool call and shell under it, with upstream's attributes and the capsule as the resource", async () => {
    const inference = await model();
    const project = await agentProject(path.join(scratch.dir, 'spans'), agentYaml(inference, 'traced-agent', collector.endpoint, [collector.authority]));
    const result = await runMur(['run', '--json', '--task', 'use both tools'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const { session_id: sessionId, workdir } = JSON.parse(result.stdout) as { session_id: string; workdir: string };
    const spans = collector.spans().filter((span) => span.resource['service.name'] === 'traced-agent');
    const [session] = named(spans, 'capsule.session');
    expect(session, JSON.stringify(collector.spans().map((span) => span.name))).toBeDefined();
    expect(session?.parentSpanId).toBeUndefined();
    expect(session?.resource).toMatchObject({ 'service.name': 'traced-agent', 'service.version': '0.1.0' });
    expect(session?.attributes).toMatchObject({ exit_status: 'ok', 'murmur.session_id': sessionId });
    const children = spans.filter((span) => span !== session);
    expect(children.every((span) => span.traceId === session?.traceId && span.parentSpanId === session?.spanId)).toBe(true);

    const inferences = named(spans, 'capsule.inference').sort((a, b) => Number(a.attributes.turn) - Number(b.attributes.turn));
    expect(inferences.map((span) => span.attributes)).toEqual([
      { turn: 0, input_tokens: 11, output_tokens: 7, decision: 'tool_call', tool_name: 'probe-tool', model: 'test-model' },
      { turn: 1, input_tokens: 11, output_tokens: 7, decision: 'end_turn', model: 'test-model' },
    ]);
    const toolCalls = named(spans, 'capsule.tool_call');
    expect(toolCalls.map((span) => span.attributes.tool_name).sort()).toEqual(['probe-tool', 'sh']);
    for (const span of toolCalls) {
      expect(span.attributes).toMatchObject({
        status: 'ok',
        input_bytes: expect.any(Number),
        output_bytes: expect.any(Number),
        duration_ms: expect.any(Number),
      });
      expect(span.endMs - span.startMs).toBe(span.attributes.duration_ms);
    }
    const [shell] = named(spans, 'capsule.shell');
    expect(shell?.attributes).toMatchObject({ exit_code: 0, duration_ms: expect.any(Number) });
    expect(String(shell?.attributes.command)).toContain('echo traced by the shell');
    // The executor's decision on the model call is in the session's trace, with the rule that admitted it.
    const egress = named(spans, 'murmur.egress');
    expect(egress.some((span) => span.attributes['murmur.egress.decision'] === 'allowed' && span.attributes['murmur.egress.rule'] !== undefined)).toBe(true);
    // Everything the trace says, and in the same words: a span per record.
    const trace = await traceOf(workdir);
    expect(inferences).toHaveLength(trace.filter((event) => event.event_type === 'inference').length);
    await expect(existsLog(workdir)).resolves.toBe(false);
    expect(collector.strayRequests()).toEqual([]);
  });

  it('cuts an attribute value past 1 024 characters, and exports a span given a time no clock reads at the time it was made, its batch with it', async () => {
    const receiver = await startOtlpReceiver();
    const errors: string[] = [];
    const tracer = openOtelTracer({
      endpoint: receiver.endpoint,
      serviceName: 'cut',
      serviceVersion: '1',
      scope: 'test',
      onExportError: (message) => errors.push(message),
    });
    try {
      tracer.span('long', { attributes: { tool_name: 't'.repeat(100_000) } }).end();
      tracer.span('unreadable time', { startTimeMs: Number.POSITIVE_INFINITY }).end(Number.NaN);
      tracer.span('after').end();
      await tracer.flush(2_000);
      await eventually(() => (receiver.spans().length === 3 ? true : undefined), 5_000, 'three spans arrived');
      const spans = receiver.spans();
      expect(spans.map((span) => span.name)).toEqual(['long', 'unreadable time', 'after']);
      expect(spans[0]?.attributes.tool_name).toBe('t'.repeat(ATTRIBUTE_VALUE_CHARACTERS));
      expect(Math.abs((spans[1]?.startMs ?? 0) - Date.now())).toBeLessThan(60_000);
      expect(errors).toEqual([]);
    } finally {
      await tracer.shutdown(1_000);
      await receiver.close();
    }
  });

  it('keeps a session whose collector is unreachable running as usual, and says why nothing was exported in logs/otel.log', async () => {
    const inference = await model();
    const closed = await freePort();
    const project = await agentProject(
      path.join(scratch.dir, 'unreachable'),
      agentYaml(inference, 'unheard', `http://127.0.0.1:${closed}`, [`127.0.0.1:${closed}`]),
    );
    const result = await runMur(['run', '--json', '--task', 'use both tools'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    expect(await fs.readFile(path.join(workdir, 'out', 'result.txt'), 'utf8')).toBe('done');
    const log = await fs.readFile(path.join(workdir, 'logs', 'otel.log'), 'utf8');
    expect(log).toMatch(new RegExp(`could not export \\d+ span\\(s\\) to http://127\\.0\\.0\\.1:${closed}/v1/traces: .*ECONNREFUSED`));
  });

  it("never names the operator's collector in a session's otel.log, which the capsule can read", async () => {
    const inference = await model();
    const closed = await freePort();
    const project = await agentProject(path.join(scratch.dir, 'operator-collector'), agentYaml(inference, 'operated', undefined, []));
    const result = await runMur(['run', '--json', '--task', 'use both tools'], {
      cwd: project,
      env: { ...env, MURMUR_OTEL_ENDPOINT: `http://127.0.0.1:${closed}` },
    });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const log = await fs.readFile(path.join(workdir, 'logs', 'otel.log'), 'utf8');
    expect(log).toMatch(/could not export \d+ span\(s\) to the executor's collector \(MURMUR_OTEL_ENDPOINT\): the export failed \(ECONNREFUSED\)$/m);
    expect(log).not.toContain(String(closed));
  });

  it("sends none of the operator's OTEL_EXPORTER_OTLP_HEADERS to a collector the capsule named, and still sends them to the operator's", async () => {
    const inference = await model();
    const theirs = await startOtlpReceiver();
    const operators = await startOtlpReceiver();
    servers.push(theirs, operators);
    const project = await agentProject(path.join(scratch.dir, 'operator-headers'), agentYaml(inference, 'headers', theirs.endpoint, [theirs.authority]));
    const operatorEnv = { ...env, OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer operator-otlp-secret,x-honeycomb-team=operator-team-secret' };
    const result = await runMur(['run', '--json', '--task', 'use both tools'], { cwd: project, env: operatorEnv });
    expect(result.code, result.stderr).toBe(0);
    await eventually(
      () => (theirs.spans().some((span) => span.name === 'capsule.session') ? true : undefined),
      10_000,
      'the capsule’s collector got its spans',
    );
    expect(JSON.stringify(theirs.requestHeaders())).not.toContain('secret');
    // The operator's collector, configured by the same environment, still gets them.
    const operated = await agentProject(path.join(scratch.dir, 'operator-headers-own'), agentYaml(inference, 'operated-headers', undefined, []));
    const own = await runMur(['run', '--json', '--task', 'use both tools'], {
      cwd: operated,
      env: { ...operatorEnv, MURMUR_OTEL_ENDPOINT: operators.endpoint },
    });
    expect(own.code, own.stderr).toBe(0);
    await eventually(() => (operators.requestHeaders().length > 0 ? true : undefined), 10_000, 'the operator’s collector got its spans');
    expect(operators.requestHeaders()[0]).toMatchObject({ authorization: 'Bearer operator-otlp-secret', 'x-honeycomb-team': 'operator-team-secret' });
  });

  it("names a collector in the session's otel.log without its user, password or query, which may be credentials", async () => {
    const inference = await model();
    const closed = await freePort();
    const secretive = `http://otel-user:otel-password@127.0.0.1:${closed}/?token=otel-token`;
    for (const [name, network] of [
      ['admitted', [`127.0.0.1:${closed}`]],
      ['unadmitted', []],
    ] as const) {
      const project = await agentProject(path.join(scratch.dir, `secretive-${name}`), agentYaml(inference, `secretive-${name}`, secretive, [...network]));
      const result = await runMur(['run', '--json', '--task', 'use both tools'], { cwd: project, env });
      expect(result.code, result.stderr).toBe(0);
      const { workdir } = JSON.parse(result.stdout) as { workdir: string };
      const log = await fs.readFile(path.join(workdir, 'logs', 'otel.log'), 'utf8');
      expect(log).toMatch(
        name === 'admitted'
          ? /could not export \d+ span\(s\) to http:\/\/127\.0\.0\.1:\d+\/v1\/traces: /
          : /observability\.otel_endpoint 'http:\/\/127\.0\.0\.1:\d+\/' is not admitted/,
      );
      expect(log).not.toMatch(/otel-(user|password|token)/);
    }
  });

  it("sends nothing to an otel_endpoint the capsule's network.allow does not admit: the spans could carry what the capsule chose past the policy", async () => {
    const inference = await model();
    const before = collector.spans().length;
    const project = await agentProject(path.join(scratch.dir, 'not-allowed'), agentYaml(inference, 'unadmitted', collector.endpoint, []));
    const result = await runMur(['run', '--json', '--task', 'use both tools'], { cwd: project, env });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    expect(
      collector
        .spans()
        .slice(before)
        .filter((span) => span.resource['service.name'] === 'unadmitted'),
    ).toEqual([]);
    const log = await fs.readFile(path.join(workdir, 'logs', 'otel.log'), 'utf8');
    expect(log).toContain(`observability.otel_endpoint '${collector.endpoint}/' is not admitted by capabilities.network.allow`);
  });

  it("gives an outgoing murmur:message/send the session's traceparent, and records the same one as a2a_send", async () => {
    const peerHeaders: Array<string | undefined> = [];
    const peer: CountingServer = await startCountingServer((request, body) => {
      peerHeaders.push(request.headers.traceparent as string | undefined);
      const call = JSON.parse(body) as { id: string };
      return {
        body: JSON.stringify({ jsonrpc: '2.0', id: call.id, result: { id: 'tsk_peer', contextId: 'ctx_peer', status: { state: 'submitted' } } }),
        headers: { 'content-type': 'application/json' },
      };
    });
    servers.push(peer);
    const project = await probeProject(
      path.join(scratch.dir, 'send'),
      `capabilities:\n  network:\n    allow: [127.0.0.1:${peer.port}, ${collector.authority}]\nobservability:\n  otel_endpoint: ${collector.endpoint}\n`,
      'sending-probe',
    );
    const result = await runMur(['run', '--json', '--task', JSON.stringify([{ op: 'send', peer: `127.0.0.1:${peer.port}`, text: 'hello' }])], {
      cwd: project,
      env,
    });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    const log = await fs.readFile(path.join(workdir, 'logs', 'session.log'), 'utf8');
    expect(probeResults(log.replaceAll('[stdout] ', ''))[0]).toMatchObject({ ok: true });
    const sent = (await traceOf(workdir)).find((event) => event.event_type === 'a2a_send');
    expect(peerHeaders[0]).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(sent?.traceparent).toBe(peerHeaders[0]);
    const session = collector.spans().find((span) => span.name === 'capsule.session' && span.resource['service.name'] === 'sending-probe');
    expect(peerHeaders[0]).toBe(`00-${session?.traceId}-${session?.spanId}-01`);
  });

  describe('on the stack', () => {
    let nats: NatsServer;
    const services: ServiceProcess[] = [];
    let stackEnv: Record<string, string>;

    beforeAll(async () => {
      nats = await startNatsServer();
      stackEnv = { ...env, MURMUR_NATS_URL: nats.url, MURMUR_OTEL_ENDPOINT: collector.endpoint };
      for (const name of ['stager', 'executor', 'watcher', 'door']) services.push(await startService(name, stackEnv));
    });

    afterAll(async () => {
      for (const service of services) await service.stop();
      await nats?.stop();
    });

    it("runs one trace from an A2A request at the door to the guest's tool call on the executor, each service tracing its own work", async () => {
      const inference = await model();
      // The capsule names no collector of its own: its spans go to the operator's (the executor's MURMUR_OTEL_ENDPOINT).
      const project = await agentProject(path.join(scratch.dir, 'stacked'), agentYaml(inference, 'stacked-agent', undefined, []));
      const { MURMUR_OTEL_ENDPOINT: _operatorOnly, ...client } = stackEnv;
      const agent = await startAgent(project, client);
      try {
        const callerTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
        const callerSpan = '00f067aa0ba902b7';
        const reply = await rpc(agent.url, 'message/send', textMessage('use both tools'), { headers: { traceparent: `00-${callerTrace}-${callerSpan}-01` } });
        expect(reply.body.error).toBeUndefined();
        const inTrace = await eventually(
          () => {
            const spans = collector.spans().filter((span) => span.traceId === callerTrace);
            return spans.some((span) => span.name === 'capsule.session') && spans.some((span) => span.name === 'capsule.tool_call') ? spans : undefined;
          },
          15_000,
          'the session spans in the caller’s trace',
        );
        const door = inTrace.find((span) => span.name === 'door.request');
        expect(door).toMatchObject({ parentSpanId: callerSpan, kind: 2, resource: { 'service.name': 'murmur-door' } });
        expect(door?.attributes).toMatchObject({ 'rpc.method': 'message/send', 'murmur.session_id': agent.sessionId });
        const session = inTrace.find((span) => span.name === 'capsule.session');
        expect(session?.parentSpanId).toBe(door?.spanId);
        expect(session?.resource['service.name']).toBe('stacked-agent');
        const toolCall = inTrace.find((span) => span.name === 'capsule.tool_call' && span.attributes.tool_name === 'probe-tool');
        expect(toolCall?.parentSpanId).toBe(session?.spanId);
        const received = (await traceOf(agent.workdir)).find((event) => event.event_type === 'a2a_task_received');
        expect(received?.traceparent_from_caller).toBe(`00-${callerTrace}-${door?.spanId}-01`);
        // The services' own work: the staging and the launch that made this session.
        const all = collector.spans();
        const launch = all.find((span) => span.name === 'executor.launch' && span.attributes['murmur.session_id'] === agent.sessionId);
        expect(launch?.resource['service.name']).toBe('murmur-executor');
        expect(
          all.some(
            (span) =>
              span.name === 'stager.stage' && span.attributes['murmur.capsule'] === 'stacked-agent@0.1.0' && span.resource['service.name'] === 'murmur-stager',
          ),
        ).toBe(true);
      } finally {
        await agent.stop();
      }
    });
  });
});

async function existsLog(workdir: string): Promise<boolean> {
  return fs
    .access(path.join(workdir, 'logs', 'otel.log'))
    .then(() => true)
    .catch(() => false);
}
