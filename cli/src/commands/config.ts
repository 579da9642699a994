import { chmod, mkdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import {
  type ConfigKey,
  MurmurError,
  SECRET_CONFIG_KEYS,
  configKey,
  hasControlCharacter,
  parseWorkspaceConfig,
  shownUrl,
  withoutUserinfo,
} from '@murmur/shared';
import { withLockfileTurn } from '@murmur/shared/artifacts';
import { refuseDanglingLink, removeEmptyParents, writeFileAtomic } from '@murmur/shared/node';
import { YAMLMap, isAlias, isNode, isScalar, parseDocument, visit } from 'yaml';
import type { Output } from '../output.js';
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

/** Where what the unread keys would set is decided instead. */
const UNREAD_KEYS_SAY =
  "a capsule's model and endpoint are its manifest's inference block, and where mur publish and mur install go is the manifest's registry block or --registry";

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
  // A password in a URL is printed back by `get` and kept in a file that may travel with the project.
  // A URL that carries credentials, or one that does not parse but looks as if it did (`user:pass@` before its host).
  const credentialed = URL.canParse(value) ? new URL(value).username !== '' || new URL(value).password !== '' : withoutUserinfo(value) !== value;
  if ((known === 'inference.endpoint' || known === 'registry.index_url') && credentialed)
    throw new MurmurError(
      'E-CFG-003',
      `the value for '${known}' carries credentials in its URL: ${URL.canParse(value) ? shownUrl(value) : withoutUserinfo(value).slice(0, 80)}`,
      {
        path: known,
        hint:
          known === 'inference.endpoint'
            ? 'give the URL without user and password; a key goes in inference.api_key (mur config set -g inference.api_key <key>)'
            : 'give the URL without user and password: mur never sends them to an index or a roost',
      },
    );
  // An index that names an http(s) scheme is a URL, and one that does not parse is no path either.
  const brokenHttp = /^https?:\/\//i.test(value) && !URL.canParse(value);
  if ((known === 'inference.endpoint' && !isHttpUrl(value)) || (known === 'registry.index_url' && (otherScheme || brokenHttp)))
    throw new MurmurError(
      'E-CFG-003',
      `the value for '${known}' is not an http(s) URL${known === 'registry.index_url' ? ' or a path' : ''}: '${URL.canParse(value) ? shownUrl(value) : withoutUserinfo(value).slice(0, 80)}'`,
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
  // One set at a time per file: each reads the whole file and writes it whole, and two at once
  // kept only the last one's key. The turn is taken beside the file, in its directory, made for it
  // (and removed again, empty, when the set is refused).
  const directory = path.dirname(file);
  const made = await mkdir(directory, { recursive: true, ...(options.global ? { mode: 0o700 } : {}) });
  try {
    // Beside the file a link leads to, where it is written (a link's own directory may be read-only).
    const written = await realpath(file).catch(() => file);
    return await withLockfileTurn(written, () => setIn(file, known, value, options, output), { what: path.basename(file), interruptible: true });
  } catch (error) {
    if (made !== undefined) await removeEmptyParents(directory, path.dirname(made));
    throw error;
  }
}

async function setIn(file: string, known: ConfigKey, value: string, options: { global?: boolean }, output: Output): Promise<number> {
  const text = (await readConfigText(file)) ?? '';
  if (text !== '') parseWorkspaceConfig(text, file);
  const document = parseDocument(text);
  // A value anchored (`&u`) and aliased elsewhere (`*u`) is one node: setting one key would change
  // the others, past the check each would get set on its own.
  let anchored: string | undefined;
  visit(document, (_key, node) => {
    if (isAlias(node) || (isNode(node) && node.anchor)) {
      anchored = isAlias(node) ? `*${node.source}` : `&${(node as { anchor: string }).anchor}`;
      return visit.BREAK;
    }
    return undefined;
  });
  if (anchored)
    throw new MurmurError(
      'E-CFG-003',
      `${file} holds a YAML anchor or alias (${anchored}): mur config set does not write through one, as it could change other keys`,
      {
        path: known,
        hint: `write each value out in ${file} in place of the anchor and its aliases, then set the key again`,
      },
    );
  const [section] = known.split('.') as [string, string];
  const held = document.get(section, true);
  // `inference:` with every key commented out is an empty (null) section: it becomes a mapping.
  if (held === null || (isScalar(held) && held.value === null)) document.set(section, new YAMLMap());
  document.setIn(known.split('.'), value);
  if (known === 'inference.api_key') {
    output.err('note: mur run does not read inference.api_key; a manifest names its key as `inference.api_key: ${NAME}`, read from the environment or .env');
  } else if (known !== 'registry.index_url') {
    // Kept, as upstream keeps them, but read by nothing here: said, rather than left to seem to work.
    output.err(`note: ${known} is kept in the configuration, but this runtime reads it nowhere: ${UNREAD_KEYS_SAY}`);
  }
  if (options.global) await chmod(path.dirname(file), 0o700);
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
