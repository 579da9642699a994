import { MurmurError } from '@murmur/shared';
import { type Output, table } from '../output.js';
import { openRuntime } from '../runtime.js';
import { askEveryService } from '../stack-health.js';

/** `mur health`: asks every instance of each service on the bus for its health check, a row each. Exit 1 unless every row is an instance that answered ok. */
export async function healthCommand(options: { json?: boolean; timeoutMs?: number }, output: Output): Promise<number> {
  if (!process.env.MURMUR_NATS_URL?.trim()) {
    throw new MurmurError('E-BUS-005', 'mur health asks running services over NATS, and MURMUR_NATS_URL is not set', {
      hint: 'export MURMUR_NATS_URL=nats://127.0.0.1:4222 (the stack’s bus)',
    });
  }
  const runtime = await openRuntime();
  try {
    const results = await askEveryService(runtime.bus, options.timeoutMs ?? 2000);
    if (options.json) output.out(JSON.stringify(results));
    else {
      const rows = results.map((result) =>
        'reply' in result
          ? [
              result.service,
              'ok',
              result.reply.instance_id,
              String(result.reply.http_port ?? '-'),
              String(result.reply.pid),
              `${Math.round(result.reply.uptime_ms / 1000)}s`,
            ]
          : [result.service, result.refused ? 'refused' : 'unreachable', result.error, '-', '-', '-'],
      );
      for (const line of table(['SERVICE', 'STATUS', 'INSTANCE', 'PORT', 'PID', 'UPTIME'], rows)) output.out(line);
    }
    return results.every((result) => 'reply' in result) ? 0 : 1;
  } finally {
    await runtime.close();
  }
}
