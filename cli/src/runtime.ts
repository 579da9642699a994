import { type Bus, connectBus } from '@murmur/shared/bus';
import { type Log, silentLog } from '@murmur/shared';
import { startExecutorService } from '@murmur/executor';
import { type StageProgress, startStagerService } from '@murmur/stager';

/**
 * Where `mur`'s work happens. With `MURMUR_NATS_URL` set, `mur` is a client: it asks the running
 * services over NATS. Without it, `mur` starts the services it needs inside its own process on the
 * in-process bus (the embedded default), and asks them the same way, so both paths run the same
 * code through the same contracts.
 */
export interface Runtime {
  bus: Bus;
  inProcess: boolean;
  close(): Promise<void>;
}

export interface RuntimeOptions {
  env?: NodeJS.ProcessEnv;
  onStageProgress?: (progress: StageProgress) => void;
  verbose?: boolean;
  /** Start an executor too (for `mur run`); staging alone does not need one. */
  executor?: boolean;
}

export async function openRuntime(options: RuntimeOptions = {}): Promise<Runtime> {
  const env = options.env ?? process.env;
  // The services' logs stay quiet inside `mur` unless asked for (MURMUR_LOG_LEVEL, or -v on stage).
  const log: Log = options.verbose || env.MURMUR_LOG_LEVEL ? (await import('@murmur/shared/service')).createLogger('mur', env) : silentLog;
  const natsUrl = env.MURMUR_NATS_URL?.trim();
  const bus = await connectBus({ natsUrl, name: 'mur', log });
  if (natsUrl) return { bus, inProcess: false, close: () => bus.close() };
  const stager = startStagerService({ bus, log, env, ...(options.onStageProgress ? { onProgress: options.onStageProgress } : {}) });
  const executor = options.executor ? startExecutorService({ bus, log, env }) : undefined;
  return {
    bus,
    inProcess: true,
    async close() {
      await executor?.close();
      await stager.close();
      await bus.close();
    },
  };
}
