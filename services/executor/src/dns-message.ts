/**
 * The sealed sandbox's DNS, as messages (RFC 1035 §4): one question in, one answer out.
 *
 * It knows exactly the names `network.allow` lists and answers each with the address the
 * sandbox's listener for it has; an IPv6 question about one is answered with no records (the
 * sandbox is IPv4 only). Every other name is `REFUSED` at once — never forwarded, so a name
 * cannot carry data out, and never `NXDOMAIN`, which would mean someone looked it up.
 */

export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NOTIMP: 4, REFUSED: 5 } as const;
export const QTYPE = { A: 1, AAAA: 28 } as const;
const CLASS_IN = 1;
const HEADER_BYTES = 12;
export const ANSWER_TTL_SECONDS = 60;
/** Larger than any question one name can make; a bigger message is not a query we answer. */
export const MAX_QUERY_BYTES = 512;

export interface DnsQuestion {
  /** Lowercase, without the trailing dot. */
  name: string;
  type: number;
  class: number;
}

export interface DnsQuery {
  id: number;
  /** The header's second word as asked (opcode, RD), echoed in the answer. */
  flags: number;
  question: DnsQuestion | undefined;
  /** The question section's bytes, copied into the answer. */
  questionBytes: Buffer;
  opcode: number;
}

/**
 * Reads a query; undefined when there is not even a header to answer (the datagram is dropped).
 * A message with a header but no readable single question has `question` undefined (`FORMERR`).
 */
export function parseQuery(message: Buffer): DnsQuery | undefined {
  if (message.length < HEADER_BYTES || message.length > MAX_QUERY_BYTES) return undefined;
  const id = message.readUInt16BE(0);
  const flags = message.readUInt16BE(2);
  if (flags & 0x8000) return undefined; // a response, not a query: never answered
  const opcode = (flags >> 11) & 0xf;
  const questions = message.readUInt16BE(4);
  const base = { id, flags, opcode, question: undefined, questionBytes: Buffer.alloc(0) };
  if (questions !== 1) return base;
  const labels: string[] = [];
  let offset = HEADER_BYTES;
  for (;;) {
    if (offset >= message.length) return base;
    const length = message[offset] as number;
    // A compression pointer or an extended label type has no place in a question.
    if (length & 0xc0) return base;
    offset += 1;
    if (length === 0) break;
    if (offset + length > message.length) return base;
    labels.push(message.toString('latin1', offset, offset + length));
    offset += length;
    if (labels.join('.').length > 253) return base;
  }
  if (offset + 4 > message.length) return base;
  const type = message.readUInt16BE(offset);
  const klass = message.readUInt16BE(offset + 2);
  return {
    id,
    flags,
    opcode,
    question: { name: labels.join('.').toLowerCase(), type, class: klass },
    questionBytes: message.subarray(HEADER_BYTES, offset + 4),
  };
}

export interface DnsDecision {
  rcode: number;
  /** IPv4 addresses to answer with (type A questions only). */
  addresses: string[];
}

/** What the sandbox answers `query`, given the names it knows (name → its listener's address). */
export function decide(query: DnsQuery, names: Readonly<Record<string, string>>): DnsDecision {
  if (query.opcode !== 0) return { rcode: RCODE.NOTIMP, addresses: [] };
  const question = query.question;
  if (!question) return { rcode: RCODE.FORMERR, addresses: [] };
  const address = Object.hasOwn(names, question.name) ? names[question.name] : undefined;
  if (address === undefined || question.class !== CLASS_IN) return { rcode: RCODE.REFUSED, addresses: [] };
  return { rcode: RCODE.NOERROR, addresses: question.type === QTYPE.A ? [address] : [] };
}

/** The answer message: the query's id and question, recursion available, authoritative. */
export function encodeAnswer(query: DnsQuery, decision: DnsDecision): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt16BE(query.id, 0);
  // QR, the query's opcode and RD, AA and RA set, and the code.
  header.writeUInt16BE(0x8000 | (query.flags & 0x7900) | 0x0400 | 0x0080 | (decision.rcode & 0xf), 2);
  const hasQuestion = query.question !== undefined;
  header.writeUInt16BE(hasQuestion ? 1 : 0, 4);
  header.writeUInt16BE(decision.addresses.length, 6);
  const answers = decision.addresses.map((address) => {
    const record = Buffer.alloc(16);
    record.writeUInt16BE(0xc000 | HEADER_BYTES, 0); // the name: a pointer to the question's
    record.writeUInt16BE(QTYPE.A, 2);
    record.writeUInt16BE(CLASS_IN, 4);
    record.writeUInt32BE(ANSWER_TTL_SECONDS, 6);
    record.writeUInt16BE(4, 10);
    address.split('.').forEach((octet, index) => {
      record.writeUInt8(Number(octet), 12 + index);
    });
    return record;
  });
  return Buffer.concat([header, hasQuestion ? query.questionBytes : Buffer.alloc(0), ...answers]);
}
