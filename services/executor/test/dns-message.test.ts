import { describe, expect, it } from 'vitest';
import { ANSWER_TTL_SECONDS, QTYPE, RCODE, decide, encodeAnswer, parseQuery } from '../src/dns-message.js';

/** A query as a stub resolver writes it: one question, recursion desired. */
function query(name: string, type: number = QTYPE.A, id = 0x1234): Buffer {
  const labels = name.split('.').flatMap((label) => [Buffer.from([label.length]), Buffer.from(label, 'latin1')]);
  const question = Buffer.concat([...labels, Buffer.from([0]), Buffer.from([type >> 8, type & 0xff, 0, 1])]);
  const header = Buffer.from([id >> 8, id & 0xff, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
  return Buffer.concat([header, question]);
}

const names = { 'api.example.com': '127.77.0.1' };

describe('the sealed sandbox’s DNS answers', () => {
  it('answers an allowlisted name with its listener’s address, once, with a TTL', () => {
    const asked = parseQuery(query('API.Example.com'));
    expect(asked?.question).toEqual({ name: 'api.example.com', type: QTYPE.A, class: 1 });
    const answer = encodeAnswer(asked as NonNullable<typeof asked>, decide(asked as NonNullable<typeof asked>, names));
    expect(answer.readUInt16BE(0)).toBe(0x1234);
    expect(answer.readUInt16BE(2) & 0x8000).toBe(0x8000); // a response
    expect(answer.readUInt16BE(2) & 0x0100).toBe(0x0100); // RD echoed
    expect(answer.readUInt16BE(2) & 0xf).toBe(RCODE.NOERROR);
    expect(answer.readUInt16BE(6)).toBe(1);
    const record = answer.subarray(answer.length - 16);
    expect(record.readUInt16BE(0)).toBe(0xc00c);
    expect(record.readUInt32BE(6)).toBe(ANSWER_TTL_SECONDS);
    expect([...record.subarray(12)]).toEqual([127, 77, 0, 1]);
  });

  it('answers an IPv6 question about an allowlisted name with no records: the sandbox is IPv4 only', () => {
    const asked = parseQuery(query('api.example.com', QTYPE.AAAA)) as NonNullable<ReturnType<typeof parseQuery>>;
    expect(decide(asked, names)).toEqual({ rcode: RCODE.NOERROR, addresses: [] });
  });

  it('refuses every other name at once, never NXDOMAIN', () => {
    const asked = parseQuery(query('secret-data.attacker.example')) as NonNullable<ReturnType<typeof parseQuery>>;
    const answer = encodeAnswer(asked, decide(asked, names));
    expect(answer.readUInt16BE(2) & 0xf).toBe(RCODE.REFUSED);
    expect(answer.readUInt16BE(6)).toBe(0);
  });

  it('refuses a name that only looks like an allowlisted one', () => {
    for (const name of ['api.example.com.evil', 'xapi.example.com', 'example.com']) {
      expect(decide(parseQuery(query(name)) as NonNullable<ReturnType<typeof parseQuery>>, names).rcode, name).toBe(RCODE.REFUSED);
    }
  });

  it('says FORMERR to a message with no readable single question, NOTIMP to another opcode, and drops what is not a query', () => {
    const two = query('api.example.com');
    two.writeUInt16BE(2, 4);
    expect(decide(parseQuery(two) as NonNullable<ReturnType<typeof parseQuery>>, names).rcode).toBe(RCODE.FORMERR);
    const pointer = Buffer.concat([query('a').subarray(0, 12), Buffer.from([0xc0, 0x0c, 0, 1, 0, 1])]);
    expect(decide(parseQuery(pointer) as NonNullable<ReturnType<typeof parseQuery>>, names).rcode).toBe(RCODE.FORMERR);
    const truncated = query('api.example.com').subarray(0, 20);
    expect(parseQuery(truncated)?.question).toBeUndefined();
    const update = query('api.example.com');
    update.writeUInt16BE(0x2800, 2); // opcode 5, UPDATE
    expect(decide(parseQuery(update) as NonNullable<ReturnType<typeof parseQuery>>, names).rcode).toBe(RCODE.NOTIMP);
    const response = query('api.example.com');
    response.writeUInt16BE(0x8100, 2);
    expect(parseQuery(response)).toBeUndefined();
    expect(parseQuery(Buffer.alloc(5))).toBeUndefined();
    expect(parseQuery(Buffer.alloc(600))).toBeUndefined();
  });
});
