import type { StageProgress, StageRequest, StagedPlan } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import { DEFAULT_STAGE_TIMEOUT_MS, requestStaging, uploadProject, uploadProjectStore } from '@murmur/shared/node';

/** What `mur` stages: the capsule directory it packs and uploads, or a capsule by name (with the project's store, packed). */
export type CliStageSource = { kind: 'directory'; dir: string } | { kind: 'registry'; name: string; version: string; projectDir?: string | undefined };

/**
 * Staging as every `mur` command asks for it, in-process or on the stack alike: the project is
 * packed and put in the bus's object store (a file the store already holds is not sent again), and
 * a stager is asked for the plan, its progress reported as it goes.
 */
export async function stageThroughBus(
  bus: Bus,
  source: CliStageSource,
  request: Omit<StageRequest, 'source'>,
  onProgress?: (progress: StageProgress) => void,
): Promise<StagedPlan> {
  const stageSource: StageRequest['source'] =
    source.kind === 'directory'
      ? { kind: 'project', project: await uploadProject(bus, source.dir) }
      : await (async () => {
          const project = source.projectDir ? await uploadProjectStore(bus, source.projectDir) : undefined;
          return { kind: 'registry' as const, name: source.name, version: source.version, ...(project ? { project } : {}) };
        })();
  return requestStaging(bus, { ...request, source: stageSource }, { timeoutMs: DEFAULT_STAGE_TIMEOUT_MS, ...(onProgress ? { onProgress } : {}) });
}
