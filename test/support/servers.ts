import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A loopback HTTP server that counts every TCP connection made to it, so a test can prove a
 * denied request never reached it (zero connections), not merely that the guest saw an error.
 */
export interface CountingServer {
  readonly url: string;
  readonly port: number;
  /** TCP connections accepted so far. */
  connections(): number;
  /** Request bodies received, in order. */
  bodies(): string[];
  close(): Promise<void>;
}

export async function startCountingServer(respond: (request: http.IncomingMessage, body: string) => { status?: number; body: string; headers?: Record<string, string> } = () => ({ body: 'hello from the loopback server' })): Promise<CountingServer> {
  let connections = 0;
  const bodies: string[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      bodies.push(body);
      const answer = respond(request, body);
      response.writeHead(answer.status ?? 200, { 'content-type': 'text/plain', ...answer.headers });
      response.end(answer.body);
    });
  });
  server.on('connection', () => {
    connections += 1;
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    connections: () => connections,
    bodies: () => [...bodies],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
