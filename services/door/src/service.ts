import type { Bus } from '@murmur/shared/bus';
import type { Log } from '@murmur/shared';
import { Hono } from 'hono';

/**
 * The door: the A2A edge of every session, stateless, forwarding over the bus. This issue wires
 * it onto the bus and HTTP; the agent card and JSON-RPC come with the capsule host that answers them.
 */
export interface DoorService {
  readonly http: Hono;
  close(): Promise<void>;
}

export function startDoorService(_options: { bus: Bus; log: Log }): DoorService {
  return { http: new Hono(), close: async () => {} };
}
