import { randomBytes } from 'node:crypto';
import type { Bus } from '../bus/bus.js';
import { MurmurError } from '../errors.js';
import { BLOB_BUCKET } from '../file-set.js';
import { numberSetting } from '../settings.js';
import type { BlobRefJson, StageProgress, StageRequest, StagedPlan } from '../plan.js';
import { commands, topics } from '../topics.js';
import { type PackOptions, packProject, packProjectStore, publishProject } from './project-pack.js';

/**
 * Asking the stack to stage, as any client does: pack the capsule project, put it in the object
 * store, and ask a stager for a plan, hearing its progress as it goes.
 *
 * The stager reports on `stage.<token>.progress` at every phase and every second while it works, so
 * a stager that is gone (killed mid-transpile, its container lost) is noticed after `idleMs` of
 * silence rather than after the whole staging timeout, and the request fails with `E-BUS-003`
 * naming what it was staging.
 */

export interface StagingOptions {
  onProgress?: (progress: StageProgress) => void;
  /** The most the whole staging may take (a cold transpile of several large components is long). */
  timeoutMs?: number;
  /** How long the stager may say nothing before it is taken to be gone (`MURMUR_STAGE_IDLE_MS`, 15 s). */
  idleMs?: number;
}

export const DEFAULT_STAGE_TIMEOUT_MS = 180_000;
const DEFAULT_IDLE_MS = 15_000;

export async function requestStaging(bus: Bus, request: StageRequest, options: StagingOptions = {}): Promise<StagedPlan> {
  const token = randomBytes(12).toString('hex');
  const idleMs = options.idleMs ?? numberSetting(process.env, 'MURMUR_STAGE_IDLE_MS', DEFAULT_IDLE_MS, { unit: 'milliseconds' });
  const what = request.source.kind === 'project' ? 'the uploaded project' : `${request.source.name}@${request.source.version}`;
  let watchdog: NodeJS.Timeout | undefined;
  let silent: ((error: MurmurError) => void) | undefined;
  const arm = (): void => {
    if (watchdog) clearTimeout(watchdog);
    watchdog = setTimeout(
      () =>
        silent?.(
          new MurmurError('E-BUS-003', `the stager stopped answering while staging ${what}: no word from it for ${idleMs / 1000}s`, {
            hint: 'the stager may have been stopped or lost; stage again',
            path: commands.stage.subject,
          }),
        ),
      idleMs,
    );
  };
  const subscription = bus.subscribe(topics.stageProgress.at(token), (progress) => {
    arm();
    if (progress.phase !== 'working') options.onProgress?.(progress);
  });
  try {
    await bus.flush();
    arm();
    return await Promise.race([
      bus.request(commands.stage, { ...request, progress: token }, { timeoutMs: options.timeoutMs ?? DEFAULT_STAGE_TIMEOUT_MS }),
      new Promise<never>((_, reject) => (silent = reject)),
    ]);
  } finally {
    if (watchdog) clearTimeout(watchdog);
    subscription.unsubscribe();
  }
}

/** Packs the capsule project in `dir` and puts it in the bus's object store: the source of a stage request. */
export async function uploadProject(bus: Bus, dir: string, options: PackOptions = {}): Promise<BlobRefJson> {
  const packed = await packProject(dir, options);
  return publishProject(await bus.objectStore(BLOB_BUCKET), packed);
}

/** A project's store alone, for staging a capsule by name; undefined when the project has none. */
export async function uploadProjectStore(bus: Bus, projectDir: string, options: PackOptions = {}): Promise<BlobRefJson | undefined> {
  const packed = await packProjectStore(projectDir, options);
  return packed ? publishProject(await bus.objectStore(BLOB_BUCKET), packed) : undefined;
}
