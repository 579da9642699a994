import { describe, expect, it } from 'vitest';
import { HarnessSessionEntrySchema } from '../src/harness-session.js';

describe("a context's harness session entry", () => {
  const entry = (sessionId: string) => ({
    type: 'murmur.harness-session',
    session_id: sessionId,
    harness: 'claude-code',
    driver: 'claude',
    created_ms: 1,
    updated_ms: 2,
  });

  it('holds a UUID, and nothing the harness’s command line could read as an option or a title', () => {
    expect(HarnessSessionEntrySchema.safeParse(entry('0191d6b2-7c4e-7000-8000-000000000001')).success).toBe(true);
    for (const id of ['--settings=/tmp/x.json', '-p', 'my session', '0191d6b2-7c4e-7000-8000-00000000000', '']) {
      expect(HarnessSessionEntrySchema.safeParse(entry(id)).success, id).toBe(false);
    }
  });
});
