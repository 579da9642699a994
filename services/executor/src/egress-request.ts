// Named imports: a snapshot of `mur` defers these built-ins to their first use, and a default
// import would load them while the snapshot is built (scripts/snapshot.mjs).
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type net from 'node:net';
import { Readable } from 'node:stream';

/**
 * One HTTP request a capsule's grant allowed, on a connection made with the `lookup` that vets
 * where the name leads (`egress-address.ts`), so it goes to the address that was checked. Node's
 * `fetch` resolves names itself and takes no lookup, hence `node:http`: no redirect is ever
 * followed (a 3xx is the guest's to read), and the signal covers the whole exchange, the body
 * included.
 */
export interface EgressResponse {
  status: number;
  /** Each header line as it came, the name lower-cased. */
  headers: Array<[string, string]>;
  body: ReadableStream<Uint8Array> | null;
}

/**
 * One session's connections: kept alive between its requests (an agent's model calls, turn after
 * turn, would otherwise each pay a TCP and TLS handshake), made with the vetted lookup, and never
 * shared with another session. Closed when the session ends.
 */
export class EgressConnections {
  private http: HttpAgent | undefined;
  private https: HttpsAgent | undefined;

  /** `lookupTo`: the vetted lookup for a connection to a port (`EgressPolicy.lookupTo`). */
  constructor(private readonly lookupTo: (port: number) => net.LookupFunction) {}

  for(protocol: string): HttpAgent {
    if (protocol === 'https:') {
      this.https ??= this.withLookup(new HttpsAgent({ keepAlive: true }));
      return this.https;
    }
    this.http ??= this.withLookup(new HttpAgent({ keepAlive: true }));
    return this.http;
  }

  /** An agent whose every connection resolves its host with the lookup for its port. */
  private withLookup<A extends HttpAgent>(agent: A): A {
    const connect = agent.createConnection.bind(agent);
    agent.createConnection = (options, callback) => connect({ ...options, lookup: this.lookupTo(Number(options.port ?? 0)) } as typeof options, callback);
    return agent;
  }

  close(): void {
    this.http?.destroy();
    this.https?.destroy();
  }
}

/**
 * One request, answered once its head arrived. `sent` settles once the request is done with its
 * body — written out, or the request gone — which may be after the answer: a server may answer
 * before it reads what it was sent (or never read it). A body still unwritten when its response
 * has ended is let go with its connection, so nothing outlives the exchange it was for.
 */
export function egressRequest(
  url: string,
  init: { method: string; headers: Array<[string, string]>; body?: Uint8Array | undefined; signal: AbortSignal; connections: EgressConnections },
): Promise<EgressResponse & { sent: Promise<void> }> {
  const target = new URL(url);
  const makeRequest = target.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const request = makeRequest(
      target,
      {
        method: init.method,
        // Without a prototype: a guest's header named `constructor` or `__proto__` is a header like any other.
        headers: init.headers.reduce<Record<string, string | string[]>>(
          (all, [name, value]) => {
            const existing = Object.hasOwn(all, name) ? all[name] : undefined;
            all[name] = existing === undefined ? value : Array.isArray(existing) ? [...existing, value] : [existing, value];
            return all;
          },
          Object.create(null) as Record<string, string | string[]>,
        ),
        signal: init.signal,
        agent: init.connections.for(target.protocol),
      },
      (response) => {
        const headers: Array<[string, string]> = [];
        for (let index = 0; index + 1 < response.rawHeaders.length; index += 2)
          headers.push([(response.rawHeaders[index] as string).toLowerCase(), response.rawHeaders[index + 1] as string]);
        const bodyless = init.method === 'HEAD' || response.statusCode === 204 || response.statusCode === 304;
        response.once('close', () => {
          if (!request.writableFinished) request.destroy();
        });
        if (bodyless) response.resume();
        resolve({
          status: response.statusCode ?? 0,
          headers,
          body: bodyless ? null : (Readable.toWeb(response) as ReadableStream<Uint8Array>),
          sent,
        });
      },
    );
    const sent = new Promise<void>((settle) => {
      request.once('finish', settle);
      request.once('close', settle);
    });
    request.on('error', reject);
    request.end(init.body);
  });
}
