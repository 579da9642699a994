import { describe, expect, it } from 'vitest';
import { HOST_LIST_LIMITS, HostToExecutorSchema } from '../src/host/protocol.js';

const save = (count: number) => ({
  type: 'request',
  id: 1,
  request: { op: 'conversation-save', context_id: 'ctx_1', messages: Array.from({ length: count }, () => ({})) },
});

const http = (count: number) => ({
  type: 'request',
  id: 2,
  request: {
    op: 'http',
    request: { method: 'GET', url: 'https://example.com/', grant: 'capsule', headers: Array.from({ length: count }, (_, index) => [`x-${index}`, 'v']) },
  },
});

describe('what a capsule host may send in one request', () => {
  it('holds a conversation of at most its limit of messages: one more is refused, not kept and written', () => {
    expect(HostToExecutorSchema.safeParse(save(HOST_LIST_LIMITS.messages)).success).toBe(true);
    const refused = HostToExecutorSchema.safeParse(save(HOST_LIST_LIMITS.messages + 1));
    expect(refused.success).toBe(false);
    expect(refused.error?.issues[0]?.path).toEqual(['request', 'messages']);
  });

  it('holds a request of at most its limit of headers', () => {
    expect(HostToExecutorSchema.safeParse(http(HOST_LIST_LIMITS.headers)).success).toBe(true);
    expect(HostToExecutorSchema.safeParse(http(HOST_LIST_LIMITS.headers + 1)).success).toBe(false);
  });
});
