import { describe, expect, it } from 'vitest';
import { patternWithin, subjectMatches } from '../src/bus/subject.js';

describe('the subjects two patterns share', () => {
  it.each([
    ['session.>', 'session.*.output', 'session.*.output'],
    ['session.>', 'session.ended', 'session.ended'],
    ['>', 'executor.heartbeat', 'executor.heartbeat'],
    ['*.ended', 'session.ended', 'session.ended'],
    ['session.ses_1.*', 'session.*.events', 'session.ses_1.events'],
    ['session.ses_1.>', 'session.*.events', 'session.ses_1.events'],
    ['session.*', 'session.*.events', undefined],
    ['session.*.*.x', 'session.*.events', undefined],
    ['session.ended.>', 'session.ended', undefined],
    ['stage', 'session.ended', undefined],
    ['executor.>', 'session.*.output', undefined],
  ])("'%s' within '%s' is %s", (pattern, template, expected) => {
    expect(patternWithin(pattern, template)).toBe(expected);
  });

  it('matches exactly the subjects both patterns match', () => {
    const subjects = ['session.ended', 'session.a.output', 'session.a.events', 'session.b.output', 'session.a.b.output', 'executor.heartbeat', 'session'];
    const patterns = ['>', 'session.>', '*.ended', 'session.a.*', 'session.*.output', '*.*.*', 'session.*'];
    for (const pattern of patterns) {
      for (const template of ['session.ended', 'session.*.output', 'session.*.events', 'executor.heartbeat']) {
        const within = patternWithin(pattern, template);
        for (const subject of subjects) {
          const both = subjectMatches(pattern, subject) && subjectMatches(template, subject);
          expect(within !== undefined && subjectMatches(within, subject), `${pattern} ∩ ${template} on ${subject}`).toBe(both);
        }
      }
    }
  });
});
