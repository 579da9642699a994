import { describe, expect, it } from 'vitest';
import { HAND_OVER_FLAG, handOverArguments, handOverFromArguments, sandboxSockets } from '../src/host/hand-over-argument.js';
import { handOverSandboxSockets } from '../src/host/sandbox-sockets.js';

describe("a sealed host's sockets named on its command line", () => {
  it('reads back, in the order they are handed over, the sockets its command line names', () => {
    const sockets = sandboxSockets({ dns: { udpFd: 5, tcpFd: 6 }, listeners: [9, 10] });
    const argv = ['/usr/bin/node', '/code/host.cjs', ...handOverArguments(sockets)];
    expect(argv.slice(2)).toEqual([HAND_OVER_FLAG, 'udp:5,tcp:6,tcp:9,tcp:10']);
    expect(handOverFromArguments(argv)).toEqual([
      { fd: 5, protocol: 'udp' },
      { fd: 6, protocol: 'tcp' },
      { fd: 9, protocol: 'tcp' },
      { fd: 10, protocol: 'tcp' },
    ]);
  });

  it('names nothing when the flag is absent, has no list, or lists something other than protocol:descriptor pairs', () => {
    expect(handOverFromArguments(['/usr/bin/node', '/code/host.cjs'])).toBeUndefined();
    expect(handOverFromArguments(['/usr/bin/node', '/code/host.cjs', HAND_OVER_FLAG])).toBeUndefined();
    for (const list of ['', 'udp:5,', 'sctp:5', 'udp:five', 'udp:5;tcp:6', 'udp:-5']) {
      expect(handOverFromArguments(['node', 'host.cjs', HAND_OVER_FLAG, list]), list).toBeUndefined();
    }
  });
});

describe('handing the sockets over once', () => {
  it("answers the executor's ask for the same sockets with the hand-over already begun, and refuses an ask for others", async () => {
    // Outside a sandbox there are no sockets at those descriptors, so the hand-over fails: what is
    // checked is that a second ask is that same hand-over, not one begun again.
    const named = sandboxSockets({ dns: { udpFd: 5, tcpFd: 6 }, listeners: [] });
    const first = handOverSandboxSockets(named);
    await expect(first).rejects.toThrow();
    expect(handOverSandboxSockets(sandboxSockets({ dns: { udpFd: 5, tcpFd: 6 }, listeners: [] }))).toBe(first);
    await expect(handOverSandboxSockets(sandboxSockets({ dns: { udpFd: 5, tcpFd: 6 }, listeners: [7] }))).rejects.toThrow(
      'the executor asked for the sockets udp:5,tcp:6,tcp:7, but the host was started to hand over udp:5,tcp:6',
    );
  });
});

describe('handing the sockets over once per process', () => {
  it("answers, from another copy of the module (the bundled host has two: its entry's and its modules'), with the hand-over one copy began", async () => {
    // A second instance of the module, as the host's CommonJS entry and its ES modules each have one.
    const anotherCopy = '../src/host/sandbox-sockets.js?another-copy';
    const other = (await import(anotherCopy)) as typeof import('../src/host/sandbox-sockets.js');
    expect(other.handOverSandboxSockets).not.toBe(handOverSandboxSockets);
    const named = sandboxSockets({ dns: { udpFd: 5, tcpFd: 6 }, listeners: [] });
    expect(other.handOverSandboxSockets(named)).toBe(handOverSandboxSockets(named));
  });
});
