import { describe, expect, it } from 'vitest';
import { MurmurError, parseArtifactManifest } from '@murmur/shared';

/** A hook's own manifest: its binding, execution mode and commit policy, checked as upstream's staging checks them (§1.8). */

function refusal(contract: string): string {
  try {
    parseArtifactManifest(`name: a-hook\nversion: 1.0.0\nruntime: hook\n${contract}`);
  } catch (error) {
    if (error instanceof MurmurError) return error.message;
    throw error;
  }
  throw new Error(`the contract was accepted:\n${contract}`);
}

describe('the hook contract', () => {
  it('accepts each binding with the policy it honours, none, or no binding with any policy', () => {
    for (const contract of [
      'binding: on-stage\ncommit_policy: write-manifests\n',
      'binding: on-compaction\ncommit_policy: replace-context\n',
      'binding: on-task-end\ncommit_policy: reopen-task\n',
      'binding: on-shell\n',
      'execution_mode: async\nbinding: on-tool-call\n',
      'commit_policy: replace-context\n',
    ]) {
      expect(() => parseArtifactManifest(`name: a-hook\nversion: 1.0.0\nruntime: hook\n${contract}`)).not.toThrow();
    }
  });

  it("refuses a policy its binding does not honour with upstream's message", () => {
    expect(refusal('binding: on-shell\ncommit_policy: reopen-task\n')).toContain(
      "commit_policy 'reopen-task' is not valid for binding 'on-shell'; binding 'on-shell' honors commit_policy 'none'",
    );
    expect(refusal('binding: on-stage\ncommit_policy: replace-context\n')).toContain(
      "commit_policy 'replace-context' is not valid for binding 'on-stage'; binding 'on-stage' honors commit_policy 'write-manifests'",
    );
  });

  it('refuses an async hook with a policy other than none, and an async on-stage hook', () => {
    expect(refusal('execution_mode: async\ncommit_policy: reopen-task\nbinding: on-task-end\n')).toContain(
      "async-with-commit not supported: execution_mode 'async' requires commit_policy 'none' (got 'reopen-task')",
    );
    expect(refusal('execution_mode: async\nbinding: on-stage\n')).toContain(
      "on-stage hooks must be blocking; execution_mode 'async' is not valid for binding 'on-stage'",
    );
  });

  it('refuses an unknown binding, mode or policy, listing what is valid', () => {
    expect(refusal('binding: on-everything\n')).toContain("unknown binding 'on-everything'; expected: on-stage, on-session-start");
    expect(refusal('execution_mode: eventually\n')).toContain("unknown execution_mode 'eventually'; expected: blocking, async");
    expect(refusal('commit_policy: rewrite-history\n')).toContain(
      "unknown commit_policy 'rewrite-history'; expected: none, replace-context, write-manifests, reopen-task",
    );
  });
});
