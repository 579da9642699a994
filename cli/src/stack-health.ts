import { type HealthReply, MurmurError, SERVICE_NAMES, type ServiceName, commands } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';

/**
 * One instance's answer to its health check; an answer mur refused (an error, a reply that breaks
 * the contract: `refused`); or why a service had none.
 */
export type ServiceAnswer = { service: ServiceName; reply: HealthReply } | { service: ServiceName; error: string; refused?: true };

/**
 * How long the census listens for another instance of a service after the last one answered:
 * instances on one bus answer within milliseconds of each other, even busy, and every
 * `mur health` waits this long once.
 */
const NEXT_INSTANCE_QUIET_MS = 500;

/**
 * Asks every service of the stack for its health over `bus`, all at once, and hears every
 * instance of each (executors are scaled, and so may the rest be) that answers within
 * `NEXT_INSTANCE_QUIET_MS` of the one before, in the order of their ids; an instance whose answer
 * is refused (an error, a reply that breaks the contract) is an answer saying so. A service none
 * of whose instances answers within `timeoutMs` is one answer saying that: the wait is paid once,
 * and never hangs the asker.
 */
export async function askEveryService(bus: Bus, timeoutMs: number): Promise<ServiceAnswer[]> {
  const answers = await Promise.all(
    SERVICE_NAMES.map(async (service): Promise<ServiceAnswer[]> => {
      try {
        const topic = commands.health.at(service);
        const { replies, refused } = await bus.gather(topic, {}, { timeoutMs, quietMs: Math.min(NEXT_INSTANCE_QUIET_MS, timeoutMs) });
        const answered: ServiceAnswer[] = [
          ...replies.sort((left, right) => left.instance_id.localeCompare(right.instance_id)).map((reply) => ({ service, reply })),
          ...refused.map((error) => ({ service, error: `${error.code}: ${error.message}`, refused: true as const })),
        ];
        if (answered.length > 0) return answered;
        return [{ service, error: `E-BUS-003: no instance answers '${topic.subject}' on ${bus.description} within ${timeoutMs} ms` }];
      } catch (error) {
        return [{ service, error: error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error) }];
      }
    }),
  );
  return answers.flat();
}
