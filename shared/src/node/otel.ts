import { type Context, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, defaultTextMapGetter, trace } from '@opentelemetry/api';
import { type ExportResult, ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { type OpenSpan, type RuntimeTracing, type SpanAttributes, type SpanOptions, isTraceparent, otelTracesUrl } from '../tracing-sink.js';
import type { LookupFunction } from 'node:net';
import { shownUrl } from '../shown-url.js';

/**
 * The OpenTelemetry SDK behind the runtime's tracing sink: spans batched and exported as OTLP/HTTP
 * JSON to `<endpoint>/v1/traces` by the official exporter.
 *
 * Export is never on a caller's path: a span's end only queues it, and a batch goes out at most
 * every 200 ms. A collector that refuses, times out or is absent costs a failed export in the
 * background, reported to `onExportError` (a session's `logs/otel.log`, a service's log) and
 * nothing else; a full queue drops spans rather than holding memory or callers.
 */
export interface OtelTracerOptions {
  /** The collector's base URL; `/v1/traces` is appended as upstream does. */
  endpoint: string;
  /** `service.name` of every span: the capsule's name, or `murmur-<service>`. */
  serviceName: string;
  serviceVersion: string;
  /** The instrumentation scope's name. */
  scope: string;
  onExportError: (message: string) => void;
  /**
   * How failures name the collector when its address is not for whoever reads them (default: the
   * URL). Given, a failure is told by its code alone: a transport's message names the address.
   */
  collectorLabel?: string;
  /**
   * How the collector's name is resolved, for a collector the capsule named: the egress policy's
   * vetted lookup, so its spans reach only where its network rules could (a capsule's own name
   * leading to the executor's loopback is refused as its requests are).
   */
  lookup?: LookupFunction;
  /**
   * A collector the capsule named: its exporter is made without the process's
   * `OTEL_EXPORTER_OTLP_*` settings, which the OpenTelemetry exporter otherwise reads as it is
   * made and merges into every exporter whatever its URL — the operator's collector headers
   * (an API key) and client certificate would go to wherever a manifest pointed.
   */
  capsuleCollector?: boolean;
}

export interface OtelTracer extends RuntimeTracing {
  readonly url: string;
  /** Exports what is queued, waiting at most `timeoutMs`. */
  flush(timeoutMs: number): Promise<void>;
  /** Exports what is queued and stops, waiting at most `timeoutMs`. */
  shutdown(timeoutMs: number): Promise<void>;
}

/**
 * One export, its retries included, gives up after this long. Collectors run beside what they
 * watch (a sidecar, the stack's network) and answer in milliseconds; a short bound is what lets a
 * dead one cost a process's exit at most a second or so, and lets its failure be reported before.
 */
const EXPORT_TIMEOUT_MS = 1_000;
/** The longest attribute value a span keeps; longer ones are cut. */
export const ATTRIBUTE_VALUE_CHARACTERS = 1024;
const propagator = new W3CTraceContextPropagator();

export function openOtelTracer(options: OtelTracerOptions): OtelTracer {
  const url = otelTracesUrl(options.endpoint);
  const exporter = new ReportingExporter(
    // No connection is kept between exports: a tracer is opened for each session, and a kept one
    // outlived its session (an idle socket per ended session, for as long as the collector kept it).
    (options.capsuleCollector ? withoutExporterEnvironment : (make: () => OTLPTraceExporter) => make())(
      () =>
        new OTLPTraceExporter({
          url,
          timeoutMillis: EXPORT_TIMEOUT_MS,
          httpAgentOptions: { keepAlive: false, ...(options.lookup ? { lookup: options.lookup } : {}) },
        }),
    ),
    // Where failures are read (a session's own `logs/otel.log`) a collector's user or `?token=` must not be.
    options.collectorLabel ?? shownUrl(url),
    options.collectorLabel === undefined ? describeFailure : failureCode,
    options.onExportError,
  );
  const provider = new BasicTracerProvider({
    // Attribute values come from capsule hosts (a tool's name, a model's): a megabyte-long one
    // made every span a megabyte, held in the queue and sent on.
    spanLimits: { attributeValueLengthLimit: ATTRIBUTE_VALUE_CHARACTERS, attributeCountLimit: 64 },
    resource: resourceFromAttributes({ 'service.name': options.serviceName, 'service.version': options.serviceVersion }),
    spanProcessors: [
      new BatchSpanProcessor(exporter, { scheduledDelayMillis: 200, maxExportBatchSize: 512, maxQueueSize: 8192, exportTimeoutMillis: EXPORT_TIMEOUT_MS }),
    ],
  });
  const tracer = provider.getTracer(options.scope, options.serviceVersion);
  let open = true;
  return {
    enabled: true,
    url,
    span(name: string, spanOptions: SpanOptions = {}): OpenSpan {
      const span = tracer.startSpan(
        name,
        {
          kind: spanOptions.kind === 'server' ? SpanKind.SERVER : spanOptions.kind === 'client' ? SpanKind.CLIENT : SpanKind.INTERNAL,
          attributes: definedAttributes(spanOptions.attributes ?? {}),
          // A time no clock reads (a host's `1e309`) would fail the encoding of its whole batch.
          ...(spanOptions.startTimeMs !== undefined && Number.isFinite(spanOptions.startTimeMs) ? { startTime: spanOptions.startTimeMs } : {}),
        },
        parentContext(spanOptions.parent),
      );
      return openSpan(span);
    },
    flush: (timeoutMs) => (open ? bounded(provider.forceFlush(), timeoutMs) : Promise.resolve()),
    shutdown: (timeoutMs) => {
      if (!open) return Promise.resolve();
      open = false;
      return bounded(provider.shutdown(), timeoutMs);
    },
  };
}

/**
 * Makes `make()`'s exporter with no `OTEL_EXPORTER_OTLP_*` in the environment, restored at once:
 * the exporter reads them only while it is made, synchronously, so nothing else sees them gone.
 */
function withoutExporterEnvironment<T>(make: () => T): T {
  const saved = Object.entries(process.env).filter(([name]) => name.startsWith('OTEL_EXPORTER_OTLP_'));
  for (const [name] of saved) delete process.env[name];
  try {
    return make();
  } finally {
    for (const [name, value] of saved) process.env[name] = value;
  }
}

function openSpan(span: Span): OpenSpan {
  const context = span.spanContext();
  const traceparent = `00-${context.traceId}-${context.spanId}-${context.traceFlags.toString(16).padStart(2, '0')}`;
  return {
    traceparent,
    setAttributes: (attributes) => span.setAttributes(definedAttributes(attributes)),
    // A status message is no attribute, and the span limits do not cut it: it can carry a host's words.
    fail: (message) => span.setStatus({ code: SpanStatusCode.ERROR, message: message.slice(0, ATTRIBUTE_VALUE_CHARACTERS) }),
    end: (endTimeMs) => span.end(endTimeMs !== undefined && Number.isFinite(endTimeMs) ? endTimeMs : undefined),
  };
}

/** The last parent asked for, parsed: a session's children all name the same one, one after another. */
let lastParent: { traceparent: string; context: Context } | undefined;

function parentContext(traceparent: string | undefined): Context {
  if (traceparent === undefined) return ROOT_CONTEXT;
  if (lastParent?.traceparent === traceparent) return lastParent.context;
  let context = ROOT_CONTEXT;
  if (isTraceparent(traceparent)) {
    const extracted = propagator.extract(ROOT_CONTEXT, { traceparent: traceparent.trim().toLowerCase() }, defaultTextMapGetter);
    if (trace.getSpanContext(extracted)) context = extracted;
  }
  lastParent = { traceparent, context };
  return context;
}

function definedAttributes(attributes: SpanAttributes): Record<string, string | number | boolean> {
  const defined: Record<string, string | number | boolean> = {};
  for (const [key, value] of Object.entries(attributes)) if (value !== undefined) defined[key] = value;
  return defined;
}

/** Waits for `work`, or `timeoutMs`, whichever is first; a failure has already been reported. */
async function bounded(work: Promise<unknown>, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    work.catch(() => undefined),
    new Promise((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    }),
  ]);
  if (timer) clearTimeout(timer);
}

/** The official exporter, with every failed export reported in words an operator can act on. */
class ReportingExporter implements SpanExporter {
  constructor(
    private readonly inner: SpanExporter,
    private readonly collector: string,
    private readonly describe: (error: Error | undefined) => string,
    private readonly report: (message: string) => void,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    const finish = (result: ExportResult): void => {
      if (result.code !== ExportResultCode.SUCCESS)
        this.report(`could not export ${spans.length} span(s) to ${this.collector}: ${this.describe(result.error)}`);
      done(result);
    };
    try {
      this.inner.export(spans, finish);
    } catch (error) {
      // A batch that cannot even be encoded (a time no clock reads) is lost: said, not silent.
      finish({ code: ExportResultCode.FAILED, error: error instanceof Error ? error : new Error(String(error)) });
    }
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

function codeOf(error: Error): string | number | undefined {
  return (error as { code?: string | number }).code ?? (error as { cause?: { code?: string } }).cause?.code;
}

function describeFailure(error: Error | undefined): string {
  if (!error) return 'the export failed';
  const code = codeOf(error);
  return code !== undefined && !error.message.includes(String(code)) ? `${error.message} (${code})` : error.message;
}

/** The failure's code (ECONNREFUSED, an HTTP status), never its message. */
function failureCode(error: Error | undefined): string {
  const code = error ? codeOf(error) : undefined;
  return code === undefined ? 'the export failed' : `the export failed (${code})`;
}
