import { isSafeContextId } from '@murmur/shared';
import { type ConversationRecords, contextKey } from './conversations.js';
import type { HarnessSessions } from './harness-sessions.js';
import type { HostRequest } from './host/protocol.js';
import { RequestUploads } from './request-uploads.js';

/** The host's requests of its contexts' records: a conversation, a harness session and its transcript. */
export type ContextRequest = Extract<HostRequest, { op: `conversation-${string}` | `harness-${string}` }>;

export function isContextRequest(request: HostRequest): request is ContextRequest {
  return request.op.startsWith('conversation-') || request.op.startsWith('harness-');
}

/**
 * Whether a request reads or writes a whole record in the executor's home (a conversation, a
 * harness session, a transcript): all of them but a transcript's upload pieces. The executor
 * answers these one at a time per session and holds only a few: a conversation load of a 20 MB
 * record holds ~60 MB while it is answered, forty sent at once took the executor to 2.5 GB, and a
 * save waiting its turn holds its messages, up to a frame's 24 MiB. A task loads once and saves once.
 */
export function wholeRecordRequest(request: HostRequest): request is Exclude<ContextRequest, { op: 'harness-transcript-upload' }> {
  return isContextRequest(request) && request.op !== 'harness-transcript-upload';
}

/**
 * What a session's host keeps of its contexts beyond the session, in the executor's home: a
 * threaded capsule's conversations, or (`transport: process`) each context's harness session and
 * its transcript. Every write is keyed by the context it names, apart for this session alone when
 * its task came under the session's own token, and bounded by how many messages the session was
 * sent: the host is not trusted to name its contexts.
 */
export class SessionContexts {
  private conversations: ConversationRecords | undefined;
  private harnessSessions: HarnessSessions | undefined;
  /** The pieces of a harness transcript the host sends ahead of its `harness-transcript-save`. */
  private readonly transcriptUploads: RequestUploads;
  /** The contexts the host has written records for (`claim`), and the client messages relayed to it. */
  private readonly written = new Set<string>();
  private messagesRelayed = 0;

  constructor(
    private readonly sessionId: string,
    transcriptMaxBytes: number,
  ) {
    // One transcript at a time: a session's harness runs one task after another.
    this.transcriptUploads = new RequestUploads(transcriptMaxBytes, transcriptMaxBytes);
  }

  /** An agent's launch gives its records: a threaded conversation's, or a harness's sessions (`transport: process`). */
  open(records: { conversations?: ConversationRecords | undefined; harnessSessions?: HarnessSessions | undefined }): void {
    this.conversations = records.conversations;
    this.harnessSessions = records.harnessSessions;
  }

  /** Whether a context has anything recorded to resume. */
  async recorded(contextId: string): Promise<boolean> {
    return this.harnessSessions ? this.harnessSessions.recorded(contextId) : ((await this.conversations?.exists(contextId)) ?? false);
  }

  /** Why the context's recorded conversation cannot be resumed (`ConversationRecords.read`), or undefined. */
  async unresumable(contextId: string): Promise<{ file: string; reason: string } | undefined> {
    if (this.harnessSessions || !this.conversations) return undefined;
    const found = await this.conversations.read(contextId);
    return 'unreadable' in found ? { file: found.file, reason: found.unreadable } : undefined;
  }

  /** A client's message was relayed to the host: it may start one more context. */
  messageRelayed(): void {
    this.messagesRelayed += 1;
  }

  /** Lets go of transcript pieces no save will take: the session has ended. */
  clear(): void {
    this.transcriptUploads.clear();
  }

  /** Answers one of the host's requests of its contexts' records (its reply's value). */
  async answer(request: ContextRequest): Promise<unknown> {
    switch (request.op) {
      case 'conversation-load':
        return (await this.conversations?.load(this.keyOf(request))) ?? [];
      case 'conversation-save': {
        // Claimed whether or not a record is kept: the bound holds for every host alike.
        const key = this.claim(request);
        await this.conversations?.save(key, request.messages);
        return null;
      }
      case 'harness-session-get':
        return (await this.harnessSessions?.get(this.keyOf(request))) ?? null;
      case 'harness-session-put': {
        const key = this.claim(request);
        await this.harnessSessions?.put(key, request.session_id);
        return null;
      }
      case 'harness-session-forget':
        return (await this.harnessSessions?.forget(this.keyOf(request))) ?? null;
      case 'harness-transcript-load':
        return (await this.harnessSessions?.transcript(this.keyOf(request), request.session_id))?.toString('base64') ?? null;
      case 'harness-transcript-upload':
        this.transcriptUploads.add(request.upload, request.chunk_base64);
        return null;
      case 'harness-transcript-save':
        return { kept: await this.keepTranscript(request) };
    }
  }

  /**
   * The key of a context the host writes a record for (its conversation, its harness session). What it writes
   * lands in the executor's home, beyond the session, so a host may start as many contexts as it
   * was given tasks — one per client message, and the launch's own — and no more: a host that
   * broke out of its capsule could otherwise write 24 MiB records under as many made-up contexts as
   * it liked, until the disk every session shares is full.
   */
  private claim(request: { context_id: string; session_scoped?: true | undefined }): string {
    const key = this.keyOf(request);
    if (key === '' || this.written.has(key)) return key;
    const allowed = this.messagesRelayed + 1;
    if (this.written.size >= allowed)
      throw new Error(
        `refused to keep a record of context '${key.slice(0, 80)}': this session has written records for ${this.written.size} contexts and been sent ${this.messagesRelayed} messages; a session keeps records for at most one context per message it was sent, and its launch's`,
      );
    this.written.add(key);
    return key;
  }

  /**
   * A host's `harness-transcript-save`: what a run left of a context's harness session, kept in
   * the context's record (`HarnessSessions.keepTranscript`), or, larger than the executor keeps,
   * dropped with what the record held. Whether it was kept: when not, the host keeps it in the
   * session's home, where it lasts as long as the session.
   */
  private async keepTranscript(request: Extract<ContextRequest, { op: 'harness-transcript-save' }>): Promise<boolean> {
    // Taken first, whatever follows: a refused save must not leave its pieces held.
    const taken = request.upload === undefined ? { body: Buffer.alloc(0) } : this.transcriptUploads.take(request.upload);
    const sessions = this.harnessSessions;
    if (!sessions) return false;
    if ('refused' in taken) throw new Error(taken.refused);
    const key = this.claim(request);
    if (key === '') return false;
    if (request.oversized_bytes !== undefined) {
      await sessions.refuseTranscript(key, request.session_id, request.oversized_bytes);
      return false;
    }
    return sessions.keepTranscript(key, request.session_id, taken.body);
  }

  /** The name the host's context is kept under: apart, for this session alone, when its task came under the session's own token. */
  private keyOf(request: { context_id: string; session_scoped?: true | undefined }): string {
    // A host is not trusted to send a client's plain id: one holding `@` would name another session's key. '' keeps nothing.
    if (!isSafeContextId(request.context_id)) return '';
    return contextKey(request.context_id, request.session_scoped ? this.sessionId : undefined);
  }
}
