import { type HealthReply, MurmurError, SERVICE_NAMES, type ServiceName, commands } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';

/** One instance's answer to its health check, or why a service had none. */
export type ServiceAnswer = { service: ServiceName; reply: HealthReply } | { service: ServiceName; error: string };

/**
 * How long the census listens for more instances of a service after one has answered: instances
 * on one bus answer within milliseconds of each other, and every `mur health` waits this long.
 */
const NEXT_INSTANCE_QUIET_MS = 250;

/**
 * Asks every service of the stack for its health over `bus`, all at once, and hears every
 * instance of each (executors are scaled, and so may the rest be), in the order of their ids. A
 * service none of whose instances answers within `timeoutMs` is one answer saying so: the wait is
 * paid once, and never hangs the asker.
 */
export async function askEveryService(bus: Bus, timeoutMs: number): Promise<ServiceAnswer[]> {
  const answers = await Promise.all(
    SERVICE_NAMES.map(async (service): Promise<ServiceAnswer[]> => {
      try {
        const topic = commands.health.at(service);
        const replies = await bus.gather(topic, {}, { timeoutMs, quietMs: Math.min(NEXT_INSTANCE_QUIET_MS, timeoutMs) });
        if (replies.length === 0) return [{ service, error: `E-BUS-004: no service answers '${topic.subject}' on ${bus.description} within ${timeoutMs} ms` }];
        return replies.sort((left, right) => left.instance_id.localeCompare(right.instance_id)).map((reply) => ({ service, reply }));
      } catch (error) {
        return [{ service, error: error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error) }];
      }
    }),
  );
  return answers.flat();
}
