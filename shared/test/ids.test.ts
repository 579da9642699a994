import { describe, expect, it } from 'vitest';
import {
  ContextIdSchema,
  DelegationIdSchema,
  ID_PREFIXES,
  type IdKind,
  MessageIdSchema,
  RequestIdSchema,
  SessionIdSchema,
  TaskIdSchema,
  idTimestampMs,
  newContextId,
  newDelegationId,
  newId,
  newMessageId,
  newRequestId,
  newSessionId,
  newTaskId,
} from '@murmur/shared';

const MINTERS: ReadonlyArray<[IdKind, string, () => string]> = [
  ['session', 'ses_', newSessionId],
  ['context', 'ctx_', newContextId],
  ['task', 'tsk_', newTaskId],
  ['delegation', 'dlg_', newDelegationId],
  ['message', 'msg_', newMessageId],
  ['request', 'req_', newRequestId],
];

const SCHEMAS = {
  session: SessionIdSchema,
  context: ContextIdSchema,
  task: TaskIdSchema,
  delegation: DelegationIdSchema,
  message: MessageIdSchema,
  request: RequestIdSchema,
} as const;

function waitForNextMillisecond(): void {
  const start = Date.now();
  while (Date.now() === start) {
    // spin: the next id must carry a later timestamp
  }
}

describe('minting ids', () => {
  it('has exactly the six id spaces with their prefixes', () => {
    expect(ID_PREFIXES).toEqual({ session: 'ses_', context: 'ctx_', task: 'tsk_', delegation: 'dlg_', message: 'msg_', request: 'req_' });
  });

  it.each(MINTERS)('mints a %s id as %s followed by 32 lowercase hex digits', (kind, prefix, mint) => {
    for (const id of [mint(), newId(kind)]) {
      expect(id).toMatch(new RegExp(`^${prefix}[0-9a-f]{32}$`));
    }
  });

  it.each(MINTERS)('mints a %s id whose uuid is version 7 with the RFC variant', (_kind, prefix, mint) => {
    const hex = mint().slice(prefix.length);
    expect(hex[12]).toBe('7');
    expect(['8', '9', 'a', 'b']).toContain(hex[16]);
  });

  it('never mints the same id twice', () => {
    const ids = Array.from({ length: 2000 }, () => newDelegationId());
    expect(new Set(ids).size).toBe(2000);
  });

  it('mints ids that sort in minting order across milliseconds', () => {
    const minted: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      minted.push(newSessionId());
      waitForNextMillisecond();
    }
    expect([...minted].sort()).toEqual(minted);
    const stamps = minted.map(idTimestampMs);
    for (let i = 1; i < stamps.length; i += 1) expect(stamps[i]).toBeGreaterThan(stamps[i - 1] ?? Number.POSITIVE_INFINITY);
  });

  it('mints ids that sort in minting order within one millisecond', () => {
    const minted = Array.from({ length: 1000 }, () => newTaskId());
    expect([...minted].sort()).toEqual(minted);
  });
});

describe('the timestamp an id carries', () => {
  it('reads the minting time in milliseconds from a fresh id', () => {
    const before = Date.now();
    const id = newContextId();
    const after = Date.now();
    const stamp = idTimestampMs(id);
    expect(stamp).toBeGreaterThanOrEqual(before);
    expect(stamp).toBeLessThanOrEqual(after);
  });

  it('reads the first 48 bits after the prefix', () => {
    expect(idTimestampMs('ses_0199c4e2f1b7712a9d3e4f5061728394')).toBe(0x0199c4e2f1b7);
    expect(idTimestampMs('req_000000000001700080000000000000ff')).toBe(1);
  });
});

describe('id schemas', () => {
  it.each(MINTERS)('accepts a minted %s id', (kind, _prefix, mint) => {
    const id = mint();
    expect(SCHEMAS[kind].parse(id)).toBe(id);
  });

  it.each([
    ['SES_0199c4e2f1b7712a9d3e4f5061728394', 'an uppercase prefix'],
    ['ses_0199C4E2F1B7712A9D3E4F5061728394', 'uppercase hex'],
    ['ses_0199c4e2f1b7712a9d3e4f506172839', '31 hex digits'],
    ['ses_0199c4e2f1b7712a9d3e4f50617283945', '33 hex digits'],
    ['ses_0199c4e2-f1b7-712a-9d3e-4f5061728394', 'a hyphenated uuid'],
    ['ctx_0199c4e2f1b7712a9d3e4f5061728394', "another id space's prefix"],
    ['0199c4e2f1b7712a9d3e4f5061728394', 'no prefix'],
    [' ses_0199c4e2f1b7712a9d3e4f5061728394', 'leading whitespace'],
  ])('refuses %j as a session id (%s)', (value) => {
    const result = SessionIdSchema.safeParse(value);
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.message).toBe("must be a session id: 'ses_' followed by 32 lowercase hex digits");
  });

  it('refuses an id of one kind where another kind is expected', () => {
    expect(DelegationIdSchema.safeParse(newSessionId()).success).toBe(false);
    expect(ContextIdSchema.safeParse(newDelegationId()).success).toBe(false);
    expect(MessageIdSchema.safeParse(newRequestId()).success).toBe(false);
  });
});
