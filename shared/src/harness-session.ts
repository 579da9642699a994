import * as z from 'zod';

/**
 * The map from an A2A context to the harness session that holds its conversation, on
 * `inference.transport: process` (upstream 0.6.0): one `harness-session.json` per context, in the
 * directory an `http` capsule keeps `conversation.jsonl` in, so `<record>/<context-id>` means the
 * same on both transports.
 *
 * `session_id` is opaque: whatever the harness calls its conversation, only ever handed back to it.
 * `harness` and `driver` are written for a person reading the directory; nothing compares them.
 * A file of any other `type`, or naming no session, reads as no entry at all.
 */

export const HARNESS_SESSION_FILE = 'harness-session.json';
export const HARNESS_SESSION_TYPE = 'murmur.harness-session';

/** The A2A request header that asks a turn to start its context's conversation anew. */
export const FORGET_SESSION_HEADER = 'x-murmur-forget-session';

/** Who asked for a forget, as `harness_session_forgotten.asked_by` names them. */
export const FORGET_ASKERS = ['cli', 'a2a'] as const;
export type ForgetAsker = (typeof FORGET_ASKERS)[number];

/**
 * A harness's session id, as Claude Code makes and takes them: a UUID. Held to that wherever one
 * is kept or passed on, since it goes on the harness's command line (`--resume=<id>`), where an id
 * that began with `-` was read as an option.
 */
export const HarnessSessionIdSchema = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID');

export const HarnessSessionEntrySchema = z.object({
  type: z.literal(HARNESS_SESSION_TYPE),
  session_id: HarnessSessionIdSchema,
  harness: z.string(),
  driver: z.string(),
  /** When the context first got a session (ms since the epoch): kept across every later write. */
  created_ms: z.number().int().nonnegative(),
  updated_ms: z.number().int().nonnegative(),
});
export type HarnessSessionEntry = z.infer<typeof HarnessSessionEntrySchema>;

/** Whether a forget header's value asks for one: `1`, `true` or `yes`, in any case. */
export function asksToForget(value: string | undefined): boolean {
  return value !== undefined && /^(1|true|yes)$/i.test(value.trim());
}
