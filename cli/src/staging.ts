import type { StageProgress, StageRequest, StagedPlan } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { DEFAULT_STAGE_TIMEOUT_MS, requestStaging, uploadProject, uploadProjectStore } from '@murmur/shared/node';

/**
 * What `mur` stages: the capsule directory it packs and uploads (`manifest`: the manifest file to
 * stage, when it is not the directory's `murmur.yaml`, as `mur run --manifest` names one), or a
 * capsule by name (with the project's store, packed).
 */
export type CliStageSource =
  | { kind: 'directory'; dir: string; manifest?: string | undefined }
  | { kind: 'registry'; name: string; version: string; projectDir?: string | undefined };

/**
 * Packs and uploads what a stage request will name: the project (a file the store already holds is
 * not sent again), or for a capsule by name the project's store. It changes nothing anyone sees —
 * blobs named by their digest — so a command may start it before it has decided to stage.
 */
export async function uploadStageSource(bus: Bus, source: CliStageSource): Promise<StageRequest['source']> {
  if (source.kind === 'directory')
    return { kind: 'project', project: await uploadProject(bus, source.dir, source.manifest === undefined ? {} : { manifestFile: source.manifest }) };
  const project = source.projectDir ? await uploadProjectStore(bus, source.projectDir) : undefined;
  return { kind: 'registry', name: source.name, version: source.version, ...(project ? { project } : {}) };
}

/**
 * Staging as every `mur` command asks for it, in-process or on the stack alike: the source is
 * uploaded (or its upload, started earlier, awaited) and a stager is asked for the plan, its
 * progress reported as it goes.
 */
export async function stageThroughBus(
  bus: Bus,
  source: CliStageSource | Promise<StageRequest['source']>,
  request: Omit<StageRequest, 'source'>,
  onProgress?: (progress: StageProgress) => void,
): Promise<StagedPlan> {
  const stageSource = await (source instanceof Promise ? source : uploadStageSource(bus, source));
  return requestStaging(bus, { ...request, source: stageSource }, { timeoutMs: DEFAULT_STAGE_TIMEOUT_MS, ...(onProgress ? { onProgress } : {}) });
}
