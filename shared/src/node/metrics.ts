import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { RuntimeMetrics } from '../metrics-sink.js';

/**
 * What a Murmur process tells Prometheus (`GET /metrics` on every service): prom-client's own
 * process metrics, and the runtime's — each counted where it happens, in whichever service that
 * is. One registry per process: a service process serves it; in `mur`'s one process every
 * service counts into the same one, which nothing serves.
 *
 * Labels are kept to bounded sets: outcomes, states, kinds, a bus topic's name (never a subject
 * with a session id in it), and an egress rule as the manifest wrote it.
 */
export const metricsRegistry = new Registry();
collectDefaultMetrics({ register: metricsRegistry });

const registers = [metricsRegistry];

const metrics = {
  launches: new Counter({
    name: 'murmur_launches_total',
    help: 'Launch requests an executor answered, by outcome (launched, refused).',
    labelNames: ['outcome'] as const,
    registers,
  }),
  sessionsLive: new Gauge({ name: 'murmur_sessions_live', help: 'Sessions running on this executor.', registers }),
  tasks: new Counter({ name: 'murmur_tasks_total', help: 'Tasks that ended, by final state.', labelNames: ['state'] as const, registers }),
  taskSeconds: new Histogram({
    name: 'murmur_task_duration_seconds',
    help: 'From a task being accepted to its final state, by final state.',
    labelNames: ['state'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900],
    registers,
  }),
  egress: new Counter({
    name: 'murmur_egress_decisions_total',
    help: "Egress decisions, by kind (http, a2a, tcp, dns), decision, and the network.allow rule that admitted it ('(none)' when nothing did).",
    labelNames: ['kind', 'decision', 'rule'] as const,
    registers,
  }),
  stageComponents: new Counter({
    name: 'murmur_stage_components_total',
    help: 'Components a stager resolved, by whether the transpile cache already held them (hit, miss).',
    labelNames: ['cache'] as const,
    registers,
  }),
  busRequestSeconds: new Histogram({
    name: 'murmur_bus_request_duration_seconds',
    help: 'Bus requests this process made, by topic and outcome (ok, error).',
    labelNames: ['topic', 'outcome'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  }),
  completions: new Counter({
    name: 'murmur_completions_total',
    help: "Delegated children's completions posted to their parents, by whether they were delivered (true, false).",
    labelNames: ['delivered'] as const,
    registers,
  }),
};

/** The registry in Prometheus' text format, with its content type. */
export async function metricsText(): Promise<{ contentType: string; body: string }> {
  return { contentType: metricsRegistry.contentType, body: await metricsRegistry.metrics() };
}

/**
 * The distinct `rule` labels the egress counter takes, each cut to 200 characters: the rules come
 * from manifests (one may list thousands), every label is a series kept for the process's life,
 * and one session could light them all. Rules past the bound are counted as `(other)`.
 */
export const EGRESS_RULES_LABELLED = 256;
const labelledRules = new Set<string>();

function ruleLabel(rule: string | undefined): string {
  if (rule === undefined) return '(none)';
  const label = rule.slice(0, 200);
  if (labelledRules.has(label)) return label;
  if (labelledRules.size >= EGRESS_RULES_LABELLED) return '(other)';
  labelledRules.add(label);
  return label;
}

/** The runtime's reports, counted into this process's registry. */
export const prometheusMetrics: RuntimeMetrics = {
  launch: (outcome) => metrics.launches.inc({ outcome }),
  sessionStarted: () => metrics.sessionsLive.inc(),
  sessionEnded: () => metrics.sessionsLive.dec(),
  taskEnded: (state, seconds) => {
    metrics.tasks.inc({ state });
    metrics.taskSeconds.observe({ state }, seconds);
  },
  egress: (kind, decision, rule) => metrics.egress.inc({ kind, decision, rule: ruleLabel(rule) }),
  stageComponent: (cacheHit) => metrics.stageComponents.inc({ cache: cacheHit ? 'hit' : 'miss' }),
  busRequest: (topic, seconds, ok) => metrics.busRequestSeconds.observe({ topic, outcome: ok ? 'ok' : 'error' }, seconds),
  completion: (delivered) => metrics.completions.inc({ delivered: String(delivered) }),
};
