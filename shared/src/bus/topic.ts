import type { z } from 'zod';
import { isPublishableSubject, isValidPattern } from './subject.js';

/**
 * A subject together with the schema of what travels on it. Topics are the only way to publish
 * or subscribe through the contract bus, so a payload can never reach the wire unvalidated.
 *
 * A topic's subject may hold `*` tokens (`session.*.events`); `at(...)` fills them in to get a
 * subject that can be published to, while the pattern itself is what a monitor subscribes to.
 */
export interface EventTopic<T, TInput = T> {
  readonly kind: 'event';
  readonly subject: string;
  /** What a publisher passes (`TInput`, defaults may be left out) and a subscriber receives (`T`). */
  readonly schema: z.ZodType<T, TInput>;
  at(...tokens: string[]): EventTopic<T, TInput>;
}

/** A request/reply subject: the schema of the request and of the reply. */
export interface CommandTopic<Q, R, QInput = Q, RInput = R> {
  readonly kind: 'command';
  readonly subject: string;
  /** The subject as defined, wildcards unfilled: what a request is counted under (never a session's id). */
  readonly pattern: string;
  readonly request: z.ZodType<Q, QInput>;
  readonly reply: z.ZodType<R, RInput>;
  /**
   * The service whose queue group answers it, where any one of them will: named when none does,
   * so the refusal says which to start. Unset where one particular instance answers (an executor
   * by its id, a session's host), whose silence means that one is gone.
   */
  readonly answeredBy?: string;
  at(...tokens: string[]): CommandTopic<Q, R, QInput, RInput>;
}

export interface CommandOptions {
  answeredBy?: string;
  /** The subject as defined: kept by `at` when it fills the wildcards. */
  pattern?: string;
}

function fill(subject: string, tokens: string[]): string {
  const queue = [...tokens];
  const filled = subject
    .split('.')
    .map((token) => (token === '*' ? (queue.shift() ?? '*') : token))
    .join('.');
  if (queue.length > 0) throw new Error(`subject '${subject}' has fewer wildcards than the ${tokens.length} tokens given`);
  return filled;
}

function checkPattern(subject: string): void {
  if (!isValidPattern(subject)) throw new Error(`'${subject}' is not a valid subject`);
}

export function defineEvent<T, TInput = T>(subject: string, schema: z.ZodType<T, TInput>): EventTopic<T, TInput> {
  checkPattern(subject);
  return {
    kind: 'event',
    subject,
    schema,
    at: (...tokens) => defineEvent(fill(subject, tokens), schema),
  };
}

export function defineCommand<Q, R, QInput = Q, RInput = R>(
  subject: string,
  request: z.ZodType<Q, QInput>,
  reply: z.ZodType<R, RInput>,
  options: CommandOptions = {},
): CommandTopic<Q, R, QInput, RInput> {
  checkPattern(subject);
  const { answeredBy, pattern = subject } = options;
  return {
    kind: 'command',
    subject,
    pattern,
    request,
    reply,
    ...(answeredBy ? { answeredBy } : {}),
    at: (...tokens) => defineCommand(fill(subject, tokens), request, reply, { ...(answeredBy ? { answeredBy } : {}), pattern }),
  };
}

export function isConcrete(topic: { subject: string }): boolean {
  return isPublishableSubject(topic.subject);
}
