import { type EgressDecision, type Log, runtimeMetrics, topics } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import type { TraceWriter } from './records.js';
import type { EgressRecord } from './sandbox-network.js';
import type { SessionTelemetry } from './session-telemetry.js';

/**
 * Network decisions recorded in the trace, of a sealed sandbox and of the host's requests each;
 * past this, one line says more were not.
 */
const NETWORK_RECORDS_KEPT = 1_000;
/** How much of an egress target is recorded (a host name, or what the host sent that is not a URL). */
const EGRESS_TARGET_KEPT = 512;
/** A decision's reason names the target: cut so a long one cannot make a long line either. */
const EGRESS_REASON_KEPT = 2_048;

export interface EgressRecordsOptions {
  sessionId: string;
  executorId: string;
  bus: Bus;
  log: Log;
  /** The session's trace and spans, once its launch has opened them. */
  trace(): TraceWriter;
  telemetry(): SessionTelemetry | undefined;
}

/**
 * Every decision about a way out of one session's sandbox, allowed or not: a metric always, and,
 * up to a bound per kind, a trace line (`egress`), a span event and an `egress.decision` on the
 * bus. The guest only sees a WASI error code, so this is where an operator reads what was refused
 * and why. The host decides how many decisions there are (50 000 denied checks were as many trace
 * lines and bus messages), so past the bound only the metric counts.
 */
export class EgressRecords {
  /** The host's requests' decisions recorded so far (`request`), and the sealed sandbox's own (`network`). */
  private requests = 0;
  private connections = 0;

  constructor(private readonly options: EgressRecordsOptions) {}

  /**
   * A request the host made to leave (`wasi:http`, an A2A send): its target recorded as scheme and
   * authority, or as given, up to a length, when it is not a URL (the host chose it).
   */
  request(kind: 'http' | 'a2a', grant: string, url: string, outcome: Record<string, unknown>, rule?: string, startedAt = Date.now()): void {
    runtimeMetrics().egress(kind, String(outcome.decision), rule);
    this.requests += 1;
    if (this.pastBound(this.requests, kind, grant, 'egress decisions of the capsule host')) return;
    let target = url.slice(0, EGRESS_TARGET_KEPT);
    /** What the bus is told: never a path or a query, even of what is not a URL. */
    let announced = (url.split(/[/?#]/, 1)[0] ?? '').slice(0, EGRESS_TARGET_KEPT);
    try {
      const parsed = new URL(url.includes('://') ? url : `http://${url}`);
      // A host name may be as long as the guest likes (a denied check needs no rule): cut as well.
      target = `${parsed.protocol}//${parsed.host}`.slice(0, EGRESS_TARGET_KEPT);
      announced = target;
    } catch {
      // not a URL: recorded as given
    }
    const reason = typeof outcome.reason === 'string' ? { reason: outcome.reason.slice(0, EGRESS_REASON_KEPT) } : {};
    // The rule that admitted it, as the span and the bus say it: a span says nothing the trace does not.
    this.options.trace().write('egress', { kind, grant, target, ...outcome, ...reason, ...(rule ? { rule } : {}) });
    this.options.telemetry()?.egress({ kind, grant, target: announced, decision: String(outcome.decision), rule }, startedAt);
    const decision = outcome.decision === 'allowed' || outcome.decision === 'denied' ? outcome.decision : 'failed';
    this.announce({
      kind,
      grant,
      target: announced,
      decision,
      rule: rule ?? null,
      ...(typeof outcome.code === 'string' ? { code: outcome.code } : {}),
    });
  }

  /** A sealed sandbox's connection or lookup, decided by the executor's own network (`sandbox-network.ts`). */
  network(record: EgressRecord): void {
    runtimeMetrics().egress(record.kind, record.decision, record.rule);
    this.connections += 1;
    if (this.pastBound(this.connections, record.kind, 'sandbox', 'network decisions')) return;
    this.options.trace().write('egress', {
      kind: record.kind,
      grant: 'sandbox',
      target: record.target,
      decision: record.decision,
      ...(record.reason ? { reason: record.reason } : {}),
      ...(record.rule ? { rule: record.rule } : {}),
    });
    this.options.telemetry()?.egress({ kind: record.kind, grant: 'sandbox', target: record.target, decision: record.decision, rule: record.rule }, Date.now());
    this.announce({ kind: record.kind, grant: 'sandbox', target: record.target, decision: record.decision, rule: record.rule ?? null });
  }

  /**
   * Whether the `count`th decision of its kind is past what a session's trace keeps
   * (`NETWORK_RECORDS_KEPT`); the first one past it is recorded as the line that says so.
   */
  private pastBound(count: number, kind: string, grant: string, decisions: string): boolean {
    if (count <= NETWORK_RECORDS_KEPT) return false;
    if (count === NETWORK_RECORDS_KEPT + 1)
      this.options.trace().write('egress', {
        kind,
        grant,
        decision: 'suppressed',
        reason: `more than ${NETWORK_RECORDS_KEPT} ${decisions} in this session; later ones are not recorded`,
      });
    return true;
  }

  /** One decision on the bus (`egress.decision`): target as scheme and authority, never a path or query. */
  private announce(decision: Omit<EgressDecision, 'session_id' | 'executor_id' | 'at'>): void {
    const { bus, log, sessionId, executorId } = this.options;
    try {
      bus.publish(topics.egressDecision, { session_id: sessionId, executor_id: executorId, ...decision, at: new Date().toISOString() });
    } catch (error) {
      log.warn({ session_id: sessionId, err: error }, 'could not announce an egress decision');
    }
  }
}
