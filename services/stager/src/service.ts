import { type Bus, type Subscription } from '@murmur/shared/bus';
import { type Log, MurmurError, QUEUE_GROUPS, commands, newId, topics } from '@murmur/shared';
import { cacheDir } from '@murmur/shared/node';
import { type StageProgress, Stager } from './stage.js';

export { Stager, type StageProgress, type StageCall, type StagerOptions } from './stage.js';
export { ComponentCache, TRANSPILER_ID } from './transpiler.js';

export interface StagerServiceOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /** The id the process announces itself by; one is made up when running inside another process. */
  instanceId?: string;
  /** Reports each staging's progress, e.g. to a terminal when everything runs in one process. */
  onProgress?: (progress: StageProgress) => void;
}

export interface StagerService {
  readonly instanceId: string;
  readonly stager: Stager;
  close(): Promise<void>;
}

/**
 * The stager on the bus: answers `stage` in the `stager` queue group, so stagers scale by adding
 * processes, and tells the bus what it staged (`session.staged`) or refused (`stage.failed`).
 */
export function startStagerService(options: StagerServiceOptions): StagerService {
  const env = options.env ?? process.env;
  const instanceId = options.instanceId ?? `stager-${newId('request').slice(4, 16)}`;
  const roostUrl = env.MURMUR_ROOST_URL?.trim();
  const stager = new Stager({ cacheDir: cacheDir(env), log: options.log, ...(roostUrl ? { roostUrl } : {}) });
  const subscriptions: Subscription[] = [];
  subscriptions.push(
    options.bus.serve(
      commands.stage,
      async (request) => {
        const source = request.source.kind === 'directory' ? request.source.manifest_dir : `${request.source.name}@${request.source.version}`;
        try {
          const plan = await stager.stage({ request, ...(options.onProgress ? { onProgress: options.onProgress } : {}) });
          options.log.info({ capsule: `${plan.capsule.name}@${plan.capsule.version}`, ms: Math.round(plan.stats.duration_ms), cache_hits: plan.stats.cache_hits }, 'staged');
          options.bus.publish(topics.sessionStaged, {
            capsule_name: plan.capsule.name,
            capsule_version: plan.capsule.version,
            stager_id: instanceId,
            artifacts: plan.artifacts.length,
            components: plan.stats.components,
            cache_hits: plan.stats.cache_hits,
            duration_ms: plan.stats.duration_ms,
          });
          return plan;
        } catch (error) {
          if (error instanceof MurmurError) {
            options.log.warn({ source, code: error.code }, error.message);
            options.bus.publish(topics.stageFailed, { stager_id: instanceId, source, error: error.toJSON() });
          }
          throw error;
        }
      },
      { queue: QUEUE_GROUPS.stager },
    ),
  );
  subscriptions.push(options.bus.serve(commands.stageArtifact, (request) => stager.stageOne(request), { queue: QUEUE_GROUPS.stager }));
  return {
    instanceId,
    stager,
    async close() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      await stager.close();
    },
  };
}
