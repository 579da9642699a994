import { promises as fs } from 'node:fs';
import { HARNESS_SESSION_FILE, HARNESS_SESSION_TYPE, type HarnessSessionEntry, HarnessSessionEntrySchema } from '@murmur/shared';
import { writeFileAtomic } from '@murmur/shared/node';
import { type ConversationRecords, FILE_MODE } from './conversations.js';
import { rememberBounded } from './bounded-map.js';

/**
 * What one launch knows of the harness sessions of the contexts it serves (`seeds/harness_session.rs`):
 * `<record>/<context-id>/harness-session.json` on disk, and what this launch has already seen.
 *
 * - The in-memory half wins over the file: a task just answered is remembered even where nothing
 *   could be written, and it is what threads the tasks of one life of a capsule that keeps no file
 *   (`context.record: off`).
 * - A file that does not parse, is another tool's or names no session reads as no entry: the next
 *   turn starts a new conversation rather than hand the harness something it cannot use.
 * - Nothing removes an entry but `forget`, which only a person asks for: a session the harness no
 *   longer knows fails the turn instead.
 */
export class HarnessSessions {
  private readonly seen = new Map<string, string>();

  constructor(
    private readonly records: ConversationRecords,
    /** Written for a person reading the directory: the dialect, and the command that ran it. */
    private readonly names: { harness: string; driver: string },
  ) {}

  /** Whether the context has a session on disk (what `mur run --resume` asks before anything runs). */
  async recorded(contextId: string): Promise<boolean> {
    const file = this.records.fileIn(contextId, HARNESS_SESSION_FILE);
    return file !== undefined && (await readEntry(file)) !== undefined;
  }

  async get(contextId: string): Promise<string | undefined> {
    const seen = this.seen.get(contextId);
    if (seen !== undefined) return seen;
    const file = this.records.fileIn(contextId, HARNESS_SESSION_FILE);
    return file === undefined ? undefined : (await readEntry(file))?.session_id;
  }

  /** Remembers `sessionId` for the context; `created_ms` is carried over from what the file held. An empty id is no session. */
  async put(contextId: string, sessionId: string): Promise<void> {
    if (sessionId === '') return;
    rememberBounded(this.seen, contextId, sessionId);
    const file = this.records.fileIn(contextId, HARNESS_SESSION_FILE);
    if (file === undefined) return;
    const now = Date.now();
    const entry: HarnessSessionEntry = {
      type: HARNESS_SESSION_TYPE,
      session_id: sessionId,
      harness: this.names.harness,
      driver: this.names.driver,
      created_ms: (await readEntry(file))?.created_ms ?? now,
      updated_ms: now,
    };
    try {
      await this.records.ensureRecordDir(contextId);
      await writeFileAtomic(file, `${JSON.stringify(entry)}\n`, { mode: FILE_MODE });
    } catch (error) {
      this.records.reportOnce(
        `[harness-session] the session id for context '${contextId}' could not be written to ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)}); this conversation is remembered only until this capsule stops`,
      );
    }
  }

  /** Drops the context's session, from memory and from its file, and says which id it was (undefined: it had none). */
  async forget(contextId: string): Promise<string | undefined> {
    const dropped = await this.get(contextId);
    this.seen.delete(contextId);
    const file = this.records.fileIn(contextId, HARNESS_SESSION_FILE);
    if (file !== undefined) {
      try {
        await fs.rm(file, { force: true });
      } catch (error) {
        this.records.reportOnce(
          `[harness-session] the session id for context '${contextId}' could not be removed from ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)}); this context is forgotten only until this capsule stops`,
        );
      }
    }
    return dropped;
  }
}

async function readEntry(file: string): Promise<HarnessSessionEntry | undefined> {
  try {
    const parsed = HarnessSessionEntrySchema.safeParse(JSON.parse(await fs.readFile(file, 'utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
