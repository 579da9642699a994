import * as z from 'zod';
import { Sha256HexSchema } from './file-set.js';
import { SessionIdSchema } from './ids.js';
import { CapabilityPolicySchema } from './policy.js';

/**
 * roost's wire: sessions, credentials and spawn approvals, delegation's referee.
 *
 * - `POST   /v1/sessions`               register a session (a child registers under an approval)
 * - `DELETE /v1/sessions/{session_id}`  deregister, with the session's credential
 * - `GET    /status/{session_id}`       whether roost knows the session
 * - `POST   /spawn`                     ask for an approval to spawn `name@version`
 *
 * A credential is handed out once, at registration, and roost keeps only its sha256. An approval
 * is valid for `SPAWN_APPROVAL_TTL_MS` and spends itself on the first registration it admits.
 * Errors are `{ error, code?, axis? }`; `axis` names the capability axis a spawn did not fit.
 */

// The headers (`SPAWN_CREDENTIAL_HEADER`, `SPAWN_APPROVAL_HEADER`) live in `delegation.ts`.
/** How long an approval admits a registration. */
export const SPAWN_APPROVAL_TTL_MS = 60_000;
/** The bus key-value bucket holding roost's sessions and approvals. */
export const ROOST_KV_BUCKET = 'murmur-roost';
/** Largest request body roost's session and spawn routes read. */
export const ROOST_MAX_BODY_BYTES = 64 * 1024;

/** Every axis a child's envelope must fit inside its parent's on. */
export const SPAWN_AXES = ['network', 'filesystem', 'env', 'shell', 'spawn', 'limits', 'containment'] as const;
export const SpawnAxisSchema = z.enum(SPAWN_AXES);
export type SpawnAxis = z.infer<typeof SpawnAxisSchema>;

const text = z.string().trim().min(1).max(256);
/** 32 random bytes, hex. */
const secret = z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits');

export const RegisterSessionRequestSchema = z.object({
  session_id: SessionIdSchema,
  capsule_name: text,
  capsule_version: text,
  /** The envelope the trusted runtime (the executor) reports for the session. */
  policy: CapabilityPolicySchema,
  /**
   * sha256 of the `.mur.zip` the session runs, when it runs a capsule by name (absent for a
   * project staged from its directory). Under an approval it must be the archive roost approved.
   */
  capsule_sha256: Sha256HexSchema.optional(),
});
export type RegisterSessionRequest = z.infer<typeof RegisterSessionRequestSchema>;

export const RegisterSessionResponseSchema = z.object({
  session_id: SessionIdSchema,
  credential: secret,
});
export type RegisterSessionResponse = z.infer<typeof RegisterSessionResponseSchema>;

export const DeregisterSessionResponseSchema = z.object({ deregistered: z.literal(true) });
export type DeregisterSessionResponse = z.infer<typeof DeregisterSessionResponseSchema>;

export const SessionStatusSchema = z.object({
  session_id: SessionIdSchema,
  status: z.literal('running'),
  capsule_name: z.string(),
  capsule_version: z.string(),
  /** The session whose approval admitted this one. */
  spawned_by: SessionIdSchema.optional(),
  /** ISO 8601. */
  registered_at: z.string(),
});
export type SessionStatus = z.infer<typeof SessionStatusSchema>;

export const SpawnRequestSchema = z.object({
  name: text,
  version: text,
});
export type SpawnRequest = z.infer<typeof SpawnRequestSchema>;

export const SpawnApprovalSchema = z.object({
  approval: secret,
  /** ISO 8601; the approval admits no registration from this instant on. */
  expires_at: z.string(),
  name: z.string(),
  version: z.string(),
  /** sha256 of the archive in roost's registry that was checked: the one the child must run. */
  sha256: Sha256HexSchema,
  /** The session that asked, or null for a spawn admitted by roost's global allowlist. */
  parent_session_id: SessionIdSchema.nullable(),
});
export type SpawnApproval = z.infer<typeof SpawnApprovalSchema>;

export const RoostErrorSchema = z.object({
  error: z.string(),
  code: z.string().optional(),
  axis: SpawnAxisSchema.optional(),
});
export type RoostError = z.infer<typeof RoostErrorSchema>;
