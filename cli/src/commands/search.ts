import { readFile } from 'node:fs/promises';
import {
  type ArtifactMeta,
  INDEX_CEILING_BYTES,
  MurmurError,
  fetchFailureReason,
  firstIssueText,
  readBodyCapped,
  shownUrl,
  withoutUserinfo,
} from '@murmur/shared';
import { ArtifactStore, RoostRegistryClient } from '@murmur/shared/artifacts';
import { globalStoreDir } from '@murmur/shared/node';
import * as z from 'zod';
import { type Output, UsageError, table } from '../output.js';
import { effectiveConfig, workspaceConfigFiles } from '../workspace-config.js';

/**
 * `mur search <query>`: artifacts whose name, description or a tag contains the query (any case),
 * in upstream's table (NAME VERSION RUNTIME DESCRIPTION), at most `--limit` of them.
 *
 * Where it looks (`--registry`): `local` is the global store; a path is an artifact index file
 * (upstream's `schema_version: "1"` JSON); a URL ending in `.json` is such an index, any other URL
 * a roost. Without the flag: `registry.index_url` when the config sets one, else the roost
 * `MURMUR_ROOST_URL` names, else the global store.
 */

const IndexSchema = z.object({
  schema_version: z.string(),
  artifacts: z.array(
    z.object({
      name: z.string(),
      version: z.string(),
      runtime: z.string(),
      description: z.string().nullish(),
      tags: z.array(z.string()).default([]),
    }),
  ),
});

interface Entry {
  name: string;
  version: string;
  runtime: string;
  description?: string | null | undefined;
  tags: string[];
}

function fromIndex(text: string, source: string): Entry[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new MurmurError('E-IO-003', `failed to parse artifact index from ${source}: ${error instanceof Error ? error.message : String(error)}`, {
      path: source,
    });
  }
  const index = IndexSchema.safeParse(json);
  if (!index.success)
    throw new MurmurError('E-IO-003', `failed to parse artifact index from ${source}: ${firstIssueText(index.error, 'it is not an artifact index')}`, {
      path: source,
      hint: 'an artifact index is {"schema_version": "1", "artifacts": [{"name", "version", "runtime", …}]}',
    });
  const parsed = index.data;
  if (parsed.schema_version !== '1')
    throw new MurmurError('E-IO-003', `unsupported artifact index schema version '${parsed.schema_version}' from ${source} (expected 1)`, { path: source });
  return parsed.artifacts;
}

/** An index at `url`, named in every message without its query, which may carry a signed URL's credential. */
async function fetchIndex(url: string): Promise<Entry[]> {
  const shown = shownUrl(url);
  // Never sent (fetch refuses them) and never printed back, as a roost's are not.
  if (new URL(url).username !== '' || new URL(url).password !== '')
    throw new MurmurError('E-IO-003', `the index URL ${shown} carries a user or password, which is never sent`, {
      path: shown,
      hint: 'give the URL without user and password',
    });
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(30_000) });
  } catch (error) {
    throw new MurmurError('E-IO-003', `failed to fetch artifact index from ${shown}: ${fetchFailureReason(error)}`, { path: shown });
  }
  if (!response.ok) throw new MurmurError('E-IO-003', `failed to fetch artifact index from ${shown}: HTTP ${response.status}`, { path: shown });
  return fromIndex((await readBodyCapped(response, INDEX_CEILING_BYTES, `the artifact index from ${shown}`, 'E-IO-003')).toString('utf8'), shown);
}

async function entriesFrom(registry: string | undefined): Promise<Entry[]> {
  const given = registry?.trim();
  const configured = given ? undefined : await effectiveConfig('registry.index_url');
  const source = given || configured?.value || process.env.MURMUR_ROOST_URL?.trim() || 'local';
  // Whatever fails, a source the user did not type is named with where it came from, so it is
  // corrected there, not by a --registry nobody passed.
  const globalFile = workspaceConfigFiles(process.env, process.cwd())[0];
  const hint = given
    ? "--registry takes 'local', a roost URL, or an artifact index (a .json file or URL)"
    : configured
      ? `it is registry.index_url in ${configured.file ?? 'the defaults'}: correct it with mur config set${configured.file === globalFile ? ' -g' : ''} registry.index_url <roost URL or index .json>, or pass --registry`
      : 'it is MURMUR_ROOST_URL, which should name a roost URL; or pass --registry';
  try {
    return await entriesAt(source);
  } catch (error) {
    if (!(error instanceof MurmurError) || (given && error.hint)) throw error;
    throw new MurmurError(error.code, error.message, { hint, ...(error.path ? { path: error.path } : {}) });
  }
}

/** The entries `source` lists: the global store (`local`), an index (a `.json` URL or file), or a roost. */
async function entriesAt(source: string): Promise<Entry[]> {
  // A store's entries name their runtime as the artifact's manifest does, as an index's do.
  const entries = (metas: ArtifactMeta[]): Entry[] => metas.map((meta) => ({ ...meta, runtime: meta.artifact_runtime }));
  if (source.toLowerCase() === 'local') return entries(await new ArtifactStore(globalStoreDir(), 'global').list());
  // A scheme is a scheme in any case (`HTTPS://`), as the config that stores it has it.
  if (/^https?:\/\//i.test(source)) {
    if (!URL.canParse(source)) throw new MurmurError('E-IO-003', `'${withoutUserinfo(source)}' is not a URL`, { path: withoutUserinfo(source) });
    if (new URL(source).pathname.endsWith('.json')) return fetchIndex(source);
    return entries(await new RoostRegistryClient(source.replace(/\/+$/, '')).list());
  }
  let text: string;
  try {
    text = await readFile(source, 'utf8');
  } catch (error) {
    throw new MurmurError('E-IO-003', `failed to read artifact index from ${source}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
      path: source,
    });
  }
  return fromIndex(text, source);
}

export async function searchCommand(query: string, options: { registry?: string; limit?: string; json?: boolean }, output: Output): Promise<void> {
  const limit = Number(options.limit ?? '10');
  if (!Number.isInteger(limit) || limit < 1)
    throw new UsageError(`--limit must be a whole number of at least 1; got '${options.limit}'`, {
      path: '--limit',
      hint: 'e.g. mur search http --limit 20',
    });
  const needle = query.toLowerCase();
  const matches = (await entriesFrom(options.registry))
    .filter(
      (entry) =>
        entry.name.toLowerCase().includes(needle) ||
        (entry.description ?? '').toLowerCase().includes(needle) ||
        entry.tags.some((tag) => tag.toLowerCase().includes(needle)),
    )
    .slice(0, limit);
  if (options.json) {
    output.out(JSON.stringify(matches));
    return;
  }
  if (matches.length === 0) {
    output.out('No results found.');
    return;
  }
  for (const line of table(
    ['NAME', 'VERSION', 'RUNTIME', 'DESCRIPTION'],
    matches.map((entry) => [entry.name, entry.version, entry.runtime, entry.description?.trim() || '—']),
  ))
    output.out(line);
}
