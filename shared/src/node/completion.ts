import { randomBytes } from 'node:crypto';
import { readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  COMPLETION_FILE,
  COMPLETION_SESSION_HEADER,
  DELEGATION_ID_HEADER,
  type DelegationOutcome,
  DelegationOutcomeSchema,
  type SpawnerHandle,
  boundDetail,
  completionMessageText,
} from '../delegation.js';
import type { Bus } from '../bus/bus.js';
import { MurmurError } from '../errors.js';
import { runtimeMetrics } from '../metrics-sink.js';
import { newMessageId, newRequestId } from '../ids.js';
import { commands } from '../topics.js';

/**
 * How a delegation's ending is recorded and told (seeds `delegation.rs`). Two reporters, one path:
 * the child's own runtime at the end of its session, or the launcher's watcher for a child that
 * could not. Both write `completion.json` in the child's workdir — by rename, before the post and
 * again after it, so a reader never sees half a file and a reporter that dies mid-post still
 * leaves the outcome — and both post the same JSON-RPC `message/send` to the parent's door. A
 * completion that cannot be delivered is recorded with the reason, never dropped.
 */

const DELIVERY_TIMEOUT_MS = 10_000;

export function completionPath(workdir: string): string {
  return path.join(workdir, COMPLETION_FILE);
}

/** The completion recorded in `workdir`, or undefined when none (or none that parses) is there. */
export function readCompletion(workdir: string): DelegationOutcome | undefined {
  try {
    const parsed = DelegationOutcomeSchema.safeParse(JSON.parse(readFileSync(completionPath(workdir), 'utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** Writes `completion.json` through a uniquely named sibling and a rename: the child and its watcher may both reach here. */
export function writeCompletion(workdir: string, outcome: DelegationOutcome): void {
  const target = completionPath(workdir);
  const staged = path.join(workdir, `.${COMPLETION_FILE}.${randomBytes(6).toString('hex')}.tmp`);
  writeFileSync(staged, `${JSON.stringify(outcome, null, 2)}\n`);
  try {
    renameSync(staged, target);
  } catch (error) {
    rmSync(staged, { force: true });
    throw error;
  }
}

function transportReason(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  if (cause?.code === 'ECONNREFUSED') return `failed to connect: connection refused`;
  if (cause?.code) return `failed to connect: ${cause.code}`;
  if ((error as Error).name === 'TimeoutError') return `the parent did not answer within ${DELIVERY_TIMEOUT_MS / 1000}s`;
  return error instanceof Error ? error.message : String(error);
}

export interface DeliveryOptions {
  /**
   * The bus the parent may be on. A parent that is a session of this stack is told there, as a
   * door would tell it — the only way that works from inside a container, where the door's URL
   * names the host. Only a parent no session of the bus answers for is posted to over HTTP.
   */
  bus?: Bus | undefined;
}

type Delivery = { delivered: true } | { delivered: false; reason: string };

/** The session a Murmur door URL addresses (`…/sessions/<id>/`), or undefined for any other URL. */
function doorSession(url: string): string | undefined {
  try {
    return /\/sessions\/(ses_[0-9a-f]{32})\/?$/.exec(new URL(url).pathname)?.[1];
  } catch {
    return undefined;
  }
}

/**
 * The completion as the `send` a door would make of its post: into the session the parent's URL
 * names, over the bus, with the session the handle addresses — which that session checks is itself.
 */
async function deliverOverBus(bus: Bus, handle: SpawnerHandle, url: string, outcome: DelegationOutcome): Promise<Delivery | 'not-on-this-bus'> {
  const session = doorSession(url);
  if (!session) return 'not-on-this-bus';
  try {
    const reply = await bus.request(
      commands.sessionRpc.at(session),
      {
        method: 'send',
        message_id: newMessageId(),
        context_id: handle.context_id,
        text: completionMessageText(outcome),
        delegation_id: outcome.delegation_id,
        completion_session: handle.session_id,
      },
      { timeoutMs: DELIVERY_TIMEOUT_MS },
    );
    if (reply.error) return { delivered: false, reason: reply.error.message };
    if (reply.task?.state === 'rejected')
      return { delivered: false, reason: 'the parent rejected the completion: its queue is full or its session has stopped taking work' };
    if (!reply.task) return { delivered: false, reason: `the parent session ${session} answered without a task` };
    return { delivered: true };
  } catch (error) {
    if (error instanceof MurmurError && error.code === 'E-BUS-004') return 'not-on-this-bus';
    return { delivered: false, reason: error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error) };
  }
}

/**
 * Tells the parent of one completion: over the bus when the parent is a session there, else posted
 * to the parent's door with the delegation and the addressed session in headers. A JSON-RPC error
 * or a `rejected` task did not deliver it: both are failures, with the parent's own words.
 */
export async function deliverCompletion(handle: SpawnerHandle, outcome: DelegationOutcome, options: DeliveryOptions = {}): Promise<Delivery> {
  const delivery = await attemptDelivery(handle, outcome, options);
  // Only a completion that had somewhere to go is counted: one the spawner asked none for was never posted.
  if (handle.url) runtimeMetrics().completion(delivery.delivered);
  return delivery;
}

async function attemptDelivery(handle: SpawnerHandle, outcome: DelegationOutcome, options: DeliveryOptions): Promise<Delivery> {
  if (!handle.url) return { delivered: false, reason: 'the spawner asked for no completion' };
  const url = handle.url.includes('://') ? handle.url : `http://${handle.url}`;
  if (options.bus) {
    const overBus = await deliverOverBus(options.bus, handle, url, outcome);
    if (overBus !== 'not-on-this-bus') return overBus;
  }
  const body = {
    jsonrpc: '2.0',
    id: newRequestId(),
    method: 'message/send',
    params: {
      message: {
        kind: 'message',
        messageId: newMessageId(),
        contextId: handle.context_id,
        role: 'user',
        parts: [{ kind: 'text', text: completionMessageText(outcome) }],
      },
    },
  };
  let reply: { error?: { message?: string }; result?: { status?: { state?: string } } };
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [DELEGATION_ID_HEADER]: outcome.delegation_id, [COMPLETION_SESSION_HEADER]: handle.session_id },
      body: JSON.stringify(body),
      redirect: 'manual',
      signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
    });
    reply = (await response.json()) as typeof reply;
  } catch (error) {
    return { delivered: false, reason: transportReason(error) };
  }
  if (reply === null || typeof reply !== 'object')
    return { delivered: false, reason: `the parent's door at ${url} answered something that is not a JSON-RPC response` };
  if (reply.error) return { delivered: false, reason: reply.error.message ?? 'the parent refused the completion' };
  // A door that answers for no such session: the parent is gone, though the door outlived it.
  if (!reply.result && !reply.error) return { delivered: false, reason: `the parent's door at ${url} answered without a result` };
  if (reply.result?.status?.state === 'rejected')
    return { delivered: false, reason: 'the parent rejected the completion: its queue is full or its session has stopped taking work' };
  return { delivered: true };
}

/**
 * Records `outcome`, posts it when the handle names where, and records what the posting did.
 * `complain` is told, in a line for the session's stderr, when a completion could not be delivered.
 */
export async function reportCompletion(
  handle: SpawnerHandle,
  outcome: DelegationOutcome,
  workdir: string,
  complain: (line: string) => void,
  options: DeliveryOptions = {},
): Promise<DelegationOutcome> {
  const recorded: DelegationOutcome = { ...outcome, ...(outcome.detail !== undefined ? { detail: boundDetail(outcome.detail) } : {}), delivered: false };
  delete recorded.delivery_error;
  const write = (value: DelegationOutcome): void => {
    try {
      writeCompletion(workdir, value);
    } catch (error) {
      complain(`[capsule-runtime] delegation ${value.delegation_id}: failed to write ${COMPLETION_FILE}: ${(error as Error).message}`);
    }
  };
  write(recorded);
  if (!handle.url) return recorded;
  const delivery = await deliverCompletion(handle, recorded, options);
  const settled: DelegationOutcome = delivery.delivered ? { ...recorded, delivered: true } : { ...recorded, delivered: false, delivery_error: delivery.reason };
  if (!delivery.delivered) {
    complain(
      `[capsule-runtime] delegation ${recorded.delegation_id}: the completion could not be delivered to ${handle.url}: ${delivery.reason}; recorded in ${completionPath(workdir)}`,
    );
  }
  write(settled);
  return settled;
}

/** A delegation the parent ended itself: recorded, posted to nobody — the only party to tell is the one that did it. */
export function recordTerminated(outcome: DelegationOutcome, workdir: string): DelegationOutcome {
  const recorded: DelegationOutcome = { ...outcome, ...(outcome.detail !== undefined ? { detail: boundDetail(outcome.detail) } : {}), delivered: false };
  delete recorded.delivery_error;
  writeCompletion(workdir, recorded);
  return recorded;
}

/** Where a finished child left its answer: `out/result.txt` in its workdir, absolute; undefined when it wrote none. */
export function childResultPath(workdir: string, sessionDir: string): string | undefined {
  return [path.join(sessionDir, 'out', 'result.txt'), path.join(workdir, 'out', 'result.txt')].find(
    (candidate) => statSync(candidate, { throwIfNoEntry: false })?.isFile() === true,
  );
}
