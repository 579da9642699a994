import { promises as fs } from 'node:fs';
import path from 'node:path';
import { isSafeContextId } from '@murmur/shared';
import { pathExists, writeFileAtomic } from '@murmur/shared/node';

/**
 * A threaded capsule's conversations, kept beyond the capsule (upstream 0.6.0):
 * `$MURMUR_HOME/conversations/<record>/<context-id>/conversation.jsonl`, one message a line, on the
 * executor that ran it. `context.record` names the record (default: the capsule's name; `off`
 * keeps none).
 *
 * - A context id comes from a client (`mur run --context`, an A2A message), so it is checked, not
 *   trusted (`isSafeContextId`): one that is not a plain path segment gets no file, and nothing
 *   else changes.
 * - A context a session's own token named is kept apart, under `<context-id>@<session-id>`
 *   (`contextKey`): that token is good for its session alone, and so is what it said, where a
 *   context of the capsule's shared record may be continued by any session of the capsule.
 * - Written whole, by rename, 0600 under 0700 directories: a reader never sees half a record, and
 *   no other user of the machine reads a conversation.
 * - Never fatal: a home that cannot be written costs the conversation its memory beyond this
 *   capsule, reported once, and the session goes on.
 */

const DIRECTORY_MODE = 0o700;
export const FILE_MODE = 0o600;

/**
 * The name a context is kept under in its record: its id, or, scoped to a session, its id and the
 * session's joined by `@`: a name no client can give (a context id holds no `@`), so only that
 * session finds it again.
 */
export function contextKey(contextId: string, sessionScope?: string): string {
  return sessionScope === undefined ? contextId : `${contextId}@${sessionScope}`;
}

/** Whether `key` is a context's id, or one scoped to a session (`contextKey`): a plain path segment either way. */
function isContextKey(key: string): boolean {
  const [contextId = '', session, ...more] = key.split('@');
  return more.length === 0 && isSafeContextId(contextId) && (session === undefined || isSafeContextId(session));
}

export class ConversationRecords {
  private reported = false;

  constructor(
    /** `<home>/conversations`, and the record under it; no record when the capsule keeps none. */
    private readonly store: { conversations: string; record: string } | undefined,
    private readonly report: (line: string) => void,
  ) {}

  static of(home: string, capsuleName: string, record: string | undefined, report: (line: string) => void): ConversationRecords {
    const name = record ?? capsuleName;
    const keeps = record !== 'off' && isSafeContextId(name);
    return new ConversationRecords(keeps ? { conversations: path.join(home, 'conversations'), record: name } : undefined, report);
  }

  /** `<home>/conversations/<record>`, or undefined when the capsule keeps none. */
  get recordDir(): string | undefined {
    return this.store ? path.join(this.store.conversations, this.store.record) : undefined;
  }

  /**
   * A file of the context's directory, or undefined when nothing is kept for it (no record, or an
   * id that is not a path segment). `contextId` here and below is a `contextKey`.
   */
  fileIn(contextId: string, name: string): string | undefined {
    const dir = this.contextDir(contextId);
    return dir === undefined ? undefined : path.join(dir, name);
  }

  /** The context's directory (`<record>/<context-id>`), or undefined when nothing is kept for it. */
  contextDir(contextId: string): string | undefined {
    if (!this.store || !isContextKey(contextId)) return undefined;
    return path.join(this.store.conversations, this.store.record, contextId);
  }

  private fileFor(contextId: string): string | undefined {
    return this.fileIn(contextId, 'conversation.jsonl');
  }

  /**
   * Makes `<record>/<name>` (a context's directory) and returns it, each
   * level held at 0700 whatever made it first: `conversations/`, the record, `name`. Undefined
   * when the capsule keeps no record.
   */
  async ensureRecordDir(name: string): Promise<string | undefined> {
    if (!this.store) return undefined;
    let dir = this.store.conversations;
    for (const level of ['', this.store.record, name]) {
      dir = path.join(dir, level);
      await fs.mkdir(dir, { recursive: true, mode: DIRECTORY_MODE });
      await fs.chmod(dir, DIRECTORY_MODE);
    }
    return dir;
  }

  /** Says `line` the first time something could not be kept, and never again: an unwritable home must not cost a line per task. */
  reportOnce(line: string): void {
    if (this.reported) return;
    this.reported = true;
    this.report(line);
  }

  async exists(contextId: string): Promise<boolean> {
    const file = this.fileFor(contextId);
    return file !== undefined && (await pathExists(file));
  }

  /** The messages recorded for the context; nothing for an unknown, unreadable or damaged record (one nested too deep among them). */
  async load(contextId: string): Promise<unknown[]> {
    const file = this.fileFor(contextId);
    if (!file) return [];
    try {
      const messages = (await fs.readFile(file, 'utf8'))
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as unknown);
      return messages.some((message) => nestedDeeperThan(message, MESSAGE_DEPTH_LIMIT)) ? [] : messages;
    } catch {
      return [];
    }
  }

  async save(contextId: string, messages: readonly unknown[]): Promise<void> {
    const file = this.fileFor(contextId);
    if (!file || !this.store) return;
    if (messages.some((message) => nestedDeeperThan(message, MESSAGE_DEPTH_LIMIT))) {
      this.reportOnce(
        `[conversation] the conversation for context '${contextId}' was not written: a message in it is nested more than ${MESSAGE_DEPTH_LIMIT} levels deep, which no model's message is`,
      );
      return;
    }
    try {
      await this.ensureRecordDir(contextId);
      await writeFileAtomic(file, messages.map((message) => `${JSON.stringify(message)}\n`).join(''), { mode: FILE_MODE });
    } catch (error) {
      this.reportOnce(
        `[conversation] the conversation for context '${contextId}' could not be written to ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)}); it is remembered only until this capsule stops`,
      );
    }
  }
}

/**
 * How deep a recorded message may nest. A model's message is a few levels (role, content, a tool
 * call's input); one thousands deep parses, but is past what `JSON.stringify` can walk when it is
 * answered back, and read back it would fail every later session of its context.
 */
const MESSAGE_DEPTH_LIMIT = 64;

/** Whether `value` nests arrays and objects more than `limit` deep; walked without recursion, so any depth is measured. */
function nestedDeeperThan(value: unknown, limit: number): boolean {
  const pending: Array<[unknown, number]> = [[value, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next;
    if (item === null || typeof item !== 'object') continue;
    if (depth >= limit) return true;
    for (const child of Array.isArray(item) ? item : Object.values(item)) pending.push([child, depth + 1]);
  }
  return false;
}
