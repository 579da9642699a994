import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HealthReplySchema, SERVICE_NAMES, type SessionStaged, commands, silentLog, topics } from '@murmur/shared';
import { type Bus, createBus } from '@murmur/shared/bus';
import { NatsTransport } from '@murmur/shared/bus/nats';
import { uploadProject } from '@murmur/shared/node';
import { capsuleProject } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { capsuleWat } from './support/guests.js';
import { rawExchange } from './support/servers.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, eventually, repositoryRoot, runMur, startService } from './support/processes.js';

/**
 * The stack as it is deployed: every service its own process, all on one real nats-server.
 */
describe('the services as processes on NATS', () => {
  let nats: NatsServer;
  let home: { dir: string; cleanup: () => Promise<void> };
  const services: ServiceProcess[] = [];
  let client: Bus;

  beforeAll(async () => {
    nats = await startNatsServer();
    home = await tempDir('murmur-services-');
    const env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(home.dir, 'home') };
    for (const name of SERVICE_NAMES) services.push(await startService(name, env));
    // A second stager: staging is a queue group, so stagers scale by adding processes.
    services.push(await startService('stager', env));
    client = createBus(await NatsTransport.connect(nats.url, { log: silentLog }), silentLog);
  });

  afterAll(async () => {
    await client?.close();
    for (const service of services) await service.stop();
    await nats?.stop();
    await home?.cleanup();
  });

  it('each service says on start which bus and which port it uses', () => {
    for (const service of services) {
      expect(service.ready.bus).toBe(nats.url);
      expect(service.port).toBeGreaterThan(0);
      expect(String(service.ready.msg)).toContain(`ready on http://127.0.0.1:${service.port}`);
    }
  });

  it.each(SERVICE_NAMES)('%s answers its health check on the bus and over HTTP', async (name) => {
    const reply = await client.request(commands.health.at(name), {}, { timeoutMs: 5_000 });
    expect(reply.service).toBe(name);
    expect(reply.status).toBe('ok');
    expect(reply.bus).toBe(nats.url);
    const process = services.find((service) => service.name === name && service.port === reply.http_port);
    expect(process).toBeDefined();
    const response = await fetch(`${process?.url}/health`);
    expect(response.status).toBe(200);
    expect(HealthReplySchema.parse(await response.json()).instance_id).toBe(reply.instance_id);
  });

  it('mur health lists every instance of every service as ok, both stagers among them', async () => {
    const result = await runMur(['health', '--json'], { env: { MURMUR_NATS_URL: nats.url } });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    const rows = JSON.parse(result.stdout) as Array<{ service: string; reply?: { status: string; http_port: number } }>;
    expect(rows.map((row) => [row.service, row.reply?.status])).toEqual(
      SERVICE_NAMES.flatMap((name) => (name === 'stager' ? [name, name] : [name])).map((name) => [name, 'ok']),
    );
    // Each row is a process of this stack, each process has its row.
    expect(rows.map((row) => row.reply?.http_port).sort()).toEqual(services.map((service) => service.port).sort());
    const table = await runMur(['health'], { env: { MURMUR_NATS_URL: nats.url } });
    expect(table.stdout.split('\n').filter((line) => line.startsWith('stager ')).length).toBe(2);
  });

  it('mur health shows an answer it refuses as a refused row of its own, and fails', async () => {
    // A stranger on the door's health subject, answering what no door of this version would.
    const stranger = await NatsTransport.connect(nats.url, { log: silentLog });
    stranger.subscribe('service.door.health', (message) => message.respond?.(new TextEncoder().encode('{"ok":true,"data":{"status":"fine"}}')));
    await stranger.flush();
    try {
      const result = await runMur(['health', '--json'], { env: { MURMUR_NATS_URL: nats.url } });
      expect(result.code).toBe(1);
      const rows = JSON.parse(result.stdout) as Array<{ service: string; reply?: { status: string }; error?: string; refused?: boolean }>;
      const door = rows.filter((row) => row.service === 'door');
      expect(door.filter((row) => row.reply?.status === 'ok')).toHaveLength(1);
      expect(door.filter((row) => row.refused)).toEqual([
        { service: 'door', refused: true, error: expect.stringContaining("E-BUS-002: refused the reply on 'service.door.health'") },
      ]);
    } finally {
      await stranger.close();
    }
  });

  it('stages over NATS through the stager processes, sharing the work between them', async () => {
    const project = path.join(home.dir, 'capsule');
    await capsuleProject(project, 'name: over-nats\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const staged: SessionStaged[] = [];
    const subscription = client.subscribe(topics.sessionStaged, (event) => void staged.push(event));
    const uploaded = await uploadProject(client, project, { digestCache: path.join(home.dir, 'digests.json') });
    // NATS hands each request of a queue group to a member at random: with 6 requests one stager
    // took them all about 1 run in 32 (it did in CI); with 24, about 1 in 8 million.
    const ATTEMPTS = 24;
    for (let attempt = 0; attempt < ATTEMPTS; attempt += 1) {
      const plan = await client.request(commands.stage, { source: { kind: 'project', project: uploaded } }, { timeoutMs: 60_000 });
      expect(plan.capsule.name).toBe('over-nats');
    }
    await eventually(() => (staged.length >= ATTEMPTS ? true : undefined), 5_000, `${ATTEMPTS} session.staged events`);
    subscription.unsubscribe();
    expect(new Set(staged.map((event) => event.stager_id)).size).toBe(2);
  });

  it('mur stage asks the stagers over NATS and prints the same plan as in-process', async () => {
    const project = path.join(home.dir, 'same-either-way');
    await capsuleProject(project, 'name: either-way\nversion: 0.2.0\ncapabilities:\n  env:\n    allow: [GREETING]\n', (await capsuleWat()).bytes);
    const overNats = await runMur(['stage', project, '--json'], { env: { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(home.dir, 'home') } });
    const inProcess = await runMur(['stage', project, '--json'], { env: { MURMUR_HOME: path.join(home.dir, 'home') } });
    expect(overNats.code, overNats.stderr).toBe(0);
    expect(inProcess.code, inProcess.stderr).toBe(0);
    const strip = (text: string) => {
      const plan = JSON.parse(text) as Record<string, unknown> & { stats: unknown; staged_at: unknown; capsule: { component: Record<string, unknown> } };
      const { stats: _stats, staged_at: _stagedAt, ...rest } = plan;
      return { ...rest, capsule: { ...rest.capsule, component: { ...rest.capsule.component, cache_hit: null } } };
    };
    expect(strip(overNats.stdout)).toEqual(strip(inProcess.stdout));
  });

  it('a refused staging comes back over NATS with its code and is announced on the bus', async () => {
    const failures: string[] = [];
    const subscription = client.subscribe(topics.stageFailed, (event) => void failures.push(event.error.code));
    const result = await runMur(['stage', '--capsule', 'ghost', '--capsule-version', '9.9.9'], { env: { MURMUR_NATS_URL: nats.url } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-RUN-008]');
    expect(result.stderr).toContain('ghost@9.9.9');
    await eventually(() => (failures.includes('E-RUN-008') ? true : undefined), 5_000, 'a stage.failed event');
    subscription.unsubscribe();
  });

  /** Runs a service process that is expected not to start, and returns its exit code and log. */
  async function refusedStart(name: string, env: Record<string, string>): Promise<{ code: number | null; log: string }> {
    const child = spawn(process.execPath, [path.join(repositoryRoot, 'services', name, 'dist', 'index.js')], {
      env: { PATH: process.env.PATH ?? '', MURMUR_NATS_URL: nats.url, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout.on('data', (chunk: Buffer) => (log += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (log += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    const [code] = (await once(child, 'exit')) as [number | null];
    clearTimeout(timer);
    return { code, log };
  }

  it('a service given a port that is not one refuses to start, with a code naming the variable', async () => {
    const { code, log } = await refusedStart('door', { MURMUR_DOOR_PORT: 'eighty' });
    expect(code).toBe(1);
    expect(log).toContain("error[E-IO-003]: invalid MURMUR_DOOR_PORT: 'eighty' is not a port number (0-65535)");
    expect(log).not.toMatch(/\n\s+at /);
  });

  it('a service reaches a bus that requires a token through a URL carrying it, and names the bus without it', async () => {
    const token = randomBytes(16).toString('hex');
    const guarded = await startNatsServer({ token });
    try {
      const service = await startService('roost', { MURMUR_NATS_URL: `nats://${token}@127.0.0.1:${guarded.port}` });
      try {
        expect(service.ready.bus).toBe(`nats://127.0.0.1:${guarded.port}`);
        expect(service.logs()).not.toContain(token);
      } finally {
        await service.stop();
      }
      const { code, log } = await refusedStart('roost', { MURMUR_NATS_URL: `nats://127.0.0.1:${guarded.port}` });
      expect(code).toBe(1);
      expect(log).toMatch(new RegExp(`error\\[E-BUS-005\\]: cannot connect to the bus at nats://127\\.0\\.0\\.1:${guarded.port}: .*authorization`, 'i'));
      const wrong = await refusedStart('roost', { MURMUR_NATS_URL: `nats://not-${token}@127.0.0.1:${guarded.port}` });
      expect(wrong.log).toContain('E-BUS-005');
      expect(wrong.log).not.toContain(token);
    } finally {
      await guarded.stop();
    }
  });

  it('roost refuses to start with a publishing token short enough to guess, naming the variable and never the token', async () => {
    const { code, log } = await refusedStart('roost', { MURMUR_ROOST_TOKEN: 'hunter2' });
    expect(code).toBe(1);
    expect(log).toContain('error[E-CFG-003]: MURMUR_ROOST_TOKEN is 7 characters long; a publishing token needs at least 16');
    expect(log).not.toContain('hunter2');
  });

  it('the stager process keeps its blob cache within MURMUR_BLOB_CACHE_MAX_BYTES, the blobs used least recently first', async () => {
    const own = await tempDir('murmur-stager-trim-');
    try {
      const blobs = path.join(own.dir, 'home', 'cache', 'blobs');
      const aged: string[] = [];
      for (let index = 0; index < 4; index += 1) {
        const bytes = Buffer.alloc(4096, index);
        const sha256 = createHash('sha256').update(bytes).digest('hex');
        const file = path.join(blobs, sha256.slice(0, 2), sha256);
        await fs.mkdir(path.dirname(file), { recursive: true });
        await fs.writeFile(file, bytes, { mode: 0o444 });
        // Used an hour ago, each later one a minute more recently.
        const used = new Date(Date.now() - (60 - index) * 60_000);
        await fs.utimes(file, used, used);
        aged.push(file);
      }
      const stager = await startService('stager', { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(own.dir, 'home'), MURMUR_BLOB_CACHE_MAX_BYTES: '10000' });
      try {
        // 16 KiB over a bound of 10 000 bytes: down to 9 000, the two least recently used.
        await eventually(async () => (stager.logs().includes('removed the blobs used least recently') ? true : undefined), 10_000, 'the trim at start');
        expect(aged.map((file) => existsSync(file))).toEqual([false, false, true, true]);
        expect(stager.logs()).toMatch(/"removed":2,"freed_bytes":8192,"kept_bytes":8192/);
      } finally {
        await stager.stop();
      }
    } finally {
      await own.cleanup();
    }
  });

  it('a service whose port is taken says so with a code, and exits', async () => {
    const taken = await startService('door', { MURMUR_NATS_URL: nats.url });
    try {
      const { code, log } = await refusedStart('door', { MURMUR_DOOR_PORT: String(taken.port) });
      expect(code).toBe(1);
      expect(log).toContain(`error[E-IO-003]: door cannot listen on 127.0.0.1:${taken.port}: EADDRINUSE`);
    } finally {
      await taken.stop();
    }
  });

  it('a service answers a client that trickles its request 408 at MURMUR_HTTP_READ_TIMEOUT_MS, and refuses a value that is no duration', async () => {
    const door = await startService('door', { MURMUR_NATS_URL: nats.url, MURMUR_HTTP_READ_TIMEOUT_MS: '300' });
    try {
      // Headers never ended: what the service itself is never shown, so only the server's bound can end it.
      const { received, closed } = await rawExchange(door.port, 'POST /sessions/ HTTP/1.1\r\nHost: localhost\r\nContent-Le', 10_000);
      expect(closed).toBe(true);
      expect(received).toMatch(/^HTTP\/1\.1 408 /);
    } finally {
      await door.stop();
    }
    const { code, log } = await refusedStart('door', { MURMUR_HTTP_READ_TIMEOUT_MS: 'soon' });
    expect(code).toBe(1);
    expect(log).toContain("error[E-CFG-003]: invalid MURMUR_HTTP_READ_TIMEOUT_MS: 'soon'");
  });

  it('a service stops cleanly on SIGTERM', async () => {
    const extra = await startService('watcher', { MURMUR_NATS_URL: nats.url });
    expect(await extra.stop()).toBe(0);
    expect(extra.logs()).toContain('watcher stopped');
  });

  it('a service told to stop after its NATS server is gone still stops, cleanly and at once', async () => {
    // nats.js, closed while it reconnects, kept a timer that held such a process open for good.
    const ownNats = await startNatsServer();
    const extra = await startService('watcher', { MURMUR_NATS_URL: ownNats.url });
    await ownNats.stop();
    const asked = Date.now();
    // stop() sends SIGKILL after 5 s, which would make the code null.
    expect(await extra.stop()).toBe(0);
    expect(Date.now() - asked).toBeLessThan(5_000);
    expect(extra.logs()).toContain('watcher stopped');
  });

  it('a service whose NATS server hangs while it stops exits at its stop deadline, saying what it was waiting for', async () => {
    const ownNats = await startNatsServer();
    try {
      // Under the 2 s a closing NATS connection gives a server to take what it drains.
      const extra = await startService('watcher', { MURMUR_NATS_URL: ownNats.url, MURMUR_SERVICE_STOP_DEADLINE_MS: '1500' });
      await ownNats.pause();
      // Its log on failure: an exit 0 here (twice in CI, before the pause waited for the server to
      // be stopped) fits the server answering the drain in the moment before SIGSTOP took it.
      expect(await extra.stop(), extra.logs()).toBe(1);
      const said = extra
        .logs()
        .split('\n')
        .filter((line) => line.includes('did not stop'))
        .map((line) => JSON.parse(line) as { msg: string; waiting_for: string });
      expect(said).toEqual([expect.objectContaining({ waiting_for: 'closing its bus connection' })]);
      expect(said[0]?.msg).toBe('watcher did not stop within 1500 ms (still closing its bus connection); exiting');
    } finally {
      await ownNats.stop();
    }
  });

  it('a service refuses a stop deadline that is not a number of milliseconds, naming the variable', async () => {
    await expect(startService('watcher', { MURMUR_NATS_URL: nats.url, MURMUR_SERVICE_STOP_DEADLINE_MS: '8s' })).rejects.toThrow(
      /E-CFG-003.*invalid MURMUR_SERVICE_STOP_DEADLINE_MS: '8s' is not a whole number of milliseconds above 0/,
    );
  });

  it('a service refuses any of its own settings that is not the number it names, rather than run on the default', async () => {
    // Each of these used to fall back to its default without a word (the pool: with a warning, and no pool).
    const refused: Array<[service: string, name: string, value: string, expected: RegExp]> = [
      ['executor', 'MURMUR_EXECUTOR_POOL', 'two', /invalid MURMUR_EXECUTOR_POOL: 'two' is not a whole number of hosts\b/],
      ['executor', 'MURMUR_HARD_LIMIT_GRACE_MS', '10s', /invalid MURMUR_HARD_LIMIT_GRACE_MS: '10s' is not a whole number of milliseconds above 0/],
      ['door', 'MURMUR_DOOR_MAX_BODY_BYTES', '64k', /invalid MURMUR_DOOR_MAX_BODY_BYTES: '64k' is not a whole number of bytes above 0/],
      ['watcher', 'MURMUR_EXECUTOR_LOST_MS', '-1', /invalid MURMUR_EXECUTOR_LOST_MS: '-1' is not a whole number of milliseconds above 0/],
    ];
    for (const [service, name, value, expected] of refused) {
      await expect(startService(service, { MURMUR_NATS_URL: nats.url, [name]: value }), name).rejects.toThrow(new RegExp(`E-CFG-003.*${expected.source}`));
    }
  });
});
