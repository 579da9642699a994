/**
 * The spans the services open for their own work — a door request, a staging, a launch, an
 * egress decision — as the parts report them.
 *
 * Like the metrics sink, the parts report to whatever the process installed: a service process
 * with `MURMUR_OTEL_ENDPOINT` installs the OpenTelemetry SDK (`@murmur/shared/node` `otel.ts`);
 * everything else keeps the default, which records nothing, allocates nothing and never loads the
 * SDK. A span carries its W3C `traceparent` so that the next hop (a bus message, an HTTP header)
 * can continue the same trace; the default's is `undefined`, and then a caller's own traceparent is
 * passed on unchanged.
 */
export type SpanAttributeValue = string | number | boolean;
export type SpanAttributes = Record<string, SpanAttributeValue | undefined>;

export interface SpanOptions {
  /** The W3C `traceparent` of the span this one continues; absent or malformed starts a new trace. */
  parent?: string | undefined;
  attributes?: SpanAttributes;
  /** `server` for a request answered, `client` for one made; `internal` otherwise. */
  kind?: 'server' | 'client' | 'internal';
  /** When the work began (Unix ms), for a span opened after the fact. */
  startTimeMs?: number;
}

export interface OpenSpan {
  /** This span's own `traceparent`, for the next hop; `undefined` when nothing is recorded. */
  readonly traceparent: string | undefined;
  setAttributes(attributes: SpanAttributes): void;
  /** Marks the span failed, with the message an operator reads. */
  fail(message: string): void;
  end(endTimeMs?: number): void;
}

export interface RuntimeTracing {
  readonly enabled: boolean;
  span(name: string, options?: SpanOptions): OpenSpan;
}

const noSpan: OpenSpan = {
  traceparent: undefined,
  setAttributes: () => {},
  fail: () => {},
  end: () => {},
};

const recordsNothing: RuntimeTracing = { enabled: false, span: () => noSpan };

let sink: RuntimeTracing = recordsNothing;

export function runtimeTracing(): RuntimeTracing {
  return sink;
}

export function installRuntimeTracing(next: RuntimeTracing): void {
  sink = next;
}

/** Runs `work` inside a span named `name`: ended when it settles, failed when it throws. */
export async function traced<T>(name: string, options: SpanOptions, work: (span: OpenSpan) => Promise<T>): Promise<T> {
  const span = sink.span(name, options);
  try {
    return await work(span);
  } catch (error) {
    span.fail(error instanceof Error ? error.message : String(error));
    throw error;
  } finally {
    span.end();
  }
}

/**
 * `<endpoint>/v1/traces` (upstream's path), whatever trailing slashes the endpoint was written
 * with. The path is added to the endpoint's path, not to its end: a collector's `?token=` stays a
 * query, where appending made it `?token=…/v1/traces` and sent the spans to `/`.
 */
export function otelTracesUrl(endpoint: string): string {
  const trimmed = endpoint.trim();
  const base = trimmed.includes('://') ? trimmed : `http://${trimmed}`;
  try {
    const url = new URL(base);
    url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/traces`;
    return url.href;
  } catch {
    return `${base.replace(/\/+$/, '')}/v1/traces`;
  }
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * Whether `value` is a W3C traceparent worth continuing: version `00`-shaped, and neither id all
 * zeros (the spec's invalid values). Anything else is dropped rather than passed on.
 */
export function isTraceparent(value: string | undefined): value is string {
  const match = value === undefined ? null : TRACEPARENT.exec(value.trim().toLowerCase());
  if (!match) return false;
  return match[1] !== 'ff' && !/^0+$/.test(match[2] as string) && !/^0+$/.test(match[3] as string);
}
