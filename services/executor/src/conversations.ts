import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';

/**
 * A threaded capsule's conversations, kept beyond the capsule (upstream 0.6.0):
 * `$MURMUR_HOME/conversations/<record>/<context-id>/conversation.jsonl`, one message a line, on the
 * executor that ran it. `context.record` names the record (default: the capsule's name; `off`
 * keeps none).
 *
 * - A context id comes from a client (`mur run --context`, an A2A message), so it is checked, not
 *   trusted: one that is not a plain path segment gets no file, and nothing else changes.
 * - Written whole, by rename, 0600 under 0700 directories: a reader never sees half a record, and
 *   no other user of the machine reads a conversation.
 * - Never fatal: a home that cannot be written costs the conversation its memory beyond this
 *   capsule, reported once, and the session goes on.
 */

const SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

export function isContextSegment(contextId: string): boolean {
  return SEGMENT.test(contextId);
}

export class ConversationRecords {
  private reported = false;

  constructor(
    /** `<home>/conversations/<record>`, or undefined when the capsule keeps none. */
    private readonly root: string | undefined,
    private readonly report: (line: string) => void,
  ) {}

  static of(home: string, capsuleName: string, record: string | undefined, report: (line: string) => void): ConversationRecords {
    if (record === 'off') return new ConversationRecords(undefined, report);
    const name = record ?? capsuleName;
    return new ConversationRecords(isContextSegment(name) ? path.join(home, 'conversations', name) : undefined, report);
  }

  private fileFor(contextId: string): string | undefined {
    if (!this.root || !isContextSegment(contextId)) return undefined;
    return path.join(this.root, contextId, 'conversation.jsonl');
  }

  exists(contextId: string): boolean {
    const file = this.fileFor(contextId);
    return file !== undefined && existsSync(file);
  }

  /** The messages recorded for the context; nothing for an unknown, unreadable or damaged record. */
  load(contextId: string): unknown[] {
    const file = this.fileFor(contextId);
    if (!file) return [];
    try {
      return readFileSync(file, 'utf8')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as unknown);
    } catch {
      return [];
    }
  }

  save(contextId: string, messages: readonly unknown[]): void {
    const file = this.fileFor(contextId);
    if (!file) return;
    try {
      for (const dir of [path.dirname(path.dirname(path.dirname(file))), path.dirname(path.dirname(file)), path.dirname(file)]) {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        chmodSync(dir, 0o700);
      }
      const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`;
      writeFileSync(temporary, messages.map((message) => `${JSON.stringify(message)}\n`).join(''), { mode: 0o600 });
      renameSync(temporary, file);
    } catch (error) {
      if (this.reported) return;
      this.reported = true;
      this.report(
        `[conversation] the conversation for context '${contextId}' could not be written to ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)}); it is remembered only until this capsule stops`,
      );
    }
  }
}
