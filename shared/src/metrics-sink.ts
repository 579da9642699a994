/**
 * What the runtime counts, as its parts report it: launches, live sessions, tasks and their
 * latency, egress decisions, the stager's cache, bus requests and delegated completions.
 *
 * The parts report to whatever sink the process installed. A service process installs
 * Prometheus (`@murmur/shared/service`, served on `GET /metrics`); `mur`, which runs the same
 * parts in one process and serves no metrics, keeps the default that counts nothing, and never
 * loads prom-client (it costs `mur run` ~70 ms of start-up).
 */
export interface RuntimeMetrics {
  launch(outcome: 'launched' | 'refused'): void;
  sessionStarted(): void;
  sessionEnded(): void;
  taskEnded(state: string, seconds: number): void;
  egress(kind: string, decision: string, rule: string | undefined): void;
  stageComponent(cacheHit: boolean): void;
  busRequest(topic: string, seconds: number, ok: boolean): void;
  completion(delivered: boolean): void;
}

const countsNothing: RuntimeMetrics = {
  launch: () => {},
  sessionStarted: () => {},
  sessionEnded: () => {},
  taskEnded: () => {},
  egress: () => {},
  stageComponent: () => {},
  busRequest: () => {},
  completion: () => {},
};

let sink: RuntimeMetrics = countsNothing;

export function runtimeMetrics(): RuntimeMetrics {
  return sink;
}

export function installRuntimeMetrics(next: RuntimeMetrics): void {
  sink = next;
}
