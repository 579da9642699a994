import type { Bus, Subscription } from './bus/bus.js';
import type { HealthReply, ServiceName } from './events.js';
import { commands } from './topics.js';

export interface ServiceIdentity {
  service: ServiceName;
  instanceId: string;
  /** The HTTP port the service listens on, or null for a bus-only service. */
  httpPort: number | null;
  startedAt: Date;
}

export function healthOf(identity: ServiceIdentity, bus: Bus): HealthReply {
  return {
    service: identity.service,
    instance_id: identity.instanceId,
    status: 'ok',
    bus: bus.description,
    http_port: identity.httpPort,
    pid: process.pid,
    started_at: identity.startedAt.toISOString(),
    uptime_ms: Date.now() - identity.startedAt.getTime(),
  };
}

/** Answers `service.<name>.health` on the bus: the check a deployment (or `mur`) asks a service. */
export function serveHealth(bus: Bus, identity: ServiceIdentity): Subscription {
  return bus.serve(commands.health.at(identity.service), () => healthOf(identity, bus));
}
