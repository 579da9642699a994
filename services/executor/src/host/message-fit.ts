import { cutLongStrings, fitEventForBus } from '../event-fit.js';
import type { HostToExecutor } from './protocol.js';

/**
 * The most characters of JSON one message from a capsule host to the executor may hold.
 *
 * Much of what crosses is the guest's to size: an answer, a streamed chunk, a message it sends, a
 * conversation. The executor reads each message whole on the one event loop every session shares,
 * so without a bound a guest could make it parse hundreds of megabytes at once. Nothing the
 * executor passes on can be larger than the bus's 1 MiB anyway, a request body crosses in pieces
 * (`request-body.ts`), and the largest legitimate messages (a long conversation saved whole) stay
 * well within 8 MiB.
 */
export const HOST_MESSAGE_LIMIT = 8 * 1024 * 1024;

/**
 * `message` as the host may send it, or why it may not be sent at all:
 * - a feed event is cut to what the bus carries (`fitEventForBus`);
 * - an answer to a door's call that is too large becomes an error saying so (`-32603`);
 * - a request or a trace line that is too large is refused, and its caller told why (the host's
 *   trace cuts a record long before, `ChannelTrace`);
 * - anything else has its long strings cut, each saying so, or is refused if that is not enough.
 */
export function fitForExecutor(message: HostToExecutor, limit = HOST_MESSAGE_LIMIT): { message: HostToExecutor } | { refused: string } {
  if (message.type === 'event') {
    const event = fitEventForBus(message.event);
    // An event that already fit was measured by the fit, far within the limit.
    if (event === message.event) return { message };
    message = { ...message, event };
  }
  const size = JSON.stringify(message).length;
  if (size <= limit) return { message };
  const refusal = `the ${describe(message)} is ${size} characters of JSON, more than the ${limit} a capsule host may send the executor at once`;
  // A request cut would ask for something else, and a trace line cut is no record.
  if (message.type === 'request' || message.type === 'trace') return { refused: refusal };
  if (message.type === 'rpc-reply')
    return {
      message: {
        ...message,
        reply: { error: { code: -32603, message: `Internal error: ${refusal}; ask for less of it (a smaller historyLength or pageSize)` } },
      },
    };
  const cut = cutLongStrings(message, limit, 'too long for the capsule host’s channel') as HostToExecutor;
  return JSON.stringify(cut).length <= limit ? { message: cut } : { refused: refusal };
}

function describe(message: HostToExecutor): string {
  switch (message.type) {
    case 'request':
      return `'${message.request.op}' request`;
    case 'rpc-reply':
      return 'reply';
    case 'trace':
      return `trace record of ${message.line.length} characters`;
    default:
      return `'${message.type}' message`;
  }
}
