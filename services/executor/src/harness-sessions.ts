import { promises as fs } from 'node:fs';
import path from 'node:path';
import { HARNESS_SESSION_FILE, HARNESS_SESSION_TYPE, type HarnessSessionEntry, HarnessSessionEntrySchema, HarnessSessionIdSchema } from '@murmur/shared';
import { writeFileAtomic } from '@murmur/shared/node';
import { readKeptRecord } from './record-file.js';
import { type ConversationRecords, FILE_MODE } from './conversations.js';
import { rememberBounded } from './bounded-map.js';

/**
 * What one launch knows of the harness sessions of the contexts it serves (`seeds/harness_session.rs`):
 * `<record>/<context-id>/harness-session.json` on disk, and what this launch has already seen; and
 * the session's transcript beside it, `harness-<session-id>.jsonl`.
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
    /** The largest transcript kept (`MURMUR_HARNESS_TRANSCRIPT_MAX_BYTES`). */
    readonly transcriptLimitBytes = HARNESS_TRANSCRIPT_LIMIT_BYTES,
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
    await this.dropTranscripts(contextId);
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

  /**
   * The transcript of `sessionId` kept for the context, or undefined when none is (none written
   * yet, the record off, one over the limit). A transcript kept where this runtime used to keep
   * them (`<record>/.harness-home`) is read from there until the context's next run saves it here
   * (and removes it there).
   */
  async transcript(contextId: string, sessionId: string): Promise<Buffer | undefined> {
    const file = this.transcriptFile(contextId, sessionId);
    if (file === undefined) return undefined;
    const kept = await this.readTranscript(file, contextId);
    if (kept !== undefined) return kept;
    const earlier = await this.earlierTranscript(sessionId);
    return earlier === undefined ? undefined : await this.readTranscript(earlier, contextId);
  }

  /**
   * Keeps what a run left of the context's session, replacing the context's earlier transcripts;
   * false when nothing could be kept (the record off, a home that cannot be written), and the host
   * keeps it in the session's home for as long as the session lives.
   */
  async keepTranscript(contextId: string, sessionId: string, transcript: Buffer): Promise<boolean> {
    const file = this.transcriptFile(contextId, sessionId);
    if (file === undefined) return false;
    try {
      await this.records.ensureRecordDir(contextId);
      await writeFileAtomic(file, transcript, { mode: FILE_MODE });
    } catch (error) {
      this.records.reportOnce(
        `[harness-session] the transcript of context '${contextId}' could not be written to ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)}); this conversation can be resumed only until this capsule stops`,
      );
      return false;
    }
    await this.dropTranscripts(contextId, path.basename(file));
    await this.dropEarlierTranscript(sessionId);
    return true;
  }

  /**
   * A run left a transcript too large to keep: the context's earlier one is dropped with it, so a
   * later session that resumes the context is told the harness no longer knows its session,
   * rather than resume a conversation with its last turns missing.
   */
  async refuseTranscript(contextId: string, sessionId: string, bytes: number): Promise<void> {
    this.records.reportOnce(
      `[harness-session] the transcript of context '${contextId}' is ${bytes} bytes, more than the ${this.transcriptLimitBytes} an executor keeps (MURMUR_HARNESS_TRANSCRIPT_MAX_BYTES); it can be resumed only until this capsule stops (after that, start anew with mur run --forget-session)`,
    );
    await this.dropTranscripts(contextId);
    await this.dropEarlierTranscript(sessionId);
  }

  /**
   * The copy of `sessionId` where this runtime kept transcripts before, once a newer one replaced
   * it (or was refused): left there, it would be what a later resume read, without the turns since.
   */
  private async dropEarlierTranscript(sessionId: string): Promise<void> {
    const earlier = await this.earlierTranscript(sessionId);
    if (earlier !== undefined) await fs.rm(earlier, { force: true }).catch(() => {});
  }

  /** `<record>/<context-id>/harness-<session-id>.jsonl`; undefined when nothing is kept for the context, or the id is not a session's (a UUID). */
  private transcriptFile(contextId: string, sessionId: string): string | undefined {
    return HarnessSessionIdSchema.safeParse(sessionId).success ? this.records.fileIn(contextId, `harness-${sessionId.toLowerCase()}.jsonl`) : undefined;
  }

  /** Removes the context's transcripts but `keep`. */
  private async dropTranscripts(contextId: string, keep?: string): Promise<void> {
    const dir = this.records.contextDir(contextId);
    if (dir === undefined) return;
    const names = await fs.readdir(dir).catch(() => [] as string[]);
    for (const name of names) if (name !== keep && TRANSCRIPT_NAME.test(name)) await fs.rm(path.join(dir, name), { force: true }).catch(() => {});
  }

  /** A regular file of at most the limit (`readKeptRecord`); undefined when it is not one, said when it is too large. */
  private async readTranscript(file: string, contextId: string): Promise<Buffer | undefined> {
    const found = await readKeptRecord(file, this.transcriptLimitBytes);
    if ('content' in found) return found.content;
    if ('oversized' in found)
      this.records.reportOnce(
        `[harness-session] the transcript of context '${contextId}' at ${file}: ${found.unreadable} (MURMUR_HARNESS_TRANSCRIPT_MAX_BYTES); it was not resumed`,
      );
    return undefined;
  }

  /**
   * `<record>/.harness-home/.claude/projects/<any>/<session-id>.jsonl`, where this runtime kept a
   * record's transcripts before. That home was writable by every session of the record, so what
   * is found there is taken only when it really lies inside it, not through a link out of it.
   */
  private async earlierTranscript(sessionId: string): Promise<string | undefined> {
    const record = this.records.recordDir;
    if (record === undefined || !HarnessSessionIdSchema.safeParse(sessionId).success) return undefined;
    try {
      const home = await fs.realpath(path.join(record, EARLIER_HOME));
      const projects = path.join(home, '.claude', 'projects');
      for (const project of await fs.readdir(projects)) {
        const candidate = path.join(projects, project, `${sessionId}.jsonl`);
        const real = await fs.realpath(candidate).catch(() => undefined);
        if (real === candidate) return candidate;
      }
    } catch {}
    return undefined;
  }
}

/** The largest transcript an executor keeps by default: twice a conversation record's 8 MiB. */
export const HARNESS_TRANSCRIPT_LIMIT_BYTES = 16 * 1024 * 1024;

/** Where this runtime kept a record's harness transcripts before: the harness's home, under the record. */
const EARLIER_HOME = '.harness-home';

const TRANSCRIPT_NAME = /^harness-[0-9a-f-]{36}\.jsonl$/i;

/** The most a harness session's entry (a few ids and a time) is read of. */
const ENTRY_LIMIT_BYTES = 64 * 1024;

/** A context's harness session entry (`readKeptRecord`); undefined when there is none to read. */
async function readEntry(file: string): Promise<HarnessSessionEntry | undefined> {
  const found = await readKeptRecord(file, ENTRY_LIMIT_BYTES);
  if (!('content' in found)) return undefined;
  try {
    const parsed = HarnessSessionEntrySchema.safeParse(JSON.parse(found.content.toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
