import { existsSync } from 'node:fs';
import path from 'node:path';
import { type ConfigKey, type Containment, MurmurError, effectiveConfigValue, parseWorkspaceConfig } from '@murmur/shared';
import { parseDocument } from 'yaml';
import { murmurHome, readSmallTextFile, readSmallTextFileSync, refuseDanglingLink } from '@murmur/shared/node';

/** A configuration is a handful of keys: a file past this is not one, and is not parsed. */
const CONFIG_FILE = { what: 'the configuration', maxBytes: 1024 * 1024 };

/** The workspace configuration files, global first: `$MURMUR_HOME/config.yaml` and `<cwd>/.murmur/config.yaml`. */
export function workspaceConfigFiles(env: NodeJS.ProcessEnv, cwd: string): string[] {
  return [path.join(murmurHome(env), 'config.yaml'), path.join(cwd, '.murmur', 'config.yaml')];
}

/**
 * Whether `file` is there to be read: false when absent, refused (`E-IO-002`) when it is a link to
 * nothing — a global config on a volume not mounted yet, whose `containment: sealed` was read as no
 * floor at all, and the capsule ran at the host's lowest.
 */
function configPresent(file: string): boolean {
  if (existsSync(file)) return true;
  refuseDanglingLink(file, 'read', 'restore what the link names, or remove the link to run with no configuration there');
  return false;
}

/** Each configured containment floor, with the file that set it; a file that is absent sets none. */
export function configuredContainment(env: NodeJS.ProcessEnv, cwd: string): Array<{ file: string; containment: Containment }> {
  const floors: Array<{ file: string; containment: Containment }> = [];
  for (const file of workspaceConfigFiles(env, cwd)) {
    if (!configPresent(file)) continue;
    let text: string;
    try {
      text = readSmallTextFileSync(file, CONFIG_FILE);
    } catch (error) {
      if (error instanceof MurmurError) throw error;
      throw unreadableConfig(file, error as NodeJS.ErrnoException);
    }
    const config = parseWorkspaceConfig(text, file);
    if (config.containment) floors.push({ file, containment: config.containment });
  }
  return floors;
}

/** A config file's text, or undefined when there is none. */
export function readConfigText(file: string): Promise<string | undefined> {
  if (!configPresent(file)) return Promise.resolve(undefined);
  return readSmallTextFile(file, CONFIG_FILE).catch((error: NodeJS.ErrnoException) => {
    if (error instanceof MurmurError) throw error;
    throw unreadableConfig(file, error);
  });
}

/** A config file's parsed value (checked as the runtime reads it), or undefined when there is none. */
export async function readConfigFile(file: string): Promise<unknown> {
  const text = await readConfigText(file);
  if (text === undefined) return undefined;
  parseWorkspaceConfig(text, file);
  // Without yaml's own duplicate-key check, which is quadratic; parseWorkspaceConfig has judged the text.
  return parseDocument(text, { uniqueKeys: false }).toJS() as unknown;
}

/** A key's merged value over the two files (`global: true`: the global file's alone), with the file it came from. */
export async function effectiveConfig(
  key: ConfigKey,
  options: { env?: NodeJS.ProcessEnv; cwd?: string; global?: boolean } = {},
): Promise<{ value: string; file: string | undefined } | undefined> {
  const [globalFile, projectFile] = workspaceConfigFiles(options.env ?? process.env, options.cwd ?? process.cwd()) as [string, string];
  const found = effectiveConfigValue(await readConfigFile(globalFile), options.global ? undefined : await readConfigFile(projectFile), key);
  if (!found) return undefined;
  return { value: found.value, file: found.from === 'project' ? projectFile : found.from === 'global' ? globalFile : undefined };
}

function unreadableConfig(file: string, error: NodeJS.ErrnoException): MurmurError {
  return new MurmurError('E-IO-002', `cannot read ${file}: ${error.code ?? error.message}`, {
    path: file,
    hint: error.code === 'EISDIR' ? `a configuration is a file: move the directory ${file} out of the way` : `check that you may read ${file}`,
  });
}
