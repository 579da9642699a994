/**
 * NATS subject matching, shared by the in-process transport (which must route exactly as a
 * nats-server would, or the contract suite would pass on one transport and fail on the other)
 * and by `mur events` (which labels what it tails).
 *
 * Subjects are dot-separated tokens. In a pattern, `*` matches exactly one token and `>` matches
 * one or more trailing tokens; `>` is only valid as the last token.
 */

const TOKEN = /^[^\s.*>]+$/;

/** Whether `subject` is a concrete subject a message can be published to. */
export function isPublishableSubject(subject: string): boolean {
  return subject.length > 0 && subject.split('.').every((token) => TOKEN.test(token));
}

/** Whether `pattern` is a well-formed subscription pattern. */
export function isValidPattern(pattern: string): boolean {
  if (pattern.length === 0) return false;
  const tokens = pattern.split('.');
  return tokens.every((token, index) => {
    if (token === '>') return index === tokens.length - 1;
    return token === '*' || TOKEN.test(token);
  });
}

export function subjectMatches(pattern: string, subject: string): boolean {
  const patternTokens = pattern.split('.');
  const subjectTokens = subject.split('.');
  for (let index = 0; index < patternTokens.length; index += 1) {
    const token = patternTokens[index];
    if (token === '>') return subjectTokens.length > index;
    if (index >= subjectTokens.length) return false;
    if (token !== '*' && token !== subjectTokens[index]) return false;
  }
  return patternTokens.length === subjectTokens.length;
}

/**
 * The subjects both `pattern` and `template` match, as one pattern, or undefined when they share
 * none. `template` holds no `>` (a topic's subject: tokens and `*`): `session.>` and
 * `session.*.output` give `session.*.output`, `*.ended` and `session.ended` give `session.ended`.
 */
export function patternWithin(pattern: string, template: string): string | undefined {
  const wanted = pattern.split('.');
  const tokens = template.split('.');
  const shared: string[] = [];
  for (const [index, token] of tokens.entries()) {
    const asked = wanted[index];
    if (asked === undefined) return undefined;
    if (asked === '>') return [...shared, ...tokens.slice(index)].join('.');
    if (asked === '*') shared.push(token);
    else if (token === '*' || token === asked) shared.push(asked);
    else return undefined;
  }
  return wanted.length === tokens.length ? shared.join('.') : undefined;
}
