import { type ArtifactMeta, MurmurError } from '@murmur/shared';
import { ArtifactStore, RoostRegistryClient } from '@murmur/shared/artifacts';
import { globalStoreDir, projectStoreDir } from '@murmur/shared/node';
import { type Output, table } from '../output.js';
import { findProjectRoot, registryChoice } from '../project.js';

/**
 * Upstream's PLATFORM column: a native build's platform tag, else what runs anywhere (`wasm`).
 * **Decided:** a generic archive that is no component (a skill) says `static`, not `wasm`.
 */
function platform(meta: ArtifactMeta): string {
  return meta.platforms.length === 0 ? meta.runtime : meta.platforms.map((pair) => pair.join('-')).join(', ');
}

/**
 * `mur list`: the project store (or the global one outside a project, or with `-g`); `--all` shows
 * both with a SCOPE column, last (upstream's `NAME VERSION RUNTIME PLATFORM [SCOPE]`);
 * `--registry <url>` lists a roost's index instead.
 */
export async function listCommand(options: { global?: boolean; all?: boolean; registry?: string; json?: boolean }, output: Output): Promise<void> {
  const rows: Array<{ scope: string; meta: ArtifactMeta }> = [];
  const choice = registryChoice(options.registry);
  if (choice.kind === 'remote' && (options.global || options.all))
    throw new MurmurError(
      'E-IO-003',
      `${options.global ? '-g' : '--all'} chooses among this machine's stores, and --registry ${choice.url} lists a roost: give one`,
      {
        path: options.global ? '--global' : '--all',
        hint: 'mur list --registry <url> lists what a roost holds; mur list -g or --all what this machine holds',
      },
    );
  if (choice.kind === 'remote') {
    for (const meta of await new RoostRegistryClient(choice.url).list()) rows.push({ scope: 'roost', meta });
  } else {
    const project = findProjectRoot();
    const global = new ArtifactStore(globalStoreDir(), 'global');
    if (options.all) {
      if (project) for (const meta of await new ArtifactStore(projectStoreDir(project), 'project').list()) rows.push({ scope: 'project', meta });
      for (const meta of await global.list()) rows.push({ scope: 'global', meta });
    } else {
      // `--registry local` is the global store, as search, publish and install read it.
      const store = options.global || choice.kind === 'local' || !project ? global : new ArtifactStore(projectStoreDir(project), 'project');
      for (const meta of await store.list()) rows.push({ scope: store.scope, meta });
    }
  }
  if (options.json) {
    output.out(JSON.stringify(rows.map((row) => ({ scope: row.scope, ...row.meta }))));
    return;
  }
  if (rows.length === 0) {
    output.out('No artifacts found.');
    return;
  }
  const header = ['NAME', 'VERSION', 'RUNTIME', 'PLATFORM', ...(options.all ? ['SCOPE'] : [])];
  const cells = rows.map(({ meta, scope }) => [meta.name, meta.version, meta.artifact_runtime, platform(meta), ...(options.all ? [scope] : [])]);
  for (const line of table(header, cells)) output.out(line);
}
