import { MurmurError } from '@murmur/shared';
import { type Output, terminalSafe } from '../output.js';
import { OUTPUT_PENDING_MAX_BYTES, OutputRelay } from '../output-relay.js';
import { busClosedError, openRuntime } from '../runtime.js';

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
  let relay: OutputRelay | undefined;
  try {
    // The bus cannot be told to wait: for a stdout read slowly, what is past the relay's bound is dropped and said.
    relay = new OutputRelay(process.stdout, 'stdout', output.err, OUTPUT_PENDING_MAX_BYTES, "the bus's messages");
    const shown = relay;
    subscription = runtime.bus.tap(pattern, (subject, payload) => {
      const time = new Date().toISOString();
      const line = options.json ? JSON.stringify({ time, subject, payload }) : `${time} ${subject} ${JSON.stringify(payload)}`;
      shown.write(`${process.stdout.isTTY ? terminalSafe(line) : line}\n`);
    });
    await runtime.bus.flush();
  } catch (error) {
    // A pattern the bus refuses: the connection goes too, or mur would wait on it for ever.
    await runtime.close();
    throw error;
  }
  output.err(`listening on '${pattern}' at ${runtime.bus.description} (ctrl-c to stop)`);
  const code = await new Promise<number>((resolve) => {
    process.once('SIGINT', () => resolve(0));
    process.once('SIGTERM', () => resolve(0));
    // Silence from a bus that is gone is not silence from the stack: say when it goes, and end
    // when it will never come back (the connection refused on reconnecting).
    runtime.bus.onConnectionChange((state, reason) => {
      if (state === 'closed') {
        output.err(busClosedError(runtime, reason, 'check MURMUR_NATS_URL and its token, then run mur events again').format());
        resolve(1);
        return;
      }
      output.err(
        state === 'disconnected'
          ? `mur: lost the bus at ${runtime.bus.description}; waiting for it to come back (nothing passes meanwhile)`
          : `mur: the bus is back; listening on '${pattern}' again`,
      );
    });
  });
  subscription.unsubscribe();
  relay?.finish();
  await runtime.close();
  return code;
}
