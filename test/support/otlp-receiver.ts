import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A loopback OTLP/HTTP collector: the stand-in for what an operator runs (Jaeger, Tempo, an
 * OpenTelemetry Collector). It accepts `POST /v1/traces` with OTLP JSON — what the official
 * exporter sends — and decodes every span it receives, with its resource, so a test reads what
 * actually crossed the wire.
 */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  kind: number;
  startMs: number;
  endMs: number;
  attributes: Record<string, string | number | boolean>;
  resource: Record<string, string | number | boolean>;
  scope: string;
  status: { code?: number; message?: string };
}

export interface OtlpReceiver {
  /** The endpoint to configure: the exporter appends `/v1/traces`. */
  readonly endpoint: string;
  /** `127.0.0.1:<port>`: the `network.allow` entry that admits it. */
  readonly authority: string;
  spans(): ReceivedSpan[];
  /** Requests that were not `POST /v1/traces` with a JSON body (there should be none). */
  strayRequests(): string[];
  /** The headers of every request, in order. */
  requestHeaders(): http.IncomingHttpHeaders[];
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };
type KeyValue = { key: string; value: AnyValue };
type OtlpSpan = {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: KeyValue[];
  status?: { code?: number; message?: string };
};
type OtlpTraces = {
  resourceSpans: Array<{ resource?: { attributes?: KeyValue[] }; scopeSpans: Array<{ scope?: { name?: string }; spans: OtlpSpan[] }> }>;
};

function decodeValue(value: AnyValue): string | number | boolean {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  return '';
}

function decodeAttributes(attributes: KeyValue[] | undefined): Record<string, string | number | boolean> {
  return Object.fromEntries((attributes ?? []).map((entry) => [entry.key, decodeValue(entry.value)]));
}

/** OTLP JSON ids are hex strings (the proto3 JSON mapping the JavaScript exporter uses for traces). */
export function decodeTraces(body: OtlpTraces): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of body.resourceSpans) {
    const resource = decodeAttributes(resourceSpans.resource?.attributes);
    for (const scopeSpans of resourceSpans.scopeSpans) {
      for (const span of scopeSpans.spans) {
        spans.push({
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId || undefined,
          name: span.name,
          kind: span.kind,
          startMs: Number(BigInt(span.startTimeUnixNano) / 1_000_000n),
          endMs: Number(BigInt(span.endTimeUnixNano) / 1_000_000n),
          attributes: decodeAttributes(span.attributes),
          resource,
          scope: scopeSpans.scope?.name ?? '',
          status: span.status ?? {},
        });
      }
    }
  }
  return spans;
}

export async function startOtlpReceiver(options: { host?: string } = {}): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const stray: string[] = [];
  const headers: http.IncomingHttpHeaders[] = [];
  const server = http.createServer((request, response) => {
    headers.push(request.headers);
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const isTraces = request.method === 'POST' && request.url === '/v1/traces' && (request.headers['content-type'] ?? '').includes('application/json');
      if (!isTraces) {
        stray.push(`${request.method} ${request.url} ${request.headers['content-type'] ?? ''}`);
        response.writeHead(404).end();
        return;
      }
      try {
        spans.push(...decodeTraces(JSON.parse(Buffer.concat(chunks).toString()) as OtlpTraces));
      } catch (error) {
        stray.push(`undecodable body: ${String(error)}`);
        response.writeHead(400).end();
        return;
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, options.host ?? '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    authority: `127.0.0.1:${port}`,
    spans: () => [...spans],
    strayRequests: () => [...stray],
    requestHeaders: () => [...headers],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
