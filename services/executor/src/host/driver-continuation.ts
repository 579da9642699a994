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
 * - a compaction that replaces the history drops it (the driver never saw the replacement);
 * - it lives as long as the session, not one attempt: the next task of the same context sends
 *   only its new messages.
 */

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
}

export class DriverContinuation {
  private held: Held | undefined;

  /** The id and the messages the driver already knows, when a continuation is held for `contextId`. */
  active(contextId: string | undefined): { id: string; ackedLength: number } | undefined {
    const held = this.held;
    if (!held || held.contextId !== contextId) return undefined;
    return { id: held.id, ackedLength: held.ackedLength };
  }

  /** What this turn's driver result said: an id renews the continuation (the driver now knows `sentLength` messages); none drops it. */
  afterTurn(id: string | undefined, contextId: string | undefined, sentLength: number): void {
    this.held = id === undefined ? undefined : { id, contextId, ackedLength: sentLength };
  }

  /** The final assistant message was kept in the context's history: the driver made it, so it knows it. */
  advance(contextId: string | undefined, ackedLength: number): void {
    if (this.held && this.held.contextId === contextId) this.held.ackedLength = ackedLength;
  }

  clear(): void {
    this.held = undefined;
  }
}
