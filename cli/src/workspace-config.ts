import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { type Containment, MurmurError, parseWorkspaceConfig } from '@murmur/shared';
import { murmurHome } from '@murmur/shared/node';

/** The workspace configuration files, global first: `$MURMUR_HOME/config.yaml` and `<cwd>/.murmur/config.yaml`. */
export function workspaceConfigFiles(env: NodeJS.ProcessEnv, cwd: string): string[] {
  return [path.join(murmurHome(env), 'config.yaml'), path.join(cwd, '.murmur', 'config.yaml')];
}

/** Each configured containment floor, with the file that set it; a file that is absent sets none. */
export function configuredContainment(env: NodeJS.ProcessEnv, cwd: string): Array<{ file: string; containment: Containment }> {
  const floors: Array<{ file: string; containment: Containment }> = [];
  for (const file of workspaceConfigFiles(env, cwd)) {
    if (!existsSync(file)) continue;
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new MurmurError('E-IO-002', `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { path: file });
    }
    const config = parseWorkspaceConfig(text, file);
    if (config.containment) floors.push({ file, containment: config.containment });
  }
  return floors;
}
