import type { Bus } from '@murmur/shared/bus';
import type { Log } from '@murmur/shared';

/**
 * The executor runs capsule hosts in sandboxes and is the one policy point for everything that
 * leaves them. This issue wires it onto the bus; launching comes with the capsule host.
 */
export interface ExecutorService {
  close(): Promise<void>;
}

export function startExecutorService(_options: { bus: Bus; log: Log }): ExecutorService {
  return { close: async () => {} };
}
