import net from 'node:net';

/**
 * The benches' load generator: `clients` keep-alive TCP connections, each writing one prebuilt
 * HTTP/1.1 request and reading its response before the next, for a fixed time. It parses only
 * what it must — the status line, `content-length` or chunked framing — and hands the body to the
 * caller's check as bytes, so one Node thread can drive several times the requests `fetch` can
 * (undici's per-request cost was what bounded the card rows before). Every row of a bench uses
 * it, the SDK's as well, so the comparison stays fair.
 */

export interface Phase {
  requests: number;
  failures: number;
  perSecond: number;
  p50: number;
  p99: number;
  mean: number;
}

export interface LoadPlan {
  /** Where to connect: `http://` URLs (their paths are the requests'), client `i` using `urls[i % urls.length]`. */
  urls: string[];
  clients: number;
  seconds: number;
  /** The `n`th request's method, extra headers and body (the bench varies the message per request). */
  request(n: number): { method: 'GET' | 'POST'; headers?: Record<string, string>; body?: string };
  /** Whether the response to the `n`th request is the right one; a false counts as a failure. */
  accept(status: number, body: Buffer, n: number): boolean;
}

const HEAD_END = Buffer.from('\r\n\r\n');

/** The bytes of one request: built once per request, nothing parsed or allocated beyond them. */
function requestBytes(target: URL, wanted: ReturnType<LoadPlan['request']>): Buffer {
  const body = wanted.body === undefined ? undefined : Buffer.from(wanted.body);
  let head = `${wanted.method} ${target.pathname}${target.search} HTTP/1.1\r\nhost: ${target.host}\r\nconnection: keep-alive\r\n`;
  for (const [name, value] of Object.entries(wanted.headers ?? {})) head += `${name}: ${value}\r\n`;
  if (body) head += `content-length: ${body.length}\r\n`;
  head += '\r\n';
  return body ? Buffer.concat([Buffer.from(head), body]) : Buffer.from(head);
}

/**
 * Where the response in `data` ends and what it holds, or undefined while more bytes are needed.
 * Header names are compared in lower case; a server that frames neither way is not one we bench.
 */
function readResponse(data: Buffer): { status: number; body: Buffer; length: number } | undefined {
  const headEnd = data.indexOf(HEAD_END);
  if (headEnd < 0) return undefined;
  const head = data.toString('latin1', 0, headEnd).toLowerCase();
  const status = Number(head.slice(9, 12));
  const bodyStart = headEnd + 4;
  const lengthAt = head.indexOf('\r\ncontent-length:');
  if (lengthAt >= 0) {
    const length = Number.parseInt(head.slice(lengthAt + 17, head.indexOf('\r\n', lengthAt + 2) >>> 0), 10);
    if (data.length < bodyStart + length) return undefined;
    return { status, body: data.subarray(bodyStart, bodyStart + length), length: bodyStart + length };
  }
  if (!head.includes('\r\ntransfer-encoding: chunked')) throw new Error('a response with neither content-length nor chunked framing');
  const parts: Buffer[] = [];
  let at = bodyStart;
  for (;;) {
    const lineEnd = data.indexOf('\r\n', at);
    if (lineEnd < 0) return undefined;
    const size = Number.parseInt(data.toString('latin1', at, lineEnd), 16);
    if (data.length < lineEnd + 2 + size + 2) return undefined;
    if (size === 0) return { status, body: Buffer.concat(parts), length: lineEnd + 4 };
    parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

/** One connection's loop: a request, its response, the next, until `until`; reconnects after a failure. */
async function runClient(plan: LoadPlan, target: URL, until: number, next: () => number, latencies: number[], failed: () => void): Promise<void> {
  while (performance.now() < until) {
    const socket = net.connect({ host: target.hostname, port: Number(target.port) });
    socket.setNoDelay(true);
    await new Promise<void>((resolve) => {
      let pending: Buffer = Buffer.alloc(0);
      let n = 0;
      let sentAt = 0;
      let inFlight = false;
      const send = (): void => {
        if (performance.now() >= until) {
          socket.end();
          resolve();
          return;
        }
        n = next();
        inFlight = true;
        sentAt = performance.now();
        socket.write(requestBytes(target, plan.request(n)));
      };
      socket.once('connect', send);
      socket.on('data', (chunk: Buffer) => {
        pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
        let response: ReturnType<typeof readResponse>;
        try {
          response = readResponse(pending);
        } catch {
          socket.destroy();
          return;
        }
        if (!response) return;
        inFlight = false;
        const ok = plan.accept(response.status, response.body, n);
        if (ok) latencies.push(performance.now() - sentAt);
        else failed();
        pending = pending.subarray(response.length);
        send();
      });
      socket.once('error', () => undefined);
      // A connection lost with a request on it (refused, reset, closed by the server) is that request's failure.
      socket.once('close', () => {
        if (inFlight) failed();
        resolve();
      });
    });
  }
}

/** `plan.clients` connections doing requests back to back for `plan.seconds`; latencies of the accepted ones. */
export async function load(plan: LoadPlan): Promise<Phase> {
  const targets = plan.urls.map((url) => new URL(url));
  const latencies: number[] = [];
  let failures = 0;
  let sequence = 0;
  const started = performance.now();
  const until = started + plan.seconds * 1000;
  await Promise.all(
    Array.from({ length: plan.clients }, (_, client) =>
      runClient(
        plan,
        targets[client % targets.length] as URL,
        until,
        () => ++sequence,
        latencies,
        () => {
          failures += 1;
        },
      ),
    ),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((left, right) => left - right);
  const at = (quantile: number): number => latencies[Math.min(latencies.length - 1, Math.floor(quantile * latencies.length))] ?? Number.NaN;
  const mean = latencies.reduce((sum, latency) => sum + latency, 0) / latencies.length;
  return { requests: latencies.length, failures, perSecond: latencies.length / elapsed, p50: at(0.5), p99: at(0.99), mean };
}
