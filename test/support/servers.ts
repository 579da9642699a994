import http from 'node:http';
import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';

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

export async function startCountingServer(
  respond: (request: http.IncomingMessage, body: string) => { status?: number; body: string; headers?: Record<string, string> } = () => ({
    body: 'hello from the loopback server',
  }),
): Promise<CountingServer> {
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

/**
 * The same, over TLS, with a certificate for `localhost` made for this run by `openssl` (a CA and
 * a leaf it signed, in `dir`): `ca` is the CA's path, for a client's `--cacert`.
 */
export async function startCountingTlsServer(
  dir: string,
  respond: (request: http.IncomingMessage) => string = () => 'hello over TLS',
): Promise<CountingServer & { ca: string }> {
  const { execFileSync } = await import('node:child_process');
  const { readFileSync, writeFileSync } = await import('node:fs');
  const https = await import('node:https');
  const path = await import('node:path');
  const openssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=murmur test CA', '-keyout', 'ca.key', '-out', 'ca.pem');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', 'leaf.key', '-out', 'leaf.csr');
  writeFileSync(path.join(dir, 'leaf.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  openssl('x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-extfile', 'leaf.ext', '-out', 'leaf.pem');
  let connections = 0;
  const server = https.createServer({ key: readFileSync(path.join(dir, 'leaf.key')), cert: readFileSync(path.join(dir, 'leaf.pem')) }, (request, response) => {
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end(respond(request));
  });
  server.on('connection', () => {
    connections += 1;
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://localhost:${port}`,
    port,
    ca: path.join(dir, 'ca.pem'),
    connections: () => connections,
    bodies: () => [],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A loopback UDP socket that counts the datagrams it receives. */
export async function startCountingUdp(): Promise<{ port: number; datagrams(): number; close(): Promise<void> }> {
  const { createSocket } = await import('node:dgram');
  const socket = createSocket('udp4');
  let datagrams = 0;
  socket.on('message', () => {
    datagrams += 1;
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { port: socket.address().port, datagrams: () => datagrams, close: () => new Promise<void>((resolve) => socket.close(() => resolve())) };
}

/**
 * Sends `sent` raw to a loopback port, as a client that then says nothing more: what it is sent
 * back, and whether the server closed the connection within `waitMs`.
 */
export async function rawExchange(port: number, sent: string, waitMs: number): Promise<{ received: string; closed: boolean }> {
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
  await once(socket, 'connect');
  socket.write(sent);
  let timer: NodeJS.Timeout | undefined;
  const closed = await Promise.race([
    once(socket, 'close').then(() => true),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), waitMs))),
  ]);
  clearTimeout(timer);
  socket.destroy();
  return { received, closed };
}
