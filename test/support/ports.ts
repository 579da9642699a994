import net from 'node:net';

/** A port nothing listens on right now, on loopback. */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port as number;
}

/**
 * `count` ports nothing listens on right now, on loopback, each a different one: all are held
 * until every one is found. Asked for one at a time, the kernel may hand back a port it just gave
 * (each was closed before the next was asked for), and two services of one stack given the same
 * port do not start.
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers = Array.from({ length: count }, () => net.createServer());
  try {
    return await Promise.all(
      servers.map(
        (server) =>
          new Promise<number>((resolve, reject) => {
            server.unref();
            server.once('error', reject);
            server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
          }),
      ),
    );
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve()))));
  }
}
