import * as z from 'zod';
import { MurmurError } from './errors.js';
import { CONTAINMENT_CLASSES, ContainmentSchema } from './manifest/capsule.js';
import { parseYamlSource } from './manifest/yaml-source.js';

/**
 * The workspace configuration (`$MURMUR_HOME/config.yaml`, global; `<cwd>/.murmur/config.yaml`,
 * the project's), as far as this runtime reads it: `containment`, a floor every capsule run here
 * is held to. The two merge by strength — the stronger floor wins, so a project cannot lower what
 * the machine's owner set. Other keys (registry, inference, beta) belong to parts not built here
 * and are left alone.
 */
export const WorkspaceConfigSchema = z.looseObject({
  containment: ContainmentSchema.optional(),
});
export type WorkspaceConfig = z.infer<typeof WorkspaceConfigSchema>;

/** Reads one config file's text; `file` names it in a refusal. */
export function parseWorkspaceConfig(text: string, file: string): WorkspaceConfig {
  let source: ReturnType<typeof parseYamlSource>;
  try {
    source = parseYamlSource(text, file);
  } catch (error) {
    // Not YAML at all: a configuration error, named as one (the manifest's code would mislead).
    if (!(error instanceof MurmurError)) throw error;
    throw new MurmurError('E-CFG-003', error.message, { path: file, hint: `fix the YAML in ${file}, or remove the file` });
  }
  const value = source.value ?? {};
  if (typeof value !== 'object' || Array.isArray(value))
    throw new MurmurError('E-CFG-003', `${file}: the configuration must be a mapping of keys to values`, {
      path: file,
      hint: `write it as 'key: value' lines (mur config set <key> <value> writes one), or remove ${file}`,
    });
  for (const key of CONFIG_KEYS) {
    const [section, name] = key.split('.') as [string, string];
    const held = (value as Record<string, unknown>)[section];
    const line = (at: string[]): string => {
      const found = source.lineOf(at);
      return found ? ` (line ${found})` : '';
    };
    // An empty section (`inference:` with its keys commented out) is no section, as YAML reads it.
    if (held === undefined || held === null) continue;
    if (typeof held !== 'object' || Array.isArray(held))
      throw new MurmurError('E-CFG-003', `${file}: '${section}' must be a mapping of keys to values${line([section])}`, {
        path: section,
        hint: `write it as '${section}:' followed by indented 'key: value' lines, or remove it from ${file}`,
      });
    const item = (held as Record<string, unknown>)[name];
    if (item !== undefined && item !== null && typeof item === 'object')
      throw new MurmurError(
        'E-CFG-003',
        `${file}: '${key}' must be a single value, not a ${Array.isArray(item) ? 'list' : 'mapping'}${line([section, name])}`,
        {
          path: key,
          // Not `mur config set`: it reads the whole file first, and would refuse it for this.
          hint: `edit ${file} to give '${key}' one value (or remove it), then mur config set can change it`,
        },
      );
  }
  const containment = (value as Record<string, unknown>).containment;
  const parsed = WorkspaceConfigSchema.safeParse(value);
  if (!parsed.success) {
    const line = source.lineOf(['containment']);
    throw new MurmurError(
      'E-CFG-003',
      `${file}: invalid configuration value for 'containment': must be one of: ${CONTAINMENT_CLASSES.join(', ')}; got ${containment !== null && typeof containment === 'object' ? (Array.isArray(containment) ? 'a list' : 'a mapping') : `'${String(containment)}'`}${line ? ` (line ${line})` : ''}`,
      {
        path: 'containment',
        hint: `set containment to one of ${CONTAINMENT_CLASSES.join(', ')} in ${file}, or remove it`,
      },
    );
  }
  return parsed.data;
}

/**
 * The keys `mur config set|get` knows: upstream's six. Anything else is `E-CFG-002`, so a typo
 * is refused rather than written where nothing reads it.
 */
export const CONFIG_KEYS = [
  'registry.default',
  'registry.index_url',
  'inference.provider',
  'inference.model',
  'inference.api_key',
  'inference.endpoint',
] as const;
export type ConfigKey = (typeof CONFIG_KEYS)[number];

/** A key whose value is a secret: never printed back. */
export const SECRET_CONFIG_KEYS: ReadonlySet<ConfigKey> = new Set(['inference.api_key']);

/** What `registry.default` is when no file sets it (upstream's default registry). */
export const DEFAULT_REGISTRY = 'official';

export function configKey(key: string): ConfigKey {
  if ((CONFIG_KEYS as readonly string[]).includes(key)) return key as ConfigKey;
  throw new MurmurError('E-CFG-002', `unsupported config key '${key}'`, { path: key, hint: `supported keys: ${CONFIG_KEYS.join(', ')}` });
}

/** A key's value in one parsed file, or undefined when the file leaves it unset (an empty string counts as unset). */
export function configValueIn(document: unknown, key: ConfigKey): string | undefined {
  let value: unknown = document;
  for (const part of key.split('.')) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return typeof value === 'string' && value.trim() !== '' ? value : undefined;
}

/**
 * A key's effective value across the two files (upstream §1.9): the project's when it sets one,
 * else the global's — except `inference.api_key`, which is only ever the global's (a project
 * checked into a repository must not carry a key, nor override the owner's) — and
 * `registry.default` falls back to `official`.
 */
export function effectiveConfigValue(global: unknown, project: unknown, key: ConfigKey): { value: string; from: 'global' | 'project' | 'default' } | undefined {
  const fromProject = key === 'inference.api_key' ? undefined : configValueIn(project, key);
  if (fromProject !== undefined) return { value: fromProject, from: 'project' };
  const fromGlobal = configValueIn(global, key);
  if (fromGlobal !== undefined) return { value: fromGlobal, from: 'global' };
  return key === 'registry.default' ? { value: DEFAULT_REGISTRY, from: 'default' } : undefined;
}
