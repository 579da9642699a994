import { ALL_EVENT_TOPICS, MurmurError } from '@murmur/shared';
import { patternWithin, refuseInvalidPattern } from '@murmur/shared/bus';
import { type Output, UsageError, terminalSafe } from '../output.js';
import { OUTPUT_PENDING_MAX_BYTES, OutputRelay } from '../output-relay.js';
import { busClosedError, openRuntime } from '../runtime.js';

/**
 * `mur events [pattern]`: the stack's events, as they pass. Monitoring is subscribing; nothing is
 * stored here. Runs until interrupted.
 *
 * Only the event subjects the pattern covers are subscribed to, never the services' requests
 * (`session.<id>.stop`, `launch`, …): NATS counts any subscriber of a request's subject as one
 * that may answer, so a tail of `session.>` turned every "no such session" into a timeout — a door
 * asked for an ended session's card answered 504 after 15 s, `mur stop` waited 5 s — and a request
 * carries what is not for a monitor (a launch, its capsule's environment).
 */
export async function eventsCommand(pattern: string, options: { json?: boolean }, output: Output): Promise<number> {
  if (!process.env.MURMUR_NATS_URL?.trim()) {
    throw new MurmurError('E-BUS-005', 'mur events tails the stack’s bus, and MURMUR_NATS_URL is not set', {
      hint: 'export MURMUR_NATS_URL=nats://127.0.0.1:4222; without it every service runs inside the mur that started it',
    });
  }
  refuseInvalidPattern(pattern);
  const eventSubjects = ALL_EVENT_TOPICS.map((topic) => topic.subject);
  const within = [...new Set(eventSubjects.flatMap((subject) => patternWithin(pattern, subject) ?? []))];
  if (within.length === 0)
    throw new UsageError(`'${pattern}' covers none of the stack's event subjects`, {
      path: 'pattern',
      hint: `mur events shows events, not the services' requests: e.g. 'session.>' or 'executor.heartbeat'; the event subjects are ${eventSubjects.join(', ')}`,
    });
  const runtime = await openRuntime();
  let subscriptions: Array<ReturnType<typeof runtime.bus.tap>>;
  let relay: OutputRelay | undefined;
  try {
    // The bus cannot be told to wait: for a stdout read slowly, what is past the relay's bound is dropped and said.
    relay = new OutputRelay(process.stdout, 'stdout', output.err, OUTPUT_PENDING_MAX_BYTES, "the bus's messages");
    const shown = relay;
    const show = (subject: string, payload: unknown): void => {
      const time = new Date().toISOString();
      const line = options.json ? JSON.stringify({ time, subject, payload }) : `${time} ${subject} ${JSON.stringify(payload)}`;
      shown.write(`${process.stdout.isTTY ? terminalSafe(line) : line}\n`);
    };
    subscriptions = within.map((subject) => runtime.bus.tap(subject, show));
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
  for (const subscription of subscriptions) subscription.unsubscribe();
  relay?.finish();
  await runtime.close();
  return code;
}
