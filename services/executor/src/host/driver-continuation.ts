/**
 * A stateful driver's continuation: the protocol by which a driver that keeps the conversation on
 * its side (a provider's response id, a server-side thread) spares the host resending it.
 *
 * A driver opts in by returning `("continuation_id", <id>)` in its tool-result's metadata; the
 * host then knows the driver has seen the first `ackedLength` messages of the logical history, and
 * the next turn's request carries only the messages after them, with `continuation_id: <id>`. A
 * turn whose result carries no id (or an empty one) drops the continuation, so the next turn
 * resends everything — a driver that never sets the key sees the full history every turn.
 *
 * Invariants, as upstream keeps them:
 * - a continuation is used only under the context it was made in: an id from one conversation
 *   never carries into an unrelated task of the same session;
 * - it is used only for a history that begins with exactly the messages the driver saw: a task of
 *   a context that keeps no history (each starts afresh), a reopened attempt (its task text
 *   rewritten), the task after one that ended without its history kept (failed, canceled, out of
 *   turns) — each starts from other messages, and is sent whole, with no id. Otherwise the wire
 *   would carry only the messages past what the driver saw of another history (often none), and
 *   the driver would answer a task it was never told;
 * - a compaction that replaces the history drops it (the driver never saw the replacement);
 * - it lives as long as the session, not one attempt: the next task of the same context sends
 *   only its new messages.
 */
import { createHash } from 'node:crypto';

/** The metadata key a driver answers with, and the request field the host sends back: one string on both sides. */
export const CONTINUATION_ID_KEY = 'continuation_id';

/** The first non-empty `continuation_id` in the metadata, in list order; undefined when there is none. */
export function continuationIdOf(metadata: ReadonlyArray<readonly [string, string]>): string | undefined {
  for (const [key, value] of metadata) {
    if (key === CONTINUATION_ID_KEY && value !== '') return value;
  }
  return undefined;
}

interface Held {
  id: string;
  contextId: string | undefined;
  ackedLength: number;
  /** The digest of the messages the driver saw (`digestOf`): what a history must begin with to go on from them. */
  acked: string;
}

/** The messages' content as one digest: a history loaded from disk matches the one it was saved from. */
function digestOf(messages: readonly unknown[]): string {
  return createHash('sha256').update(JSON.stringify(messages)).digest('hex');
}

export class DriverContinuation {
  private held: Held | undefined;

  /**
   * The id and the number of messages the driver already knows, when a continuation is held for
   * `contextId` and `messages` begins with exactly those it saw.
   */
  active(contextId: string | undefined, messages: readonly unknown[]): { id: string; ackedLength: number } | undefined {
    const held = this.held;
    if (!held || held.contextId !== contextId || held.ackedLength > messages.length) return undefined;
    if (digestOf(messages.slice(0, held.ackedLength)) !== held.acked) return undefined;
    return { id: held.id, ackedLength: held.ackedLength };
  }

  /** What this turn's driver result said: an id renews the continuation (the driver now knows the messages `sent`); none drops it. */
  afterTurn(id: string | undefined, contextId: string | undefined, sent: readonly unknown[]): void {
    this.held = id === undefined ? undefined : { id, contextId, ackedLength: sent.length, acked: digestOf(sent) };
  }

  /** The final assistant message was kept in the context's history (`kept`): the driver made it, so it knows it. */
  advance(contextId: string | undefined, kept: readonly unknown[]): void {
    if (this.held && this.held.contextId === contextId) Object.assign(this.held, { ackedLength: kept.length, acked: digestOf(kept) });
  }

  clear(): void {
    this.held = undefined;
  }
}
