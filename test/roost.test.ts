import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CapabilityPolicy,
  HealthReplySchema,
  RegisterSessionResponseSchema,
  SPAWN_APPROVAL_HEADER,
  SPAWN_CREDENTIAL_HEADER,
  SessionStatusSchema,
  SpawnApprovalSchema,
  capabilityPolicy,
  newSessionId,
  parseCapsuleManifest,
} from '@murmur/shared';
import { capsuleArchive, publishInto } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { type NatsServer, startNatsServer } from './support/nats-server.js';
import { murBin, repositoryRoot, startService, untilSaid } from './support/processes.js';

/**
 * roost as it is deployed: its own process on a real nats-server with JetStream, keeping sessions
 * and approvals in the bus's key-value bucket, so a roost process that restarts forgets nothing.
 * And `mur roost`, the same service run by the CLI, with its global spawn allowlist.
 */

const PARENT = 'name: local/parent\nversion: 1.0.0\ncapabilities:\n  network:\n    allow: [api.example.com]\n  spawn:\n    allow: [local/worker]\n';
const WORKER = 'name: local/worker\nversion: 0.1.0\ncapabilities:\n  network:\n    allow: ["https://api.example.com"]\n';
const HELPER = 'name: local/helper\nversion: 0.1.0\n';

const policyOf = (text: string): CapabilityPolicy => capabilityPolicy(parseCapsuleManifest(text).manifest);

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function register(
  roostUrl: string,
  name: string,
  version: string,
  text: string,
  approval?: { approval: string; sha256: string },
): Promise<{ status: number; body: Record<string, unknown>; sessionId: string }> {
  const sessionId = newSessionId();
  const answer = await post(
    `${roostUrl}/v1/sessions`,
    // A child reports the archive it runs: here, the one roost approved.
    { session_id: sessionId, capsule_name: name, capsule_version: version, policy: policyOf(text), ...(approval ? { capsule_sha256: approval.sha256 } : {}) },
    approval ? { [SPAWN_APPROVAL_HEADER]: approval.approval } : {},
  );
  return { ...answer, sessionId };
}

describe('roost on NATS across a restart of its process', () => {
  let nats: NatsServer;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let env: Record<string, string>;
  const started: Array<{ stop(): Promise<number | null> }> = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    scratch = await tempDir('murmur-roost-');
    const registry = path.join(scratch.dir, 'registry');
    for (const text of [PARENT, WORKER]) await publishInto(registry, await capsuleArchive(text));
    env = { MURMUR_NATS_URL: nats.url, MURMUR_HOME: path.join(scratch.dir, 'home'), MURMUR_ROOST_REGISTRY_PATH: registry };
  });

  afterAll(async () => {
    for (const service of started.reverse()) await service.stop();
    await nats?.stop();
    await scratch?.cleanup();
  });

  it('keeps a registered session and an unused approval, so the restarted roost admits the child exactly once', async () => {
    const first = await startService('roost', env);
    started.push(first);
    expect(first.ready.bus).toBe(nats.url);

    const parent = await register(first.url, 'local/parent', '1.0.0', PARENT);
    expect(parent.status, JSON.stringify(parent.body)).toBe(201);
    const { credential } = RegisterSessionResponseSchema.parse(parent.body);
    const spawned = await post(`${first.url}/spawn`, { name: 'local/worker', version: '0.1.0' }, { [SPAWN_CREDENTIAL_HEADER]: credential });
    expect(spawned.status, JSON.stringify(spawned.body)).toBe(200);
    const approval = SpawnApprovalSchema.parse(spawned.body);
    const statusBefore = SessionStatusSchema.parse(await (await fetch(`${first.url}/status/${parent.sessionId}`)).json());

    expect(await first.stop()).toBe(0);
    const second = await startService('roost', env);
    started.push(second);

    const statusAfter = await fetch(`${second.url}/status/${parent.sessionId}`);
    expect(statusAfter.status).toBe(200);
    expect(SessionStatusSchema.parse(await statusAfter.json())).toEqual(statusBefore);

    const child = await register(second.url, 'local/worker', '0.1.0', WORKER, approval);
    expect(child.status, JSON.stringify(child.body)).toBe(201);
    const childStatus = SessionStatusSchema.parse(await (await fetch(`${second.url}/status/${child.sessionId}`)).json());
    expect(childStatus).toMatchObject({ status: 'running', capsule_name: 'local/worker', capsule_version: '0.1.0', spawned_by: parent.sessionId });

    const again = await register(second.url, 'local/worker', '0.1.0', WORKER, approval);
    expect(again.status).toBe(403);
    expect(String(again.body.error)).toContain('already used');

    // The parent's credential works against the new process too.
    expect((await post(`${second.url}/spawn`, { name: 'local/worker', version: '0.1.0' }, { [SPAWN_CREDENTIAL_HEADER]: credential })).status).toBe(200);
    const gone = await fetch(`${second.url}/v1/sessions/${parent.sessionId}`, { method: 'DELETE', headers: { [SPAWN_CREDENTIAL_HEADER]: credential } });
    expect(gone.status).toBe(200);
    expect((await fetch(`${second.url}/status/${parent.sessionId}`)).status).toBe(404);
  });
});

describe('mur roost', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let child: ChildProcess;
  let url: string;

  beforeAll(async () => {
    scratch = await tempDir('murmur-mur-roost-');
    const registry = path.join(scratch.dir, 'registry');
    for (const text of [PARENT, WORKER, HELPER]) await publishInto(registry, await capsuleArchive(text));
    child = spawn(murBin, ['roost', '--port', '0', '--registry-path', registry, '--spawn-allow', 'local/worker', '--spawn-allow=local/helper'], {
      cwd: repositoryRoot,
      env: { PATH: process.env.PATH ?? '', MURMUR_HOME: path.join(scratch.dir, 'home') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const port = await untilSaid(child, 'stderr', (stderr) => {
      const match = /mur-roost: listening on 127\.0\.0\.1:(\d+) \(registry (.+)\)/.exec(stderr);
      return match ? Number(match[1]) : undefined;
    });
    expect(port).toBeGreaterThan(0);
    url = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    }
    await scratch?.cleanup();
  });

  it('listens on the free port it was given with --port 0 and answers GET /health', async () => {
    const response = await fetch(`${url}/health`);
    expect(response.status).toBe(200);
    const health = HealthReplySchema.parse(await response.json());
    expect(health).toMatchObject({ service: 'roost', status: 'ok', bus: 'in-process', http_port: Number(new URL(url).port) });
  });

  it('approves a spawn without a credential only for the capsules named by --spawn-allow', async () => {
    for (const name of ['local/worker', 'local/helper']) {
      const answer = await post(`${url}/spawn`, { name, version: '0.1.0' });
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      expect(SpawnApprovalSchema.parse(answer.body)).toMatchObject({ name, version: '0.1.0', parent_session_id: null });
    }
    const refused = await post(`${url}/spawn`, { name: 'local/parent', version: '1.0.0' });
    expect(refused.status).toBe(403);
    expect(String(refused.body.error)).toContain("'local/parent' is not in it");
  });

  it('stops cleanly on SIGTERM', async () => {
    const exited = once(child, 'exit') as Promise<[number | null]>;
    child.kill('SIGTERM');
    const [code] = await exited;
    expect(code).toBe(0);
  });
});
