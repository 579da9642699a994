import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { type Server, type Socket, createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FrameChannel } from '../src/host/frame-channel.js';

/** Both ends of a real Unix socket: `near` is read through a FrameChannel, `far` is written raw. */
interface Pair {
  near: Socket;
  far: Socket;
}

describe('a framed channel', () => {
  let dir: string;
  let server: Server;
  let pairs: Pair[];

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'murmur-frames-'));
    pairs = [];
  });

  afterEach(async () => {
    for (const { near, far } of pairs) {
      near.destroy();
      far.destroy();
    }
    if (server) await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  async function pair(): Promise<Pair> {
    const socketPath = path.join(dir, `s${pairs.length}`);
    server = createServer();
    server.listen(socketPath);
    await once(server, 'listening');
    const accepted = once(server, 'connection') as Promise<[Socket]>;
    const far = createConnection(socketPath);
    await once(far, 'connect');
    const [near] = await accepted;
    const made = { near, far };
    pairs.push(made);
    return made;
  }

  /** A reader over `near` with `limit`, and what it was told. */
  function reader(near: Socket, limit = 1024) {
    const told = { messages: [] as unknown[], violations: [] as string[], closed: false };
    const channel = new FrameChannel(near, limit, {
      message: (value) => told.messages.push(value),
      violation: (why) => told.violations.push(why),
      close: () => {
        told.closed = true;
      },
    });
    return { channel, told };
  }

  function frame(body: string | Buffer, announced?: number): Buffer {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    const header = Buffer.alloc(4);
    header.writeUInt32BE(announced ?? bytes.length);
    return Buffer.concat([header, bytes]);
  }

  const until = async (condition: () => boolean): Promise<void> => {
    for (let waited = 0; !condition(); waited += 5) {
      if (waited > 5_000) throw new Error('timed out');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };

  it('delivers messages in order, whole, however the bytes are cut on the way', async () => {
    const { near, far } = await pair();
    const { told } = reader(near);
    const messages = [{ type: 'ready' }, { text: 'naïve 🦀 façade' }, [1, 2, 3], 'plain', null];
    const bytes = Buffer.concat(messages.map((message) => frame(JSON.stringify(message))));
    // One byte at a time for the first two frames, then the rest in one write.
    const split = frame(JSON.stringify(messages[0])).length + frame(JSON.stringify(messages[1])).length;
    for (let index = 0; index < split; index++) {
      far.write(bytes.subarray(index, index + 1));
      await new Promise((resolve) => setImmediate(resolve));
    }
    far.write(bytes.subarray(split));
    await until(() => told.messages.length === messages.length);
    expect(told.messages).toEqual(messages);
    expect(told.violations).toEqual([]);
  });

  it('sends what the other side reads back as the same message', async () => {
    const { near, far } = await pair();
    const { told } = reader(near);
    const sender = new FrameChannel(far, 1024, { message: () => {}, violation: () => {} });
    const sent: Array<Error | undefined> = [];
    sender.send({ type: 'event', text: 'ünïcode' }, (error) => sent.push(error));
    sender.send({ type: 'result', exit_code: 0 });
    await until(() => told.messages.length === 2);
    expect(told.messages).toEqual([
      { type: 'event', text: 'ünïcode' },
      { type: 'result', exit_code: 0 },
    ]);
    expect(sent).toEqual([undefined]);
  });

  it('takes a frame exactly at its limit, and refuses one byte more before reading its body', async () => {
    const { near, far } = await pair();
    const { told } = reader(near, 16);
    const atLimit = JSON.stringify('x'.repeat(14));
    expect(Buffer.byteLength(atLimit)).toBe(16);
    far.write(frame(atLimit));
    // Announced, never sent: the reader refuses on the header alone.
    far.write(frame(Buffer.alloc(0), 17));
    await until(() => told.violations.length === 1 && told.closed);
    expect(told.messages).toEqual(['x'.repeat(14)]);
    expect(told.violations[0]).toBe('it announced a message of 17 bytes, more than the 16 this channel takes');
  });

  it('refuses a frame that is not JSON, reads nothing after it, and closes', async () => {
    const { near, far } = await pair();
    const { channel, told } = reader(near);
    far.write(Buffer.concat([frame('{"type":"ready"}'), frame('not json'), frame('{"type":"after"}')]));
    await until(() => told.closed);
    expect(told.messages).toEqual([{ type: 'ready' }]);
    expect(told.violations).toHaveLength(1);
    expect(told.violations[0]).toMatch(/^it sent a message that is not JSON \(/);
    expect(channel.open).toBe(false);
    // The peer sees the channel end.
    await until(() => far.readableEnded || far.destroyed);
  });

  it('refuses an empty frame, even as the last bytes read, as a message that is not JSON', async () => {
    const { near, far } = await pair();
    const { told } = reader(near);
    far.write(Buffer.concat([frame('{"type":"ready"}'), frame('')]));
    await until(() => told.closed);
    expect(told.messages).toEqual([{ type: 'ready' }]);
    expect(told.violations).toEqual(['it sent a message that is not JSON (Unexpected end of JSON input)']);
  });

  it('refuses a peer that leaves more than its backlog unread, and keeps no more of it', async () => {
    const { near, far } = await pair();
    const told: string[] = [];
    const sender = new FrameChannel(near, 1024, { message: () => {}, violation: (why) => told.push(why) }, 256 * 1024);
    far.pause();
    const piece = { text: 'x'.repeat(64 * 1024) };
    for (let sent = 0; sent < 200 && told.length === 0; sent++) sender.send(piece);
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(/^it left \d+ bytes sent to it unread, more than the 262144 this channel holds for it$/);
    expect(sender.open).toBe(false);
  });

  it('sends the first frame of a turn of the event loop at once and gathers the rest of the turn into one write, in order', async () => {
    const { near, far } = await pair();
    // What the socket hands the kernel: one entry per write, the number of frames it carried.
    const writes: number[] = [];
    const socket = near as unknown as {
      _write: (chunk: Buffer, encoding: string, done: () => void) => void;
      _writev: (chunks: unknown[], done: () => void) => void;
    };
    const write = socket._write.bind(near);
    const writev = socket._writev.bind(near);
    socket._write = (chunk, encoding, done) => {
      writes.push(1);
      write(chunk, encoding, done);
    };
    socket._writev = (chunks, done) => {
      writes.push(chunks.length);
      writev(chunks, done);
    };
    const sender = new FrameChannel(near, 1024, { message: () => {}, violation: () => {} });
    const { told } = reader(far);
    // Sent the way a host sends a task's events: between awaits, in ticks and microtasks of one turn.
    sender.send({ n: 1 });
    await Promise.resolve();
    sender.send({ n: 2 });
    await new Promise<void>((resolve) => process.nextTick(resolve));
    sender.send({ n: 3 });
    await until(() => told.messages.length === 3);
    expect(told.messages).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect(writes).toEqual([1, 2]);
    // The next turn's first frame goes at once again.
    sender.send({ n: 4 });
    await until(() => told.messages.length === 4);
    expect(writes).toEqual([1, 2, 1]);
  });

  it('tells its owner the peer ended once every frame it sent was read, before the channel has closed', async () => {
    const { near, far } = await pair();
    const events: string[] = [];
    new FrameChannel(near, 1024, {
      message: (value) => events.push(`message ${(value as { n: number }).n}`),
      violation: (why) => events.push(`violation ${why}`),
      ended: () => events.push('ended'),
      close: () => events.push('closed'),
    });
    far.end(Buffer.concat([frame('{"n":1}'), frame('{"n":2}')]));
    await until(() => events.includes('closed'));
    expect(events).toEqual(['message 1', 'message 2', 'ended', 'closed']);
  });

  it('tells a sender its message did not go once the channel has closed', async () => {
    const { near, far } = await pair();
    const { channel, told } = reader(near);
    far.destroy();
    await until(() => told.closed);
    const outcome = await new Promise<Error | undefined>((resolve) => channel.send({ type: 'late' }, resolve));
    expect(outcome?.message).toBe('the channel is closed');
  });
});
