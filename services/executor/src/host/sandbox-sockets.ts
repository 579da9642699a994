import { type Socket, createSocket } from 'node:dgram';
import { type Server, createServer } from 'node:net';
import { type HandedSocket, socketList } from './hand-over-argument.js';
import { hostSlot } from './host-slot.js';

/**
 * Hands the sealed sandbox's sockets to the executor. `murmur-confine` bound them in the
 * sandbox's network namespace (DNS on port 53, one listener per allowlisted destination) and left
 * them at the descriptors `start.sandbox` names; each is wrapped, sent over Node's IPC channel as
 * a handle, and closed here, so the host serves none of them and the executor — outside, where the
 * policy is — serves all. Done before the capsule's code runs, when nothing in the sandbox can
 * connect to them yet. Then the IPC channel is closed for good (`host-link.ts` says why): the
 * host's messages go over its framed channel.
 */
async function handOver(sockets: readonly HandedSocket[]): Promise<void> {
  const ipc = process.send as ((message: unknown, handle: unknown, callback: (error: Error | null) => void) => boolean) | undefined;
  if (!ipc) throw new Error('the host was started without the channel a sealed sandbox hands its sockets over');
  const send = (message: { type: 'listener' | 'listeners-done'; fd?: number; protocol?: 'tcp' | 'udp' }, handle: unknown): Promise<void> =>
    new Promise((resolve, reject) => {
      ipc.call(process, message, handle, (error) => (error ? reject(error) : resolve()));
    });
  for (const handed of sockets) {
    const socket = await wrap(handed);
    await send({ type: 'listener', fd: handed.fd, protocol: handed.protocol }, socket);
    socket.close();
  }
  await send({ type: 'listeners-done' }, undefined);
  process.disconnect?.();
}

/** The socket at `fd` as node can send it: bound (UDP) or listening (TCP) on the descriptor. */
function wrap({ fd, protocol }: HandedSocket): Promise<Socket | Server> {
  return new Promise((resolve, reject) => {
    if (protocol === 'udp') {
      const udp = createSocket('udp4');
      udp.once('error', reject);
      udp.bind({ fd }, () => resolve(udp));
    } else {
      const server = createServer();
      server.once('error', reject);
      server.listen({ fd }, () => resolve(server));
    }
  });
}

/**
 * Hands `sockets` over, once: begun from the host's command line as it starts (`boot.ts`), the
 * executor's ask for the same sockets is that same hand-over. An ask for any others is refused,
 * since what was handed is handed and the channel is closed after it.
 */
export function handOverSandboxSockets(sockets: readonly HandedSocket[]): Promise<void> {
  const named = socketList(sockets);
  // Once per process, whichever copy of this module began it (`host-slot.ts`).
  const slot = hostSlot();
  if (slot.handOver === undefined) slot.handOver = { sockets: named, done: handOver(sockets) };
  else if (slot.handOver.sockets !== named)
    return Promise.reject(new Error(`the executor asked for the sockets ${named}, but the host was started to hand over ${slot.handOver.sockets}`));
  return slot.handOver.done;
}
