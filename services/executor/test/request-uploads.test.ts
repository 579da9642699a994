import { describe, expect, it } from 'vitest';
import { uploadPieces } from '../src/host/request-body.js';
import { RequestUploads } from '../src/request-uploads.js';

/**
 * What the executor holds of request bodies a capsule host sends ahead in pieces: the host runs
 * untrusted code, so every bound holds against a host that does not stop by itself.
 */
describe('request bodies uploaded ahead of their requests', () => {
  const base64 = (text: string): string => Buffer.from(text).toString('base64');

  it('gives back a body cut into pieces byte for byte, and holds nothing once it is taken', () => {
    const body = Buffer.from(Array.from({ length: 3_000_000 }, (_, index) => index % 251));
    const pieces = uploadPieces(body.toString('base64'));
    expect(pieces.length).toBeGreaterThan(3);
    const uploads = new RequestUploads();
    for (const piece of pieces) uploads.add(7, piece);
    expect(uploads.heldBytes).toBe(body.length);
    const taken = uploads.take(7);
    expect('body' in taken && taken.body.equals(body)).toBe(true);
    expect(uploads.heldBytes).toBe(0);
    expect(uploads.take(7)).toEqual({ refused: 'no request body was uploaded as 7' });
  });

  it('counts a body taken for its request, and one sent inline, against the session until the request is answered', () => {
    const uploads = new RequestUploads(10, 20, 8);
    uploads.add(1, base64('123456'));
    const sending = uploads.send(1);
    expect('body' in sending && sending.body.toString()).toBe('123456');
    // Taken, but still in flight: it holds its share of the session's bytes.
    expect(uploads.heldBytes).toBe(6);
    const inline = uploads.sendInline(10);
    expect('release' in inline).toBe(true);
    expect(uploads.heldBytes).toBe(16);
    expect(uploads.sendInline(5)).toEqual({
      refused: "this session's request bodies waiting or being sent would hold more than 20 bytes: wait for a request to be answered",
    });
    expect(() => uploads.add(2, base64('abcde'))).toThrow("this session's request bodies waiting or being sent would hold more than 20 bytes");
    if ('release' in sending) {
      sending.release();
      sending.release();
    }
    if ('release' in inline) inline.release();
    expect(uploads.heldBytes).toBe(0);
    expect(uploads.send(9)).toEqual({ refused: 'no request body was uploaded as 9' });
  });

  it('refuses a body growing past its limit, lets go of it, and keeps the reason for its request', () => {
    const uploads = new RequestUploads(10, 100, 8);
    uploads.add(1, base64('123456'));
    expect(() => uploads.add(1, base64('78901'))).toThrow('the request body is larger than 10 bytes');
    expect(uploads.heldBytes).toBe(0);
    // A host that goes on sending pieces of it is refused with the same reason, and nothing is held.
    expect(() => uploads.add(1, base64('1'))).toThrow('the request body is larger than 10 bytes');
    expect(uploads.heldBytes).toBe(0);
    expect(uploads.take(1)).toEqual({ refused: 'the request body is larger than 10 bytes' });
  });

  it('bounds what a session holds across its uploads, whatever the number of uploads', () => {
    const uploads = new RequestUploads(10, 20, 16);
    uploads.add(1, base64('1234567890'));
    uploads.add(2, base64('1234567890'));
    expect(() => uploads.add(3, base64('1'))).toThrow(
      "this session's request bodies waiting or being sent would hold more than 20 bytes: make one request (or wait for one to be answered) before uploading another",
    );
    expect(uploads.heldBytes).toBe(20);
    uploads.take(1);
    uploads.add(4, base64('12345'));
    expect(uploads.heldBytes).toBe(15);
  });

  it('keeps the reasons of a few refused uploads only, so refusals cannot grow without end', () => {
    const uploads = new RequestUploads(1, 100);
    for (let id = 1; id <= 1000; id++) expect(() => uploads.add(id, base64('12'))).toThrow();
    expect(uploads.take(1)).toEqual({ refused: 'no request body was uploaded as 1' });
    expect(uploads.take(1000)).toEqual({ refused: 'the request body is larger than 1 bytes' });
  });

  it('counts pieces and uploads, not bytes alone: no empty piece, nothing after a short one, a few uploads at once', () => {
    const uploads = new RequestUploads(1000, 2000, 8);
    expect(() => uploads.add(1, '')).toThrow('upload 1 was sent an empty piece');
    uploads.add(2, base64('123456'));
    uploads.add(2, base64('ab'));
    // A short piece was the last: the host that goes on is refused, and the upload let go.
    expect(() => uploads.add(2, base64('123456'))).toThrow('upload 2 was sent a piece after its last one');
    expect(uploads.heldBytes).toBe(0);
    for (let id = 10; id < 18; id++) uploads.add(id, base64('x'));
    expect(() => uploads.add(18, base64('x'))).toThrow(
      'this session already has 8 request bodies waiting for their requests: make one request before uploading another',
    );
    // A request made, or an upload let go, makes room again.
    uploads.take(10);
    uploads.add(19, base64('x'));
    expect(uploads.heldBytes).toBe(8);
  });

  it('lets go of everything when its session ends', () => {
    const uploads = new RequestUploads();
    uploads.add(1, base64('held'));
    uploads.clear();
    expect(uploads.heldBytes).toBe(0);
    expect(uploads.take(1)).toEqual({ refused: 'no request body was uploaded as 1' });
  });
});
