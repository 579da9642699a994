import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import type { SandboxNetworkStart } from './protocol.js';

/**
 * Hands the sealed sandbox's sockets to the executor. `murmur-confine` bound them in the
 * sandbox's network namespace (DNS on port 53, one listener per allowlisted destination) and left
 * them at the descriptors `start.sandbox` names; each is wrapped, sent over Node's IPC channel as
 * a handle, and closed here, so the host serves none of them and the executor — outside, where the
 * policy is — serves all. Done before the capsule's code runs, when nothing in the sandbox can
 * connect to them yet. Then the IPC channel is closed for good (`host-link.ts` says why): the
 * host's messages go over its framed channel.
 */
export async function handOverSandboxSockets(sandbox: SandboxNetworkStart): Promise<void> {
  const ipc = process.send as ((message: unknown, handle: unknown, callback: (error: Error | null) => void) => boolean) | undefined;
  if (!ipc) throw new Error('the host was started without the channel a sealed sandbox hands its sockets over');
  const send = (message: { type: 'listener' | 'listeners-done'; fd?: number; protocol?: 'tcp' | 'udp' }, handle: unknown): Promise<void> =>
    new Promise((resolve, reject) => {
      ipc.call(process, message, handle, (error) => (error ? reject(error) : resolve()));
    });
  const udp = createSocket('udp4');
  await new Promise<void>((resolve, reject) => {
    udp.once('error', reject);
    udp.bind({ fd: sandbox.dns.udpFd }, () => resolve());
  });
  await send({ type: 'listener', fd: sandbox.dns.udpFd, protocol: 'udp' }, udp);
  udp.close();
  for (const fd of [sandbox.dns.tcpFd, ...sandbox.listeners]) {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ fd }, () => resolve());
    });
    await send({ type: 'listener', fd, protocol: 'tcp' }, server);
    server.close();
  }
  await send({ type: 'listeners-done' }, undefined);
  process.disconnect?.();
}
