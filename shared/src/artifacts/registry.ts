import { type ArtifactMeta, RegistryIndexSchema, currentPlatform, fallbackMeta } from '../artifact-meta.js';
import { MurmurError, isErrorCode } from '../errors.js';
import { fetchFailureReason } from '../fetch-failure.js';
import { shownUrl } from '../shown-url.js';
import { INDEX_CEILING_BYTES, readBodyCapped, readBodyPrefix } from '../response-body.js';
import { maxEntryBytesFromEnv } from './mur-zip.js';
import { type ArtifactStore, sha256Hex } from './store.js';

/**
 * Where artifacts come from, in the order staging asks: the project store, the global store,
 * roost over HTTP, and last the artifacts shipped with the runtime (its default drivers). Every source hands back the bytes together with the digest it claims for
 * them; whoever uses the bytes compares the two before doing anything else with them.
 */

export type SourceOrigin = 'project' | 'global' | 'roost' | 'default';

export interface ResolvedArtifact {
  name: string;
  version: string;
  bytes: Buffer;
  /** The digest the source recorded or sent. Not yet verified. */
  claimedSha256: string;
  /** What the bytes hash to, when the source computed it as it read them (a local store). */
  bytesSha256?: string;
  meta: ArtifactMeta;
  origin: SourceOrigin;
  /** A path or URL, for messages. */
  location: string;
}

export interface ArtifactSource {
  readonly origin: SourceOrigin;
  /** Where this source looks, for messages: a directory or a URL. */
  readonly location: string;
  resolve(name: string, version: string): Promise<ResolvedArtifact | undefined>;
  list(): Promise<ArtifactMeta[]>;
}

export function storeSource(store: ArtifactStore): ArtifactSource {
  return {
    origin: store.scope,
    location: store.root,
    async resolve(name, version) {
      const stored = await store.resolve(name, version);
      if (!stored) return undefined;
      return {
        name,
        version,
        bytes: stored.bytes,
        claimedSha256: stored.recordedSha256,
        bytesSha256: stored.bytesSha256,
        meta: stored.meta,
        origin: store.scope,
        location: stored.zipPath,
      };
    },
    list: () => store.list(),
  };
}

export const SHA256_HEADER = 'x-murmur-sha256';

/** How long an index roost sent is used for the metas of the artifacts resolved after it. */
const INDEX_REUSED_MS = 5_000;
const REQUEST_TIMEOUT_MS = 30_000;
/** The most of an error's body read: an answer of a server, shown as far as this. */
const ERROR_BODY_LIMIT = 64 * 1024;

interface ErrorBody {
  error?: string;
  code?: string;
  hint?: string;
}

/**
 * roost's registry over HTTP, upstream's `/v1/artifacts` shape: `GET /v1/artifacts` (the index),
 * `GET /v1/artifacts/{name}/{version}` (the bytes, with `x-murmur-sha256`), and
 * `POST /v1/artifacts?name&version&runtime` (publish). Names are URL-encoded, so a namespaced
 * `local/worker` is one path segment.
 */
const REGISTRY_URL_HINT = 'name roost by its URL, e.g. http://127.0.0.1:7700 (--registry, registry.remote_url or MURMUR_ROOST_URL)';

/**
 * A registry URL that could not be a roost's, refused before anything is asked: not http(s), no
 * host, or holding what a base URL cannot (a query, a fragment) — and a user or password, which
 * fetch would refuse with the URL whole in its words, the password among them; roost's token goes
 * in MURMUR_ROOST_TOKEN. Refusals show the URL without any of those parts.
 */
function refuseRegistryUrl(baseUrl: string): void {
  let parsed: URL;
  try {
    parsed = new URL(baseUrl);
  } catch {
    throw new MurmurError('E-ROOST-001', `the registry '${baseUrl.slice(0, 200)}' is not a URL`, { hint: REGISTRY_URL_HINT });
  }
  const shown = shownUrl(baseUrl);
  if ((parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || parsed.hostname === '')
    throw new MurmurError('E-ROOST-001', `the registry ${shown} is not an http(s) URL with a host`, { hint: REGISTRY_URL_HINT });
  if (parsed.username !== '' || parsed.password !== '')
    throw new MurmurError('E-ROOST-001', `the registry URL ${shown} carries a user or password, which is never sent`, {
      hint: "give roost's token in MURMUR_ROOST_TOKEN, and name roost by its URL alone",
    });
  if (parsed.search !== '' || parsed.hash !== '')
    throw new MurmurError('E-ROOST-001', `the registry URL ${shown} has a query or a fragment, which a registry's base URL cannot have`, {
      hint: REGISTRY_URL_HINT,
    });
}

/**
 * What a registry client may show a roost of its operator's: `token`, roost's bearer, given only
 * with a publish; or, where the operator has one but this registry is not where it goes, why
 * (`withheld`), for the refusal a roost that needs it answers with.
 */
export interface RoostCredentials {
  token?: string | undefined;
  withheld?: string | undefined;
}

export class RoostRegistryClient implements ArtifactSource {
  readonly origin = 'roost' as const;
  readonly location: string;
  /** The index last read for `metaOf`, and when. */
  private indexRead: { at: number; metas: Promise<ArtifactMeta[]> } | undefined;

  /**
   * The token goes with a publish alone: roost's reads are open, and a read is sent to whatever
   * registry a project's `murmur.yaml` names — `mur install` in a cloned project gave the user's
   * publishing token to a server of the project author's choosing.
   */
  constructor(
    baseUrl: string,
    private readonly credentials: RoostCredentials = { token: process.env.MURMUR_ROOST_TOKEN },
  ) {
    refuseRegistryUrl(baseUrl);
    this.location = baseUrl.replace(/\/+$/, '');
  }

  private headers(method: string, extra: Record<string, string> = {}): Record<string, string> {
    const token = method === 'POST' ? this.credentials.token?.trim() : undefined;
    return token ? { authorization: `Bearer ${token}`, ...extra } : extra;
  }

  private async request(method: string, pathAndQuery: string, body?: Uint8Array): Promise<Response> {
    const url = `${this.location}${pathAndQuery}`;
    try {
      const init: RequestInit = {
        method,
        headers: this.headers(method, body ? { 'content-type': 'application/octet-stream' } : {}),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      };
      if (body) init.body = body;
      // A publish is not sent on by a redirect: a 302 turns it into a GET and loses its body, a 308
      // fails midway; it is said, with where it led. A read follows one (a registry may serve its
      // archives from elsewhere; fetch drops the token for another origin).
      if (method !== 'GET') init.redirect = 'manual';
      const response = await fetch(url, init);
      if (method !== 'GET' && response.status >= 300 && response.status < 400) {
        await response.body?.cancel();
        const location = response.headers.get('location');
        throw new MurmurError(
          'E-ROOST-001',
          `roost at ${this.location} answered ${method} ${pathAndQuery.split('?')[0]} with ${response.status}, a redirect${location ? ` to ${location.split('?')[0]?.slice(0, 200)}` : ''}, which is not followed`,
          {
            hint: location
              ? 'name the registry by the URL it redirects to (--registry, registry.remote_url or MURMUR_ROOST_URL)'
              : 'name the registry by its own URL',
          },
        );
      }
      return response;
    } catch (error) {
      if (error instanceof MurmurError) throw error;
      throw new MurmurError('E-ROOST-001', `cannot reach roost at ${this.location}: ${fetchFailureReason(error)}`, {
        cause: error,
      });
    }
  }

  /** `publishing`: a conflict (`E-REG-003`, `E-REG-004`) is what a publish is refused as, never a read. */
  private async failure(response: Response, what: string, publishing = false): Promise<MurmurError> {
    let body: ErrorBody = {};
    const text = await readBodyPrefix(response, ERROR_BODY_LIMIT);
    try {
      body = JSON.parse(text) as ErrorBody;
    } catch {
      body = { error: text };
    }
    const message = body.error?.trim() || `HTTP ${response.status}`;
    if (response.status === 401 || response.status === 403) {
      return new MurmurError('E-ROOST-001', `roost at ${this.location} refused ${what}: ${message}`, {
        hint: this.credentials.withheld ?? 'set MURMUR_ROOST_TOKEN to the token roost was started with',
      });
    }
    // What roost judged of the archive itself (too large, malformed, a name it cannot store) keeps
    // roost's code and hint; E-ROOST-001's hint (is roost running there?) would send the user looking
    // in the wrong place.
    const archiveCode = publishing && typeof body.code === 'string' && /^E-(ART|MAN|REG)-/.test(body.code) && isErrorCode(body.code) ? body.code : undefined;
    const code =
      publishing && (body.code === 'E-REG-003' || response.status === 409)
        ? 'E-REG-003'
        : (archiveCode ?? (body.code === 'E-REG-001' ? 'E-REG-001' : 'E-ROOST-001'));
    return new MurmurError(code, `roost at ${this.location} refused ${what}: ${message}`, body.hint ? { hint: body.hint } : {});
  }

  async resolve(name: string, version: string, platform: string = currentPlatform()): Promise<ResolvedArtifact | undefined> {
    const query = platform === 'unknown' ? '' : `?platform=${encodeURIComponent(platform)}`;
    const response = await this.request('GET', `/v1/artifacts/${encodeURIComponent(name)}/${encodeURIComponent(version)}${query}`);
    if (response.status === 404) {
      await response.body?.cancel();
      return undefined;
    }
    if (!response.ok) throw await this.failure(response, `${name}@${version}`);
    const claimed = response.headers.get(SHA256_HEADER)?.trim();
    if (!claimed) {
      await response.body?.cancel();
      throw new MurmurError(
        'E-REG-002',
        `roost at ${this.location} sent ${name}@${version} without an ${SHA256_HEADER} header; refusing bytes that cannot be verified`,
        {
          path: this.location,
          hint: `a Murmur registry sends each archive's digest: check that ${this.location} is a roost (and no proxy before it drops the header), or install from another registry`,
        },
      );
    }
    const bytes = await readBodyCapped(response, maxEntryBytesFromEnv(), `${name}@${version} from roost at ${this.location}`, 'E-ART-002', 'E-ROOST-001');
    const meta = await this.metaOf(name, version);
    return {
      name,
      version,
      bytes,
      claimedSha256: claimed,
      meta,
      origin: 'roost',
      location: `${this.location}/v1/artifacts/${encodeURIComponent(name)}/${encodeURIComponent(version)}`,
    };
  }

  /**
   * The index entry for one artifact, or the fallback when the index does not list it. The index
   * read for one is used for the others resolved within `INDEX_REUSED_MS`: a capsule of many
   * artifacts from roost fetched the whole index (up to 16 MiB) once for each.
   */
  private async metaOf(name: string, version: string): Promise<ArtifactMeta> {
    if (!this.indexRead || Date.now() - this.indexRead.at > INDEX_REUSED_MS)
      this.indexRead = { at: Date.now(), metas: this.list().catch(() => [] as ArtifactMeta[]) };
    const index = await this.indexRead.metas;
    return index.find((meta) => meta.name === name && meta.version === version) ?? fallbackMeta(name, version);
  }

  async list(): Promise<ArtifactMeta[]> {
    const response = await this.request('GET', '/v1/artifacts');
    if (!response.ok) throw await this.failure(response, 'the index');
    const text = (await readBodyCapped(response, INDEX_CEILING_BYTES, `the index of roost at ${this.location}`, 'E-ROOST-001')).toString('utf8');
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      value = undefined;
    }
    const parsed = RegistryIndexSchema.safeParse(value);
    if (!parsed.success) throw new MurmurError('E-ROOST-001', `roost at ${this.location} sent an index that is not a list of artifact metas`);
    return parsed.data;
  }

  /**
   * The query names what the archive is, and roost checks it against the archive; the description
   * travels in the archive only: percent-encoded in the query, one of build's 4 096 characters
   * passed the server's 16 KiB of headers (`431`).
   */
  async publish(bytes: Uint8Array, meta: ArtifactMeta): Promise<{ sha256: string }> {
    const query = new URLSearchParams({ name: meta.name, version: meta.version, runtime: meta.runtime, artifact_runtime: meta.artifact_runtime });
    for (const [os, arch] of meta.platforms) query.append('platform', `${os}-${arch}`);
    const response = await this.request('POST', `/v1/artifacts?${query.toString()}`, bytes);
    if (response.status !== 201) throw await this.failure(response, `publishing ${meta.name}@${meta.version}`, true);
    // An answer is read with a ceiling, as every answer of a server is: a 201 of 1.5 GB held 3 GB of mur's memory.
    const text = (
      await readBodyCapped(response, PUBLISH_ANSWER_CEILING_BYTES, `roost's answer to publishing ${meta.name}@${meta.version}`, 'E-ROOST-001')
    ).toString('utf8');
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const sha256 = (body as { sha256?: unknown } | undefined)?.sha256;
    const sent = sha256Hex(bytes);
    // What roost stored is what was sent, or the publish is not said to have happened.
    if (typeof sha256 !== 'string' || sha256.toLowerCase() !== sent)
      throw new MurmurError(
        'E-ROOST-001',
        `roost at ${this.location} answered the publish of ${meta.name}@${meta.version} without the digest of the bytes sent (${sent}): it may not have stored them`,
        { hint: `check with 'mur search ${meta.name} --registry ${this.location}' whether it holds them, or publish to a roost that answers as roost does` },
      );
    return { sha256 };
  }
}

/** The most of roost's answer to a publish that is read: a digest, in a small JSON object. */
const PUBLISH_ANSWER_CEILING_BYTES = 64 * 1024;

export interface ChainHit {
  artifact: ResolvedArtifact;
}

/** The sources in order; the first that has the artifact wins. */
export class RegistryChain {
  constructor(readonly sources: readonly ArtifactSource[]) {}

  async resolve(name: string, version: string): Promise<ResolvedArtifact | undefined> {
    for (const source of this.sources) {
      const found = await source.resolve(name, version);
      if (found) return found;
    }
    return undefined;
  }

  /** "the project store (/p), the global store (/g) and roost (http://…)": where a miss looked. */
  describeSearch(): string {
    const parts = this.sources.map((source) => (source.origin === 'roost' ? `roost (${source.location})` : `the ${source.origin} store (${source.location})`));
    if (parts.length <= 1) return parts.join('');
    return `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
  }
}
