import { randomBytes } from 'node:crypto';
import { existsSync, promises as fs } from 'node:fs';
import http from 'node:http';
import { crc32, createDeflateRaw } from 'node:zlib';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryIndexSchema } from '@murmur/shared';
import { ArtifactStore, MAX_ENTRIES, inspectArchive, pinFirstRun, readLockfile, sha256Hex, writeLockfile, writeMurZip } from '@murmur/shared/artifacts';
import { capsuleProject, componentArtifact, skillArtifact } from './support/artifacts.js';
import { listTree, tempDir } from './support/fs.js';
import { capsuleWat, toolWat } from './support/guests.js';
import { rawZip } from './support/raw-zip.js';
import { rawExchange } from './support/servers.js';
import { type ServiceProcess, runMur, startService } from './support/processes.js';
import { UPLOADS_AT_ONCE } from '../services/roost/src/registry-routes.js';

/**
 * roost serving the registry over HTTP, and `mur` using it as a remote registry: publish,
 * install, list, and staging that falls back to roost when no local store has the artifact.
 */
describe('roost as a remote registry', () => {
  let roost: ServiceProcess;
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let registryPath: string;
  let toolZip: string;
  const token = 'publish-token-for-tests';

  beforeAll(async () => {
    scratch = await tempDir('murmur-registry-');
    registryPath = path.join(scratch.dir, 'roost-registry');
    roost = await startService('roost', {
      MURMUR_ROOST_REGISTRY_PATH: registryPath,
      MURMUR_ROOST_TOKEN: token,
      MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES: String(1024 * 1024),
    });
    toolZip = path.join(scratch.dir, 'echo-tool-0.1.0.mur.zip');
    await fs.writeFile(toolZip, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes));
  });

  afterAll(async () => {
    await roost?.stop();
    await scratch?.cleanup();
  });

  /** A user's machine: its own home (global store, cache) and nothing installed. */
  function user(name: string) {
    const home = path.join(scratch.dir, name);
    return { MURMUR_HOME: home, MURMUR_ROOST_TOKEN: token };
  }

  it('publishes to roost with mur publish --registry, and refuses to overwrite a published version', async () => {
    const first = await runMur(['publish', toolZip, '--registry', roost.url], { env: user('publisher') });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout.trim()).toBe('Published echo-tool@0.1.0');
    const stored = await listTree(registryPath);
    expect(stored).toEqual([
      'echo-tool/',
      'echo-tool/0.1.0/',
      'echo-tool/0.1.0/echo-tool-0.1.0.meta.json',
      'echo-tool/0.1.0/echo-tool-0.1.0.mur.zip',
      'echo-tool/0.1.0/echo-tool-0.1.0.sha256',
    ]);

    const again = await runMur(['publish', toolZip, '--registry', roost.url], { env: user('publisher') });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('artifact echo-tool@0.1.0 already exists in registry (the store roost serves)');
    // The registry's files are roost's own: a publisher is not told where roost keeps them.
    expect(again.stderr).not.toContain(registryPath);
    expect(await listTree(registryPath)).toEqual(stored);
  });

  it('publishes an artifact whose description is as long as build allows, which travels in the archive and not in the URL', async () => {
    // 2 100 characters that percent-encode to nine bytes each: past a server's 16 KiB of headers in a query.
    const described = path.join(scratch.dir, 'described-0.1.0.mur.zip');
    const manifest = `name: described\nversion: "0.1.0"\nruntime: tool\ndescription: ${'説'.repeat(2_100)}\nrequires_files: [described.wasm]\n`;
    await fs.writeFile(
      described,
      await writeMurZip([
        { name: 'murmur.yaml', data: Buffer.from(manifest) },
        { name: 'described.wasm', data: (await toolWat()).bytes },
      ]),
    );
    const result = await runMur(['publish', described, '--registry', roost.url], { env: user('describer') });
    expect(result.code, result.stderr).toBe(0);
    const index = RegistryIndexSchema.parse(await (await fetch(`${roost.url}/v1/artifacts`)).json());
    expect(index.find((meta) => meta.name === 'described')?.description).toBe('説'.repeat(2_100));
  });

  it('serves the index and the bytes with their digest in x-murmur-sha256', async () => {
    const index = RegistryIndexSchema.parse(await (await fetch(`${roost.url}/v1/artifacts`)).json());
    expect(index.map((meta) => [meta.name, meta.version, meta.runtime, meta.artifact_runtime])).toContainEqual(['echo-tool', '0.1.0', 'wasm', 'tool']);
    const response = await fetch(`${roost.url}/v1/artifacts/echo-tool/0.1.0`);
    expect(response.status).toBe(200);
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(response.headers.get('x-murmur-sha256')).toBe(sha256Hex(bytes));
    expect(Buffer.from(bytes).equals(await fs.readFile(toolZip))).toBe(true);
  });

  it('answers 404 with E-REG-001 for an artifact it does not have', async () => {
    const response = await fetch(`${roost.url}/v1/artifacts/ghost/1.0.0`);
    expect(response.status).toBe(404);
    expect(await response.json()).toMatchObject({ code: 'E-REG-001' });
    // mur install from it says to publish there, not to the global store a plain publish fills.
    const install = await runMur(['install', 'ghost@1.0.0', '-g', '--registry', roost.url], { env: user('installer') });
    expect(install.code).toBe(1);
    expect(install.stderr).toContain(`hint: publish it there first ('mur publish <zip> --registry ${roost.url}')`);
  });

  it('answers every path and method it has no route for with 404 and a code, as JSON', async () => {
    for (const [method, where] of [
      ['GET', '/nope'],
      ['PUT', '/v1/artifacts/echo-tool/0.1.0'],
      ['DELETE', '/v1/artifacts/echo-tool/0.1.0'],
    ] as const) {
      const response = await fetch(`${roost.url}${where}`, { method, headers: { authorization: `Bearer ${token}` } });
      expect(response.status, `${method} ${where}`).toBe(404);
      expect(await response.json()).toEqual({ error: `roost has no ${method} ${where}`, code: 'E-ROOST-002' });
    }
    // Its own routes beside them still answer.
    expect((await fetch(`${roost.url}/health`)).status).toBe(200);
  });

  it('answers /health and /metrics only for loopback names, as its registry: a page reaching them through a name of its own reads neither', async () => {
    const port = new URL(roost.url).port;
    for (const where of ['/health', '/metrics']) {
      const rebound = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        // fetch sets Host from the URL; a page rebound to 127.0.0.1 sends its own name.
        http
          .get({ host: '127.0.0.1', port, path: where, headers: { host: `attacker.example:${port}` } }, (response) => {
            let body = '';
            response.on('data', (chunk) => (body += chunk));
            response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
          })
          .on('error', reject);
      });
      expect(rebound.status, where).toBe(421);
      expect(JSON.parse(rebound.body)).toMatchObject({ code: 'E-SVC-001' });
      expect(rebound.body).not.toContain('nats://');
      expect((await fetch(`${roost.url}${where}`)).status, where).toBe(200);
      // A target in absolute form names the authority it is for, whatever Host says (RFC 9112).
      const absolute = await rawExchange(
        Number(port),
        `GET http://attacker.example:${port}${where} HTTP/1.1\r\nHost: localhost:${port}\r\nConnection: close\r\n\r\n`,
        2_000,
      );
      expect(absolute.received, where).toMatch(/^HTTP\/1\.1 421 /);
    }
  });

  it('tells a publisher what roost refused of the archive by roost’s own code, not as a roost it cannot reach', async () => {
    const large = path.join(scratch.dir, 'large-1.0.0.mur.zip');
    // Two entries each under the 1 MiB ceiling, together past it: the upload is refused whole.
    const noise = () => randomBytes(700 * 1024);
    await fs.writeFile(
      large,
      await writeMurZip([
        { name: 'murmur.yaml', data: Buffer.from('name: large\nversion: 1.0.0\nruntime: skill\n') },
        { name: 'skill.md', data: noise() },
        { name: 'more.md', data: noise() },
      ]),
    );
    const result = await runMur(['publish', large, '--registry', roost.url], { env: user('publisher') });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `error[E-ART-002]: roost at ${roost.url} refused publishing large@1.0.0: the artifact is larger than the 1048576-byte ceiling`,
    );
    expect(result.stderr).not.toContain('roost is running');
  });

  it('does not send a publish on where a redirect points, and says where it led', async () => {
    const redirecting = http.createServer((request, response) => {
      request.resume();
      response.writeHead(308, { location: 'https://registry.example/v1/artifacts?name=echo-tool' }).end();
    });
    await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(redirecting.address() as { port: number }).port}`;
    try {
      const result = await runMur(['publish', toolZip, '--registry', url], { env: user('publisher') });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(
        `error[E-ROOST-001]: roost at ${url} answered POST /v1/artifacts with 308, a redirect to https://registry.example/v1/artifacts, which is not followed`,
      );
      expect(result.stderr).toContain('name the registry by the URL it redirects to');
    } finally {
      await new Promise((resolve) => redirecting.close(resolve));
    }
  });

  it('says a publish was not done when the server answers 201 without the digest of what was sent, or with more than a digest, reading no more than its ceiling', async () => {
    const answers: Record<string, (response: http.ServerResponse) => void> = {
      '/wrong': (response) => response.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ sha256: 'a'.repeat(64) })),
      '/empty': (response) => response.writeHead(201).end(),
      // Endless: a server that answers for ever is cut at the ceiling, not read into memory.
      '/endless': (response) => {
        response.writeHead(201, { 'content-type': 'application/json' });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        const write = (): void => {
          while (!response.destroyed && response.write(chunk));
          if (!response.destroyed) response.once('drain', write);
        };
        write();
      },
    };
    const hostile = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => answers[new URL(request.url ?? '/', 'http://x').pathname.replace('/v1/artifacts', '')]?.(response));
    });
    await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(hostile.address() as { port: number }).port}`;
    try {
      for (const [prefix, said] of [
        ['/wrong', 'without the digest of the bytes sent'],
        ['/empty', 'without the digest of the bytes sent'],
        ['/endless', 'E-ROOST-001'],
      ] as const) {
        const result = await runMur(['publish', toolZip, '--registry', `${base}${prefix}`], { env: user('publisher') });
        expect(result.code, prefix).toBe(1);
        expect(result.stderr, prefix).toContain(said);
        expect(result.stdout, prefix).not.toContain('Published');
      }
    } finally {
      hostile.closeAllConnections();
      await new Promise((resolve) => hostile.close(resolve));
    }
  });

  it('takes a few uploads at once and tells the next to come back (503, Retry-After), then takes it once one has ended', async () => {
    const url = new URL(`/v1/artifacts?name=slow-tool&version=0.1.0`, roost.url);
    // Uploads that stall half-way: each holds its place until its client goes.
    const stalled = Array.from({ length: UPLOADS_AT_ONCE }, () => {
      const request = http.request(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': '100000' },
      });
      request.on('error', () => {});
      request.write(Buffer.alloc(1000));
      return request;
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const refused = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: Buffer.alloc(10) });
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(await refused.json()).toMatchObject({ code: 'E-ROOST-002', error: `roost is taking ${UPLOADS_AT_ONCE} uploads already` });
    } finally {
      for (const request of stalled) request.destroy();
    }
    // Their places are given back as they go. (A name no longer than echo-tool's: mur list's columns are asserted below.)
    const zip = path.join(scratch.dir, 'unstalled-0.1.0.mur.zip');
    await fs.writeFile(zip, await componentArtifact('unstalled', '0.1.0', (await toolWat()).bytes));
    let published: Awaited<ReturnType<typeof runMur>> | undefined;
    for (let attempt = 0; attempt < 20 && published?.code !== 0; attempt += 1) {
      if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 100));
      published = await runMur(['publish', zip, '--registry', roost.url], { env: user('publisher') });
    }
    expect(published?.code, published?.stderr).toBe(0);
  });

  it('refuses to publish without the token it was started with', async () => {
    const result = await runMur(['publish', toolZip, '--registry', roost.url], { env: { MURMUR_HOME: path.join(scratch.dir, 'anonymous') } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-ROOST-001]');
    expect(result.stderr).toContain('MURMUR_ROOST_TOKEN');
  });

  it('refuses a publish without the token before reading its body, even one sent without a length', async () => {
    // Chunked, and never ended: roost must answer from the headers alone, not once it has read (and held) the body.
    const request = http.request(`${roost.url}/v1/artifacts?name=x&version=1.0.0`, { method: 'POST', headers: { 'transfer-encoding': 'chunked' } });
    const answered = new Promise<{ status: number; body: string }>((resolve, reject) => {
      request.on('response', (response) => {
        let body = '';
        response.on('data', (chunk: Buffer) => {
          body += chunk.toString();
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      });
      request.on('error', reject);
    });
    request.write(Buffer.alloc(64 * 1024, 1));
    const timedOut = new Promise<'no answer'>((resolve) => setTimeout(() => resolve('no answer'), 5_000).unref());
    try {
      const response = await Promise.race([answered, timedOut]);
      expect(response, 'roost answered while the body was still being sent').not.toBe('no answer');
      expect(response).toMatchObject({ status: 401 });
      expect(JSON.parse((response as { body: string }).body)).toMatchObject({ code: 'E-ROOST-001' });
    } finally {
      request.destroy();
    }
  });

  it('takes no publish from a web page, even one that holds the token: a request with an Origin is 403', async () => {
    const before = await listTree(registryPath);
    const response = await fetch(`${roost.url}/v1/artifacts?name=echo-tool&version=0.9.0`, {
      method: 'POST',
      body: await fs.readFile(toolZip),
      headers: { authorization: `Bearer ${token}`, origin: 'http://attacker.example', 'content-type': 'text/plain' },
    });
    expect(response.status).toBe(403);
    expect(await response.json()).toMatchObject({ code: 'E-ROOST-001', error: expect.stringContaining('roost takes no POST from a web page') });
    expect(await listTree(registryPath)).toEqual(before);
  });

  it('answers only for loopback names: a web page reaching roost through a name of its own (DNS rebinding) reads nothing of the registry', async () => {
    const { port } = new URL(roost.url);
    const get = (requestPath: string, host: string): Promise<{ status: number; body: string }> =>
      new Promise((resolve, reject) => {
        const request = http.get({ host: '127.0.0.1', port, path: requestPath, headers: { host } }, (response) => {
          let body = '';
          response.on('data', (chunk: Buffer) => {
            body += chunk.toString();
          });
          response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
        });
        request.on('error', reject);
      });
    if (!existsSync(path.join(registryPath, 'echo-tool', '0.1.0'))) {
      const published = await runMur(['publish', toolZip, '--registry', roost.url], { env: user('rebinding') });
      expect(published.code, published.stderr).toBe(0);
    }
    for (const requestPath of ['/v1/artifacts', '/v1/artifacts/echo-tool/0.1.0']) {
      const refused = await get(requestPath, `attacker.example:${port}`);
      expect(refused.status, requestPath).toBe(421);
      expect(JSON.parse(refused.body)).toMatchObject({ code: 'E-ROOST-002', error: expect.stringContaining("'attacker.example:") });
      for (const host of [`localhost:${port}`, `127.0.0.1:${port}`]) expect((await get(requestPath, host)).status, `${requestPath} as ${host}`).toBe(200);
      // A target in absolute form names the authority it is for, whatever Host says (RFC 9112).
      const absolute = await rawExchange(
        Number(port),
        `GET http://attacker.example:${port}${requestPath} HTTP/1.1\r\nHost: localhost:${port}\r\nConnection: close\r\n\r\n`,
        2_000,
      );
      expect(absolute.received, requestPath).toMatch(/^HTTP\/1\.1 421 /);
    }
  });

  it('refuses a token that is almost the one it was started with, alike', async () => {
    const almost = `${token.slice(0, -1)}${token.endsWith('s') ? 't' : 's'}`;
    for (const presented of [almost, `${token}x`, token.slice(0, -1)]) {
      const response = await fetch(`${roost.url}/v1/artifacts?name=echo-tool&version=9.9.9`, {
        method: 'POST',
        body: await fs.readFile(toolZip),
        headers: { authorization: `Bearer ${presented}` },
      });
      expect(response.status).toBe(401);
      expect(await response.json()).toMatchObject({ code: 'E-ROOST-001' });
    }
  });

  async function post(query: string, body: Uint8Array): Promise<{ status: number; body: { code?: string; error?: string } }> {
    const response = await fetch(`${roost.url}/v1/artifacts?${query}`, { method: 'POST', body, headers: { authorization: `Bearer ${token}` } });
    return { status: response.status, body: (await response.json()) as { code?: string; error?: string } };
  }

  it('refuses a reserved version, an archive with an unsafe entry, and an archive that names another artifact, storing none of them', async () => {
    const before = await listTree(registryPath);
    const reserved = await post('name=echo-tool&version=latest', await fs.readFile(toolZip));
    expect(reserved).toMatchObject({ status: 422, body: { code: 'E-REG-004' } });
    const slip = rawZip([
      { name: 'murmur.yaml', data: Buffer.from('name: slip\nversion: 1.0.0\nruntime: skill\n') },
      { name: '../../escape.md', data: Buffer.from('gotcha') },
    ]);
    const unsafe = await post('name=slip&version=1.0.0', slip);
    expect(unsafe).toMatchObject({ status: 422, body: { code: 'E-ART-001' } });
    expect(unsafe.body.error).toContain('../../escape.md');
    // A name holding a C1 control (U+009B, a terminal's one-character CSI) is as unsafe as one holding ESC.
    for (const control of ['\u001b', '\u007f', '\u009b']) {
      const controlled = await post(
        'name=slip&version=1.0.0',
        rawZip([
          { name: 'murmur.yaml', data: Buffer.from('name: slip\nversion: 1.0.0\nruntime: skill\n') },
          { name: `notes${control}[2J.md`, data: Buffer.from('gotcha') },
        ]),
      );
      expect(controlled, JSON.stringify(control)).toMatchObject({ status: 422, body: { code: 'E-ART-001' } });
      expect(controlled.body.error).toContain('has an unsafe path: contains a control character');
    }
    const mislabelled = await post('name=other-tool&version=0.1.0', await fs.readFile(toolZip));
    expect(mislabelled).toMatchObject({ status: 422, body: { code: 'E-MAN-003' } });
    expect(await listTree(registryPath)).toEqual(before);
  });

  it('stores what an archive is, not what its upload says: a runtime the archive is not, two platforms, a platform of a non-native archive are refused', async () => {
    const before = await listTree(registryPath);
    const bytes = await fs.readFile(toolZip);
    for (const [query, code, words] of [
      ['runtime=native', 'E-MAN-003', 'runtime="native" does not match the archive, which is wasm'],
      ['artifact_runtime=driver%1b%5b31m', 'E-MAN-003', 'does not match the archive, which is tool'],
      ['platform=linux-aarch64&platform=darwin-x86_64', 'E-REG-006', 'an upload is one platform’s build; this one names 2'],
      ['platform=linux-x86_64', 'E-MAN-003', 'a platform build must be a native artifact; this one is wasm'],
    ] as const) {
      const refused = await post(`name=echo-tool&version=0.1.0&${query}`, bytes);
      expect(refused, query).toMatchObject({ status: 422, body: { code } });
      expect(refused.body.error, query).toContain(words);
    }
    expect(await listTree(registryPath)).toEqual(before);
  });

  it('takes a native build only for the platform its upload names, and tells a client asking for another which builds there are', async () => {
    const native = skill('name: farside\nversion: 1.0.0\nruntime: skill\nexecution: native\n', [{ name: 'bin/farside', data: Buffer.from('#!/bin/sh\n') }]);
    const before = await listTree(registryPath);
    // With no platform it was filed under roost's own, which is not the publisher's.
    const unnamed = await post('name=farside&version=1.0.0', native);
    expect(unnamed).toMatchObject({ status: 422, body: { code: 'E-REG-006' } });
    expect(unnamed.body.error).toBe('farside@1.0.0 is a native artifact, and its upload names no platform');
    expect(await listTree(registryPath)).toEqual(before);
    expect((await post('name=farside&version=1.0.0&platform=darwin-aarch64', native)).status).toBe(201);
    for (const [query, said] of [
      ['', 'artifact farside@1.0.0 has no build for a request that names no platform (?platform=os-arch); it has darwin-aarch64'],
      ['?platform=linux-x86_64', 'artifact farside@1.0.0 has no build for platform linux-x86_64; it has darwin-aarch64'],
    ]) {
      const response = await fetch(`${roost.url}/v1/artifacts/farside/1.0.0${query}`);
      expect(response.status).toBe(404);
      expect(await response.json()).toEqual({ error: said, code: 'E-REG-001' });
    }
    expect((await fetch(`${roost.url}/v1/artifacts/farside/1.0.0?platform=darwin-aarch64`)).status).toBe(200);
  });

  it('refuses a platform that is not os-arch and a name whose escapes do not decode, serving and storing nothing outside its store', async () => {
    const before = await listTree(registryPath);
    const climbing = await post('name=echo-tool&version=0.2.0&platform=linux-x/../../../escaped/pwn', await fs.readFile(toolZip));
    expect(climbing.status).toBe(422);
    const secret = await fetch(`${roost.url}/v1/artifacts/echo-tool/0.1.0?platform=${encodeURIComponent('x/../../../../secret/private-1.0')}`);
    expect(secret.status).toBe(422);
    expect(await secret.json()).toMatchObject({ code: 'E-REG-006' });
    const malformed = await fetch(`${roost.url}/v1/artifacts/%E0%A4%A/1.0`);
    expect(malformed.status).toBe(422);
    expect(await malformed.json()).toMatchObject({ code: 'E-REG-006' });
    expect(await listTree(registryPath)).toEqual(before);
    expect(existsSync(path.join(scratch.dir, 'escaped'))).toBe(false);
  });

  it('refuses a body over its size ceiling without storing it', async () => {
    const big = await writeMurZip([
      { name: 'murmur.yaml', data: Buffer.from('name: big\nversion: 1.0.0\nruntime: skill\n') },
      { name: 'skill.md', data: Buffer.alloc(2 * 1024 * 1024, 7) },
    ]);
    // Stored (not deflated) bytes would be over the ceiling; send something incompressible-looking.
    const noise = Buffer.concat([big, Buffer.from(Array.from({ length: 1024 * 1024 + 10 }, (_, index) => (index * 7919) % 251))]);
    const response = await post('name=big&version=1.0.0', noise);
    expect(response.status).toBe(413);
    expect(response.body.code).toBe('E-ART-002');
    expect((await listTree(registryPath)).some((entry) => entry.startsWith('big'))).toBe(false);
  });

  it('lists roost’s index with mur list --registry', async () => {
    const result = await runMur(['list', '--registry', roost.url], { env: user('lister') });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.split('\n')[0]).toBe('NAME       VERSION  RUNTIME  PLATFORM');
    expect(result.stdout).toContain('echo-tool  0.1.0    tool     wasm');
  });

  it('installs from roost into the project store and pins the artifact in murmur.lock', async () => {
    const project = path.join(scratch.dir, 'installing-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['install', 'echo-tool@0.1.0', '--registry', roost.url], { cwd: project, env: user('installer') });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('Installed echo-tool@0.1.0 →');
    const lock = await readLockfile(path.join(project, 'murmur.lock'));
    expect(lock?.artifacts).toEqual([{ name: 'echo-tool', resolved_version: '0.1.0', sha256: { wasm: sha256Hex(await fs.readFile(toolZip)) } }]);
    expect(await listTree(path.join(project, '.murmur', 'artifacts'))).toContain('echo-tool/0.1.0/echo-tool-0.1.0.mur.zip');
  });

  it("takes the bytes a lock pins from the source that has them, passing a global store's other build, and names that build when no source has them", async () => {
    const env = user('pinned-elsewhere');
    const project = path.join(scratch.dir, 'pinned-elsewhere-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n', (await capsuleWat()).bytes);
    const pinned = sha256Hex(await fs.readFile(toolZip));
    const lockText = `lock_version: 1\nartifacts:\n  - name: echo-tool\n    resolved_version: 0.1.0\n    sha256:\n      wasm: ${pinned}\n`;
    await fs.writeFile(path.join(project, 'murmur.lock'), lockText);
    // An earlier build of the same version, in this user's global store (looked in first).
    const rebuilt = path.join(scratch.dir, 'echo-tool-other-build', 'echo-tool-0.1.0.mur.zip');
    await fs.mkdir(path.dirname(rebuilt), { recursive: true });
    await fs.writeFile(rebuilt, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes, 'tool', 'tags: [other-build]\n'));
    expect((await runMur(['install', '-g', rebuilt], { env })).code).toBe(0);
    const other = sha256Hex(await fs.readFile(rebuilt));
    // No source but the global store: refused, naming where the other bytes are.
    const refused = await runMur(['install', 'echo-tool@0.1.0'], { cwd: project, env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`error[E-REG-005]: murmur.lock pins echo-tool@0.1.0 as sha256 ${pinned}, and no source holds those bytes: `);
    expect(refused.stderr).toContain(`echo-tool-0.1.0.mur.zip (sha256 ${other}) holds others; nothing was installed`);
    expect(refused.stderr).toContain('hint: install the pinned bytes from the registry they came from (--registry <roost url>)');
    expect(existsSync(path.join(project, '.murmur', 'artifacts'))).toBe(false);
    // With the roost that published them among the sources: its bytes, the lock as it was.
    const installed = await runMur(['install', 'echo-tool@0.1.0'], { cwd: project, env: { ...env, MURMUR_ROOST_URL: roost.url } });
    expect(installed.code, installed.stderr).toBe(0);
    expect(sha256Hex(await fs.readFile(path.join(project, '.murmur', 'artifacts', 'echo-tool', '0.1.0', 'echo-tool-0.1.0.mur.zip')))).toBe(pinned);
    expect(await fs.readFile(path.join(project, 'murmur.lock'), 'utf8')).toBe(lockText);
  });

  it('publishes to and installs from the roost the project’s registry.remote_url names, with no --registry, its token given only where the user names that roost', async () => {
    const project = path.join(scratch.dir, 'remote-url-project');
    await capsuleProject(project, `name: app\nversion: 0.1.0\nregistry:\n  remote_url: ${roost.url}\n`, (await capsuleWat()).bytes);
    const zip = path.join(scratch.dir, 'remote-notes-1.0.0.mur.zip');
    await fs.writeFile(zip, await skillArtifact('remote-notes', '1.0.0', '# notes\n'));
    // The project alone naming a registry does not give it the user's token: a cloned project would collect it.
    const withheld = await runMur(['publish', zip], { cwd: project, env: user('remote-user') });
    expect(withheld.code).toBe(1);
    expect(withheld.stderr).toContain(`error[E-ROOST-001]: roost at ${roost.url} refused publishing remote-notes@1.0.0`);
    expect(withheld.stderr).toContain(
      `hint: MURMUR_ROOST_TOKEN goes only to a registry you name, and ${roost.url} is named by murmur.yaml's registry settings`,
    );
    expect(existsSync(path.join(registryPath, 'remote-notes'))).toBe(false);
    const published = await runMur(['publish', zip], { cwd: project, env: { ...user('remote-user'), MURMUR_ROOST_URL: `${roost.url}/` } });
    expect(published.code, published.stderr).toBe(0);
    expect(existsSync(path.join(registryPath, 'remote-notes', '1.0.0'))).toBe(true);
    // The user's own stores do not have it: the install finds it where the project says.
    const installed = await runMur(['install', 'remote-notes@1.0.0'], { cwd: project, env: user('remote-user') });
    expect(installed.code, installed.stderr).toBe(0);
    expect((await readLockfile(path.join(project, 'murmur.lock')))?.artifacts.map((entry) => entry.name)).toEqual(['remote-notes']);
  });

  it('refuses a registry.default that is neither local nor remote, naming the file and the field', async () => {
    const project = path.join(scratch.dir, 'bogus-default-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\nregistry:\n  default: bogus\n', (await capsuleWat()).bytes);
    for (const command of [
      ['install', 'remote-notes@1.0.0'],
      ['publish', toolZip],
    ]) {
      const result = await runMur(command, { cwd: project, env: user('bogus-user') });
      expect(result.code, command[0]).toBe(1);
      expect(result.stderr).toContain(`error[E-IO-003]: ${path.join(project, 'murmur.yaml')}: registry.default must be 'local' or 'remote', got 'bogus'`);
    }
  });

  it('installs with -g or from a local zip without pinning, and two installs at once keep both pins', async () => {
    const project = path.join(scratch.dir, 'pinning-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const env = user('pinner');
    const global = await runMur(['install', '-g', 'echo-tool@0.1.0', '--registry', roost.url], { cwd: project, env });
    expect(global.code, global.stderr).toBe(0);
    const local = await runMur(['install', toolZip], { cwd: project, env });
    expect(local.code, local.stderr).toBe(0);
    expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
    const other = path.join(scratch.dir, 'other-tool-0.1.0.mur.zip');
    await fs.writeFile(other, await componentArtifact('other-tool', '0.1.0', (await toolWat()).bytes));
    expect((await runMur(['publish', other, '--registry', roost.url], { env })).code).toBe(0);
    const both = await Promise.all(
      ['echo-tool@0.1.0', 'other-tool@0.1.0'].map((reference) => runMur(['install', reference, '--registry', roost.url], { cwd: project, env })),
    );
    for (const result of both) expect(result.code, result.stderr).toBe(0);
    const lock = await readLockfile(path.join(project, 'murmur.lock'));
    expect(lock?.artifacts.map((entry) => entry.name).sort()).toEqual(['echo-tool', 'other-tool']);
    expect(existsSync(path.join(project, 'murmur.lock.writing'))).toBe(false);
  });

  it('says when an install replaces other bytes under the same name and version, and not when it installs the same again', async () => {
    const env = user('replacer');
    expect((await runMur(['install', '-g', toolZip], { env })).code).toBe(0);
    const again = await runMur(['install', '-g', toolZip], { env });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).not.toContain('W-REG-001');
    const other = path.join(scratch.dir, 'echo-tool-rebuilt', 'echo-tool-0.1.0.mur.zip');
    await fs.mkdir(path.dirname(other), { recursive: true });
    await fs.writeFile(other, await componentArtifact('echo-tool', '0.1.0', (await toolWat()).bytes, 'tool', 'tags: [rebuilt]\n'));
    const replacing = await runMur(['install', '-g', other], { env });
    expect(replacing.code, replacing.stderr).toBe(0);
    expect(replacing.stderr).toContain(`warning[W-REG-001]: echo-tool@0.1.0 at `);
    expect(replacing.stderr).toContain(`held other bytes (sha256 ${sha256Hex(await fs.readFile(toolZip))}), which this install replaced`);
  });

  it('refuses to install into a project store reached through a link, as staging would refuse it, writing nothing there', async () => {
    const project = path.join(scratch.dir, 'linked-store-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const elsewhere = path.join(scratch.dir, 'elsewhere-store');
    await fs.mkdir(elsewhere);
    await fs.symlink(elsewhere, path.join(project, '.murmur'));
    const result = await runMur(['install', toolZip], { cwd: project, env: user('linker') });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("error[E-PRJ-002]: the project store's '.murmur' is a symlink");
    expect(await fs.readdir(elsewhere)).toEqual([]);
    expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
  });

  it("refuses to install through a link at the artifact's own directory in the project store, or at its version's, writing nothing there", async () => {
    for (const linked of [['echo-tool'], ['echo-tool', '0.1.0']]) {
      const project = path.join(scratch.dir, `linked-${linked.length}-project`);
      await capsuleProject(project, 'name: app\nversion: 0.1.0\n', (await capsuleWat()).bytes);
      const elsewhere = path.join(scratch.dir, `elsewhere-${linked.length}`);
      await fs.mkdir(elsewhere);
      const link = path.join(project, '.murmur', 'artifacts', ...linked);
      await fs.mkdir(path.dirname(link), { recursive: true });
      await fs.symlink(elsewhere, link);
      const result = await runMur(['install', toolZip], { cwd: project, env: user(`linker-${linked.length}`) });
      expect(result.code, result.stderr).toBe(1);
      expect(result.stderr).toContain(`error[E-PRJ-002]: the project store's '${path.join('.murmur', 'artifacts', ...linked)}' is a symlink`);
      expect(await fs.readdir(elsewhere)).toEqual([]);
      expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
    }
  });

  it('refuses to install bytes that are another artifact than the one named, writing nothing', async () => {
    const env = user('mislabelled');
    // A store that holds other-tool's archive under echo-tool's name and version.
    const version = path.join(env.MURMUR_HOME, 'artifacts', 'echo-tool', '0.3.0');
    await fs.mkdir(version, { recursive: true });
    const bytes = await componentArtifact('other-tool', '0.3.0', (await toolWat()).bytes);
    await fs.writeFile(path.join(version, 'echo-tool-0.3.0.mur.zip'), bytes);
    await fs.writeFile(path.join(version, 'echo-tool-0.3.0.sha256'), sha256Hex(bytes));
    const project = path.join(scratch.dir, 'mislabelled-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\n', (await capsuleWat()).bytes);
    const result = await runMur(['install', 'echo-tool@0.3.0'], { cwd: project, env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-REG-002]');
    expect(result.stderr).toContain('holds other-tool@0.3.0 under echo-tool@0.3.0');
    expect(existsSync(path.join(project, '.murmur', 'artifacts'))).toBe(false);
    expect(existsSync(path.join(project, 'murmur.lock'))).toBe(false);
  });

  it('stages a capsule whose artifact only roost has, when MURMUR_ROOST_URL names it', async () => {
    const project = path.join(scratch.dir, 'staging-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\nartifacts:\n  - name: echo-tool\n    version: 0.1.0\n', (await capsuleWat()).bytes);
    const withoutRoost = await runMur(['stage', project, '--json'], { env: user('stager-machine') });
    expect(withoutRoost.code).toBe(1);
    expect(withoutRoost.stderr).toContain('error[E-RUN-008]');
    const withRoost = await runMur(['stage', project, '--json'], { env: { ...user('stager-machine'), MURMUR_ROOST_URL: roost.url } });
    expect(withRoost.code, withRoost.stderr).toBe(0);
    const plan = JSON.parse(withRoost.stdout) as { artifacts: Array<{ name: string; origin: string }> };
    expect(plan.artifacts).toMatchObject([{ name: 'echo-tool', origin: 'roost' }]);
  });

  it('tells what it cannot find to publish to the roost staging reads, at the URL its user reaches that roost by', async () => {
    const project = path.join(scratch.dir, 'missing-project');
    await capsuleProject(project, 'name: app\nversion: 0.1.0\nartifacts:\n  - name: never-published\n    version: 0.1.0\n', (await capsuleWat()).bytes);
    const direct = await runMur(['stage', project, '--json'], { env: { ...user('stack-user'), MURMUR_ROOST_URL: roost.url } });
    expect(direct.code).toBe(1);
    expect(direct.stderr).toContain('error[E-RUN-008]');
    expect(direct.stderr).toContain(`or publish each to the roost staging reads ('mur publish <zip> --registry ${roost.url}')`);
    // A stack's stager reaches roost by the stack's own name for it; its user, by the published one.
    const published = 'http://localhost:7700';
    const onStack = await runMur(['stage', '--capsule', 'never-published', '--capsule-version', '0.1.0'], {
      env: { ...user('stack-user'), MURMUR_ROOST_URL: roost.url, MURMUR_ROOST_PUBLIC_URL: published },
    });
    expect(onStack.code).toBe(1);
    expect(onStack.stderr).toContain('error[E-RUN-008]');
    expect(onStack.stderr).toContain(`or publish it to the roost staging reads ('mur publish <zip> --registry ${published}')`);
    expect(onStack.stderr).not.toContain(`--registry ${roost.url}`);
    // Without a roost there is none to name.
    const alone = await runMur(['stage', project, '--json'], { env: user('stack-user') });
    expect(alone.stderr).toContain('error[E-RUN-008]');
    expect(alone.stderr).not.toContain('--registry');
  });

  it('will not serve bytes that no longer match their recorded digest', async () => {
    const zip = path.join(registryPath, 'echo-tool', '0.1.0', 'echo-tool-0.1.0.mur.zip');
    const original = await fs.readFile(zip);
    const tampered = Buffer.from(original);
    tampered[40] = (tampered[40] ?? 0) ^ 0xff;
    await fs.writeFile(zip, tampered);
    try {
      const response = await fetch(`${roost.url}/v1/artifacts/echo-tool/0.1.0`);
      expect(response.status).toBe(500);
      expect(await response.json()).toMatchObject({ code: 'E-REG-002' });
    } finally {
      await fs.writeFile(zip, original);
    }
  });
});

/**
 * What a registry refuses of an archive before it is parsed or stored: sizes that cost the reader
 * far more than the uploader, and variants that would shadow a version already published.
 */
const skill = (manifest: string, extra: Array<{ name: string; data: Buffer }> = []) =>
  rawZip([{ name: 'murmur.yaml', data: Buffer.from(manifest) }, { name: 'skill.md', data: Buffer.from('# a skill\n') }, ...extra]);

describe('archives a registry refuses', () => {
  const refusal = async (bytes: Uint8Array, options: { platform?: string; publishing?: boolean } = {}) => {
    const error = (await inspectArchive(bytes, 'upload', options).then(
      () => undefined,
      (thrown: unknown) => thrown,
    )) as { code?: string; message?: string } | undefined;
    return { code: error?.code, message: error?.message ?? '' };
  };

  it('refuses a murmur.yaml over 1 MiB before parsing it, and a description or tags past what an index keeps', async () => {
    const wordy = `name: wordy\nversion: 0.1.0\nruntime: skill\ndescription: ${'d'.repeat(1_500_000)}\n`;
    const huge = await refusal(skill(wordy));
    expect(huge).toEqual({ code: 'E-ART-002', message: `upload: murmur.yaml is ${wordy.length} bytes; an artifact's manifest is at most 1048576` });
    // Past what an index keeps, refused where it would become an entry (a publish), read anywhere else:
    // what a store already holds stays runnable.
    const wordy5000 = skill(`name: wordy\nversion: 0.1.0\nruntime: skill\ndescription: ${'d'.repeat(5000)}\n`);
    const long = await refusal(wordy5000, { publishing: true });
    expect(long).toMatchObject({ code: 'E-MAN-003', message: 'upload: the description is 5000 characters; a packaged one is at most 4096' });
    expect((await refusal(wordy5000)).code).toBeUndefined();
    const tagged = skill(`name: wordy\nversion: 0.1.0\nruntime: skill\ntags: [${Array.from({ length: 40 }, (_, index) => `t${index}`).join(', ')}]\n`);
    expect(await refusal(tagged, { publishing: true })).toMatchObject({
      code: 'E-MAN-003',
      message: expect.stringContaining('40 tags; a packaged artifact has at most 32'),
    });
    expect((await refusal(tagged)).code).toBeUndefined();
    const capsule = rawZip([{ name: 'murmur.yaml', data: Buffer.from(`name: wordy-capsule\nversion: 0.1.0\ndescription: ${'d'.repeat(5000)}\n`) }]);
    expect(await refusal(capsule, { publishing: true })).toMatchObject({
      code: 'E-MAN-003',
      message: expect.stringContaining('a packaged one is at most 4096'),
    });
    const fits = skill(`name: wordy\nversion: 0.1.0\nruntime: skill\ndescription: ${'d'.repeat(4096)}\n`);
    expect((await refusal(fits, { publishing: true })).code).toBeUndefined();
  });

  it('refuses an archive declaring more entries than an artifact holds, without reading them', async () => {
    // Two entries, and an end record declaring 65 535: read one by one, the directory would run out
    // long before the count (what was refused before as an archive that does not parse).
    const archive = Buffer.from(skill('name: many\nversion: 0.1.0\nruntime: skill\n'));
    const end = archive.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
    archive.writeUInt16LE(0xffff, end + 8);
    archive.writeUInt16LE(0xffff, end + 10);
    expect(await refusal(archive)).toEqual({
      code: 'E-ART-003',
      message: `upload: the archive has 65535 entries; an artifact archive holds at most ${MAX_ENTRIES}`,
    });
  });

  it('refuses what staging could not read, as staging words it: a skill without skill.md, a native tool without its binary', async () => {
    const noSkill = rawZip([
      { name: 'murmur.yaml', data: Buffer.from('name: hollow\nversion: 0.1.0\nruntime: skill\n') },
      { name: 'skill.md/', data: Buffer.alloc(0) },
      { name: 'notes.md', data: Buffer.from('not the skill') },
    ]);
    expect(await refusal(noSkill, { publishing: true })).toEqual({
      code: 'E-ART-003',
      message: 'upload: skill.md not found at the archive root (ensure skill.md is at the root of the .mur.zip)',
    });
    const manifest = 'name: tools/nobin\nversion: 0.1.0\nruntime: tool\nimplementation: native\n';
    const noBinary = rawZip([
      { name: 'murmur.yaml', data: Buffer.from(manifest) },
      { name: 'bin/other', data: Buffer.from('#!/bin/sh\n') },
    ]);
    expect(await refusal(noBinary, { platform: 'linux-x86_64' })).toEqual({
      code: 'E-ART-003',
      message: "upload: failed to read native binary at 'bin/nobin' from the archive (ensure the binary is at bin/nobin inside the .mur.zip)",
    });
    const withBinary = rawZip([
      { name: 'murmur.yaml', data: Buffer.from(manifest) },
      { name: 'bin/nobin', data: Buffer.from('#!/bin/sh\n') },
    ]);
    expect((await refusal(withBinary, { platform: 'linux-x86_64' })).code).toBeUndefined();
  });

  it('marks no archive but a native one as a platform’s build', async () => {
    const refused = await refusal(skill('name: plain\nversion: 0.1.0\nruntime: skill\n'), { platform: 'linux-x86_64' });
    expect(refused).toMatchObject({ code: 'E-MAN-003', message: expect.stringContaining('a platform build must be a native artifact; this one is static') });
  });

  it('adds no variant to a published version but a native build for another platform', async () => {
    const scratch = await tempDir('murmur-variants-');
    try {
      const store = new ArtifactStore(path.join(scratch.dir, 'store'), 'global');
      const generic = skill('name: shared-name\nversion: 0.1.0\nruntime: skill\n');
      await store.publish(generic, (await inspectArchive(generic, 'generic')).meta);
      const before = await listTree(store.root);
      // Other bytes under the same name and version, claiming to be a platform's native build.
      const native = skill('name: shared-name\nversion: 0.1.0\nruntime: skill\nexecution: native\n', [
        { name: 'bin/shared-name', data: Buffer.from('#!/bin/sh\n') },
      ]);
      const inspected = await inspectArchive(native, 'native', { platform: 'linux-x86_64' });
      const shadowing = await store.publish(native, inspected.meta).then(
        () => undefined,
        (error: { code?: string; message?: string }) => error,
      );
      expect(shadowing?.code).toBe('E-REG-003');
      expect(shadowing?.message).toContain("only a native artifact's build for another platform may be added to a published version");
      expect(await listTree(store.root)).toEqual(before);
      expect((await store.resolve('shared-name', '0.1.0'))?.bytes).toEqual(Buffer.from(generic));
    } finally {
      await scratch.cleanup();
    }
  });
});

describe('a reinstall', () => {
  it('leaves a reader meanwhile the old version or the new one, never none and never a zip beside another digest', async () => {
    const scratch = await tempDir('murmur-reinstall-');
    try {
      const store = new ArtifactStore(path.join(scratch.dir, 'store'), 'global');
      const builds = ['first', 'second'].map((text) =>
        skill('name: swapped\nversion: 0.1.0\nruntime: skill\n', [{ name: 'notes.md', data: Buffer.from(text) }]),
      );
      const meta = (await inspectArchive(builds[0] as Buffer, 'swapped')).meta;
      await store.install(builds[0] as Buffer, meta, sha256Hex(builds[0] as Buffer));
      let installing = true;
      const seen: string[] = [];
      const reader = (async () => {
        while (installing) {
          const stored = await store.resolve('swapped', '0.1.0');
          seen.push(stored === undefined ? 'none' : sha256Hex(stored.bytes) === stored.recordedSha256 ? 'whole' : 'mismatched');
        }
      })();
      for (let round = 1; round <= 60; round += 1) {
        const bytes = builds[round % 2] as Buffer;
        await store.install(bytes, meta, sha256Hex(bytes));
      }
      installing = false;
      await reader;
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.filter((verdict) => verdict !== 'whole')).toEqual([]);
      expect((await fs.readdir(store.versionDir('swapped', '0.1.0'))).sort()).toEqual([
        'swapped-0.1.0.meta.json',
        'swapped-0.1.0.mur.zip',
        'swapped-0.1.0.sha256',
      ]);
    } finally {
      await scratch.cleanup();
    }
  });
});

describe("a first run's pins", () => {
  const pin = (name: string, digit: string) => ({ name, resolved_version: '0.1.0', sha256: { wasm: digit.repeat(64) } });

  it('are written whole where no lock is, and only where another mur has not pinned since, its pins standing', async () => {
    const scratch = await tempDir('murmur-first-pins-');
    try {
      const fresh = path.join(scratch.dir, 'fresh.lock');
      await pinFirstRun(fresh, [pin('driver', 'a'), pin('skill', 'b')]);
      expect((await readLockfile(fresh))?.artifacts).toEqual([pin('driver', 'a'), pin('skill', 'b')]);
      // An install wrote the lock between the run's staging (no lock) and its pinning.
      const raced = path.join(scratch.dir, 'raced.lock');
      await writeLockfile(raced, { lock_version: 1, artifacts: [pin('installed', 'c'), pin('skill', 'd')] });
      await pinFirstRun(raced, [pin('driver', 'a'), pin('skill', 'b')]);
      expect((await readLockfile(raced))?.artifacts).toEqual([pin('installed', 'c'), pin('skill', 'd'), pin('driver', 'a')]);
      expect(existsSync(`${raced}.writing`)).toBe(false);
    } finally {
      await scratch.cleanup();
    }
  });
});

describe('an archive that inflates far past its size', () => {
  const MiB = 1024 * 1024;
  /** Raw deflate of `size` zero bytes, made a piece at a time (the test never holds them), with their CRC-32. */
  async function deflatedZeros(size: number): Promise<{ data: Buffer; deflated: { size: number; crc: number } }> {
    const deflate = createDeflateRaw({ level: 9 });
    const out: Buffer[] = [];
    deflate.on('data', (chunk: Buffer) => out.push(chunk));
    const piece = Buffer.alloc(MiB);
    let crc = 0;
    for (let written = 0; written < size; written += MiB) {
      crc = crc32(piece, crc);
      if (!deflate.write(piece)) await new Promise((resolve) => deflate.once('drain', resolve));
    }
    // Its last pieces come out after the writes are taken: read to its end.
    await new Promise((resolve) => {
      deflate.on('end', resolve);
      deflate.end();
    });
    return { data: Buffer.concat(out), deflated: { size, crc } };
  }
  const skill = (name: string) => [
    { name: 'murmur.yaml', data: Buffer.from(`name: ${name}\nversion: 1.0.0\nruntime: skill\n`) },
    { name: 'skill.md', data: Buffer.from('# a skill\n') },
  ];

  it('is checked as it inflates, never held: roost publishes 400 MiB of zeros from a 400 KB upload without its memory growing by more than pieces', async () => {
    const scratch = await tempDir('murmur-inflate-');
    const roost = await startService('roost', { MURMUR_ROOST_REGISTRY_PATH: path.join(scratch.dir, 'registry') });
    try {
      const zeros = await deflatedZeros(400 * MiB);
      const upload = rawZip([...skill('zeros'), { name: 'zeros.txt', ...zeros }]);
      expect(upload.length).toBeLessThan(MiB);
      const response = await fetch(`${roost.url}/v1/artifacts?name=zeros&version=1.0.0`, { method: 'POST', body: upload });
      expect(response.status, await response.clone().text()).toBe(201);
      // The most the process held at once, as the kernel counted it: it held the 400 MiB whole before.
      const status = await fs.readFile(`/proc/${roost.ready.pid as number}/status`, 'utf8');
      const peakKb = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]);
      expect(peakKb).toBeGreaterThan(0);
      expect(peakKb * 1024).toBeLessThan(200 * MiB);
    } finally {
      await roost.stop();
      await scratch.cleanup();
    }
  }, 120_000);

  it('is refused as it inflates when its bytes do not match its checksum or its declared size', async () => {
    const zeros = await deflatedZeros(32 * MiB);
    const refusal = async (entry: Record<string, unknown>) =>
      (await inspectArchive(rawZip([...skill('liar'), { name: 'zeros.txt', ...zeros, ...entry } as never]), 'upload').then(
        () => undefined,
        (thrown: { code?: string; message?: string }) => `${thrown.code}: ${thrown.message}`,
      )) ?? 'accepted';
    expect(await refusal({})).toBe('accepted');
    expect(await refusal({ deflated: { ...zeros.deflated, crc: zeros.deflated.crc ^ 1 } })).toBe(
      "E-ART-003: upload: zip entry 'zeros.txt' is corrupt: its bytes do not match the CRC-32 its header declares",
    );
    expect(await refusal({ deflated: { ...zeros.deflated, size: 20 * MiB } })).toBe(
      `E-ART-003: upload: zip entry 'zeros.txt' holds more than the ${20 * MiB} bytes its header declares`,
    );
    expect(await refusal({ deflated: { ...zeros.deflated, size: 40 * MiB } })).toBe(
      `E-ART-003: upload: zip entry 'zeros.txt' holds ${32 * MiB} bytes but its header declares ${40 * MiB}`,
    );
  });
});
