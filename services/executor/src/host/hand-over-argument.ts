/**
 * A sealed sandbox's sockets, named on the capsule host's command line (`--hand-over
 * udp:5,tcp:6,tcp:9`) as well as in the executor's `hand-over` ask. The host begins handing them
 * over as it starts (`boot.ts`), while its own modules load, instead of once they have loaded and
 * it has read the ask: the hand-over is a round trip through the executor for each socket, and for
 * a fresh host, or a pooled one taken while it starts (`mur run`'s), it was on the way to the
 * guest's first instruction. It imports nothing: `boot.ts` reads it before anything else of the
 * host is loaded.
 */
export const HAND_OVER_FLAG = '--hand-over';

export interface HandedSocket {
  fd: number;
  protocol: 'tcp' | 'udp';
}

/** A sealed sandbox's sockets in the order they are handed over: DNS over UDP, DNS over TCP, then each listener. */
export function sandboxSockets(sandbox: { dns: { udpFd: number; tcpFd: number }; listeners: readonly number[] }): HandedSocket[] {
  return [
    { fd: sandbox.dns.udpFd, protocol: 'udp' },
    { fd: sandbox.dns.tcpFd, protocol: 'tcp' },
    ...sandbox.listeners.map((fd): HandedSocket => ({ fd, protocol: 'tcp' })),
  ];
}

/** `sockets` as the command line names them: `udp:5,tcp:6`. */
export function socketList(sockets: readonly HandedSocket[]): string {
  return sockets.map((socket) => `${socket.protocol}:${socket.fd}`).join(',');
}

/** The host's arguments that name `sockets`. */
export function handOverArguments(sockets: readonly HandedSocket[]): string[] {
  return [HAND_OVER_FLAG, socketList(sockets)];
}

/**
 * The sockets `argv` names after `HAND_OVER_FLAG`; undefined when it names none, or names them in
 * any other form (the host then hands over what the executor's ask names, when it reads it).
 */
export function handOverFromArguments(argv: readonly string[]): HandedSocket[] | undefined {
  const at = argv.indexOf(HAND_OVER_FLAG);
  const list = at === -1 ? undefined : argv[at + 1];
  if (list === undefined || !/^(udp|tcp):\d+(,(udp|tcp):\d+)*$/.test(list)) return undefined;
  return list.split(',').map((entry) => {
    const [protocol, fd] = entry.split(':') as ['udp' | 'tcp', string];
    return { fd: Number(fd), protocol };
  });
}
