import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EgressPolicy, transportError } from '../src/egress.js';
import { HostEgress } from '../src/host-egress.js';
import { planNetwork } from '../src/network-plan.js';
import { RequestUploads } from '../src/request-uploads.js';
import { eventually } from '../../../test/support/processes.js';

/**
 * One exchange through the egress relay, against a real server on loopback: what the session
 * counts of a request's body for as long as the body is held, what reaches the server of a
 * guest's headers, and what a refusal says.
 */

const servers: http.Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

async function serve(handler: http.RequestListener): Promise<number> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

const policy = (allow: string[], artifacts: unknown[] = []) =>
  new EgressPolicy({ policy: { network_allow: allow } as never, artifacts: artifacts as never }, { privateHosts: () => false });

describe('a request body', () => {
  it('its server answered before reading counts against the session until the request is done with it, and goes with the response', async () => {
    let serverSocketClosed = false;
    const port = await serve((request, response) => {
      // Answers at once and never reads what it is sent.
      request.pause();
      request.socket.once('close', () => {
        serverSocketClosed = true;
      });
      response.end('early');
    });
    const egress = policy([`127.0.0.1:${port}`]);
    // 16 MiB: more than loopback's socket buffers take, so most of it waits in the executor.
    const body = Buffer.alloc(16 * 1024 * 1024, 0x61);
    const uploads = new RequestUploads(64 * 1024 * 1024, 128 * 1024 * 1024, 64 * 1024 * 1024);
    uploads.add(1, body.toString('base64'));
    const opened = await egress.http({ url: `http://127.0.0.1:${port}/`, method: 'POST', headers: [], grant: 'capsule', upload: 1 } as never, uploads);
    expect(opened).toMatchObject({ outcome: 'response', status: 200 });
    // Answered, and the body is still the session's to count: it is still in the executor.
    expect(uploads.heldBytes).toBe(body.length);
    expect(await new Response((opened as { body: ReadableStream<Uint8Array> }).body).text()).toBe('early');
    // With the response read whole, the body nobody will read is let go with its connection.
    await eventually(() => (uploads.heldBytes === 0 ? true : undefined), 5_000, 'the body to be let go');
    await eventually(() => serverSocketClosed || undefined, 5_000, 'the connection to close');
    egress.close();
  });

  it('its server read is let go once written, and a HEAD that declares a large body it has not is answered', async () => {
    const port = await serve((request, response) => {
      request.resume();
      request.on('end', () => {
        response.writeHead(200, { 'content-length': String(100 * 1024 * 1024) });
        response.end();
      });
    });
    const egress = policy([`127.0.0.1:${port}`]);
    const uploads = new RequestUploads();
    const opened = await egress.http({ url: `http://127.0.0.1:${port}/big.iso`, method: 'HEAD', headers: [], grant: 'capsule' } as never, uploads);
    expect(opened).toMatchObject({ outcome: 'response', status: 200, body: null });
    expect(uploads.heldBytes).toBe(0);
    egress.close();
  });
});

describe('what a request carries and a response says', () => {
  it('a GET with a body sends it, an empty one sends none, and the length sent is the body’s own, not the guest’s', async () => {
    const seen: Array<{ method: string; length: string | undefined; body: string }> = [];
    const port = await serve((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        seen.push({ method: request.method ?? '', length: request.headers['content-length'], body: Buffer.concat(chunks).toString() });
        response.end('ok');
      });
    });
    const egress = policy([`127.0.0.1:${port}`]);
    const ask = async (method: string, body: string): Promise<void> => {
      const opened = await egress.http(
        {
          url: `http://127.0.0.1:${port}/_search`,
          method,
          headers: [['content-length', '999']],
          grant: 'capsule',
          body_base64: Buffer.from(body).toString('base64'),
        } as never,
        new RequestUploads(),
      );
      expect(opened).toMatchObject({ outcome: 'response', status: 200 });
      await new Response((opened as { body: ReadableStream<Uint8Array> }).body).arrayBuffer();
    };
    await ask('GET', '{"query":{"match_all":{}}}');
    await ask('GET', '');
    await ask('POST', '');
    expect(seen).toEqual([
      { method: 'GET', length: '26', body: '{"query":{"match_all":{}}}' },
      { method: 'GET', length: undefined, body: '' },
      { method: 'POST', length: '0', body: '' },
    ]);
    egress.close();
  });

  it('a CONNECT is refused, naming the method, and never reaches the server', async () => {
    let reached = false;
    const port = await serve((_request, response) => {
      reached = true;
      response.end();
    });
    const egress = policy([`127.0.0.1:${port}`]);
    const opened = await egress.http({ url: `http://127.0.0.1:${port}/`, method: 'CONNECT', headers: [], grant: 'capsule' } as never, new RequestUploads());
    expect(opened).toMatchObject({ outcome: 'denied', code: 'HTTP-request-method-invalid', reason: expect.stringContaining('CONNECT') });
    expect(reached).toBe(false);
    egress.close();
  });

  it('a response’s content-length reaches the guest, the hop-by-hop headers do not', async () => {
    const port = await serve((_request, response) => {
      response.writeHead(200, { 'content-length': '5', connection: 'keep-alive', 'x-kept': 'yes' });
      response.end('hello');
    });
    const egress = policy([`127.0.0.1:${port}`]);
    const opened = await egress.http({ url: `http://127.0.0.1:${port}/`, method: 'GET', headers: [], grant: 'capsule' } as never, new RequestUploads());
    expect(opened).toMatchObject({ outcome: 'response', status: 200 });
    const { headers, body } = opened as { headers: Array<[string, string]>; body: ReadableStream<Uint8Array> };
    expect(headers).toEqual(
      expect.arrayContaining([
        ['content-length', '5'],
        ['x-kept', 'yes'],
      ]),
    );
    expect(headers.map(([name]) => name)).not.toContain('connection');
    expect(await new Response(body).text()).toBe('hello');
    egress.close();
  });
});

describe('a guest’s headers', () => {
  it('named like an object’s own properties reach the server as headers, and nothing else does', async () => {
    let seen: string[] = [];
    const port = await serve((request, response) => {
      seen = request.rawHeaders;
      response.end();
    });
    const egress = policy([`127.0.0.1:${port}`]);
    const opened = await egress.http(
      {
        url: `http://127.0.0.1:${port}/`,
        method: 'GET',
        headers: [
          ['constructor', 'one'],
          ['__proto__', 'two'],
          ['x-plain', 'three'],
        ],
        grant: 'capsule',
      } as never,
      new RequestUploads(),
    );
    expect(opened).toMatchObject({ outcome: 'response', status: 200 });
    await new Response((opened as { body: ReadableStream<Uint8Array> }).body).arrayBuffer();
    const pairs = seen.flatMap((name, index) => (index % 2 === 0 ? [`${name.toLowerCase()}: ${seen[index + 1]}`] : []));
    expect(pairs).toEqual(expect.arrayContaining(['constructor: one', '__proto__: two', 'x-plain: three']));
    expect(pairs.filter((pair) => pair.startsWith('constructor:'))).toEqual(['constructor: one']);
    egress.close();
  });
});

describe('a refusal', () => {
  it('of a tool’s or a hook’s request names its own narrowed allow list, not the capsule’s', () => {
    const egress = policy(
      ['api.example.com', 'files.example.com'],
      [
        { name: 'fetcher', role: 'tool', capabilities: { network: { allow: ['files.example.com'] } } },
        { name: 'audit', role: 'hook', capabilities: { network: { allow: ['collector.example:4318'] } } },
      ],
    );
    expect(egress.judgeHttp('https://api.example.com/', 'tool:fetcher')).toMatchObject({
      allowed: false,
      reason: "network policy: 'api.example.com:443' not in tool:fetcher's network.allow (files.example.com)",
    });
    // A hook gets exactly its own entry's rules: the capsule's neither narrow nor widen them.
    expect(egress.judgeHttp('http://collector.example:4318/v1/traces', 'hook:audit')).toMatchObject({ allowed: true });
    expect(egress.judgeHttp('https://api.example.com/', 'hook:audit')).toMatchObject({
      allowed: false,
      reason: "network policy: 'api.example.com:443' not in hook:audit's network.allow (collector.example:4318)",
    });
    expect(egress.judgeHttp('https://nowhere.example/', 'capsule')).toMatchObject({
      allowed: false,
      reason: "network policy: 'nowhere.example:443' not in capabilities.network.allow",
    });
  });

  it('of a hook with no network entry of its own gives it nothing, never the capsule’s rules', () => {
    const egress = policy(['api.example.com'], [{ name: 'plain', role: 'hook' }]);
    expect(egress.judgeHttp('https://api.example.com/', 'capsule')).toMatchObject({ allowed: true });
    expect(egress.judgeHttp('https://api.example.com/', 'hook:plain')).toMatchObject({
      allowed: false,
      code: 'HTTP-request-denied',
      reason: "network policy: 'api.example.com:443' not in hook:plain's network.allow (nothing)",
    });
  });

  it("of a sealed sandbox's connection holds a rule's port: another port of the same host is refused", () => {
    const egress = policy(['127.0.0.1:8080', 'any-port.example']);
    expect(egress.judgeTcp('127.0.0.1', 8080)).toMatchObject({ allowed: true, rule: '127.0.0.1:8080' });
    expect(egress.judgeTcp('127.0.0.1', 8081)).toEqual({ allowed: false, reason: "network policy: '127.0.0.1:8081' not in capabilities.network.allow" });
    // A host rule without a port admits any.
    expect(egress.judgeTcp('any-port.example', 9)).toMatchObject({ allowed: true });
  });

  it('of a request that timed out says so, whatever shape the abort came in', () => {
    const aborted = Object.assign(new Error('The operation was aborted due to timeout'), {
      name: 'AbortError',
      cause: new DOMException('The operation was aborted due to timeout', 'TimeoutError'),
    });
    expect(transportError(aborted)).toEqual({ code: 'connection-timeout', reason: 'the request timed out' });
  });
});

describe('an A2A send', () => {
  /** The host's egress of one session under `allow`, and every decision it records, with the rule each was counted under. */
  function hostEgress(allow: string[], resolve?: (host: string) => Promise<Array<{ address: string; family: number }>>) {
    const egress = new EgressPolicy(
      { policy: { network_allow: allow } as never, artifacts: [] },
      { privateHosts: () => false, ...(resolve ? { resolve } : {}) },
    );
    const decisions: Array<{ kind: string; target: string; outcome: Record<string, unknown>; rule: string | undefined }> = [];
    const records = {
      request: (kind: string, _grant: string, target: string, outcome: Record<string, unknown>, rule?: string) =>
        void decisions.push({ kind, target, outcome, rule }),
    };
    const host = new HostEgress({ policy: () => egress, records: records as never, traceparent: () => undefined });
    const send = (peer: string) => host.answer({ op: 'send', request: { peer_url: peer, message_id: 'msg_1', text: 'hello' } });
    return { egress, decisions, send };
  }

  it('to a peer named as host:port, the way the spec writes peers, is counted under the rule that allowed it', async () => {
    const port = await serve((request, response) => {
      request.resume();
      request.on('end', () => {
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { id: 'tsk_peer', contextId: 'ctx_peer', status: { state: 'submitted' } } }));
      });
    });
    const { egress, decisions, send } = hostEgress([`127.0.0.1:${port}`]);
    expect(await send(`127.0.0.1:${port}`)).toMatchObject({ ok: true, value: { task_id: 'tsk_peer' } });
    expect(decisions).toEqual([{ kind: 'a2a', target: `127.0.0.1:${port}`, outcome: { decision: 'allowed', state: 'submitted' }, rule: `127.0.0.1:${port}` }]);
    egress.close();
  });

  it('to a name that resolves to an address no rule names is the policy’s refusal, recorded as denied as a wasi:http request’s is, and connects nowhere', async () => {
    let connections = 0;
    const port = await serve((_request, response) => {
      connections += 1;
      response.end();
    });
    const { egress, decisions, send } = hostEgress([`peer.example:${port}`], async () => [{ address: '127.0.0.1', family: 4 }]);
    const result = await send(`peer.example:${port}`);
    expect(result).toEqual({
      ok: false,
      error: expect.stringContaining("network policy: 'peer.example' resolves to 127.0.0.1, which is not a public address"),
    });
    expect(decisions).toMatchObject([{ kind: 'a2a', outcome: { decision: 'denied' } }]);
    expect(connections).toBe(0);
    egress.close();
  });
});

describe("a sealed sandbox's network plan", () => {
  it('takes hosts named like an object’s own properties as names, and gives no listener to what cannot stand for a destination', () => {
    const plan = planNetwork(['constructor:8080', '__proto__:9090', 'dns.example:53', '0.0.0.0:8080', '127.77.0.1:443', 'api.example:443'], 3);
    // A name is answered even where its port gets no listener: a connection to it is refused, as to any port not allowed.
    expect(Object.keys(plan.names).sort()).toEqual(['__proto__', 'api.example', 'constructor', 'dns.example']);
    for (const name of ['constructor', '__proto__', 'api.example']) expect(plan.names[name]).toMatch(/^127\.77\.\d+\.\d+$/);
    expect(plan.listeners.map((listener) => `${listener.host}:${listener.port}`).sort()).toEqual(['__proto__:9090', 'api.example:443', 'constructor:8080']);
    expect(plan.skipped).toEqual(
      expect.arrayContaining([
        "dns.example:53: port 53 is the sandbox's own DNS",
        "0.0.0.0: not an address a sandbox's connection can stand for",
        "127.77.0.1: not an address a sandbox's connection can stand for",
      ]),
    );
  });
});
