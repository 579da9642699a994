import { describe, expect, it } from 'vitest';
import { FileSetSchema, ProjectListingSchema } from '../src/file-set.js';

const file = (path: string) => ({ path, sha256: 'a'.repeat(64), size: 1 });

describe('a file set', () => {
  it('refuses two paths that one disk folding case or Unicode forms would make one file, naming both', () => {
    for (const [left, right] of [
      ['skills/a/SKILL.md', 'skills/a/skill.md'],
      ['caf\u00e9.txt', 'cafe\u0301.txt'],
      ['\u03b1\u03c3', '\u03b1\u03c2'],
    ]) {
      const parsed = FileSetSchema.safeParse([file(left as string), file(right as string)]);
      expect(parsed.success, `${left} / ${right}`).toBe(false);
      expect(parsed.error?.issues[0]?.message).toBe(`paths '${left}' and '${right}' differ only in case or Unicode form`);
    }
    expect(FileSetSchema.safeParse([file('a.txt'), file('b.txt')]).success).toBe(true);
  });

  it("holds a project listing's label to text without control characters", () => {
    const listing = (label: string) => ({ format: 'murmur-project/1', label, files: [file('murmur.yaml')] });
    expect(ProjectListingSchema.safeParse(listing('my project')).success).toBe(true);
    const refused = ProjectListingSchema.safeParse(listing('x\u001b]0;pwned\u0007'));
    expect(refused.success).toBe(false);
    expect(refused.error?.issues[0]?.message).toBe('must not hold control characters');
  });
});
