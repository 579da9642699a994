import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import * as z from 'zod';
import { CapabilityPolicySchema, type Log, MurmurError, ROOST_KV_BUCKET, SessionIdSchema } from '@murmur/shared';
import type { Bus, KeyValueStore } from '@murmur/shared/bus';

/**
 * roost's state, all of it in the bus key-value bucket `murmur-roost`, so a roost that restarts
 * (or another roost on the same NATS) knows every session and every approval:
 *
 * - `session.<session_id>`        the session: capsule, reported policy, sha256 of its credential
 * - `credential.<sha256>`         which session a credential belongs to
 * - `approval.<sha256>`           an approval: what it admits, until when, and whether it is spent
 *
 * Secrets (credentials, approvals) are never stored, only their sha256.
 */

export const SessionRecordSchema = z.object({
  session_id: SessionIdSchema,
  capsule_name: z.string(),
  capsule_version: z.string(),
  policy: CapabilityPolicySchema,
  credential_sha256: z.string(),
  spawned_by: SessionIdSchema.optional(),
  registered_at: z.string(),
});
export type SessionRecord = z.infer<typeof SessionRecordSchema>;

export const ApprovalRecordSchema = z.object({
  name: z.string(),
  version: z.string(),
  parent_session_id: SessionIdSchema.nullable(),
  /** Milliseconds since the epoch. */
  issued_at: z.number(),
  expires_at: z.number(),
  /** The child envelope that was approved: what the registering child may report at most. */
  policy: CapabilityPolicySchema,
  /**
   * sha256 of the archive the envelope was read from. The child's stager resolves the name from
   * its own stores, which may hold other bytes under it, whose hooks reach elsewhere: only this
   * archive was refereed.
   */
  sha256: z.string(),
  used_by: SessionIdSchema.optional(),
  used_at: z.number().optional(),
});
export type ApprovalRecord = z.infer<typeof ApprovalRecordSchema>;

/** 32 random bytes, hex. */
export function newSecret(): string {
  return randomBytes(32).toString('hex');
}

export function sha256Of(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** Compares two hex digests in constant time. */
export function digestsEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  return left.length === right.length && timingSafeEqual(left, right);
}

const sessionKey = (sessionId: string): string => `session.${sessionId}`;
const credentialKey = (digest: string): string => `credential.${digest}`;
const approvalKey = (digest: string): string => `approval.${digest}`;

export interface StoredApproval {
  readonly record: ApprovalRecord;
  readonly revision: number;
  readonly key: string;
}

export class RoostState {
  private opening: Promise<KeyValueStore> | undefined;

  constructor(
    private readonly bus: Bus,
    private readonly log: Log,
  ) {}

  /** The bucket, opened on first use; a failed open is retried by the next call. */
  private kv(): Promise<KeyValueStore> {
    if (!this.opening) {
      const opening = this.bus.keyValue(ROOST_KV_BUCKET);
      this.opening = opening;
      opening.catch(() => {
        if (this.opening === opening) this.opening = undefined;
      });
    }
    return this.opening;
  }

  /** Opens the bucket now, so a misconfigured bus is reported at start rather than at the first request. */
  async open(): Promise<void> {
    await this.kv();
  }

  private parse<T>(schema: z.ZodType<T>, key: string, raw: string): T {
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch {
      json = undefined;
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      this.log.error({ key }, 'a roost record in the key-value bucket is unreadable');
      throw new MurmurError('E-IO-003', `roost's record '${key}' is unreadable`);
    }
    return parsed.data;
  }

  async session(sessionId: string): Promise<SessionRecord | undefined> {
    const key = sessionKey(sessionId);
    const raw = await (await this.kv()).get(key);
    return raw === undefined ? undefined : this.parse(SessionRecordSchema, key, raw);
  }

  /** The session a credential was issued to, if it is still registered. */
  async sessionForCredential(credential: string): Promise<SessionRecord | undefined> {
    const digest = sha256Of(credential);
    const sessionId = await (await this.kv()).get(credentialKey(digest));
    if (sessionId === undefined) return undefined;
    const session = await this.session(sessionId);
    return session && digestsEqual(session.credential_sha256, digest) ? session : undefined;
  }

  /**
   * Records a session and its credential index. `false` when the session id is taken (nothing is
   * left behind then).
   */
  async createSession(record: SessionRecord): Promise<boolean> {
    const kv = await this.kv();
    await kv.put(credentialKey(record.credential_sha256), record.session_id);
    const created = await kv.create(sessionKey(record.session_id), JSON.stringify(record));
    if (!created) await kv.delete(credentialKey(record.credential_sha256));
    return created;
  }

  async deleteSession(record: SessionRecord): Promise<void> {
    const kv = await this.kv();
    await kv.delete(sessionKey(record.session_id));
    await kv.delete(credentialKey(record.credential_sha256));
  }

  /** Forgets the session `sessionId` and its credential, if roost knows it; true when it did. */
  async forgetSession(sessionId: string): Promise<boolean> {
    const record = await this.session(sessionId);
    if (!record) return false;
    await this.deleteSession(record);
    return true;
  }

  async approval(approval: string): Promise<StoredApproval | undefined> {
    const key = approvalKey(sha256Of(approval));
    const entry = await (await this.kv()).entry(key);
    if (entry === undefined) return undefined;
    return { key, revision: entry.revision, record: this.parse(ApprovalRecordSchema, key, entry.value) };
  }

  async createApproval(approval: string, record: ApprovalRecord): Promise<void> {
    const key = approvalKey(sha256Of(approval));
    if (!(await (await this.kv()).create(key, JSON.stringify(record)))) {
      throw new MurmurError('E-IO-003', 'an approval with this digest already exists');
    }
  }

  /**
   * Spends an approval: compare-and-set from the revision that was read, so of two registrations
   * racing with one approval exactly one wins. Returns the spent entry's revision, or undefined
   * when someone else changed it first.
   */
  async spendApproval(stored: StoredApproval, sessionId: string, at: number): Promise<number | undefined> {
    const kv = await this.kv();
    const spent: ApprovalRecord = { ...stored.record, used_by: sessionId, used_at: at };
    if (!(await kv.update(stored.key, JSON.stringify(spent), stored.revision))) return undefined;
    return (await kv.entry(stored.key))?.revision;
  }

  /** Gives back an approval spent by a registration that then failed. Best effort. */
  async restoreApproval(stored: StoredApproval, spentRevision: number): Promise<void> {
    const kv = await this.kv();
    await kv.update(stored.key, JSON.stringify(stored.record), spentRevision);
  }

  /** Deletes approvals that expired before `before`; returns how many. */
  async sweepApprovals(before: number): Promise<number> {
    const kv = await this.kv();
    let swept = 0;
    for (const key of await kv.keys()) {
      if (!key.startsWith('approval.')) continue;
      const raw = await kv.get(key);
      if (raw === undefined) continue;
      let expiresAt: number | undefined;
      try {
        expiresAt = ApprovalRecordSchema.parse(JSON.parse(raw)).expires_at;
      } catch {
        expiresAt = undefined;
      }
      if (expiresAt === undefined || expiresAt < before) {
        await kv.delete(key);
        swept += 1;
      }
    }
    return swept;
  }
}
