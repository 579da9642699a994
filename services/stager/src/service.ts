import path from 'node:path';
import type { Bus, Subscription } from '@murmur/shared/bus';
import {
  BLOB_BUCKET,
  type Log,
  MurmurError,
  QUEUE_GROUPS,
  type StageRequest,
  commands,
  newId,
  numberSetting,
  runtimeMetrics,
  runtimeTracing,
  topics,
} from '@murmur/shared';
import { BlobCache, blobCacheMaxBytes, cacheDir, globalStoreDir, keepBlobsWithin } from '@murmur/shared/node';
import { refuseOversizedPlan } from './plan-size.js';
import { type StageProgress, Stager } from './stage.js';
import { DEFAULT_STAGER_CONCURRENCY, DEFAULT_STAGER_QUEUE, StagingSlots } from './staging-slots.js';
import { DEFAULT_TRANSPILE_TIMEOUT_MS } from './transpiler.js';

export { Stager, type StageProgress, type StageCall, type StagerOptions } from './stage.js';
export { ComponentCache } from './transpiler.js';
export { StagingSlots } from './staging-slots.js';
export { TRANSPILER_ID } from '@murmur/shared';

export interface StagerServiceOptions {
  bus: Bus;
  log: Log;
  env?: NodeJS.ProcessEnv;
  /** The id the process announces itself by; one is made up when running inside another process. */
  instanceId?: string;
  /** Reports each staging's progress, e.g. to a terminal when everything runs in one process. */
  onProgress?: (progress: StageProgress) => void;
  /**
   * Keeps the blob cache within `MURMUR_BLOB_CACHE_MAX_BYTES` (`keepBlobsWithin`): what the stager
   * process does; a stager inside `mur run` lives for one run, and leaves the user's cache alone.
   */
  trimBlobCache?: boolean;
}

export interface StagerService {
  readonly instanceId: string;
  readonly stager: Stager;
  close(): Promise<void>;
}

/** How often a stager busy with a staging says so to the requester that asked for progress. */
const WORKING_INTERVAL_MS = 1_000;

function describeSource(request: StageRequest): string {
  return request.source.kind === 'project'
    ? `the uploaded project ${request.source.project.sha256.slice(0, 12)}`
    : `${request.source.name}@${request.source.version}`;
}

/**
 * The stager on the bus: answers `stage` in the `stager` queue group, so stagers scale by adding
 * processes, and tells the bus what it staged (`session.staged`) or refused (`stage.failed`).
 *
 * A requester that names a progress token hears each phase on `stage.<token>.progress`, and that
 * the stager is still working every second, so it can tell a long transpile from a stager that
 * died. A stager that is shut down answers every staging still in flight with `E-BUS-006` before
 * it goes, rather than leave its requesters to time out.
 */
export function startStagerService(options: StagerServiceOptions): StagerService {
  const env = options.env ?? process.env;
  const { bus, log } = options;
  const instanceId = options.instanceId ?? `stager-${newId('request').slice(4, 16)}`;
  const roostUrl = env.MURMUR_ROOST_URL?.trim();
  const cache = cacheDir(env);
  const blobs = new BlobCache(path.join(cache, 'blobs'), () => bus.objectStore(BLOB_BUCKET));
  const stopTrimming = options.trimBlobCache ? keepBlobsWithin(blobs, blobCacheMaxBytes(env), log) : () => {};
  // The global store from the same environment as the cache (process.env otherwise decided it).
  const transpileTimeoutMs = numberSetting(env, 'MURMUR_TRANSPILE_TIMEOUT_MS', DEFAULT_TRANSPILE_TIMEOUT_MS, { unit: 'milliseconds' });
  const roostPublicUrl = env.MURMUR_ROOST_PUBLIC_URL?.trim();
  const stager = new Stager({
    cacheDir: cache,
    globalStore: globalStoreDir(env),
    blobs,
    log,
    transpileTimeoutMs,
    ...(roostUrl ? { roostUrl, ...(roostPublicUrl ? { roostPublicUrl } : {}) } : {}),
  });
  const slots = new StagingSlots(
    numberSetting(env, 'MURMUR_STAGER_CONCURRENCY', DEFAULT_STAGER_CONCURRENCY, { unit: 'stagings' }),
    numberSetting(env, 'MURMUR_STAGER_QUEUE', DEFAULT_STAGER_QUEUE, { unit: 'stagings', zero: true }),
    `the stager ${instanceId}`,
  );
  /** Each staging still in flight, with what it stages, for the refusal it gets if the stager goes. */
  const inFlight = new Map<(error: MurmurError) => void, string>();
  let closing = false;

  /** Runs `work`, unless the stager shuts down first: then the requester is told so, with a code. */
  function whileServing<T>(what: string, work: Promise<T>): Promise<T> {
    if (closing) return Promise.reject(shutDown(what));
    return new Promise<T>((resolve, reject) => {
      const abandon = (error: MurmurError): void => reject(error);
      inFlight.set(abandon, what);
      work.then(resolve, reject).finally(() => inFlight.delete(abandon));
    });
  }

  function shutDown(what: string): MurmurError {
    return new MurmurError('E-BUS-006', `the stager ${instanceId} shut down before it finished staging ${what}; nothing it prepared was kept`, {
      hint: 'stage again: another stager (or this one, restarted) will answer',
    });
  }

  const subscriptions: Subscription[] = [
    bus.serve(
      commands.stage,
      async (request) => {
        const source = describeSource(request);
        const progressTopic = request.progress ? topics.stageProgress.at(request.progress) : undefined;
        const report = (progress: StageProgress): void => {
          options.onProgress?.(progress);
          if (progressTopic) bus.publish(progressTopic, progress);
        };
        const working = progressTopic ? setInterval(() => report({ phase: 'working', stager_id: instanceId }), WORKING_INTERVAL_MS) : undefined;
        const span = runtimeTracing().span('stager.stage', {
          parent: request.traceparent,
          attributes: { 'murmur.source': source, 'murmur.stager_id': instanceId },
        });
        try {
          const plan = await whileServing(
            source,
            slots.run(
              () => stager.stage({ request, onProgress: report }),
              (ahead) => report({ phase: 'queued', stager_id: instanceId, ahead }),
            ),
          );
          refuseOversizedPlan(plan, bus.maxPayload);
          span.setAttributes({
            'murmur.capsule': `${plan.capsule.name}@${plan.capsule.version}`,
            'murmur.stage.components': plan.stats.components,
            'murmur.stage.cache_hits': plan.stats.cache_hits,
          });
          for (let index = 0; index < plan.stats.components; index += 1) runtimeMetrics().stageComponent(index < plan.stats.cache_hits);
          log.info(
            { capsule: `${plan.capsule.name}@${plan.capsule.version}`, ms: Math.round(plan.stats.duration_ms), cache_hits: plan.stats.cache_hits },
            'staged',
          );
          bus.publish(topics.sessionStaged, {
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
          span.fail(error instanceof MurmurError ? `${error.code}: ${error.message}` : String(error));
          if (error instanceof MurmurError) {
            log.warn({ source, code: error.code }, error.message);
            bus.publish(topics.stageFailed, { stager_id: instanceId, source, error: error.toJSON() });
          }
          throw error;
        } finally {
          span.end();
          if (working) clearInterval(working);
        }
      },
      { queue: QUEUE_GROUPS.stager },
    ),
    bus.serve(
      commands.stageArtifact,
      (request) =>
        whileServing(
          `${request.name}@${request.version}`,
          slots.run(
            () => stager.stageOne(request),
            () => {},
          ),
        ),
      { queue: QUEUE_GROUPS.stager },
    ),
  ];
  return {
    instanceId,
    stager,
    async close() {
      closing = true;
      stopTrimming();
      for (const subscription of subscriptions) subscription.unsubscribe();
      for (const [abandon, what] of [...inFlight]) abandon(shutDown(what));
      // Those waiting for a slot were answered above; none of them starts now.
      slots.close(shutDown('what was waiting for a slot'));
      // The refusals go out before the connection does.
      await bus.flush().catch(() => {});
      await stager.close();
    },
  };
}
