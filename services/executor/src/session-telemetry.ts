import { type OpenSpan, type SpanAttributes, otelTracesUrl, shownUrl } from '@murmur/shared';
import type { OtelTracer } from '@murmur/shared/otel';
import type { LookupFunction } from 'node:net';
import { LogFile, type RecordsOutsideSandbox, type TraceRecord } from './records.js';

/**
 * A session's OpenTelemetry spans, upstream's: `capsule.session` for each attempt — from its
 * `session_start` to its `session_end` — with `capsule.inference`, `capsule.tool_call`,
 * `capsule.shell` and `capsule.compaction` under it, and the executor's own `murmur.egress`
 * decisions. Resource `service.name`/`service.version` are the capsule's.
 *
 * The spans are made from the trace records as the executor writes them (the host's arrive over its
 * channel, each as its line; the executor's are its own), so a span never says something `trace.jsonl` does not: a tool call's
 * or shell's span ends at its record and lasts its `duration_ms`; an inference's starts at the
 * host's previous record (the turn's start, the last tool result) — the trace does not time the
 * model call itself. The host has no network: the executor, which has, exports.
 *
 * **Decided, unlike upstream** (which starts a fresh trace per session and only links the
 * caller's span id): an incoming `traceparent` makes the session a child *in the caller's trace*,
 * so one trace runs from the A2A request at the door to the guest's tool call; a session with no
 * caller continues its launch's trace.
 */
export class SessionTelemetry {
  private session: OpenSpan | undefined;
  private sessionStartedAt = 0;
  /** The caller of the task being started, from its `a2a_task_received`. */
  private callerTraceparent: string | undefined;
  private lastHostRecordAt = 0;
  private closed: Promise<void> | undefined;

  private constructor(
    private readonly tracer: OtelTracer,
    private readonly launchTraceparent: string | undefined,
  ) {}

  /**
   * The session's telemetry, or none when there is no collector to send to. `endpoint` is the
   * capsule's `observability.otel_endpoint`, used only when its own network rules admit it: the
   * spans carry what the capsule chose (tool names, the first 200 characters of each shell
   * command), so an endpoint outside `network.allow` would be a way out of the sandbox that the
   * policy never judged. The executor's `MURMUR_OTEL_ENDPOINT` (the operator's collector) takes
   * the spans then, or whenever the capsule names none.
   */
  static async open(options: {
    capsule: { name: string; version: string };
    endpoint: string | undefined;
    /** The capsule's policy on its collector's URL: undefined when it may send there, else why not. */
    endpointRefusal: (url: string) => { code: string; reason: string } | undefined;
    /** How the capsule's own endpoint is resolved: the session's vetted lookup (`egress-address.ts`). */
    capsuleLookup: LookupFunction;
    operatorEndpoint: string | undefined;
    sessionDir: string;
    recordsOutside: RecordsOutsideSandbox;
    launchTraceparent: string | undefined;
  }): Promise<SessionTelemetry | undefined> {
    const log = new LazyLog(options.sessionDir, options.recordsOutside);
    let endpoint = options.endpoint?.trim() || undefined;
    const refusal = endpoint ? options.endpointRefusal(otelTracesUrl(endpoint)) : undefined;
    if (endpoint && refusal) {
      const elsewhere = options.operatorEndpoint ? " (the executor's collector gets them)" : '';
      // Said as the policy refused it: a collector the rules admit may still be one of the runtime's
      // own endpoints, and adding it to network.allow again would change nothing.
      log.line(
        refusal.code === 'HTTP-request-denied'
          ? `observability.otel_endpoint '${shownUrl(endpoint)}' is not admitted by capabilities.network.allow: this session's spans are not sent there${elsewhere}; add it to network.allow to export`
          : `observability.otel_endpoint '${shownUrl(endpoint)}' is refused: ${refusal.reason}; this session's spans are not sent there${elsewhere}`,
      );
      endpoint = undefined;
    }
    // This log is in the session's directory, which the capsule reads: the operator's collector
    // is never named there, only the capsule's own.
    const collectorLabel = endpoint ? undefined : "the executor's collector (MURMUR_OTEL_ENDPOINT)";
    endpoint ??= options.operatorEndpoint?.trim() || undefined;
    if (!endpoint) return undefined;
    const { openOtelTracer } = await import('@murmur/shared/otel');
    const tracer = openOtelTracer({
      endpoint,
      serviceName: options.capsule.name,
      serviceVersion: options.capsule.version,
      scope: 'murmur-capsule-runtime',
      onExportError: (message) => log.line(message),
      // The capsule's collector is reached as its requests are; the operator's is the operator's.
      ...(collectorLabel ? { collectorLabel } : { lookup: options.capsuleLookup, capsuleCollector: true }),
    });
    return new SessionTelemetry(tracer, options.launchTraceparent);
  }

  /** What an outgoing `message/send` carries, and a delegated child's launch continues. */
  get traceparent(): string | undefined {
    return this.session?.traceparent ?? this.launchTraceparent;
  }

  /** A record the capsule host wrote. */
  observeHost(record: TraceRecord): void {
    this.observe(record);
    this.lastHostRecordAt = record.timestamp;
  }

  /** A record the executor wrote for the session (its fallback `session_end`). */
  observe(record: TraceRecord): void {
    const at = record.timestamp;
    switch (record.event_type) {
      case 'a2a_task_received':
        this.callerTraceparent = text(record.traceparent_from_caller);
        return;
      case 'session_start':
        this.session?.end(at);
        this.sessionStartedAt = at;
        this.session = this.tracer.span('capsule.session', {
          parent: this.callerTraceparent ?? this.launchTraceparent,
          startTimeMs: at,
          attributes: { 'murmur.session_id': record.session_id },
        });
        return;
      case 'inference':
        this.child('capsule.inference', Math.max(this.lastHostRecordAt, this.sessionStartedAt), at, {
          turn: number(record.turn),
          input_tokens: number(record.input_tokens),
          output_tokens: number(record.output_tokens),
          decision: text(record.decision),
          tool_name: text(record.tool_name),
          origin: text(record.origin),
          model: text(record.model),
        });
        return;
      case 'tool_call':
        this.child('capsule.tool_call', at - (number(record.duration_ms) ?? 0), at, {
          tool_name: text(record.tool_name),
          input_bytes: number(record.input_bytes),
          output_bytes: number(record.output_bytes),
          duration_ms: number(record.duration_ms),
          status: text(record.status),
        });
        return;
      case 'shell':
        this.child('capsule.shell', at - (number(record.duration_ms) ?? 0), at, {
          // 200 characters, not UTF-16 units: a cut through a pair left a lone surrogate in the attribute.
          command: firstCharacters(text(record.command), 200),
          exit_code: number(record.exit_code),
          duration_ms: number(record.duration_ms),
        });
        return;
      case 'compaction':
        // Compaction is one step of a turn: upstream models it as a 1 ms span.
        this.child('capsule.compaction', at - 1, at, { tokens_before: number(record.tokens_before), tokens_after: number(record.tokens_after) });
        return;
      case 'session_end':
        this.endSession(text(record.exit_status) ?? 'failed', at);
        return;
      case 'task_end':
        // The caller parents every attempt of its task, a reopened one too (each its own
        // session_start … session_end), and no later task: forgotten when the task ends.
        this.callerTraceparent = undefined;
        return;
    }
  }

  /** One egress decision of the executor's, in the session's trace. */
  egress(attributes: { kind: string; grant: string; target: string; decision: string; rule?: string | undefined }, startedAtMs: number): void {
    const span = this.tracer.span('murmur.egress', {
      kind: 'client',
      parent: this.traceparent,
      startTimeMs: startedAtMs,
      attributes: {
        'murmur.egress.kind': attributes.kind,
        'murmur.egress.grant': attributes.grant,
        'murmur.egress.target': attributes.target,
        'murmur.egress.decision': attributes.decision,
        'murmur.egress.rule': attributes.rule,
      },
    });
    if (attributes.decision !== 'allowed') span.fail(`egress ${attributes.decision}: ${attributes.target}`);
    span.end();
  }

  /**
   * Ends what is still open (a host that died before its `session_end`: `failed`, as upstream's
   * fallback) and exports the rest, waiting at most `timeoutMs`; a second call waits for the first.
   */
  close(timeoutMs: number): Promise<void> {
    if (this.session) this.endSession('failed', Date.now());
    this.closed ??= this.tracer.shutdown(timeoutMs);
    return this.closed;
  }

  private endSession(exitStatus: string, at: number): void {
    const session = this.session;
    if (!session) return;
    this.session = undefined;
    session.setAttributes({ exit_status: exitStatus });
    if (exitStatus !== 'ok') session.fail(`the session ended ${exitStatus}`);
    session.end(at);
  }

  private child(name: string, startMs: number, endMs: number, attributes: SpanAttributes): void {
    const span = this.tracer.span(name, { parent: this.traceparent, startTimeMs: Math.min(startMs, endMs), attributes });
    if (attributes.status === 'error') span.fail(`${name} ended in error`);
    span.end(endMs);
  }
}

/** `logs/otel.log`, made only when there is something to say. */
class LazyLog {
  private file: LogFile | undefined;
  constructor(
    private readonly sessionDir: string,
    private readonly outside: RecordsOutsideSandbox,
  ) {}
  line(message: string): void {
    this.file ??= new LogFile(this.sessionDir, 'otel.log', this.outside);
    this.file.line(`[${new Date().toISOString()}] ${message}`);
  }
}

/** The first `count` characters of `value` (code points, never half of a surrogate pair). */
function firstCharacters(value: string | undefined, count: number): string | undefined {
  if (value === undefined || value.length <= count) return value;
  return Array.from(value).slice(0, count).join('');
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function number(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}
