import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ProbeResult, probeProject, probeRun } from './support/capsules.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { type ServiceProcess, runMur, startService } from './support/processes.js';
import { freePort } from './support/ports.js';
import { startCountingServer } from './support/servers.js';

/**
 * The bus is the stack's control plane: whoever reaches it without credentials launches and stops
 * sessions and reads their events. A capsule launched on the stack may name the bus's address in
 * its `network.allow` (an address says where it goes only to whoever knows it is the bus's); the
 * executor connects it nowhere near it. The bus here is a real nats-server, which greets every
 * connection with `INFO`: a capsule that read that greeting would have reached it.
 */
describe('a capsule on a stack and the bus the stack runs on', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let nats: NatsServer;
  const services: ServiceProcess[] = [];

  beforeAll(async () => {
    scratch = await tempDir('murmur-own-bus-');
    nats = await startNatsServer();
    // The watcher's port is in the stack's settings, as an executor beside it reads them.
    const env = {
      MURMUR_NATS_URL: nats.url,
      MURMUR_HOME: path.join(scratch.dir, 'stack-home'),
      MURMUR_EXECUTOR_POOL: '0',
      MURMUR_WATCHER_PORT: String(await freePort()),
    };
    for (const name of ['stager', 'executor', 'watcher']) services.push(await startService(name, env));
  }, 60_000);

  afterAll(async () => {
    for (const service of services.reverse()) await service.stop();
    await nats.stop();
    await scratch.cleanup();
  });

  /** The probe capsule of `project` run on the stack with `actions`: what each did, and the session's trace. */
  async function probeOnStack(project: string, actions: unknown[]): Promise<{ results: ProbeResult[]; trace: Array<Record<string, unknown>> }> {
    const result = await runMur(['run', '--json', '--task', JSON.stringify(actions)], {
      cwd: project,
      env: { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') },
    });
    expect(result.code, result.stderr).toBe(0);
    const { workdir } = JSON.parse(result.stdout) as { workdir: string };
    return probeRun(workdir);
  }

  /** A python3 shell action: connect to `host:port` as a raw socket, send `say`, and print what came back first (or the error's name). */
  function rawConnect(host: string, port: number, say = ''): { op: 'shell'; binary: string; args: string[] } {
    const send = say === '' ? '' : `  s.sendall(${JSON.stringify(say)}.encode())\n`;
    return {
      op: 'shell',
      binary: 'python3',
      args: [
        '-c',
        `import socket\ntry:\n  s = socket.create_connection(('${host}', ${port}), timeout=10)\n${send}  print(s.recv(64).decode() or 'closed')\nexcept OSError as e:\n  print(type(e).__name__)`,
      ],
    };
  }

  it('is refused the bus by address, by another loopback address and by localhost, over wasi:http, a raw socket and A2A, and the bus never greets it', async () => {
    const port = nats.port;
    const project = await probeProject(
      path.join(scratch.dir, 'bus-seeker'),
      `capabilities:\n  network:\n    allow: [127.0.0.1:${port}, localhost:${port}, 127.0.0.2:${port}]\n  shell:\n    allow: [python3]\n`,
    );
    const actions = [
      { op: 'fetch', url: `http://127.0.0.1:${port}/` },
      { op: 'fetch', url: `http://localhost:${port}/` },
      rawConnect('127.0.0.1', port),
      rawConnect('127.0.0.2', port),
      rawConnect('localhost', port),
      { op: 'send', peer: `127.0.0.1:${port}`, text: 'hello, bus' },
    ];
    const { results, trace } = await probeOnStack(project, actions);

    expect(results.slice(0, 2).map((entry) => entry.ok)).toEqual([false, false]);
    for (const entry of results.slice(2, 5)) {
      const said = (entry.value as { stdout: string }).stdout.trim();
      expect(said, 'a sandboxed process read the bus’s greeting').not.toMatch(/^INFO/);
    }
    expect(results[5]).toMatchObject({ op: 'send', ok: false, error: expect.stringMatching(/is the bus this runtime runs on/) });
    // Each refused by the executor as the bus, not merely unanswered.
    const refusals = trace.filter((event) => event.event_type === 'egress' && event.decision === 'denied');
    for (const refusal of refusals) expect(String(refusal.reason)).toMatch(/is the bus this runtime runs on/);
    expect(refusals.filter((refusal) => refusal.kind === 'http' && refusal.code === 'destination-IP-prohibited')).toHaveLength(2);
    expect(refusals.filter((refusal) => refusal.kind === 'tcp')).toHaveLength(3);
  });

  it("is refused the executor's own listener, whose metrics name every session's egress rules, and the watcher's dashboard beside it, over wasi:http and a raw socket", async () => {
    const executor = services.find((service) => service.name === 'executor') as ServiceProcess;
    const watcher = services.find((service) => service.name === 'watcher') as ServiceProcess;
    const project = await probeProject(
      path.join(scratch.dir, 'metrics-seeker'),
      `capabilities:\n  network:\n    allow: [127.0.0.1:${executor.port}, localhost:${watcher.port}]\n  shell:\n    allow: [python3]\n`,
    );
    // The dashboard answers a request from this machine without a token.
    expect((await fetch(`http://127.0.0.1:${watcher.port}/dashboard/api/snapshot`)).status).toBe(200);
    const actions = [
      { op: 'fetch', url: `http://localhost:${watcher.port}/dashboard/api/snapshot` },
      { op: 'fetch', url: `http://127.0.0.1:${executor.port}/metrics` },
      rawConnect('127.0.0.1', executor.port, 'GET /metrics HTTP/1.0\r\n\r\n'),
    ];
    const { results, trace } = await probeOnStack(project, actions);
    expect(results.slice(0, 2)).toMatchObject([
      { op: 'fetch', ok: false },
      { op: 'fetch', ok: false },
    ]);
    expect(results[2]).toMatchObject({ op: 'shell', value: { stdout: expect.any(String) } });
    expect(((results[2] as ProbeResult).value as { stdout: string }).stdout, 'a sandboxed process read the executor’s answer').not.toMatch(/HTTP\/1/);
    const refusals = trace.filter((event) => event.event_type === 'egress' && event.decision === 'denied');
    expect(refusals.map((refusal) => [refusal.kind, String(refusal.reason).replace(/^.* is (.*), which .*$/, '$1')])).toEqual([
      ['http', "the watcher's dashboard on this machine"],
      ['http', "this executor's health and metrics listener"],
      ['tcp', "this executor's health and metrics listener"],
    ]);
  });

  it('still reaches what its rules allow on another port of the same address', async () => {
    const neighbour = await startCountingServer();
    try {
      const project = await probeProject(path.join(scratch.dir, 'neighbour'), `capabilities:\n  network:\n    allow: [127.0.0.1:${neighbour.port}]\n`);
      const { results } = await probeOnStack(project, [{ op: 'fetch', url: `${neighbour.url}/` }]);
      expect(results[0]).toMatchObject({ ok: true, value: { status: 200 } });
      expect(neighbour.connections()).toBe(1);
    } finally {
      await neighbour.close();
    }
  });

  it('may not be given a workdir in the executor’s own state, nor one that holds it: its cache’s components, its home', async () => {
    const project = await probeProject(path.join(scratch.dir, 'cache-writer'), '');
    const stackHome = path.join(scratch.dir, 'stack-home');
    const cache = path.join(stackHome, 'cache');
    await fs.mkdir(cache, { recursive: true });
    for (const [workdir, relation, state] of [
      [cache, 'lies in', stackHome],
      [scratch.dir, 'holds', stackHome],
    ] as const) {
      const result = await runMur(['run', '--workdir', workdir, '--task', JSON.stringify([{ op: 'write', path: 'component.js', text: 'x' }])], {
        cwd: project,
        env: { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') },
      });
      expect(result.code, workdir).toBe(1);
      expect(result.stderr).toContain(
        `error[E-IO-002]: workdir '${workdir}' ${relation} the executor's own state (${state}): a capsule's workdir is bound writable into its sandbox`,
      );
    }
    // Refused before its sandbox was made: the capsule wrote nothing in either.
    expect(existsSync(path.join(cache, 'component.js'))).toBe(false);
    expect(existsSync(path.join(scratch.dir, 'component.js'))).toBe(false);
  });

  it('may not be given the machine’s own directories for a workdir: / and /etc would be the capsule’s to write, /dev a sandbox mounts afresh', async () => {
    const project = await probeProject(path.join(scratch.dir, 'system-writer'), '');
    for (const [workdir, said] of [
      ['/', "workdir '/' is the root of the machine: a capsule's workdir is bound writable into its sandbox"],
      ['/etc', "workdir '/etc' lies in /etc, one of the machine's own directories: a capsule's workdir is bound writable into its sandbox"],
      [
        '/dev/shm',
        "workdir '/dev/shm' lies in /dev, one of the machine's own directories: a capsule's workdir is bound writable into its sandbox, and every sandbox mounts its own /dev",
      ],
      ['/root', "workdir '/root' lies in /root, one of the machine's own directories"],
      ['/var/spool', "workdir '/var/spool' lies in /var, one of the machine's own directories"],
    ] as const) {
      const result = await runMur(['run', '--workdir', workdir, '--task', JSON.stringify([{ op: 'write', path: 'murmur-was-here', text: 'x' }])], {
        cwd: project,
        env: { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home') },
      });
      expect(result.code, workdir).toBe(1);
      expect(result.stderr).toContain(`error[E-IO-002]: ${said}`);
      // What the capsule would have written first: refused before its sandbox (or its session's directory) was made.
      expect(existsSync(path.join(workdir, 'murmur-was-here'))).toBe(false);
    }
  });
});
