import {
  type CapabilityPolicy,
  type DeregisterSessionResponse,
  type Log,
  MurmurError,
  ROOST_MAX_BODY_BYTES,
  type RegisterSessionResponse,
  RegisterSessionRequestSchema,
  SPAWN_APPROVAL_HEADER,
  SPAWN_APPROVAL_TTL_MS,
  SPAWN_CREDENTIAL_HEADER,
  type SessionStatus,
  SessionIdSchema,
  type SpawnApproval,
  type SpawnAxis,
  SpawnRequestSchema,
  capabilityPolicy,
  parseNetworkAllowRules,
  validateFilesystemScope,
} from '@murmur/shared';
import { type ArtifactStore, assertStorable, inspectArchive } from '@murmur/shared/artifacts';
import { bearerOf, tokenMatcher } from '@murmur/shared/node';
import { type Context, Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { httpStatusOf } from './http-status.js';
import type * as z from 'zod';
import { type HookReach, findMisfit, hookReachOf } from './fit.js';
import { type ApprovalRecord, type RoostState, type SessionRecord, digestsEqual, newSecret, sha256Of } from './state.js';

/**
 * Delegation's referee over HTTP (schemas in `@murmur/shared`'s `roost.ts`):
 *
 * - `POST   /v1/sessions`               201 `{session_id, credential}`; 400 bad body, 409 taken,
 *                                        403 for an approval that is unknown, spent, expired, for
 *                                        another capsule or archive, or narrower than what the
 *                                        child reports
 * - `DELETE /v1/sessions/{session_id}`  200 `{deregistered: true}`; 401 credential, 404 unknown
 * - `GET    /status/{session_id}`       200 the session; 404 `{error: 'session not found'}`
 * - `POST   /spawn`                     200 an approval for 60 s; 401 credential, 403 not allowed
 *                                        or does not fit (with `axis`), 404 not in the registry
 *
 * Every refusal is `{error, code?, axis?}`; a bus (key-value) failure is 503.
 */

export interface SessionRoutesOptions {
  state: RoostState;
  store: ArtifactStore;
  /** Capsules anyone may spawn without a credential (no parent, so no fit check). */
  spawnAllow: readonly string[];
  /**
   * roost's token (`MURMUR_ROOST_TOKEN`), when it has one: a session registers without a spawn
   * approval only with it. Such a session reports its own envelope, its `spawn_allow` among it, and
   * what it reports is what `/spawn` approves from: from anyone at all, that would approve any
   * capsule for anyone who can reach roost. (A child registers under its approval, which roost
   * issued to its parent: no token.)
   */
  registrationToken?: string | undefined;
  now: () => number;
  log: Log;
}

/** An answer that is not a 2xx, thrown from a handler and rendered by `onError`. */
class Refusal extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    message: string,
    readonly extra: { code?: string; axis?: SpawnAxis } = {},
  ) {
    super(message);
  }
}

/** A request roost could not take (malformed, unauthenticated, unknown): the catalogue's E-ROOST-002. */
const ROOST_REFUSED = 'E-ROOST-002';
/** roost refused the delegation (the catalogue's E-DLG-002). */
const DELEGATION_REFUSED = 'E-DLG-002';
/** Approvals that expired this long ago are deleted; until then a late child is told "expired". */
const APPROVAL_SWEEP_GRACE_MS = 10 * 60_000;
const APPROVAL_SWEEP_INTERVAL_MS = 60_000;

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((issue) => (issue.path.length > 0 ? `'${issue.path.join('.')}': ${issue.message}` : issue.message))
    .join('; ');
}

async function jsonBody<T>(context: Context, schema: z.ZodType<T>, what: string): Promise<T> {
  let raw: unknown;
  try {
    raw = JSON.parse(await context.req.text());
  } catch {
    throw new Refusal(400, `${what}: the body is not JSON`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new Refusal(400, `${what}: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function statusOf(record: SessionRecord): SessionStatus {
  return {
    session_id: record.session_id,
    status: 'running',
    capsule_name: record.capsule_name,
    capsule_version: record.capsule_version,
    ...(record.spawned_by === undefined ? {} : { spawned_by: record.spawned_by }),
    registered_at: record.registered_at,
  };
}

export function sessionRoutes(options: SessionRoutesOptions): Hono {
  const { state, store, log, now } = options;
  const globalSpawnAllow = new Set(options.spawnAllow);
  // By digest, in constant time, as the publish token is.
  const registrars = options.registrationToken === undefined ? undefined : tokenMatcher([options.registrationToken]);
  const app = new Hono();
  const registeredPolicies = new RegisteredPolicies(store);
  let lastSweep = Number.NEGATIVE_INFINITY;

  app.onError((error, context) => {
    // Every refusal carries a code: the delegation's own where it is one, else roost's.
    if (error instanceof Refusal) return context.json({ error: error.message, code: ROOST_REFUSED, ...error.extra }, error.status);
    if (error instanceof MurmurError) {
      const status = httpStatusOf(error);
      if (status >= 500) log.error({ err: error, path: context.req.path }, 'roost request failed');
      return context.json({ error: error.message, code: error.code }, status);
    }
    log.error({ err: error, path: context.req.path }, 'roost request failed');
    return context.json({ error: `internal error: ${error instanceof Error ? error.message : String(error)}`, code: 'E-IO-003' }, 500);
  });

  const limited = bodyLimit({
    maxSize: ROOST_MAX_BODY_BYTES,
    onError: (context) => context.json({ error: `the request body is larger than roost's ${ROOST_MAX_BODY_BYTES}-byte limit`, code: ROOST_REFUSED }, 413),
  });

  /** The header's value, or undefined when absent; present but blank is kept (and refused later). */
  const header = (context: Context, name: string): string | undefined => context.req.header(name);

  /** The session presenting `credential`, or a 401. */
  async function authenticated(credential: string | undefined, what: string): Promise<SessionRecord> {
    if (credential === undefined) throw new Refusal(401, `${what} needs the session's credential in ${SPAWN_CREDENTIAL_HEADER}`);
    const session = credential.trim() === '' ? undefined : await state.sessionForCredential(credential.trim());
    if (!session) throw new Refusal(401, `the credential in ${SPAWN_CREDENTIAL_HEADER} is not a registered session's`);
    return session;
  }

  // ── sessions ──────────────────────────────────────────────────────────────

  app.post('/v1/sessions', limited, async (context) => {
    if (registrars !== undefined && header(context, SPAWN_APPROVAL_HEADER) === undefined && !registrars.admits(bearerOf(context.req.header('authorization'))))
      throw new Refusal(401, 'registering a session without a spawn approval needs roost’s token (MURMUR_ROOST_TOKEN, as a bearer)', { code: 'E-ROOST-001' });
    const body = await jsonBody(context, RegisterSessionRequestSchema, 'invalid session registration');
    checkPolicy(body.policy);
    const approval = header(context, SPAWN_APPROVAL_HEADER);
    if (await state.session(body.session_id)) throw new Refusal(409, `session ${body.session_id} is already registered`);

    const at = now();
    const credential = newSecret();
    const record: SessionRecord = {
      session_id: body.session_id,
      capsule_name: body.capsule_name,
      capsule_version: body.capsule_version,
      policy: body.policy,
      credential_sha256: sha256Of(credential),
      registered_at: iso(at),
    };

    let spent: { restore: () => Promise<void> } | undefined;
    if (approval !== undefined) {
      const stored = await state.approval(approval.trim());
      const refuse = (reason: string, axis?: SpawnAxis): never => {
        log.warn({ session_id: body.session_id, capsule: `${body.capsule_name}@${body.capsule_version}`, reason }, 'refused a registration under an approval');
        throw new Refusal(403, reason, { code: DELEGATION_REFUSED, ...(axis ? { axis } : {}) });
      };
      if (!stored) refuse(`the spawn approval in ${SPAWN_APPROVAL_HEADER} is unknown to roost`);
      const { record: granted } = stored!;
      if (granted.used_by !== undefined) refuse('the spawn approval was already used; an approval admits one registration');
      if (at >= granted.expires_at)
        refuse(`the spawn approval expired at ${iso(granted.expires_at)} (approvals are valid for ${SPAWN_APPROVAL_TTL_MS / 1000} s)`);
      if (granted.name !== body.capsule_name || granted.version !== body.capsule_version) {
        refuse(`the spawn approval was issued for capsule ${granted.name}@${granted.version}, not ${body.capsule_name}@${body.capsule_version}`);
      }
      if (body.capsule_sha256 !== granted.sha256) {
        refuse(
          `the spawn approval was issued for the archive of ${granted.name}@${granted.version} in roost's registry (sha256 ${granted.sha256}), ` +
            (body.capsule_sha256 === undefined
              ? 'and this session reports no archive it runs'
              : `and this session runs another archive under that name and version (sha256 ${body.capsule_sha256}): the stager's stores hold bytes roost did not check`),
        );
      }
      const misfit = findMisfit(body.policy, granted.policy, { ceiling: `the approved ${granted.name}@${granted.version}'s` });
      if (misfit) refuse(`the reported envelope is wider than the one approved: ${misfit.reason}`, misfit.axis);
      // A delegation ends with its parent: an approval its parent left unused is not a way in after it.
      if (granted.parent_session_id !== null && !(await state.session(granted.parent_session_id)))
        refuse(`the session the spawn approval was issued to (${granted.parent_session_id}) is no longer registered, so its approval admits nobody`);

      const spentRevision = await state.spendApproval(stored!, body.session_id, at);
      if (spentRevision === undefined) refuse('the spawn approval was already used; an approval admits one registration');
      spent = { restore: () => state.restoreApproval(stored!, spentRevision!) };
      if (granted.parent_session_id !== null) record.spawned_by = granted.parent_session_id;
    }

    let created: boolean;
    try {
      created = await state.createSession(record);
    } catch (error) {
      await spent?.restore().catch(() => {});
      throw error;
    }
    if (!created) {
      await spent?.restore().catch(() => {});
      throw new Refusal(409, `session ${body.session_id} is already registered`);
    }
    log.info(
      { session_id: record.session_id, capsule: `${record.capsule_name}@${record.capsule_version}`, spawned_by: record.spawned_by },
      'session registered',
    );
    const response: RegisterSessionResponse = { session_id: record.session_id, credential };
    return context.json(response, 201);
  });

  app.delete('/v1/sessions/:session_id', async (context) => {
    const sessionId = context.req.param('session_id');
    const credential = header(context, SPAWN_CREDENTIAL_HEADER);
    if (credential === undefined || credential.trim() === '')
      throw new Refusal(401, `deregistering a session needs its credential in ${SPAWN_CREDENTIAL_HEADER}`);
    const session = SessionIdSchema.safeParse(sessionId).success ? await state.session(sessionId) : undefined;
    if (!session) throw new Refusal(404, 'session not found');
    if (!digestsEqual(sha256Of(credential.trim()), session.credential_sha256)) {
      throw new Refusal(401, `the credential in ${SPAWN_CREDENTIAL_HEADER} is not session ${sessionId}'s`);
    }
    await state.deleteSession(session);
    log.info({ session_id: sessionId }, 'session deregistered');
    const response: DeregisterSessionResponse = { deregistered: true };
    return context.json(response, 200);
  });

  app.get('/status/:session_id', async (context) => {
    const sessionId = context.req.param('session_id');
    const session = SessionIdSchema.safeParse(sessionId).success ? await state.session(sessionId) : undefined;
    if (!session) return context.json({ error: 'session not found' }, 404);
    return context.json(statusOf(session), 200);
  });

  // ── spawn approvals ───────────────────────────────────────────────────────

  app.post('/spawn', limited, async (context) => {
    const credential = header(context, SPAWN_CREDENTIAL_HEADER);
    const parent = credential === undefined ? undefined : await authenticated(credential, 'a spawn');
    const body = await jsonBody(context, SpawnRequestSchema, 'invalid spawn request');
    const child = `${body.name}@${body.version}`;
    const refuse = (status: ContentfulStatusCode, reason: string, axis?: SpawnAxis): never => {
      log.warn({ parent_session_id: parent?.session_id ?? null, child, reason }, 'refused a spawn');
      throw new Refusal(status, reason, { code: DELEGATION_REFUSED, ...(axis ? { axis } : {}) });
    };

    if (parent) {
      if (!parent.policy.spawn_allow.includes(body.name)) {
        refuse(403, `spawn: capsule '${body.name}' is not in capabilities.spawn.allow of session ${parent.session_id}`, 'spawn');
      }
    } else if (!globalSpawnAllow.has(body.name)) {
      // Upstream's "not allowed": nothing was presented that could be wrong, so not a 401.
      refuse(
        403,
        `a spawn without ${SPAWN_CREDENTIAL_HEADER} is allowed only for capsules in roost's spawn allowlist (--spawn-allow, MURMUR_ROOST_SPAWN_ALLOW), and '${body.name}' is not in it`,
      );
    }

    const { policy: childPolicy, hooks, sha256 } = await registeredPolicies.of(body.name, body.version);
    if (parent) {
      const misfit = findMisfit(childPolicy, parent.policy, undefined, hooks);
      if (misfit) refuse(403, misfit.reason, misfit.axis);
      // Deregistered while the registry was read: no approval for a parent that is gone.
      await authenticated(credential, 'a spawn');
    }

    const issuedAt = now();
    const approval = newSecret();
    const record: ApprovalRecord = {
      name: body.name,
      version: body.version,
      parent_session_id: parent?.session_id ?? null,
      issued_at: issuedAt,
      expires_at: issuedAt + SPAWN_APPROVAL_TTL_MS,
      policy: childPolicy,
      sha256,
    };
    await state.createApproval(approval, record);
    log.info({ parent_session_id: record.parent_session_id, child, expires_at: iso(record.expires_at) }, 'spawn approved');
    sweepLater(issuedAt);
    const response: SpawnApproval = {
      approval,
      expires_at: iso(record.expires_at),
      name: body.name,
      version: body.version,
      sha256,
      parent_session_id: record.parent_session_id,
    };
    return context.json(response, 200);
  });

  /** Deletes long-expired approvals now and then; never in the way of a request. */
  function sweepLater(at: number): void {
    if (at - lastSweep < APPROVAL_SWEEP_INTERVAL_MS) return;
    lastSweep = at;
    state
      .sweepApprovals(at - APPROVAL_SWEEP_GRACE_MS)
      .then((swept) => {
        if (swept > 0) log.info({ swept }, 'deleted expired spawn approvals');
      })
      .catch((error: unknown) => log.warn({ err: error }, 'could not sweep expired spawn approvals'));
  }

  return app;
}

/** A registered envelope must be one the executor could enforce: rules that parse, a scope inside the workdir. */
function checkPolicy(policy: CapabilityPolicy): void {
  try {
    parseNetworkAllowRules(policy.network_allow, 'policy.network_allow');
    validateFilesystemScope(policy.filesystem_scope, 'policy.filesystem_scope');
  } catch (error) {
    if (error instanceof MurmurError) throw new Refusal(400, `invalid session registration: ${error.message}`, { code: error.code });
    throw error;
  }
}

/** Envelopes worked out, kept: an archive is not rewritten under its name@version. */
const POLICIES_KEPT = 256;

/**
 * The envelopes of the capsules in roost's registry, each worked out from its archive once: a
 * `/spawn` of an allowlisted capsule needs no credential, and reading, hashing and inflating its
 * archive at every request (64 MiB took ~350 ms) was anyone's to repeat. A version stays its
 * archive (a publish never replaces one); one removed and published again is read again when
 * its recorded digest changes, which the store's record says without reading the bytes.
 */
class RegisteredPolicies {
  private readonly kept = new Map<string, RegisteredEnvelope>();

  constructor(private readonly store: ArtifactStore) {}

  async of(name: string, version: string): Promise<RegisteredEnvelope> {
    const key = `${name}@${version}`;
    // A name that cannot be a store path has no record: the full read below refuses it by name.
    const recorded = await this.store.recordedSha256(name, version).catch(() => undefined);
    const kept = this.kept.get(key);
    if (kept && recorded !== undefined && kept.sha256 === recorded) return kept;
    const envelope = await registeredCapsulePolicy(this.store, name, version);
    this.kept.delete(key);
    this.kept.set(key, envelope);
    if (this.kept.size > POLICIES_KEPT) this.kept.delete(this.kept.keys().next().value as string);
    return envelope;
  }
}

/** A registered capsule's envelope, its hooks' own network rules, and the digest they were read from. */
interface RegisteredEnvelope {
  policy: CapabilityPolicy;
  hooks: HookReach[];
  sha256: string;
}

/** The envelope of the capsule `name@version` in roost's registry, from its own manifest. */
async function registeredCapsulePolicy(store: ArtifactStore, name: string, version: string): Promise<RegisteredEnvelope> {
  const label = `${name}@${version}`;
  try {
    assertStorable(name, version);
  } catch {
    throw new Refusal(404, `capsule ${label} is not in roost's registry (that name or version cannot name an artifact)`, { code: 'E-REG-001' });
  }
  const stored = await store.resolve(name, version, 'unknown');
  if (!stored) throw new Refusal(404, `capsule ${label} is not in roost's registry; publish it first`, { code: 'E-REG-001' });
  if (stored.bytesSha256 !== stored.recordedSha256) {
    throw new MurmurError('E-REG-002', `artifact integrity check failed for ${label}: the stored bytes no longer match their recorded sha256`);
  }
  const inspected = await inspectArchive(stored.bytes, label);
  if (inspected.packaged.kind !== 'capsule') {
    throw new Refusal(422, `${label} in roost's registry is a ${inspected.packaged.manifest.runtime} artifact, not a capsule`, { code: 'E-MAN-003' });
  }
  const manifest = inspected.packaged.manifest;
  return { policy: capabilityPolicy(manifest), hooks: hookReachOf(manifest.artifacts), sha256: stored.recordedSha256 };
}
