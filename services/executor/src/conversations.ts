import { promises as fs } from 'node:fs';
import path from 'node:path';
import { isSafeContextId } from '@murmur/shared';
import { writeFileAtomic } from '@murmur/shared/node';
import { readKeptRecord } from './record-file.js';

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
 * - Read only as what it is: a regular file of at most `CONVERSATION_RECORD_LIMIT_BYTES`, every
 *   line a message, reached through no link. Anything else (a FIFO, whose read waited for ever
 *   and wedged the session; a link, which sent another file to the model as its history; a
 *   damaged or oversized record) cannot be resumed, and is left as it is rather than written
 *   over by the fresh conversation a task then starts.
 */

/**
 * The largest record read: what a host may send the executor to save (`HOST_MESSAGE_LIMIT`, 8 MiB
 * of JSON). A larger one could be loaded but never saved again, so the context forgot every
 * later turn without a word.
 */
export const CONVERSATION_RECORD_LIMIT_BYTES = 8 * 1024 * 1024;

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

/** What reading a context's record found: its messages (none when nothing is recorded), or why it cannot be read. */
export type RecordRead = { messages: unknown[] } | { unreadable: string; file: string };

export class ConversationRecords {
  private reported = false;
  /** Contexts whose record could not be read: never written over by the fresh conversation their task started. */
  private readonly unreadable = new Set<string>();

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
      // mkdir and chmod follow a link: one in a level's place would have the record written, and
      // whatever it points to made 0700, wherever that is.
      if (!(await fs.lstat(dir)).isDirectory()) throw Object.assign(new Error(`${dir} is not a directory (a link?)`), { code: 'ENOTDIR' });
      await fs.chmod(dir, DIRECTORY_MODE);
    }
    return dir;
  }

  /** The first level on the way to the context's directory that is a link (followed, it would read a record from elsewhere), if any. */
  private async linkedLevel(contextId: string): Promise<string | undefined> {
    if (!this.store) return undefined;
    let dir = this.store.conversations;
    for (const level of ['', this.store.record, contextId]) {
      dir = path.join(dir, level);
      const stat = await fs.lstat(dir).catch(() => undefined);
      if (stat?.isSymbolicLink()) return dir;
      if (!stat?.isDirectory()) return undefined;
    }
    return undefined;
  }

  /** Says `line` the first time something could not be kept, and never again: an unwritable home must not cost a line per task. */
  reportOnce(line: string): void {
    if (this.reported) return;
    this.reported = true;
    this.report(line);
  }

  /** Whether anything is recorded for the context: a record, readable or not. */
  async exists(contextId: string): Promise<boolean> {
    const file = this.fileFor(contextId);
    return (
      file !== undefined &&
      (await fs.lstat(file).then(
        () => true,
        () => false,
      ))
    );
  }

  /** The context's record, read as `RecordRead` says: never through a link, never waited on, never past the limit. */
  async read(contextId: string): Promise<RecordRead> {
    const file = this.fileFor(contextId);
    if (!file) return { messages: [] };
    const linked = await this.linkedLevel(contextId);
    if (linked !== undefined) return { unreadable: `${linked} is a symbolic link, which is not followed`, file };
    const found = await readKeptRecord(file, CONVERSATION_RECORD_LIMIT_BYTES);
    if ('missing' in found) return { messages: [] };
    if ('unreadable' in found) return { unreadable: found.unreadable, file };
    const messages: unknown[] = [];
    for (const [index, line] of found.content.toString('utf8').split('\n').entries()) {
      if (line === '') continue;
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        return { unreadable: `line ${index + 1} is not JSON (the record is damaged)`, file };
      }
      if (nestedDeeperThan(message, MESSAGE_DEPTH_LIMIT)) return { unreadable: `line ${index + 1} nests more than ${MESSAGE_DEPTH_LIMIT} levels deep`, file };
      messages.push(message);
    }
    return { messages };
  }

  /**
   * The messages recorded for the context; none for an unknown record. One that cannot be read
   * (`read`) is said once and left as it is: the task starts afresh, and its conversation is not
   * saved over the record.
   */
  async load(contextId: string): Promise<unknown[]> {
    const found = await this.read(contextId);
    if ('messages' in found) return found.messages;
    this.unreadable.add(contextId);
    this.reportOnce(
      `[conversation] the record of context '${contextId}' at ${found.file} cannot be read: ${found.unreadable}; this task starts afresh, and the record is left as it is (move it aside to record the context anew)`,
    );
    return [];
  }

  async save(contextId: string, messages: readonly unknown[]): Promise<void> {
    const file = this.fileFor(contextId);
    if (!file || !this.store || this.unreadable.has(contextId)) return;
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
