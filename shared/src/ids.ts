import { v7 as uuidv7 } from 'uuid';
import * as z from 'zod';

/**
 * Every id the runtime mints is a UUIDv7 in its 32-hex "simple" form behind a prefix that names
 * its id space. UUIDv7 leads with a millisecond timestamp, so ids of one kind sort in the order
 * they were minted: "the lexically greatest session id is the newest session" is a rule readers
 * of `running/` and `workdir/` rely on.
 */
export const ID_PREFIXES = {
  session: 'ses_',
  context: 'ctx_',
  task: 'tsk_',
  delegation: 'dlg_',
  message: 'msg_',
  request: 'req_',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

export function newId(kind: IdKind): string {
  return ID_PREFIXES[kind] + uuidv7().replaceAll('-', '');
}

export const newSessionId = (): string => newId('session');
export const newContextId = (): string => newId('context');
export const newTaskId = (): string => newId('task');
export const newDelegationId = (): string => newId('delegation');
export const newMessageId = (): string => newId('message');
export const newRequestId = (): string => newId('request');

function idSchema(kind: IdKind) {
  const prefix = ID_PREFIXES[kind];
  return z.string().regex(new RegExp(`^${prefix}[0-9a-f]{32}$`), `must be a ${kind} id: '${prefix}' followed by 32 lowercase hex digits`);
}

export const SessionIdSchema = idSchema('session');
/** The words of every refusal of what is no session id: what was given (its first 80 characters), and what an id looks like. */
export function notASessionId(given: string): string {
  return `'${given.slice(0, 80)}' is not a session id (${ID_PREFIXES.session} followed by 32 hex digits)`;
}
export const ContextIdSchema = idSchema('context');
export const TaskIdSchema = idSchema('task');
export const DelegationIdSchema = idSchema('delegation');
export const MessageIdSchema = idSchema('message');
export const RequestIdSchema = idSchema('request');

/** The millisecond timestamp a UUIDv7-based id carries in its first 48 bits. */
export function idTimestampMs(id: string): number {
  const hex = id.slice(id.indexOf('_') + 1, id.indexOf('_') + 13);
  return Number.parseInt(hex, 16);
}
