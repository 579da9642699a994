import { chmod, mkdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { type ConfigKey, MurmurError, SECRET_CONFIG_KEYS, configKey, hasControlCharacter, parseWorkspaceConfig } from '@murmur/shared';
import { writeFileAtomic } from '@murmur/shared/node';
import { YAMLMap, isAlias, isScalar, parseDocument } from 'yaml';
import type { Output } from '../output.js';
import { refuseDanglingLink } from '../dangling-link.js';
import { effectiveConfig, readConfigText, workspaceConfigFiles } from '../workspace-config.js';

/**
 * `mur config set|get`: upstream's six keys over the global (`$MURMUR_HOME/config.yaml`) and the
 * project's (`<cwd>/.murmur/config.yaml`) files.
 *
 * - `set` writes the project's file unless `-g` (never `inference.api_key`, which only the global
 *   file's counts); it edits the one key in the document as it is,
 *   comments and every other key kept, and writes it whole by rename. The global file is held at
 *   0600 under a 0700 directory (it may hold the inference key); the project's keeps its mode. A
 *   file that is a link is written where it leads. A file that does not parse, or whose section is
 *   not a mapping (or is an alias), is refused, not overwritten.
 * - `get` prints the effective value (the merge of §1.9) or, with `-g`, the global file's; an
 *   unset key prints nothing and exits 1, as `git config` does. A secret is never printed back.
 */

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
}

export async function configSetCommand(key: string, value: string, options: { global?: boolean }, output: Output): Promise<number> {
  const known = configKey(key);
  if (value.trim() === '')
    throw new MurmurError('E-CFG-003', `the value for '${known}' is empty`, { path: known, hint: `give it a value: mur config set ${known} <value>` });
  if (hasControlCharacter(value))
    throw new MurmurError('E-CFG-003', `the value for '${known}' holds a control character`, {
      path: known,
      hint: 'give the value as plain text, on one line',
    });
  // An index may be a file's path as well as a URL; an endpoint is always a URL. Either way, no other scheme.
  const otherScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(value) && !/^https?:\/\//i.test(value);
  if ((known === 'inference.endpoint' && !isHttpUrl(value)) || (known === 'registry.index_url' && otherScheme))
    throw new MurmurError(
      'E-CFG-003',
      `the value for '${known}' is not an http(s) URL${known === 'registry.index_url' ? ' or a path' : ''}: '${value.slice(0, 80)}'`,
      {
        path: known,
        hint:
          known === 'inference.endpoint'
            ? `give the full URL, e.g. mur config set ${known} https://api.example.com/v1`
            : `give a roost's URL, an index's .json URL, or the path of an index file, e.g. mur config set ${known} https://example.com/index.json`,
      },
    );
  const [globalFile, projectFile] = workspaceConfigFiles(process.env, process.cwd()) as [string, string];
  const file = options.global ? globalFile : projectFile;
  // Never read from the project's file, and a secret there travels with the project (its
  // repository, its archive): refused before anything is written, rather than written and warned about.
  if (known === 'inference.api_key' && !options.global) {
    throw new MurmurError(
      'E-CFG-003',
      `inference.api_key is only ever read from the global config; it is not written to ${file}, which travels with the project`,
      {
        path: known,
        hint: 'mur config set -g inference.api_key <key>',
      },
    );
  }
  const text = (await readConfigText(file)) ?? '';
  if (text !== '') parseWorkspaceConfig(text, file);
  const document = parseDocument(text);
  const [section] = known.split('.') as [string, string];
  const held = document.get(section, true);
  // An alias would be written through to the mapping it names, wherever else that is used.
  if (isAlias(held))
    throw new MurmurError('E-CFG-003', `${file}: '${section}' is an alias (*${held.source}); mur config set does not write through one`, {
      path: section,
      hint: `write '${section}' out as its own mapping in ${file}, then set the key again`,
    });
  // `inference:` with every key commented out is an empty (null) section: it becomes a mapping.
  if (held === null || (isScalar(held) && held.value === null)) document.set(section, new YAMLMap());
  document.setIn(known.split('.'), value);
  if (known === 'inference.api_key') {
    output.err('note: mur run does not read inference.api_key; a manifest names its key as `inference.api_key: ${NAME}`, read from the environment or .env');
  }
  const directory = path.dirname(file);
  await mkdir(directory, { recursive: true, ...(options.global ? { mode: 0o700 } : {}) });
  if (options.global) await chmod(directory, 0o700);
  // A file that is a link (a dotfiles checkout) is written where it leads, not replaced by a file;
  // the project's keeps the mode it had (one made 0600 because it names a credentialed endpoint).
  const target = await realpath(file).catch(() => {
    refuseDanglingLink(file, 'write', 'restore what the link names, or remove the link to have mur config write a file there');
    return file;
  });
  const kept = await stat(target).then(
    (found) => found.mode & 0o777,
    () => undefined,
  );
  const mode = options.global ? 0o600 : kept;
  await writeFileAtomic(target, document.toString(), mode === undefined ? {} : { mode });
  output.out(`Set ${known} in ${file}`);
  return 0;
}

export async function configGetCommand(key: string, options: { global?: boolean }, output: Output): Promise<number> {
  const known: ConfigKey = configKey(key);
  const found = await effectiveConfig(known, { global: options.global === true });
  if (!found) return 1;
  output.out(SECRET_CONFIG_KEYS.has(known) ? `(set in ${found.file ?? 'the defaults'}; not shown)` : found.value);
  return 0;
}
