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
  const source = parseYamlSource(text, file);
  const value = source.value ?? {};
  if (typeof value !== 'object' || Array.isArray(value))
    throw new MurmurError('E-CFG-003', `${file}: the configuration must be a mapping of keys to values`, { path: file });
  const containment = (value as Record<string, unknown>).containment;
  const parsed = WorkspaceConfigSchema.safeParse(value);
  if (!parsed.success) {
    const line = source.lineOf(['containment']);
    throw new MurmurError(
      'E-CFG-003',
      `${file}: invalid configuration value for 'containment': must be one of: ${CONTAINMENT_CLASSES.join(', ')}; got '${String(containment)}'${line ? ` (line ${line})` : ''}`,
      {
        path: 'containment',
        hint: `set containment to one of ${CONTAINMENT_CLASSES.join(', ')} in ${file}, or remove it`,
      },
    );
  }
  return parsed.data;
}
