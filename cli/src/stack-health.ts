import { type HealthReply, MurmurError, SERVICE_NAMES, type ServiceName, commands } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';

/** One service's answer to its health check, or why there was none. */
export type ServiceAnswer = { service: ServiceName; reply: HealthReply } | { service: ServiceName; error: string };

/**
 * Asks every service of the stack for its health over `bus`, all at once, each bounded by
 * `timeoutMs`: a service that does not answer costs the wait once, never hangs the asker.
 */
export async function askEveryService(bus: Bus, timeoutMs: number): Promise<ServiceAnswer[]> {
  return Promise.all(
    SERVICE_NAMES.map(async (service): Promise<ServiceAnswer> => {
      try {
        return { service, reply: await bus.request(commands.health.at(service), {}, { timeoutMs }) };
      } catch (error) {
        return { service, error: error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error) };
      }
    }),
  );
}
