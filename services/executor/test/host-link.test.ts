import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, readdirSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { HostLink } from '../src/host-link.js';

/**
 * Whether `pid` has exited, every thread of it, and is not yet reaped (this process's loop, which
 * would reap it, is busy): only then are its descriptors closed, which the leader's zombie state
 * alone does not say while its other threads are still ending.
 */
function exited(pid: number): boolean {
  try {
    const threads = readdirSync(`/proc/${pid}/task`);
    return threads.length === 1 && (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') ?? true);
  } catch {
    return true;
  }
}

/** A stand-in host's source for one framed message (four bytes of length, then the JSON). */
const FRAME_SOURCE = `
  const frame = (message) => {
    const body = Buffer.from(JSON.stringify(message));
    const header = Buffer.alloc(4);
    header.writeUInt32BE(body.length);
    return Buffer.concat([header, body]);
  };
`;

/**
 * A stand-in host: a real node process with the channel on fd 3, as the executor starts one. It
 * exits at once, leaving behind a process that inherited the channel and says its pid, then, after
 * `delayMs`, writes `frames` output frames and a result and exits, unless told to `stay`: so
 * the host's exit is heard before its last frames are written, let alone read.
 */
function startHost(options: { frames: number; delayMs: number; stay?: boolean }): ChildProcess {
  const writer = `
    const { Socket } = require('node:net');
    const channel = new Socket({ fd: 3, readable: false, writable: true });
    ${FRAME_SOURCE}
    channel.write(frame({ type: 'left-behind', pid: process.pid }));
    setTimeout(() => {
      for (let n = 0; n < ${options.frames}; n += 1) channel.write(frame({ type: 'output', stream: 'stdout', text: 'x'.repeat(1024) }));
      channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => { if (!${options.stay === true}) process.exit(0); });
    }, ${options.delayMs});
    // Never outlives the test by much, whatever happens to the test.
    setTimeout(() => process.exit(0), 20_000);
  `;
  const host = `
    const { spawn } = require('node:child_process');
    spawn(process.execPath, ['-e', ${JSON.stringify(writer)}], { stdio: ['ignore', 'ignore', 'inherit', 3], detached: true }).unref();
    process.exit(0);
  `;
  return spawn(process.execPath, ['-e', host], { stdio: ['ignore', 'ignore', 'inherit', 'pipe'] });
}

describe("the executor's link to a capsule host", () => {
  let leftBehind: number | undefined;
  const children: ChildProcess[] = [];

  afterEach(() => {
    for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    if (leftBehind !== undefined) {
      try {
        process.kill(leftBehind, 'SIGKILL');
      } catch {}
    }
    leftBehind = undefined;
  });

  /** The link to `child`, and every message read from it in order. */
  function link(child: ChildProcess): { link: HostLink; messages: Array<{ type: string; pid?: number }> } {
    const hostLink = new HostLink(child);
    const messages: Array<{ type: string; pid?: number }> = [];
    hostLink.on('message', (raw) => {
      const message = raw as { type: string; pid?: number };
      if (message.type === 'left-behind') leftBehind = message.pid;
      messages.push(message);
    });
    return { link: hostLink, messages };
  }

  it('a host whose exit is heard before its last frames arrive has them all read before its end is taken', async () => {
    const child = startHost({ frames: 40, delayMs: 300 });
    const { link: hostLink, messages } = link(child);
    await once(child, 'exit');
    expect(messages.map((message) => message.type)).not.toContain('result');
    expect(await hostLink.everythingRead(10_000)).toBe('closed');
    expect(messages).toHaveLength(42);
    expect(messages.at(-1)?.type).toBe('result');
    expect(hostLink.heard).toEqual({ frames: 42, lastTypes: [...Array<string>(7).fill('output'), 'result'], closed: true });
  });

  it('does not hold a host’s end past its wait for a process it left behind that keeps the channel open', async () => {
    const child = startHost({ frames: 0, delayMs: 0, stay: true });
    const { link: hostLink, messages } = link(child);
    await once(child, 'exit');
    // What the process left behind has said all it will: only its open channel is waited for now.
    for (let waited = 0; messages.at(-1)?.type !== 'result' && waited < 10_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    const started = performance.now();
    const read = await hostLink.everythingRead(500);
    const waited = performance.now() - started;
    expect(read).toBe('waited');
    expect(leftBehind, 'the process left behind said its pid').toBeTypeOf('number');
    expect(messages.at(-1)?.type).toBe('result');
    expect(waited).toBeGreaterThanOrEqual(450);
    expect(waited).toBeLessThan(5_000);
    hostLink.close();
  });
  /**
   * A stand-in host that asks for something, sends its result once the executor has read the
   * request (it says so first), and exits when the channel closes (`waits`) or as soon as the
   * result is written; and the executor's side of it, stalled on the request (a machine under
   * load) until the host has exited, or 300 ms for one that waits, so that its reply is written
   * after the result is in the channel, never read with the request. Resolves with what was read,
   * once everything was.
   */
  async function lateReply(waits: boolean): Promise<string[]> {
    const standIn = `
      const { Socket } = require('node:net');
      const channel = new Socket({ fd: 3, readable: true, writable: true });
      ${FRAME_SOURCE}
      let told = false;
      channel.on('data', () => {
        if (told) return;
        told = true;
        channel.write(frame({ type: 'result', status: 'ok', exit_code: 0 }), () => { if (!${waits}) process.exit(0); });
      });
      channel.on('close', () => process.exit(0));
      channel.write(frame({ type: 'request', id: 1, request: { op: 'http-body-release', body: 1 } }));
      setTimeout(() => process.exit(3), 10_000);
    `;
    const child = spawn(process.execPath, ['-e', standIn], { stdio: ['ignore', 'ignore', 'inherit', 'pipe'] });
    children.push(child);
    const hostLink = new HostLink(child);
    const types: string[] = [];
    hostLink.on('message', (raw) => {
      const message = raw as { type: string; id?: number };
      types.push(message.type);
      if (message.type === 'request') {
        hostLink.send({ type: 'read-it' });
        const until = Date.now() + (waits ? 300 : 5_000);
        while (Date.now() < until && !exited(child.pid as number));
        hostLink.send({ type: 'reply', id: message.id, ok: true, value: null });
      }
    });
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code).toBe(0);
    expect(await hostLink.everythingRead(5_000)).toBe('closed');
    hostLink.close();
    return types;
  }

  it('a reply written late to a host that waits for the channel’s end costs the executor nothing of what the host wrote', async () => {
    expect(await lateReply(true)).toEqual(['request', 'result']);
  });

  it('a host that exits as soon as its result is written still has it read when a reply written late fails on it', async () => {
    // The reply fails on the exited host (EPIPE), where Node would destroy the socket and drop
    // what the channel still held unread; the channel reads it first (`drainAfterError`).
    expect(await lateReply(false)).toEqual(['request', 'result']);
  });
});
