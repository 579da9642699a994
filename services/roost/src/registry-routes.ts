import { httpStatusOf } from './http-status.js';
import { type Log, MurmurError, isReservedVersion } from '@murmur/shared';
import { type ArtifactStore, SHA256_HEADER, inspectArchive, maxEntryBytesFromEnv } from '@murmur/shared/artifacts';
import { bearerOf, tokenMatcher } from '@murmur/shared/node';
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';

/**
 * roost's registry over HTTP, in upstream's `/v1/artifacts` shape so any client of a Murmur
 * registry can use it:
 *
 * - `GET  /v1/artifacts`                      the index: every stored artifact's meta
 * - `GET  /v1/artifacts/{name}/{version}`     the bytes, with `x-murmur-sha256`
 * - `POST /v1/artifacts?name&version&runtime` publish (raw `.mur.zip` body)
 *
 * A published archive is opened with every guard and its manifest read before it is stored: roost
 * never keeps bytes that staging would refuse, and never stores an archive under a name its own
 * manifest disputes. Errors are `{"error": "<message>", "code": "E-…", "hint"?}`.
 */

export interface RegistryRoutesOptions {
  store: ArtifactStore;
  /** When set, publishing needs `authorization: Bearer <token>`; reading never does. */
  publishToken?: string | undefined;
  log: Log;
}

function errorBody(error: MurmurError): { error: string; code: string; hint?: string } {
  return { error: error.message, code: error.code, ...(error.hint ? { hint: error.hint } : {}) };
}

/** `local/worker/0.1.0` or `local%2Fworker/0.1.0` → name `local/worker`, version `0.1.0`. */
function nameAndVersion(rest: string): { name: string; version: string } | undefined {
  const segments = rest
    .split('/')
    .filter((segment) => segment !== '')
    .map((segment) => {
      try {
        return decodeURIComponent(segment);
      } catch {
        throw new MurmurError('E-REG-006', `'${segment.slice(0, 60)}' is not a name or version: its percent-escapes do not decode`, {
          path: segment,
          hint: 'escape a name as encodeURIComponent does, e.g. local%2Fworker',
        });
      }
    });
  const version = segments.pop();
  if (!version || segments.length === 0) return undefined;
  return { name: segments.join('/'), version };
}

/** Uploads roost reads and checks at once; each may be held whole in memory, up to the archive ceiling. */
export const UPLOADS_AT_ONCE = 4;

export function registryRoutes(options: RegistryRoutesOptions): Hono {
  // By digest, in constant time: neither the time a refusal takes nor a length check says how much of a guess was right.
  const publishers = options.publishToken === undefined ? undefined : tokenMatcher([options.publishToken]);
  const app = new Hono();
  const fail = (error: MurmurError) => ({ body: errorBody(error), status: httpStatusOf(error) });

  app.onError((error, context) => {
    if (error instanceof MurmurError) {
      const { body, status } = fail(error);
      return context.json(body, status);
    }
    // What failed is in roost's log: its message names roost's own files, which a client is not told.
    options.log.error({ err: error }, 'registry request failed');
    return context.json({ error: `roost failed to handle ${context.req.method} ${context.req.path.slice(0, 200)}; its log says why`, code: 'E-IO-003' }, 500);
  });

  app.get('/v1/artifacts', async (context) => context.json(await options.store.list()));

  app.get('/v1/artifacts/*', async (context) => {
    const rest = context.req.path.slice('/v1/artifacts/'.length);
    const parsed = nameAndVersion(rest);
    if (!parsed) return context.json({ error: 'expected /v1/artifacts/{name}/{version}', code: 'E-REG-001' }, 404);
    const platform = context.req.query('platform');
    const stored = await options.store.resolve(parsed.name, parsed.version, platform ?? 'unknown');
    if (!stored) {
      // A native artifact built for other platforms alone is not "not found": its client is told
      // which builds there are, where it was sent looking for a version nobody published.
      const builds = (await options.store.readMeta(parsed.name, parsed.version).catch(() => undefined))?.platforms ?? [];
      const error =
        builds.length > 0
          ? `artifact ${parsed.name}@${parsed.version} has no build for ${platform ? `platform ${platform.slice(0, 64)}` : 'a request that names no platform (?platform=os-arch)'}; it has ${builds.map(([os, arch]) => `${os}-${arch}`).join(', ')}`
          : `artifact ${parsed.name}@${parsed.version} not found in registry`;
      return context.json({ error, code: 'E-REG-001' }, 404);
    }
    // Served only if the bytes still match their digest: a corrupted store is reported, not passed on.
    if (stored.bytesSha256 !== stored.recordedSha256) {
      throw new MurmurError(
        'E-REG-002',
        `artifact integrity check failed for ${parsed.name}@${parsed.version}: the stored bytes no longer match their recorded sha256`,
      );
    }
    return context.body(new Uint8Array(stored.bytes), 200, { 'content-type': 'application/octet-stream', [SHA256_HEADER]: stored.recordedSha256 });
  });

  let uploading = 0;
  app.post(
    '/v1/artifacts',
    // Before the body is read: hono's limit buffers a body sent without a length (chunked) up to
    // its ceiling, 500 MB by default, and anyone could make roost hold that much without a token.
    async (context, next) => {
      if (publishers !== undefined && !publishers.admits(bearerOf(context.req.header('authorization')))) {
        return context.json({ error: 'unauthorized: publishing needs the roost token', code: 'E-ROOST-001' }, 401);
      }
      const name = context.req.query('name')?.trim();
      const version = context.req.query('version')?.trim();
      if (!name || !version) return context.json({ error: 'name and version query parameters are required', code: 'E-MAN-001' }, 400);
      if (isReservedVersion(version)) throw new MurmurError('E-REG-004', `reserved artifact version '${version}' is not allowed`);
      // Each upload is held whole while it is checked (up to the archive's ceiling): a few at once,
      // and the rest told to come back, where eight of 450 MB held 5 GB of roost's memory.
      if (uploading >= UPLOADS_AT_ONCE)
        return context.json(
          {
            error: `roost is taking ${UPLOADS_AT_ONCE} uploads already`,
            code: 'E-ROOST-002',
            hint: 'publish again in a moment',
          },
          503,
          { 'retry-after': '1' },
        );
      uploading += 1;
      try {
        await next();
      } finally {
        uploading -= 1;
      }
    },
    bodyLimit({
      maxSize: maxEntryBytesFromEnv(),
      onError: (context) => context.json({ error: `the artifact is larger than the ${maxEntryBytesFromEnv()}-byte ceiling`, code: 'E-ART-002' }, 413),
    }),
    async (context) => {
      const name = context.req.query('name')?.trim() as string;
      const version = context.req.query('version')?.trim() as string;
      const bytes = new Uint8Array(await context.req.arrayBuffer());
      const platforms = context.req.queries('platform') ?? [];
      if (platforms.length > 1)
        throw new MurmurError('E-REG-006', `an upload is one platform’s build; this one names ${platforms.length} (${platforms.slice(0, 4).join(', ')})`);
      const inspected = await inspectArchive(bytes, `${name}@${version}`, { publishing: true, ...(platforms[0] ? { platform: platforms[0] } : {}) });
      // A native build is one platform's: with none named it was filed under roost's own, which is
      // not the publisher's (a darwin binary sent by curl was listed as linux-x86_64).
      if (inspected.meta.runtime === 'native' && platforms.length === 0)
        throw new MurmurError('E-REG-006', `${name}@${version} is a native artifact, and its upload names no platform`, {
          path: 'platform',
          hint: "name the platform it was built for, ?platform=<os>-<arch> (e.g. linux-x86_64); 'mur publish --registry' sends it",
        });
      if (inspected.meta.name !== name || inspected.meta.version !== version) {
        throw new MurmurError('E-MAN-003', `the archive's murmur.yaml names ${inspected.meta.name}@${inspected.meta.version}, not ${name}@${version}`);
      }
      // What is stored and indexed is what the archive is: a client's word for it may agree, or be
      // refused — never believed over the archive (a skill listed as a native driver, a platform
      // listed with no file for it).
      for (const [parameter, claimed, actual] of [
        ['runtime', context.req.query('runtime')?.trim(), inspected.meta.runtime],
        ['artifact_runtime', context.req.query('artifact_runtime')?.trim(), inspected.meta.artifact_runtime],
      ] as const) {
        if (claimed && claimed !== actual)
          throw new MurmurError('E-MAN-003', `${parameter}=${JSON.stringify(claimed.slice(0, 40))} does not match the archive, which is ${actual}`, {
            path: parameter,
          });
      }
      const published = await options.store.publish(bytes, inspected.meta);
      options.log.info({ artifact: `${name}@${version}`, sha256: published.sha256 }, 'published');
      return context.json({ artifact_id: `${name}@${version}`, sha256: published.sha256 }, 201);
    },
  );

  return app;
}
