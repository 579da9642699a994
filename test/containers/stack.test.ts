import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';
import { build } from 'esbuild';
import { DockerComposeEnvironment, type StartedDockerComposeEnvironment } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DelegationCompleted,
  SPAWN_APPROVAL_HEADER,
  SPAWN_CREDENTIAL_HEADER,
  type SessionEnded,
  type SessionStarted,
  capabilityPolicy,
  newSessionId,
  parseCapsuleManifest,
  silentLog,
  topics,
} from '@murmur/shared';
import { type Bus, createBus } from '@murmur/shared/bus';
import { NatsTransport } from '@murmur/shared/bus/nats';
import { type RunningAgent, agentProject, openStream, readSse, startAgent } from '../support/agents.js';
import { capsuleArchive } from '../support/artifacts.js';
import { probeProject, probeResults } from '../support/capsules.js';
import { tempDir } from '../support/fs.js';
import { helloCapsuleJs } from '../support/guests.js';
import { probeCapsule } from '../support/probe-guests.js';
import { ComposeProject, buildImages, docker } from '../support/compose.js';
import { freePorts } from '../support/ports.js';
import { eventually, repositoryRoot, runMur } from '../support/processes.js';

/**
 * The containerised stack, as a user runs it: the images built from this checkout (`npm run
 * images`), `docker-compose.yml` brought up by Testcontainers (docker-compose v1, its ryuk reaper
 * off, so the suite stops every container itself), and driven from the host as a user would —
 * `mur` and `@a2a-js/sdk` through the ports the stack publishes on 127.0.0.1, and nothing else. The
 * stand-in model endpoint runs as a container on the stack's own network (a compose override), so
 * no container ever reaches back to the host. Then the faults: an executor killed, NATS restarted,
 * a stager and a door restarted under requests.
 */

const run = promisify(execFile);
const root = repositoryRoot;
const cache = path.join(root, '.cache', 'containers');
const OVERRIDE = '.cache/containers/docker-compose.model.yml';

const DRIVER = 'murmur-driver-anthropic';
const MODEL = 'model:8443';

function agentYaml(name: string, extra = ''): string {
  return `name: ${name}\nversion: 0.1.0\nartifacts:\n  - name: ${DRIVER}\n    version: 0.1.0\n    runtime: driver\ncapabilities:\n  network:\n    allow: [${MODEL}]\n${extra}lifecycle:\n  task_acceptance: queue\n  after_task: sleep\ninference:\n  endpoint: https://${MODEL}\n  model: test-model\n  driver:\n    artifact: ${DRIVER}\n`;
}

/** Sends a parent agent the message that makes the stand-in model delegate `task` to `capsule`. */
function sendDelegation(parentUrl: string, request: { messageId: string; capsule: string; task: unknown[]; blocking?: boolean }): Promise<Response> {
  const task = JSON.stringify(request.task);
  return fetch(parentUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'message/send',
      params: {
        message: {
          kind: 'message',
          messageId: request.messageId,
          role: 'user',
          parts: [{ kind: 'text', text: `delegate ${JSON.stringify({ capsule: request.capsule, version: '0.1.0', task })}` }],
        },
        ...(request.blocking ? { configuration: { blocking: true } } : {}),
      },
    }),
  });
}

/** A delegation of a spinning task whose answer is never awaited (the test breaks the stack under it). */
function askToDelegate(parentUrl: string, messageId: string, capsule: string): Promise<unknown> {
  return sendDelegation(parentUrl, { messageId, capsule, task: [{ op: 'spin' }] }).catch(() => undefined);
}

/** A CA and a certificate for `model`, made for this run: the stand-in model serves TLS as a provider does. */
async function makeModelCertificate(dir: string): Promise<void> {
  await fs.mkdir(dir, { recursive: true });
  const openssl = (...args: string[]) => run('openssl', args, { cwd: dir });
  await openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=murmur test CA', '-keyout', 'ca.key', '-out', 'ca.pem');
  await openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=model', '-keyout', 'model.key', '-out', 'model.csr');
  await fs.writeFile(path.join(dir, 'model.ext'), 'subjectAltName=DNS:model\n');
  await openssl(
    'x509',
    '-req',
    '-in',
    'model.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    'model.ext',
    '-out',
    'model.pem',
  );
  // Read by uid 1000 in the containers.
  for (const file of await fs.readdir(dir)) await fs.chmod(path.join(dir, file), 0o644);
}

describe('the stack in containers', () => {
  let project: ComposeProject;
  let stack: StartedDockerComposeEnvironment | undefined;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  let client: Record<string, string>;
  let bus: Bus;
  let roostUrl: string;
  const started: SessionStarted[] = [];
  const ended: SessionEnded[] = [];
  const completed: DelegationCompleted[] = [];
  /** When each executor was last heard from. */
  const beats = new Map<string, number>();

  beforeAll(async () => {
    process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
    process.stderr.write((await buildImages()).map((line) => `${line}\n`).join(''));

    // The model, bundled from our own test support into the cache the override mounts, and its TLS.
    await fs.mkdir(path.join(cache, 'model'), { recursive: true });
    await makeModelCertificate(path.join(cache, 'tls'));
    await build({
      entryPoints: [path.join(root, 'test', 'containers', 'model-server.ts')],
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      outfile: path.join(cache, 'model', 'server.mjs'),
      logLevel: 'silent',
    });
    await fs.writeFile(
      path.join(root, OVERRIDE),
      [
        '# Written by test/containers/stack.test.ts: the stand-in model endpoint, on the stack network only.',
        'services:',
        '  model:',
        '    image: murmur/runtime:${MURMUR_IMAGE_TAG:-latest}',
        '    command: ["node", "/opt/model/server.mjs"]',
        '    read_only: true',
        '    user: "1000:1000"',
        '    init: true',
        '    volumes:',
        '      - ./.cache/containers/model:/opt/model:ro',
        '      - ./.cache/containers/tls:/opt/tls:ro',
        '    healthcheck:',
        '      test: ["CMD", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8443"]',
        '      interval: 2s',
        '      retries: 15',
        '  executor:',
        "    # The executors trust the stand-in model's CA, as an operator would add a private CA.",
        '    environment:',
        '      NODE_EXTRA_CA_CERTS: /opt/tls/ca.pem',
        "      # …and let the model's name resolve to its address on the stack network, which no capsule's rule reaches otherwise.",
        '      MURMUR_EGRESS_PRIVATE_HOSTS: model',
        '    volumes:',
        '      - ./.cache/containers/tls:/opt/tls:ro',
        '',
      ].join('\n'),
    );

    scratch = await tempDir('murmur-containers-');
    // Four different ports: picked one at a time, two services were once given the same one.
    const [natsPort, doorPort, roostPort, watcherPort] = (await freePorts(4)).map(String);
    env = {
      MURMUR_NATS_PORT: natsPort as string,
      MURMUR_DOOR_PORT: doorPort as string,
      MURMUR_ROOST_PORT: roostPort as string,
      // The dashboard opened as the compose file says: the watcher on the container's network, behind a token.
      MURMUR_WATCHER_PORT: watcherPort as string,
      MURMUR_WATCHER_HOST: '0.0.0.0',
      MURMUR_DASHBOARD_TOKEN: randomBytes(24).toString('hex'),
      // The bus as an operator secures it: every client presents the token, the services theirs in their URL.
      MURMUR_NATS_TOKEN: randomBytes(24).toString('hex'),
    };
    project = new ComposeProject(`murmurct${randomBytes(3).toString('hex')}`, ['docker-compose.yml', OVERRIDE], env);
    stack = await new DockerComposeEnvironment(root, project.files)
      .withClientOptions({ executable: { standalone: true } })
      .withProjectName(project.name)
      .withEnvironment(env)
      .withStartupTimeout(180_000)
      .up();
    client = { MURMUR_NATS_URL: `nats://${env.MURMUR_NATS_TOKEN}@127.0.0.1:${env.MURMUR_NATS_PORT}`, MURMUR_HOME: path.join(scratch.dir, 'home') };
    roostUrl = `http://127.0.0.1:${env.MURMUR_ROOST_PORT}`;
    bus = createBus(await NatsTransport.connect(client.MURMUR_NATS_URL as string, { log: silentLog }), silentLog);
    bus.subscribe(topics.sessionStarted, (event) => void started.push(event));
    bus.subscribe(topics.sessionEnded, (event) => void ended.push(event));
    bus.subscribe(topics.delegationCompleted, (event) => void completed.push(event));
    bus.subscribe(topics.executorHeartbeat, (beat) => void beats.set(beat.executor_id, Date.now()));
    await bus.flush();
  }, 900_000);

  afterAll(async () => {
    // Every step is taken whatever the one before did: a `down` that throws must not leave the
    // fallback, the override file or the scratch directory behind. The first failure is reported.
    const failures: unknown[] = [];
    for (const step of [
      () => bus?.close(),
      // Whatever came up — the scaled executors too — goes, with the volumes.
      () => stack?.down({ removeVolumes: true }),
      // The fallback: after a clean `down` it finds nothing, and its complaint about that is no failure.
      () =>
        project?.down().catch((error: unknown) => {
          if (failures.length > 0) throw error;
        }),
      () => fs.rm(path.join(root, OVERRIDE), { force: true }),
      () => scratch?.cleanup(),
    ]) {
      try {
        await step();
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0) throw failures[0];
  }, 180_000);

  const container = (service: string, index = 1): string => project.container(service, index);
  const healthy = (name: string): Promise<true> =>
    eventually(async () => ((await project.health(name)) === 'healthy' ? true : undefined), 60_000, `${name} to be healthy`);
  const sessionOf = (stdout: string): string => /^session: (\S+)$/m.exec(stdout)?.[1] as string;
  const startOf = (sessionId: string): Promise<SessionStarted> =>
    eventually(() => started.find((event) => event.session_id === sessionId), 15_000, `session.started of ${sessionId}`);

  it('comes up healthy from docker-compose.yml, every service answering its health check on the bus', async () => {
    for (const service of ['nats', 'roost', 'stager', 'executor', 'door', 'watcher', 'model'])
      expect(await docker('inspect', '-f', '{{.State.Health.Status}}', container(service))).toBe('healthy');
    const health = await runMur(['health', '--json'], { env: client });
    expect(health.code, health.stderr).toBe(0);
    expect((JSON.parse(health.stdout) as Array<{ service: string; reply?: { status: string } }>).map((row) => [row.service, row.reply?.status])).toEqual(
      ['roost', 'stager', 'executor', 'door', 'watcher'].map((name) => [name, 'ok']),
    );
    // Only the executor has the privileges a sandbox needs; the rest are uid 1000 on a read-only root.
    for (const service of ['nats', 'roost', 'stager', 'door', 'watcher']) {
      expect(await docker('inspect', '-f', '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapAdd}}', container(service))).toBe(
        '1000:1000 true []',
      );
    }
    // The bus takes no client without the stack's token, and no service wrote the token in its log.
    const anonymous = await runMur(['health', '--json'], { env: { ...client, MURMUR_NATS_URL: `nats://127.0.0.1:${env.MURMUR_NATS_PORT}` } });
    expect(anonymous.code).not.toBe(0);
    expect(anonymous.stderr).toMatch(/E-BUS-005.*(Authorization Violation|AUTHORIZATION_VIOLATION)/i);
    for (const service of ['roost', 'stager', 'executor', 'door', 'watcher'])
      expect(await docker('logs', container(service))).not.toContain(env.MURMUR_NATS_TOKEN);
    expect(health.stdout).not.toContain(env.MURMUR_NATS_TOKEN);
    const isolation = (await docker('logs', container('executor'))).split('\n').find((line) => line.includes('executor isolation probed'));
    expect(JSON.parse(isolation as string)).toMatchObject({
      namespaces: 'bubblewrap',
      containment: 'sealed (mountns+pivot_root+landlock+seccomp)',
      cgroups: 'v1',
    });
  });

  it('seals a shell capsule inside the executor container, run as uid 1000 with no capabilities: no route out, seccomp, Landlock, hard rlimits', async () => {
    const dir = await probeProject(
      path.join(scratch.dir, 'sealed'),
      'capabilities:\n  containment: sealed\n  shell:\n    allow: [bash]\n  resources:\n    max_processes: 7\n    max_open_files: 99\n',
    );
    const explained = await runMur(['run', '--explain-scope', '--json'], { cwd: dir, env: client });
    expect(explained.code, explained.stderr).toBe(0);
    expect(JSON.parse(explained.stdout)).toMatchObject({
      declared_containment: 'sealed',
      achieved_containment: 'sealed',
      floor_met: true,
      enforcement_tier: 'mountns+pivot_root+landlock+seccomp',
    });
    const status = 'while read -r key value rest; do case $key in Seccomp:|NoNewPrivs:|CapEff:|CapBnd:) echo "$key $value";; esac; done < /proc/self/status';
    const task = JSON.stringify([
      { op: 'shell', binary: 'bash', args: ['-c', status] },
      { op: 'shell', binary: 'bash', args: ['-c', 'exec 3<>/dev/tcp/1.1.1.1/443'] },
      { op: 'shell', binary: 'bash', args: ['-c', '/usr/bin/ls /'] },
      { op: 'shell', binary: 'bash', args: ['-c', 'echo "$(ulimit -Hn) $(ulimit -n) $(ulimit -Hu)"'] },
      { op: 'shell', binary: 'bash', args: ['-c', 'echo hi > /dev/urandom'] },
    ]);
    const result = await runMur(['run', '--task', task], { cwd: dir, env: client });
    expect(result.code, result.stderr).toBe(0);
    const shells = probeResults(result.stdout).map((entry) => entry.value as { exitCode: number; stdout: string; stderr: string });
    expect(shells[0]?.stdout.split('\n').filter(Boolean).sort()).toEqual([
      'CapBnd: 0000000000000000',
      'CapEff: 0000000000000000',
      'NoNewPrivs: 1',
      'Seccomp: 2',
    ]);
    expect(shells[1]?.stderr).toContain('Connection refused');
    expect(shells[2]).toMatchObject({ exitCode: 126 });
    expect(shells[2]?.stderr).toContain('Permission denied');
    const [hardFiles, softFiles, hardProcesses] = (shells[3]?.stdout.trim().split(' ') ?? []).map(Number);
    expect([hardFiles, softFiles]).toEqual([99, 99]);
    // The tasks the sandbox's user already runs, plus the 7 the manifest grants, as upstream counts.
    expect(hardProcesses).toBeGreaterThan(7);
    expect(hardProcesses).toBeLessThan(7 + 64);
    expect(shells[4]?.stderr).toContain('Permission denied');
  });

  it('runs a script capsule with mur run from the host: launch line, output, status, exit code and out/result.txt', async () => {
    const dir = await probeProject(path.join(scratch.dir, 'script'), 'capabilities:\n  env:\n    allow: [GREETING]\n  limits:\n    deadline_seconds: 20\n');
    const task = JSON.stringify([
      { op: 'env' },
      { op: 'print', text: 'hello from a container' },
      { op: 'write', path: 'out/result.txt', text: 'contained result' },
      { op: 'read', path: '/etc/passwd' },
    ]);
    const result = await runMur(['run', '--task', task], { cwd: dir, env: { ...client, GREETING: 'hi' } });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('hello from a container');
    const results = probeResults(result.stdout);
    expect(results.find((entry) => entry.op === 'env')?.value).toMatchObject({ GREETING: 'hi', MURMUR_CAPSULE_NAME: 'probe' });
    // The guest sees its preopen, never the container's filesystem.
    expect(results.find((entry) => entry.op === 'read')?.ok).toBe(false);
    const sessionId = sessionOf(result.stdout);
    expect(await fs.readFile(path.join(dir, 'workdir', sessionId, 'out', 'result.txt'), 'utf8')).toBe('contained result');
    expect(result.stdout.trim().split('\n').at(-1)).toBe('status:  ok');
    const listing = await runMur(['files', sessionId, 'out'], { env: client });
    expect(listing.stdout).toContain('result.txt');
    const climbing = await runMur(['files', sessionId, '../../../../etc/passwd'], { env: client });
    expect(climbing.code).toBe(1);
    expect(climbing.stderr).toContain('error[E-SES-002]');
  });

  it('refuses a capsule the bus’s host whatever its rules say: the bus, and the monitoring port that would list every session', async () => {
    // The address a capsule's author could find out and write; a name of the stack's would be refused as private anyway.
    const natsAddress = (await docker('inspect', '-f', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}', container('nats'))).trim();
    expect(natsAddress).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const dir = await probeProject(path.join(scratch.dir, 'bus-host'), `capabilities:\n  network:\n    allow: [${natsAddress}]\n`);
    const task = JSON.stringify([
      { op: 'fetch', url: `http://${natsAddress}:8222/connz?subs=1` },
      { op: 'fetch', url: `http://${natsAddress}:4222/` },
      { op: 'send', peer: `${natsAddress}:8222`, text: 'hello, monitoring' },
    ]);
    const result = await runMur(['run', '--task', task], { cwd: dir, env: client });
    expect(result.code, result.stderr).toBe(0);
    const results = probeResults(result.stdout);
    // Without the refusal the first would be nats-server's own answer: 200, with every connection and subscription.
    expect(results.map((entry) => entry.ok)).toEqual([false, false, false]);
    expect(results[2]).toMatchObject({ op: 'send', error: expect.stringMatching(/:8222' is the host of the bus this runtime runs on/) });
    // Each fetch refused for what it is, in the session's trace on its executor.
    const trace = await runMur(['files', sessionOf(result.stdout), 'trace.jsonl'], { env: client });
    expect(trace.code, trace.stderr).toBe(0);
    const refusals = trace.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { event_type: string; kind?: string; decision?: string; reason?: string })
      .filter((event) => event.event_type === 'egress' && event.kind === 'http' && event.decision === 'denied')
      .map((event) => event.reason);
    expect(refusals).toEqual([
      expect.stringMatching(/:8222' is the host of the bus this runtime runs on/),
      expect.stringMatching(/:4222' is the bus this runtime runs on/),
    ]);
  });

  it('answers an agent capsule over A2A through the published door port with @a2a-js/sdk', async () => {
    const dir = await agentProject(path.join(scratch.dir, 'agent'), agentYaml('contained-agent'));
    const agent = await startAgent(dir, client);
    try {
      expect(agent.url.startsWith(`http://localhost:${env.MURMUR_DOOR_PORT}/sessions/${agent.sessionId}/`)).toBe(true);
      const a2a = await new ClientFactory().createFromUrl(agent.url);
      expect((await a2a.getAgentCard()).name).toBe('contained-agent');
      const sent = (await a2a.sendMessage({
        message: { messageId: `m-${Date.now()}`, role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: 'who answers?' } }] },
      } as never)) as { status?: { state: number }; artifacts?: Array<{ parts: Array<{ content?: { value?: unknown } }> }> };
      expect(sent.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
      expect(JSON.stringify(sent)).toContain('answer: who answers?');
    } finally {
      await agent.stop();
    }
  });

  it('serves Prometheus metrics from every service on its own port, for a scraper on the stack network; the door also on its published port', async () => {
    const ports: Record<string, number> = { roost: 7700, stager: 7710, executor: 7720, door: 8080, watcher: 7740 };
    // From another container, by the service's name, as docker/prometheus.yml scrapes — but the
    // watcher, whose port stays on its container's loopback until its dashboard is opened.
    const scrape = (service: string): Promise<string> => {
      const [from, host] = service === 'watcher' ? [service, '127.0.0.1'] : [service === 'roost' ? 'stager' : 'roost', service];
      return docker(
        'exec',
        container(from),
        'bash',
        '-c',
        `exec 3<>/dev/tcp/${host}/${ports[service]}; printf 'GET /metrics HTTP/1.0\\r\\nHost: ${host}\\r\\n\\r\\n' >&3; cat <&3`,
      );
    };
    for (const service of Object.keys(ports)) {
      const text = await scrape(service);
      expect(text.split('\n')[0]).toMatch(/^HTTP\/1\.[01] 200/);
      expect(text).toContain('process_resident_memory_bytes');
    }
    // The runs before this one launched sessions on the executor and answered a task through the door.
    expect(await scrape('executor')).toMatch(/^murmur_launches_total\{outcome="launched"\} [1-9]/m);
    expect(await scrape('executor')).toMatch(/^murmur_tasks_total\{state="completed"\} [1-9]/m);
    const published = await (await fetch(`http://127.0.0.1:${env.MURMUR_DOOR_PORT}/metrics`)).text();
    expect(published).toMatch(/^murmur_bus_request_duration_seconds_count\{topic="session\.\*\.rpc",outcome="ok"\} [1-9]/m);
  });

  it("serves the operator dashboard on the watcher's published port to the token alone: the stack's sessions with it, nothing without", async () => {
    const snapshot = `http://127.0.0.1:${env.MURMUR_WATCHER_PORT}/dashboard/api/snapshot`;
    const refused = await fetch(snapshot, { headers: { authorization: 'Bearer not-the-token-at-all' } });
    expect(refused.status).toBe(401);
    const refusal = await refused.text();
    expect(refusal).toContain('E-DASH-002');
    expect(refusal).not.toContain('ses_');
    const answered = await fetch(snapshot, { headers: { authorization: `Bearer ${env.MURMUR_DASHBOARD_TOKEN}` } });
    expect(answered.status).toBe(200);
    const board = (await answered.json()) as { sessions: Array<{ session_id: string; executor_id: string }> };
    // The runs before this one started sessions on the stack: the watcher saw each of them.
    expect(started.length).toBeGreaterThan(0);
    for (const event of started) expect(board.sessions.map((session) => session.session_id)).toContain(event.session_id);
  });

  it('answers on its published ports only for loopback names: a web page reaching roost or the door through a name of its own (DNS rebinding) is refused', async () => {
    const statusFor = (port: string | undefined, requestPath: string, host: string): Promise<number> =>
      new Promise((resolve, reject) => {
        http
          .get({ host: '127.0.0.1', port, path: requestPath, headers: { host } }, (response) => {
            response.resume();
            resolve(response.statusCode ?? 0);
          })
          .on('error', reject);
      });
    for (const [port, requestPath] of [
      [env.MURMUR_ROOST_PORT, '/v1/artifacts'],
      [env.MURMUR_DOOR_PORT, '/sessions'],
    ] as const) {
      expect(await statusFor(port, requestPath, `attacker.example:${port}`), `${requestPath} on ${port}`).toBe(421);
      expect(await statusFor(port, requestPath, `localhost:${port}`), `${requestPath} on ${port}`).not.toBe(421);
    }
  });

  it("delegates to a child that runs on its parent's executor, under its children/, and the completion comes back as the tool's result", async () => {
    const child = await capsuleArchive('name: local/contained-child\nversion: 0.1.0\n', (await probeCapsule()).bytes);
    const zip = path.join(scratch.dir, 'contained-child-0.1.0.mur.zip');
    await fs.writeFile(zip, child);
    const published = await runMur(['publish', zip, '--registry', roostUrl], { env: client });
    expect(published.code, published.stderr).toBe(0);
    const dir = await agentProject(path.join(scratch.dir, 'parent'), agentYaml('contained-parent', '  spawn:\n    allow: [local/contained-child]\n'));
    const parent = await startAgent(dir, client);
    try {
      const sent = await sendDelegation(parent.url, {
        messageId: 'delegating',
        capsule: 'local/contained-child',
        task: [{ op: 'write', path: 'out/result.txt', text: 'child result' }],
        blocking: true,
      });
      const answer = JSON.stringify(await sent.json());
      expect(answer).toContain('Delegated capsule finished.');
      expect(answer).toContain('status: ok');
      expect(answer).toMatch(new RegExp(`workdir: \\S*/${parent.sessionId}/children/ses_[0-9a-f]{32}`));
      const report = await eventually(() => completed.find((event) => event.parent_session_id === parent.sessionId), 15_000, 'the delegation.completed');
      expect((await startOf(report.outcome.session_id)).executor_id).toBe((await startOf(parent.sessionId)).executor_id);
    } finally {
      await parent.stop();
    }
  });

  describe('with two executors', () => {
    beforeAll(async () => {
      await project.scale('executor', 2);
      await healthy(container('executor', 2));
      await eventually(() => ([...beats.values()].filter((at) => Date.now() - at < 3_000).length === 2 ? true : undefined), 30_000, 'two executors heard from');
    }, 120_000);

    it('spreads launches over both, each session saying which executor runs it, and mur ps --json says so too', async () => {
      const dir = await probeProject(path.join(scratch.dir, 'spread'), 'capabilities:\n  limits:\n    deadline_seconds: 20\n');
      const executors = new Set<string>();
      for (let attempt = 0; attempt < 16 && executors.size < 2; attempt += 1) {
        const result = await runMur(['run', '--task', JSON.stringify([{ op: 'print', text: 'spread' }])], { cwd: dir, env: client });
        expect(result.code, result.stderr).toBe(0);
        executors.add((await startOf(sessionOf(result.stdout))).executor_id);
      }
      expect(executors.size).toBe(2);
      // `mur health` hears both, where one request would hear whichever answered first. (An
      // executor busy refilling its pool may miss the census's quiet window: it is asked again.)
      const heard = await eventually(
        async () => {
          const health = await runMur(['health', '--json'], { env: client });
          const rows = health.code === 0 ? (JSON.parse(health.stdout) as Array<{ service: string; reply?: { instance_id: string } }>) : [];
          const ids = new Set(rows.filter((row) => row.service === 'executor').map((row) => row.reply?.instance_id));
          return ids.size === 2 ? ids : undefined;
        },
        30_000,
        'mur health to list both executors',
      );
      expect(heard).toEqual(executors);
      const agents: RunningAgent[] = [];
      try {
        const placed = new Set<string>();
        for (let attempt = 0; attempt < 10 && placed.size < 2; attempt += 1) {
          const agent = await startAgent(await agentProject(path.join(scratch.dir, `listed-${attempt}`), agentYaml('listed')), client);
          agents.push(agent);
          placed.add((await startOf(agent.sessionId)).executor_id);
        }
        const listed = JSON.parse((await runMur(['ps', '--json'], { env: client })).stdout) as Array<{
          session_id: string;
          executor_id?: string;
          liveness: string;
        }>;
        const rows = listed.filter((row) => agents.some((agent) => agent.sessionId === row.session_id));
        expect(rows.every((row) => row.liveness === 'live')).toBe(true);
        expect(new Set(rows.map((row) => row.executor_id))).toEqual(placed);
      } finally {
        for (const agent of agents) await agent.stop();
      }
    });

    it('notices a killed executor container: its sessions end naming the loss within 10 s, mur ps shows them gone, a lost child is reported crashed, and launches go on elsewhere', async () => {
      // A parent whose model waits on a child that spins: both live on one executor, which is then killed.
      const spinner = await capsuleArchive(
        'name: local/spinning-child\nversion: 0.1.0\ncapabilities:\n  limits:\n    deadline_seconds: 120\n',
        (await probeCapsule()).bytes,
      );
      const zip = path.join(scratch.dir, 'spinning-child-0.1.0.mur.zip');
      await fs.writeFile(zip, spinner);
      expect((await runMur(['publish', zip, '--registry', roostUrl], { env: client })).code).toBe(0);
      const parent = await startAgent(
        await agentProject(path.join(scratch.dir, 'doomed'), agentYaml('doomed-parent', '  spawn:\n    allow: [local/spinning-child]\n')),
        client,
      );
      try {
        const home = await startOf(parent.sessionId);
        void askToDelegate(parent.url, 'doomed', 'local/spinning-child');
        const child = await eventually(() => started.find((event) => event.capsule_name === 'local/spinning-child'), 30_000, 'the spinning child to start');
        expect(child.executor_id).toBe(home.executor_id);
        const killed = (await project.instances('executor')).get(home.executor_id);
        expect(killed, `the container of ${home.executor_id}`).toBeDefined();
        const killedAt = Date.now();
        await docker('kill', killed as string);
        const parentEnd = await eventually(() => ended.find((event) => event.session_id === parent.sessionId), 10_000, 'the parent to be reported lost');
        expect(Date.now() - killedAt).toBeLessThan(10_000);
        expect(parentEnd.error?.code).toBe('E-EXE-001');
        // The loss is announced per session, in no promised order: the child's end may follow its parent's.
        const childEnd = await eventually(() => ended.find((event) => event.session_id === child.session_id), 5_000, 'the child to be reported lost');
        expect(childEnd.error?.code).toBe('E-EXE-001');
        const report = await eventually(() => completed.find((event) => event.outcome.session_id === child.session_id), 15_000, 'the lost child reported');
        expect(report).toMatchObject({ parent_session_id: parent.sessionId, outcome: { status: 'crashed', reported_by: 'launcher', delivered: false } });
        expect(report.outcome.detail).toContain('E-EXE-001');
        const rows = JSON.parse((await runMur(['ps', '--json'], { env: client })).stdout) as Array<{ session_id: string; liveness: string }>;
        expect(rows.find((row) => row.session_id === parent.sessionId)?.liveness).toBe('gone');
        const after = await runMur(['run', '--task', JSON.stringify([{ op: 'print', text: 'after the loss' }])], {
          cwd: await probeProject(path.join(scratch.dir, 'after-loss')),
          env: client,
        });
        expect(after.code, after.stderr).toBe(0);
        expect((await startOf(sessionOf(after.stdout))).executor_id).not.toBe(home.executor_id);
      } finally {
        await parent.stop();
      }
    });
  });

  it('survives a NATS restart: every service reconnects without restarting, roost keeps its sessions and approvals, and a completion in flight is recorded', async () => {
    const parentManifest = 'name: local/roost-parent\nversion: 0.1.0\ncapabilities:\n  spawn:\n    allow: [local/contained-child]\n';
    const registered = await fetch(new URL('/v1/sessions', roostUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        session_id: newSessionId(),
        capsule_name: 'local/roost-parent',
        capsule_version: '0.1.0',
        policy: capabilityPolicy(parseCapsuleManifest(parentManifest).manifest),
      }),
    });
    const { credential } = (await registered.json()) as { credential: string };
    const spawn = await fetch(new URL('/spawn', roostUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json', [SPAWN_CREDENTIAL_HEADER]: credential },
      body: JSON.stringify({ name: 'local/contained-child', version: '0.1.0' }),
    });
    // The approval names the archive roost refereed, which the child must report it runs.
    const { approval, sha256: approvedArchive } = (await spawn.json()) as { approval: string; sha256: string };
    expect(approval).toBeTruthy();
    const running = (await docker('ps', '--format', '{{.Names}}', '--filter', `label=com.docker.compose.project=${project.name}`))
      .split('\n')
      .filter((name) => name && !name.includes('_nats_'));
    const startedAt = (name: string): Promise<string> => docker('inspect', '-f', '{{.State.StartedAt}}', name);
    const before = Object.fromEntries(await Promise.all(running.map(async (name) => [name, await startedAt(name)] as const)));

    // A child that ends while NATS is away: its completion is delivered late or recorded as undelivered, never lost.
    const child = await capsuleArchive(
      'name: local/interrupted-child\nversion: 0.1.0\ncapabilities:\n  limits:\n    deadline_seconds: 3\n',
      (await probeCapsule()).bytes,
    );
    const zip = path.join(scratch.dir, 'interrupted-child-0.1.0.mur.zip');
    await fs.writeFile(zip, child);
    expect((await runMur(['publish', zip, '--registry', roostUrl], { env: client })).code).toBe(0);
    const parent = await startAgent(
      await agentProject(path.join(scratch.dir, 'waiting-parent'), agentYaml('waiting-parent', '  spawn:\n    allow: [local/interrupted-child]\n')),
      client,
    );
    try {
      void askToDelegate(parent.url, 'in-flight', 'local/interrupted-child');
      await eventually(() => started.find((event) => event.capsule_name === 'local/interrupted-child'), 30_000, 'the child to start');
      await docker('stop', '-t', '5', container('nats'));
      // The child runs into its deadline and reports while there is no bus.
      await new Promise((resolve) => setTimeout(resolve, 6_000));
      await docker('start', container('nats'));
      await healthy(container('nats'));
      await eventually(
        async () => {
          const health = await runMur(['health', '--json'], { env: client });
          const rows = health.code === 0 ? (JSON.parse(health.stdout) as Array<{ service: string; reply?: { status: string } }>) : [];
          return ['roost', 'stager', 'executor', 'door', 'watcher'].every((name) => rows.some((row) => row.service === name && row.reply?.status === 'ok'))
            ? true
            : undefined;
        },
        60_000,
        'every service to answer again',
      );
      for (const [name, at] of Object.entries(before)) expect(await startedAt(name), name).toBe(at);

      const children = await eventually(
        async () => {
          const listed = await runMur(['files', parent.sessionId, 'children', '--json'], { env: client });
          return listed.code === 0
            ? (JSON.parse(listed.stdout) as { entries: Array<{ name: string }> }).entries.find((entry) => entry.name.startsWith('ses_'))
            : undefined;
        },
        30_000,
        "the child's directory under the parent's children/",
      );
      const completion = await eventually(
        async () => {
          const read = await runMur(['files', parent.sessionId, `children/${children.name}/completion.json`], { env: client });
          if (read.code !== 0) return undefined;
          const outcome = JSON.parse(read.stdout) as { status: string; delivered: boolean; delivery_error?: string };
          return outcome.delivered || outcome.delivery_error !== undefined ? outcome : undefined;
        },
        30_000,
        'a settled completion.json',
      );
      expect(completion.status).toBe('error');
      if (!completion.delivered) expect(completion.delivery_error).toMatch(/E-BUS-00[35]/);
    } finally {
      await parent.stop();
    }

    const registeredChild = await fetch(new URL('/v1/sessions', roostUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json', [SPAWN_APPROVAL_HEADER]: approval },
      body: JSON.stringify({
        session_id: newSessionId(),
        capsule_name: 'local/contained-child',
        capsule_version: '0.1.0',
        policy: capabilityPolicy(parseCapsuleManifest('name: local/contained-child\nversion: 0.1.0\n').manifest),
        capsule_sha256: approvedArchive,
      }),
    });
    expect(registeredChild.status, await registeredChild.clone().text()).toBe(201);
    const result = await runMur(['run', '--task', JSON.stringify([{ op: 'print', text: 'after nats came back' }])], {
      cwd: await probeProject(path.join(scratch.dir, 'after-nats')),
      env: client,
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('after nats came back');
  });

  it('a stager restarted under a staging answers it with E-BUS-006, and the next staging succeeds', async () => {
    const dir = path.join(scratch.dir, 'big');
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(path.join(dir, 'murmur.yaml'), 'name: big\nversion: 0.1.0\n');
    await fs.writeFile(path.join(dir, 'capsule.wasm'), (await helloCapsuleJs()).bytes);
    const transpiling = new Promise<void>((resolve) => {
      const tap = bus.tap('stage.*.progress', (_subject, payload) => {
        if ((payload as { phase?: string; state?: string }).phase === 'transpile' && (payload as { state?: string }).state === 'start') {
          tap.unsubscribe();
          resolve();
        }
      });
    });
    await bus.flush();
    const staging = runMur(['stage', dir], { env: client });
    await transpiling;
    await docker('restart', '-t', '10', container('stager'));
    const refused = await staging;
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('error[E-BUS-006]');
    await healthy(container('stager'));
    const again = await runMur(['stage', dir], { env: client });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('staged big@0.1.0');
  });

  it('a door restarted under an open stream tells the client to resubscribe, and serves the session again once it is back', async () => {
    const agent = await startAgent(await agentProject(path.join(scratch.dir, 'streamed'), agentYaml('streamed')), client);
    try {
      const stream = await openStream(agent.url, 'stream/watch', {});
      const frames = readSse(stream);
      await new Promise((resolve) => setTimeout(resolve, 500));
      await docker('restart', '-t', '10', container('door'));
      const last = (await frames).at(-1);
      expect(last?.event).toBe('error');
      expect(JSON.parse(last?.data ?? '{}')).toMatchObject({ error: { code: -32603, message: expect.stringContaining('this door is shutting down') } });
      await healthy(container('door'));
      const card = await eventually(
        async () => {
          const response = await fetch(new URL('.well-known/agent-card.json', agent.url)).catch(() => undefined);
          return response?.status === 200 ? ((await response.json()) as { session_id: string }) : undefined;
        },
        30_000,
        'the card from the restarted door',
      );
      expect(card.session_id).toBe(agent.sessionId);
    } finally {
      await agent.stop();
    }
  });
});
