import * as z from 'zod';
import { DelegationOutcomeSchema } from './delegation.js';
import { LockedArtifactSchema } from './lockfile.js';

/** An artifact a running session pulled (`manage.pull()`), for its launcher to pin in `murmur.lock`. */
export const SessionPinnedSchema = z.object({
  session_id: z.string(),
  artifact: LockedArtifactSchema,
});
export type SessionPinned = z.infer<typeof SessionPinnedSchema>;

/**
 * A delegation outcome a watcher decided, for the child's executor to record in the child's
 * workdir (only that machine holds it) and, when `post`, to deliver to the parent.
 */
export const CompletionRecordRequestSchema = z.object({
  session_id: z.string(),
  outcome: DelegationOutcomeSchema,
  post: z.boolean(),
});
export const CompletionRecordReplySchema = z.object({ outcome: DelegationOutcomeSchema });
