import { MurmurError } from '@murmur/shared';
import type { Output } from '../output.js';
import { openRuntime } from '../runtime.js';

/**
 * `mur events [pattern]`: every message on the stack's bus, as it passes. Monitoring is
 * subscribing; nothing is stored here. Runs until interrupted.
 */
export async function eventsCommand(pattern: string, options: { json?: boolean }, output: Output): Promise<number> {
  if (!process.env.MURMUR_NATS_URL?.trim()) {
    throw new MurmurError('E-BUS-005', 'mur events tails the stack’s bus, and MURMUR_NATS_URL is not set', {
      hint: 'export MURMUR_NATS_URL=nats://127.0.0.1:4222; without it every service runs inside the mur that started it',
    });
  }
  const runtime = await openRuntime();
  let subscription: ReturnType<typeof runtime.bus.tap>;
  try {
    subscription = runtime.bus.tap(pattern, (subject, payload) => {
      const time = new Date().toISOString();
      output.out(options.json ? JSON.stringify({ time, subject, payload }) : `${time} ${subject} ${JSON.stringify(payload)}`);
    });
    await runtime.bus.flush();
  } catch (error) {
    // A pattern the bus refuses: the connection goes too, or mur would wait on it for ever.
    await runtime.close();
    throw error;
  }
  output.err(`listening on '${pattern}' at ${runtime.bus.description} (ctrl-c to stop)`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  subscription.unsubscribe();
  await runtime.close();
  return 0;
}
