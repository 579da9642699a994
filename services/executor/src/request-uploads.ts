import { REQUEST_BODY_LIMIT_BYTES, UPLOAD_PIECE_CHARS } from './host/request-body.js';

/**
 * The pieces of request bodies a capsule host sends ahead of their requests (`http-upload`), held
 * until the request that names them is made or the session ends. The host runs untrusted code and
 * is not trusted to stop: one body may not grow past the limit, and all the bodies a session holds
 * at once may not pass twice it (two of its guests may upload at once). A piece past either is
 * refused and its whole upload let go; the refusal is kept for the request that names it, which is
 * refused with it (and traced), so a session can make the executor hold a bounded amount only.
 * Bytes are not all a piece costs: every piece but an upload's last is a whole piece (a short one
 * ends it), and a session holds a few uploads at once, so neither many tiny pieces nor many empty
 * uploads can make the executor hold more than their bytes say.
 */
export class RequestUploads {
  private readonly held = new Map<number, { pieces: Buffer[]; size: number; ended: boolean }>();
  /** Why an upload was let go, by its id, for its request (the newest few: each is asked for once). */
  private readonly refused = new Map<number, string>();
  private total = 0;

  constructor(
    private readonly limitBytes = REQUEST_BODY_LIMIT_BYTES,
    private readonly sessionLimitBytes = 2 * limitBytes,
    /** A whole piece, in base64 characters (`request-body.ts`). */
    private readonly pieceChars = UPLOAD_PIECE_CHARS,
  ) {}

  /** Adds one piece to upload `upload`; throws (the upload let go) past a limit, or after one. */
  add(upload: number, chunkBase64: string): void {
    const earlier = this.refused.get(upload);
    if (earlier !== undefined) throw new Error(earlier);
    const piece = Buffer.from(chunkBase64, 'base64');
    const entry = this.held.get(upload) ?? { pieces: [], size: 0, ended: false };
    const refusal = this.refusalOf(upload, entry, chunkBase64, piece.length);
    if (refusal !== undefined) {
      this.drop(upload);
      this.refused.set(upload, refusal);
      if (this.refused.size > REFUSALS_KEPT) this.refused.delete(this.refused.keys().next().value as number);
      throw new Error(refusal);
    }
    entry.pieces.push(piece);
    entry.size += piece.length;
    // A piece shorter than a whole one is the upload's last.
    entry.ended = chunkBase64.length < this.pieceChars;
    this.total += piece.length;
    this.held.set(upload, entry);
  }

  /** Why the piece `chunkBase64` (`bytes` long) may not join `entry`, upload `upload`; undefined when it may. */
  private refusalOf(upload: number, entry: { size: number; ended: boolean }, chunkBase64: string, bytes: number): string | undefined {
    if (chunkBase64 === '') return `upload ${upload} was sent an empty piece`;
    if (entry.ended) return `upload ${upload} was sent a piece after its last one`;
    if (!this.held.has(upload) && this.held.size >= OPEN_UPLOADS)
      return `this session already has ${OPEN_UPLOADS} request bodies waiting for their requests: make one request before uploading another`;
    if (entry.size + bytes > this.limitBytes) return `the request body is larger than ${this.limitBytes} bytes`;
    if (this.total + bytes > this.sessionLimitBytes)
      return `this session's request bodies waiting or being sent would hold more than ${this.sessionLimitBytes} bytes: make one request (or wait for one to be answered) before uploading another`;
    return undefined;
  }

  /** Upload `upload`'s whole body, or why it was refused; either way no longer held. */
  take(upload: number): { body: Buffer } | { refused: string } {
    const refused = this.refused.get(upload);
    this.refused.delete(upload);
    const entry = this.held.get(upload);
    this.drop(upload);
    if (entry) return { body: Buffer.concat(entry.pieces, entry.size) };
    return { refused: refused ?? `no request body was uploaded as ${upload}` };
  }

  /**
   * Upload `upload`'s whole body for its request, still counted against the session's bytes until
   * `release` (the request answered, or refused): taken bodies sit in a socket's buffer while a
   * slow server reads them, and uncounted, 64 requests of 64 MiB each held 4 GiB of one session.
   */
  send(upload: number): { body: Buffer; release: () => void } | { refused: string } {
    const taken = this.take(upload);
    if ('refused' in taken) return taken;
    this.total += taken.body.length;
    return { body: taken.body, release: this.releaser(taken.body.length) };
  }

  /** Counts a body sent inline with its request (not uploaded) the same way; why not, past the session's limit. */
  sendInline(bytes: number): { release: () => void } | { refused: string } {
    if (this.total + bytes > this.sessionLimitBytes)
      return {
        refused: `this session's request bodies waiting or being sent would hold more than ${this.sessionLimitBytes} bytes: wait for a request to be answered`,
      };
    this.total += bytes;
    return { release: this.releaser(bytes) };
  }

  private releaser(bytes: number): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total -= bytes;
    };
  }

  /** The bytes held across all uploads and bodies being sent (what the session's limit is checked against). */
  get heldBytes(): number {
    return this.total;
  }

  /** Lets go of everything held (the session ended). */
  clear(): void {
    this.held.clear();
    this.refused.clear();
    this.total = 0;
  }

  private drop(upload: number): void {
    const entry = this.held.get(upload);
    if (!entry) return;
    this.held.delete(upload);
    this.total -= entry.size;
  }
}

const REFUSALS_KEPT = 16;
/** Uploads a session holds at once: a guest's request is made once its body is up, and a few guests (tools, hooks) may upload together. */
const OPEN_UPLOADS = 8;
