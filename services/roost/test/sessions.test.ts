import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type CapabilityPolicy,
  ROOST_KV_BUCKET,
  RegisterSessionResponseSchema,
  SPAWN_APPROVAL_HEADER,
  SPAWN_APPROVAL_TTL_MS,
  SPAWN_CREDENTIAL_HEADER,
  SessionStatusSchema,
  SpawnApprovalSchema,
  capabilityPolicy,
  type SessionEnded,
  newSessionId,
  parseCapsuleManifest,
  topics,
} from '@murmur/shared';
import { type Bus, InProcessTransport, createBus } from '@murmur/shared/bus';
import { type RoostService, startRoostService } from '../src/service.js';
import { capsuleArchive, componentArtifact, publishInto } from '../../../test/support/artifacts.js';
import { tempDir } from '../../../test/support/fs.js';
import { RecordingLog } from '../../../test/support/recording-log.js';

/**
 * roost as delegation's referee, over an in-process bus and a real registry store: sessions
 * register and get a credential, a parent asks for an approval to spawn a child that must fit
 * inside it on every axis, and the child registers with that approval exactly once.
 */

const MiB = 1024 * 1024;

/** The end the watcher announces for a session lost with its executor. */
function lostSessionEnd(sessionId: string): SessionEnded {
  return {
    session_id: sessionId,
    capsule_name: 'local/parent',
    capsule_version: '1.0.0',
    executor_id: 'executor-gone',
    pid: 4242,
    process_start: '1',
    exit_status: 'failed',
    exit_code: null,
    signal: null,
    error: { code: 'E-EXE-001', message: 'the session was lost with its executor' },
    duration_ms: 1000,
    ended_at: new Date().toISOString(),
    stderr_tail: [],
    completion_reported: false,
  };
}

interface Capabilities {
  network?: string[];
  unixSockets?: boolean;
  scope?: string;
  workdirExec?: boolean;
  env?: string[];
  shell?: string[];
  spawn?: string[];
  memoryBytes?: number;
  cpuSeconds?: number;
  containment?: 'advisory' | 'scoped' | 'sealed';
  /** A hook entry's own network rules (`artifacts[].capabilities.network.allow`). */
  hookNetwork?: string[];
}

function list(values: string[]): string {
  return `[${values.map((value) => JSON.stringify(value)).join(', ')}]`;
}

/** A capsule manifest declaring exactly these capabilities. */
function manifest(name: string, version: string, caps: Capabilities): string {
  const lines = [`name: ${name}`, `version: "${version}"`];
  if (caps.hookNetwork)
    lines.push(
      'artifacts:',
      '  - name: audit',
      '    version: 0.1.0',
      '    runtime: hook',
      '    capabilities:',
      '      network:',
      `        allow: ${list(caps.hookNetwork)}`,
    );
  lines.push('capabilities:');
  if (caps.network || caps.unixSockets) {
    lines.push('  network:');
    if (caps.network) lines.push(`    allow: ${list(caps.network)}`);
    if (caps.unixSockets) lines.push('    unix_sockets: true');
  }
  if (caps.scope !== undefined || caps.workdirExec) {
    lines.push('  filesystem:');
    if (caps.scope !== undefined) lines.push(`    scope: ${JSON.stringify(caps.scope)}`);
    if (caps.workdirExec) lines.push('    workdir_exec: true');
  }
  if (caps.env) lines.push('  env:', `    allow: ${list(caps.env)}`);
  if (caps.shell) lines.push('  shell:', `    allow: ${list(caps.shell)}`);
  if (caps.spawn) lines.push('  spawn:', `    allow: ${list(caps.spawn)}`);
  if (caps.memoryBytes !== undefined) lines.push('  limits:', `    memory_bytes: ${caps.memoryBytes}`);
  if (caps.cpuSeconds !== undefined) lines.push('  resources:', `    cpu_seconds: ${caps.cpuSeconds}`);
  if (caps.containment) lines.push(`  containment: ${caps.containment}`);
  return `${lines.join('\n')}\n`;
}

const policyOf = (text: string): CapabilityPolicy => capabilityPolicy(parseCapsuleManifest(text).manifest);

const CHILDREN = [
  'local/worker',
  'local/wide-net',
  'local/wide-fs',
  'local/wide-env',
  'local/wide-shell',
  'local/spawner',
  'local/greedy',
  'local/lax',
  'local/ghost',
  'local/tool',
  'local/hooked',
];

const PARENT = manifest('local/parent', '1.0.0', {
  network: ['https://api.example.com', 'files.example.com'],
  scope: 'data',
  env: ['LANG', 'PARENT_VAR'],
  shell: ['git', 'ls'],
  spawn: CHILDREN,
  memoryBytes: 256 * MiB,
  containment: 'scoped',
});

/** Everything a child may have inside the parent; each misfit case widens one axis. */
const FITTING: Capabilities = {
  network: ['https://api.example.com', 'https://files.example.com:8443'],
  scope: 'data/worker',
  env: ['LANG'],
  shell: ['git'],
  memoryBytes: 128 * MiB,
  containment: 'sealed',
  // A hook's own rules, covered as the capsule's are.
  hookNetwork: ['https://files.example.com:8443'],
};

const WORKER = manifest('local/worker', '0.1.0', FITTING);

const MISFITS: Array<{ axis: string; name: string; caps: Capabilities; message: string }> = [
  {
    axis: 'network',
    name: 'local/wide-net',
    caps: { ...FITTING, network: ['https://api.example.com', 'api.example.com:443'] },
    message: "network: child rule 'api.example.com:443' is not covered by the parent's capabilities.network.allow",
  },
  {
    axis: 'filesystem',
    name: 'local/wide-fs',
    caps: { ...FITTING, scope: 'data/../secrets' },
    message: "filesystem: child scope 'data/../secrets' is not within the parent's capabilities.filesystem.scope 'data'",
  },
  {
    axis: 'network',
    name: 'local/hooked',
    caps: { ...FITTING, hookNetwork: ['https://api.example.com', 'collector.example:4318'] },
    message:
      "network: hook 'audit' rule 'collector.example:4318' is not covered by the parent's capabilities.network.allow (a hook is given exactly its own rules, which nothing narrows)",
  },
  {
    axis: 'env',
    name: 'local/wide-env',
    caps: { ...FITTING, env: ['LANG', 'AWS_REGION'] },
    message: "env: child variable 'AWS_REGION' is not in the parent's capabilities.env.allow",
  },
  {
    axis: 'shell',
    name: 'local/wide-shell',
    caps: { ...FITTING, shell: ['git', 'curl'] },
    message: "shell: child binary 'curl' is not in the parent's capabilities.shell.allow",
  },
  {
    axis: 'spawn',
    name: 'local/spawner',
    caps: { ...FITTING, spawn: ['local/worker', 'local/elsewhere'] },
    message: "spawn: child may spawn 'local/elsewhere', which is not in the parent's capabilities.spawn.allow",
  },
  {
    axis: 'limits',
    name: 'local/greedy',
    caps: { ...FITTING, memoryBytes: 512 * MiB },
    message: `limits: child capabilities.limits.memory_bytes ${512 * MiB} exceeds the parent's ${256 * MiB}`,
  },
  {
    axis: 'containment',
    name: 'local/lax',
    caps: { ...FITTING, containment: 'advisory' },
    message: "containment: child declares 'advisory', a weaker floor than the parent's 'scoped'",
  },
];

interface Answer<T = Record<string, unknown>> {
  status: number;
  body: T;
}

describe('roost: sessions, credentials and spawn approvals', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let transport: InProcessTransport;
  let bus: Bus;
  let log: RecordingLog;
  let clock: number;
  let roost: RoostService;

  /** The sha256 of each capsule archive in the registry, by name@version: what its runtime reports. */
  const published = new Map<string, string>();

  beforeAll(async () => {
    scratch = await tempDir('murmur-roost-sessions-');
    const publish = async (name: string, version: string, text: string) =>
      published.set(`${name}@${version}`, (await publishInto(scratch.dir, await capsuleArchive(text))).sha256);
    await publish('local/parent', '1.0.0', PARENT);
    await publish('local/worker', '0.1.0', WORKER);
    await publish('local/worker', '0.2.0', manifest('local/worker', '0.2.0', FITTING));
    for (const misfit of MISFITS) await publish(misfit.name, '0.1.0', manifest(misfit.name, '0.1.0', misfit.caps));
    await publishInto(scratch.dir, await componentArtifact('local/tool', '0.1.0', new Uint8Array([0, 97, 115, 109, 0x0d, 0, 1, 0])));
  });

  afterAll(async () => {
    await scratch?.cleanup();
  });

  function start(options: { spawnAllow?: string[]; env?: NodeJS.ProcessEnv } = {}): RoostService {
    return startRoostService({
      bus,
      log,
      registryPath: scratch.dir,
      env: options.env ?? {},
      now: () => clock,
      ...(options.spawnAllow ? { spawnAllow: options.spawnAllow } : {}),
    });
  }

  beforeEach(() => {
    transport = new InProcessTransport();
    log = new RecordingLog();
    bus = createBus(transport, log);
    clock = Date.parse('2025-06-01T12:00:00.000Z');
    roost = start({ spawnAllow: ['local/wide-net', 'local/worker'] });
  });

  afterEach(async () => {
    await roost.close();
    await bus.close();
  });

  async function call<T = Record<string, unknown>>(
    method: string,
    path: string,
    options: { body?: unknown; raw?: string; headers?: Record<string, string>; app?: RoostService } = {},
  ): Promise<Answer<T>> {
    const body = options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
    const response = await (options.app ?? roost).http.request(path, {
      method,
      headers: { 'content-type': 'application/json', ...options.headers },
      ...(body === undefined ? {} : { body }),
    });
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new Error(`${method} ${path} answered ${response.status} with a body that is not JSON: ${text}`);
    }
    return { status: response.status, body: parsed as T };
  }

  async function register(
    name: string,
    version: string,
    text: string,
    options: { approval?: string; sessionId?: string; policy?: CapabilityPolicy; sha256?: string | null; app?: RoostService } = {},
  ): Promise<Answer & { sessionId: string }> {
    const sessionId = options.sessionId ?? newSessionId();
    // As the executor reports a capsule by name: the archive it runs (null: a project from its directory).
    const sha256 = options.sha256 === undefined ? published.get(`${name}@${version}`) : (options.sha256 ?? undefined);
    const answer = await call('POST', '/v1/sessions', {
      body: {
        session_id: sessionId,
        capsule_name: name,
        capsule_version: version,
        policy: options.policy ?? policyOf(text),
        ...(sha256 === undefined ? {} : { capsule_sha256: sha256 }),
      },
      ...(options.approval === undefined ? {} : { headers: { [SPAWN_APPROVAL_HEADER]: options.approval } }),
      ...(options.app ? { app: options.app } : {}),
    });
    return { ...answer, sessionId };
  }

  async function registerParent(): Promise<{ sessionId: string; credential: string }> {
    const answer = await register('local/parent', '1.0.0', PARENT);
    expect(answer.status, JSON.stringify(answer.body)).toBe(201);
    return { sessionId: answer.sessionId, credential: RegisterSessionResponseSchema.parse(answer.body).credential };
  }

  function spawn(credential: string | undefined, name: string, version = '0.1.0', app?: RoostService): Promise<Answer> {
    return call('POST', '/spawn', {
      body: { name, version },
      ...(credential === undefined ? {} : { headers: { [SPAWN_CREDENTIAL_HEADER]: credential } }),
      ...(app ? { app } : {}),
    });
  }

  async function approvalFor(credential: string | undefined, name: string, version = '0.1.0'): Promise<string> {
    const answer = await spawn(credential, name, version);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return SpawnApprovalSchema.parse(answer.body).approval;
  }

  /** Everything roost keeps on the bus, key → value. */
  async function stored(): Promise<Record<string, string>> {
    const kv = await bus.keyValue(ROOST_KV_BUCKET);
    const entries: Record<string, string> = {};
    for (const key of await kv.keys()) entries[key] = (await kv.get(key)) as string;
    return entries;
  }

  // ── registration ──────────────────────────────────────────────────────────

  it('registers a session, answers its status, and keeps only the sha256 of the credential it hands out', async () => {
    const { sessionId, credential } = await registerParent();
    expect(credential).toMatch(/^[0-9a-f]{64}$/);

    const status = await call('GET', `/status/${sessionId}`);
    expect(status.status).toBe(200);
    expect(SessionStatusSchema.strict().parse(status.body)).toEqual({
      session_id: sessionId,
      status: 'running',
      capsule_name: 'local/parent',
      capsule_version: '1.0.0',
      registered_at: '2025-06-01T12:00:00.000Z',
    });

    const kv = await stored();
    expect(Object.keys(kv).sort()).toEqual([expect.stringMatching(/^credential\.[0-9a-f]{64}$/), `session.${sessionId}`]);
    expect(JSON.stringify(kv)).not.toContain(credential);
  });

  it('hands every session its own credential', async () => {
    const first = await registerParent();
    const second = await registerParent();
    expect(first.credential).not.toBe(second.credential);
  });

  it('refuses a body that is not a registration with 400 naming what is wrong, and registers nothing', async () => {
    const sessionId = newSessionId();
    const policy = policyOf(PARENT);
    const cases: Array<{ raw?: string; body?: unknown; says: string }> = [
      { raw: '{not json', says: 'not JSON' },
      { body: { session_id: sessionId, capsule_name: 'local/parent', capsule_version: '1.0.0' }, says: "'policy'" },
      { body: { session_id: 'not-a-session', capsule_name: 'local/parent', capsule_version: '1.0.0', policy }, says: "'session_id'" },
      { body: { session_id: sessionId, capsule_name: '', capsule_version: '1.0.0', policy }, says: "'capsule_name'" },
      {
        body: {
          session_id: sessionId,
          capsule_name: 'local/parent',
          capsule_version: '1.0.0',
          policy: { ...policy, limits: { ...policy.limits, memory_bytes: -1 } },
        },
        says: "'policy.limits.memory_bytes'",
      },
      {
        body: { session_id: sessionId, capsule_name: 'local/parent', capsule_version: '1.0.0', policy: { ...policy, network_allow: ['ftp://x.example.com'] } },
        says: "unsupported URL scheme 'ftp'",
      },
      {
        body: { session_id: sessionId, capsule_name: 'local/parent', capsule_version: '1.0.0', policy: { ...policy, filesystem_scope: '../up' } },
        says: 'cannot escape the workdir',
      },
      { body: [1, 2], says: 'invalid session registration' },
    ];
    for (const { raw, body, says } of cases) {
      const answer = await call<{ error: string }>('POST', '/v1/sessions', raw === undefined ? { body } : { raw });
      expect(answer.status, says).toBe(400);
      expect(answer.body.error).toContain(says);
    }
    expect(await stored()).toEqual({});
  });

  it('refuses to register a session id twice with 409, and the first registration keeps its credential', async () => {
    const { sessionId, credential } = await registerParent();
    const again = await register('local/parent', '1.0.0', PARENT, { sessionId });
    expect(again.status).toBe(409);
    expect(again.body.error).toContain(`session ${sessionId} is already registered`);
    expect((await spawn(credential, 'local/worker')).status).toBe(200);
  });

  it("answers 404 with {error: 'session not found'} for a session roost does not know", async () => {
    for (const id of [newSessionId(), 'ses_nothex', '..%2F..%2Fetc']) {
      const answer = await call('GET', `/status/${id}`);
      expect(answer.status).toBe(404);
      expect(answer.body).toEqual({ error: 'session not found' });
    }
  });

  it('with a token of its own, registers a session without an approval only from who presents that token', async () => {
    const token = 'a-roost-token-of-32-characters!!';
    const guarded = start({ spawnAllow: [], env: { MURMUR_ROOST_TOKEN: token } });
    try {
      const body = { session_id: newSessionId(), capsule_name: 'local/parent', capsule_version: '1.0.0', policy: policyOf(PARENT) };
      const anyone = await call('POST', '/v1/sessions', { body, app: guarded });
      expect(anyone.status).toBe(401);
      expect(anyone.body).toMatchObject({ code: 'E-ROOST-001' });
      expect(String(anyone.body.error)).toContain('MURMUR_ROOST_TOKEN');
      const almost = await call('POST', '/v1/sessions', { body, headers: { authorization: `Bearer ${token.slice(0, -1)}?` }, app: guarded });
      expect(almost.status).toBe(401);
      const holder = await call('POST', '/v1/sessions', { body, headers: { authorization: `Bearer ${token}` }, app: guarded });
      expect(holder.status, JSON.stringify(holder.body)).toBe(201);
    } finally {
      await guarded.close();
    }
  });

  // ── deregistration ────────────────────────────────────────────────────────

  it('deregisters a session only with its own credential, after which its status and its credential are gone', async () => {
    const parent = await registerParent();
    const other = await registerParent();

    const without = await call('DELETE', `/v1/sessions/${parent.sessionId}`);
    expect(without.status).toBe(401);
    expect(without.body.error).toContain(SPAWN_CREDENTIAL_HEADER);
    expect(without.body.code).toBe('E-ROOST-002');
    const wrong = await call('DELETE', `/v1/sessions/${parent.sessionId}`, { headers: { [SPAWN_CREDENTIAL_HEADER]: other.credential } });
    expect(wrong.status).toBe(401);
    const unknown = await call('DELETE', `/v1/sessions/${newSessionId()}`, { headers: { [SPAWN_CREDENTIAL_HEADER]: parent.credential } });
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('E-ROOST-002');
    // A route roost does not have is refused in the same shape, with a code.
    expect(await call('PUT', '/v1/artifacts')).toEqual({ status: 404, body: { error: 'roost has no PUT /v1/artifacts', code: 'E-ROOST-002' } });
    expect((await call('GET', `/status/${parent.sessionId}`)).status).toBe(200);

    const done = await call('DELETE', `/v1/sessions/${parent.sessionId}`, { headers: { [SPAWN_CREDENTIAL_HEADER]: parent.credential } });
    expect(done).toEqual({ status: 200, body: { deregistered: true } });
    expect((await call('GET', `/status/${parent.sessionId}`)).status).toBe(404);
    expect((await spawn(parent.credential, 'local/worker')).status).toBe(401);
    expect((await call('DELETE', `/v1/sessions/${parent.sessionId}`, { headers: { [SPAWN_CREDENTIAL_HEADER]: parent.credential } })).status).toBe(404);
    // The other session is untouched.
    expect((await spawn(other.credential, 'local/worker')).status).toBe(200);
  });

  it('forgets a session the bus says ended, as its executor would have deregistered it had it lived', async () => {
    const parent = await registerParent();
    const other = await registerParent();
    // An end roost never knew is nothing to it (heard first, so it is done by the time the next is).
    bus.publish(topics.sessionEnded, lostSessionEnd(newSessionId()));
    // The watcher's announcement for a session lost with its executor: nobody deregisters it.
    bus.publish(topics.sessionEnded, lostSessionEnd(parent.sessionId));
    const deadline = Date.now() + 5_000;
    while ((await call('GET', `/status/${parent.sessionId}`)).status !== 404 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await call('GET', `/status/${parent.sessionId}`)).status).toBe(404);
    expect((await spawn(parent.credential, 'local/worker')).status).toBe(401);
    expect(Object.keys(await stored()).filter((key) => key.includes(parent.sessionId))).toEqual([]);
    // Another session is untouched.
    expect((await spawn(other.credential, 'local/worker')).status).toBe(200);
  });

  // ── spawn ─────────────────────────────────────────────────────────────────

  it('approves a spawn of a child in the parent’s spawn.allow that fits inside it, valid for 60 s', async () => {
    const parent = await registerParent();
    const answer = await spawn(parent.credential, 'local/worker');
    expect(answer.status).toBe(200);
    const approval = SpawnApprovalSchema.strict().parse(answer.body);
    expect(approval).toEqual({
      approval: expect.stringMatching(/^[0-9a-f]{64}$/),
      expires_at: new Date(clock + SPAWN_APPROVAL_TTL_MS).toISOString(),
      name: 'local/worker',
      version: '0.1.0',
      sha256: published.get('local/worker@0.1.0'),
      parent_session_id: parent.sessionId,
    });
    expect(SPAWN_APPROVAL_TTL_MS).toBe(60_000);
    expect(JSON.stringify(await stored())).not.toContain(approval.approval);
  });

  it('refuses a spawn with a credential roost never issued with 401, and one without a credential for a capsule outside the global allowlist with 403', async () => {
    await registerParent();
    for (const credential of ['0'.repeat(64), 'garbage', '']) {
      const answer = await spawn(credential, 'local/worker');
      expect(answer.status, credential).toBe(401);
      expect(answer.body.error).toContain('not a registered session');
    }
    const anonymous = await spawn(undefined, 'local/wide-env');
    expect(anonymous.status).toBe(403);
    expect(anonymous.body.error).toContain("'local/wide-env' is not in it");
  });

  it('refuses a child outside the parent’s capabilities.spawn.allow with 403 on the spawn axis, naming the capsule and the session', async () => {
    const narrow = manifest('local/narrow', '1.0.0', { spawn: ['local/other'] });
    const answer = await register('local/narrow', '1.0.0', narrow);
    const credential = RegisterSessionResponseSchema.parse(answer.body).credential;
    const refused = await spawn(credential, 'local/worker');
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({
      axis: 'spawn',
      code: 'E-DLG-002',
      error: `spawn: capsule 'local/worker' is not in capabilities.spawn.allow of session ${answer.sessionId}`,
    });
    // A name is allowed whole, never because an allowed name begins it.
    const prefixed = await register('local/prefixed', '1.0.0', manifest('local/prefixed', '1.0.0', { spawn: ['local/work'] }));
    const longer = await spawn(RegisterSessionResponseSchema.parse(prefixed.body).credential, 'local/worker');
    expect(longer.status).toBe(403);
    expect(longer.body).toMatchObject({ axis: 'spawn', code: 'E-DLG-002' });
  });

  describe.each(MISFITS)('a child that does not fit on the $axis axis', ({ axis, name, message }) => {
    it(`is refused with 403, axis '${axis}', naming the offending value`, async () => {
      const parent = await registerParent();
      const refused = await spawn(parent.credential, name);
      expect(refused.status).toBe(403);
      expect(refused.body).toEqual({ error: message, axis, code: 'E-DLG-002' });
      expect(Object.keys(await stored()).filter((key) => key.startsWith('approval.'))).toEqual([]);
    });
  });

  it('answers 404 naming a child that is allowed but not in the registry, and 422 for an artifact that is not a capsule', async () => {
    const parent = await registerParent();
    const ghost = await spawn(parent.credential, 'local/ghost');
    expect(ghost.status).toBe(404);
    expect(ghost.body).toMatchObject({ code: 'E-REG-001', error: expect.stringContaining('local/ghost@0.1.0') });
    const unknownVersion = await spawn(parent.credential, 'local/worker', '9.9.9');
    expect(unknownVersion.status).toBe(404);
    expect(unknownVersion.body.error).toContain('local/worker@9.9.9');
    const tool = await spawn(parent.credential, 'local/tool');
    expect(tool.status).toBe(422);
    expect(tool.body.error).toContain('not a capsule');
  });

  it('refuses a spawn body that is not {name, version} with 400', async () => {
    const parent = await registerParent();
    for (const raw of ['', '{', '{"name":"local/worker"}', '{"name":5,"version":"0.1.0"}', 'null']) {
      const answer = await call('POST', '/spawn', { raw, headers: { [SPAWN_CREDENTIAL_HEADER]: parent.credential } });
      expect(answer.status, raw).toBe(400);
      expect(answer.body.error).toContain('invalid spawn request');
    }
  });

  // ── registering under an approval ─────────────────────────────────────────

  it('registers a child under an approval once: it records its parent, and the approval cannot admit a second child', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');

    const child = await register('local/worker', '0.1.0', WORKER, { approval });
    expect(child.status, JSON.stringify(child.body)).toBe(201);
    const status = SessionStatusSchema.parse((await call('GET', `/status/${child.sessionId}`)).body);
    expect(status.spawned_by).toBe(parent.sessionId);

    const second = await register('local/worker', '0.1.0', WORKER, { approval });
    expect(second.status).toBe(403);
    expect(second.body).toMatchObject({ code: 'E-DLG-002', error: 'the spawn approval was already used; an approval admits one registration' });
    // Which session won is not the loser's to learn.
    expect(JSON.stringify(second.body)).not.toContain(child.sessionId);
    expect((await call('GET', `/status/${second.sessionId}`)).status).toBe(404);
  });

  it('refuses a registration under an approval whose parent has since deregistered: a delegation ends with its parent', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');
    expect((await call('DELETE', `/v1/sessions/${parent.sessionId}`, { headers: { [SPAWN_CREDENTIAL_HEADER]: parent.credential } })).status).toBe(200);
    const orphan = await register('local/worker', '0.1.0', WORKER, { approval });
    expect(orphan.status).toBe(403);
    expect(orphan.body).toEqual({
      code: 'E-DLG-002',
      error: `the session the spawn approval was issued to (${parent.sessionId}) is no longer registered, so its approval admits nobody`,
    });
    expect((await call('GET', `/status/${orphan.sessionId}`)).status).toBe(404);
  });

  it('admits exactly one of several children racing with one approval', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');
    const answers = await Promise.all(Array.from({ length: 6 }, () => register('local/worker', '0.1.0', WORKER, { approval })));
    expect(answers.map((answer) => answer.status).sort()).toEqual([201, 403, 403, 403, 403, 403]);
    const registered = [];
    for (const answer of answers) if ((await call('GET', `/status/${answer.sessionId}`)).status === 200) registered.push(answer.sessionId);
    expect(registered).toHaveLength(1);
  });

  it('refuses an approval presented 60 s or more after it was issued as expired, but admits it just before', async () => {
    const parent = await registerParent();
    const late = await approvalFor(parent.credential, 'local/worker');
    const inTime = await approvalFor(parent.credential, 'local/worker');
    const issuedAt = clock;

    clock = issuedAt + SPAWN_APPROVAL_TTL_MS - 1;
    expect((await register('local/worker', '0.1.0', WORKER, { approval: inTime })).status).toBe(201);

    clock = issuedAt + SPAWN_APPROVAL_TTL_MS;
    const refused = await register('local/worker', '0.1.0', WORKER, { approval: late });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toBe(`the spawn approval expired at ${new Date(issuedAt + SPAWN_APPROVAL_TTL_MS).toISOString()} (approvals are valid for 60 s)`);
    expect((await call('GET', `/status/${refused.sessionId}`)).status).toBe(404);
  });

  it('refuses an approval presented by another capsule name or version, and it still admits the capsule it was issued for', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker', '0.1.0');

    const otherVersion = await register('local/worker', '0.2.0', WORKER, { approval });
    expect(otherVersion.status).toBe(403);
    expect(otherVersion.body.error).toBe('the spawn approval was issued for capsule local/worker@0.1.0, not local/worker@0.2.0');
    const otherName = await register('local/parent', '1.0.0', PARENT, { approval });
    expect(otherName.status).toBe(403);
    expect(otherName.body.error).toContain('issued for capsule local/worker@0.1.0, not local/parent@1.0.0');

    expect((await register('local/worker', '0.1.0', WORKER, { approval })).status).toBe(201);
  });

  it('refuses a child that runs other bytes under the approved name and version, or reports none, and keeps the approval for the archive it approved', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');
    const approved = published.get('local/worker@0.1.0') as string;
    const other = 'a'.repeat(64);

    const substituted = await register('local/worker', '0.1.0', WORKER, { approval, sha256: other });
    expect(substituted.status).toBe(403);
    expect(substituted.body).toEqual({
      code: 'E-DLG-002',
      error:
        `the spawn approval was issued for the archive of local/worker@0.1.0 in roost's registry (sha256 ${approved}), ` +
        `and this session runs another archive under that name and version (sha256 ${other}): the stager's stores hold bytes roost did not check`,
    });
    const unnamed = await register('local/worker', '0.1.0', WORKER, { approval, sha256: null });
    expect(unnamed.status).toBe(403);
    expect(unnamed.body.error).toContain('and this session reports no archive it runs');
    for (const refused of [substituted, unnamed]) expect((await call('GET', `/status/${refused.sessionId}`)).status).toBe(404);

    expect((await register('local/worker', '0.1.0', WORKER, { approval })).status).toBe(201);
  });

  it('refuses an approval roost never issued with 403', async () => {
    for (const approval of ['f'.repeat(64), 'not-even-hex', '']) {
      const answer = await register('local/worker', '0.1.0', WORKER, { approval });
      expect(answer.status, approval).toBe(403);
      expect(answer.body.error).toContain('unknown to roost');
    }
    expect(Object.keys(await stored())).toEqual([]);
  });

  it('refuses a child whose runtime reports a wider envelope than the one approved, and keeps the approval', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');
    const wider = { ...policyOf(WORKER), network_allow: ['https://api.example.com', 'https://evil.example.net'] };
    const refused = await register('local/worker', '0.1.0', WORKER, { approval, policy: wider });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({
      axis: 'network',
      error: expect.stringContaining("child rule 'https://evil.example.net' is not covered by the approved local/worker@0.1.0's"),
    });
    expect((await register('local/worker', '0.1.0', WORKER, { approval })).status).toBe(201);
  });

  it('refuses a registration under an approval for a session id already registered with 409, without spending the approval', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');
    const taken = await register('local/worker', '0.1.0', WORKER, { sessionId: parent.sessionId, approval });
    expect(taken.status).toBe(409);
    expect((await register('local/worker', '0.1.0', WORKER, { approval })).status).toBe(201);
  });

  // ── the global allowlist ──────────────────────────────────────────────────

  it('approves a credential-less spawn only for a capsule in the global allowlist, with no parent and no fit check', async () => {
    // local/wide-net does not fit inside local/parent, but without a credential there is no parent.
    const answer = await spawn(undefined, 'local/wide-net');
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    const approval = SpawnApprovalSchema.parse(answer.body);
    expect(approval.parent_session_id).toBeNull();

    const child = await register('local/wide-net', '0.1.0', manifest('local/wide-net', '0.1.0', MISFITS[0]!.caps), { approval: approval.approval });
    expect(child.status).toBe(201);
    const status = SessionStatusSchema.parse((await call('GET', `/status/${child.sessionId}`)).body);
    expect(status.spawned_by).toBeUndefined();
    expect((await spawn(undefined, 'local/parent')).status).toBe(403);
    // A credential, when given, must be a session's even for an allowlisted capsule.
    expect((await spawn('1'.repeat(64), 'local/wide-net')).status).toBe(401);
  });

  it('reads the global allowlist from MURMUR_ROOST_SPAWN_ALLOW when it is not given', async () => {
    const fromEnv = start({ env: { MURMUR_ROOST_SPAWN_ALLOW: ' local/wide-env, ,local/greedy ' } });
    expect(fromEnv.spawnAllow).toEqual(['local/wide-env', 'local/greedy']);
    expect((await spawn(undefined, 'local/wide-env', '0.1.0', fromEnv)).status).toBe(200);
    expect((await spawn(undefined, 'local/worker', '0.1.0', fromEnv)).status).toBe(403);
    expect(start().spawnAllow).toEqual([]);
  });

  // ── state on the bus ──────────────────────────────────────────────────────

  it('keeps sessions and approvals on the bus, so a new roost on the same bus knows them', async () => {
    const parent = await registerParent();
    const approval = await approvalFor(parent.credential, 'local/worker');
    await roost.close();

    const successor = start();
    expect((await call('GET', `/status/${parent.sessionId}`, { app: successor })).status).toBe(200);
    const child = await register('local/worker', '0.1.0', WORKER, { approval, app: successor });
    expect(child.status, JSON.stringify(child.body)).toBe(201);
    expect((await spawn(parent.credential, 'local/worker', '0.1.0', successor)).status).toBe(200);
  });

  it('deletes long-expired approvals lazily, when a later spawn is approved', async () => {
    const parent = await registerParent();
    const old = await approvalFor(parent.credential, 'local/worker');
    const approvals = async () => Object.keys(await stored()).filter((key) => key.startsWith('approval.'));
    expect(await approvals()).toHaveLength(1);

    clock += 12 * 60_000; // expired 11 minutes ago: past the 10-minute grace in which a late child is told "expired"
    await approvalFor(parent.credential, 'local/worker');
    await expect.poll(approvals).toHaveLength(1);
    const answer = await register('local/worker', '0.1.0', WORKER, { approval: old });
    expect(answer.status).toBe(403);
    expect(answer.body.error).toContain('unknown to roost');
  });

  it('answers 503 with the bus error when its key-value bucket is gone, and keeps serving the registry', async () => {
    await registerParent();
    await bus.close();
    const answer = await register('local/parent', '1.0.0', PARENT);
    expect(answer.status).toBe(503);
    expect(answer.body.code).toBe('E-BUS-005');
    const index = await roost.http.request('/v1/artifacts');
    expect(index.status).toBe(200);
  });

  // ── hostile input ─────────────────────────────────────────────────────────

  it('refuses bodies over 64 KiB with 413 and never crashes on garbage', async () => {
    const huge = JSON.stringify({ name: 'x'.repeat(70 * 1024), version: '1' });
    expect((await call('POST', '/spawn', { raw: huge })).status).toBe(413);
    expect((await call('POST', '/v1/sessions', { raw: huge })).status).toBe(413);
    const parent = await registerParent();
    const garbage = await call('POST', '/spawn', { raw: '\u0000\uffff', headers: { [SPAWN_CREDENTIAL_HEADER]: parent.credential } });
    expect(garbage.status).toBe(400);
    const traversal = await spawn(parent.credential, 'local/worker', '../../etc');
    expect(traversal.status).toBe(404);
    expect(log.errors).toEqual([]);
  });
});
