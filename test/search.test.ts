import { promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { componentArtifact, publishInto } from './support/artifacts.js';
import { tempDir } from './support/fs.js';
import { toolWat } from './support/guests.js';
import { type ServiceProcess, runMur, startService } from './support/processes.js';

/** `mur search <query>` over the registries: the global store, a roost, an artifact index file. */
describe('mur search', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let roost: ServiceProcess;
  let env: Record<string, string>;
  let index: string;

  beforeAll(async () => {
    scratch = await tempDir('murmur-search-');
    env = { MURMUR_HOME: path.join(scratch.dir, 'home') };
    const wasm = (await toolWat()).bytes;
    const store = path.join(env.MURMUR_HOME as string, 'artifacts');
    await publishInto(store, await componentArtifact('http-fetch', '1.2.0', wasm, 'tool', 'tags: [network, web]\n'));
    await publishInto(store, await componentArtifact('calendar', '0.3.0', wasm, 'tool', 'tags: [dates]\n'));
    const registry = path.join(scratch.dir, 'roost-registry');
    await publishInto(registry, await componentArtifact('roost-only', '2.0.0', wasm, 'tool', 'tags: [remote]\n'));
    roost = await startService('roost', { MURMUR_ROOST_REGISTRY_PATH: registry });
    index = path.join(scratch.dir, 'index.json');
    await fs.writeFile(
      index,
      JSON.stringify({
        schema_version: '1',
        updated_at: '2026-12-01T00:00:00Z',
        artifacts: [
          { name: 'indexed-search', version: '0.1.0', runtime: 'tool', description: 'finds things', tags: [] },
          { name: 'quiet', version: '1.0.0', runtime: 'skill', tags: ['Search'] },
        ],
      }),
    );
  });
  afterAll(async () => {
    await roost?.stop();
    await scratch?.cleanup();
  });

  it('finds by name, description or tag in the global store, in upstream’s table', async () => {
    const byTag = await runMur(['search', 'WEB', '--registry', 'local'], { env });
    expect(byTag.code, byTag.stderr).toBe(0);
    expect(byTag.stdout.split('\n')[0]).toMatch(/^NAME\s+VERSION\s+RUNTIME\s+DESCRIPTION$/);
    expect(byTag.stdout).toMatch(/^http-fetch\s+1\.2\.0\s+tool\s+the http-fetch tool$/m);
    expect(byTag.stdout).not.toContain('calendar');
    const byDescription = await runMur(['search', 'tool', '--registry', 'local', '--limit', '1', '--json'], { env });
    expect(JSON.parse(byDescription.stdout)).toHaveLength(1);
    const none = await runMur(['search', 'nothing-like-this', '--registry', 'local'], { env });
    expect(none.stdout.trim()).toBe('No results found.');
  });

  it("searches a roost's index by URL, and an artifact index file, an absent description shown as a dash", async () => {
    const remote = await runMur(['search', 'remote', '--registry', roost.url], { env });
    expect(remote.code, remote.stderr).toBe(0);
    expect(remote.stdout).toMatch(/^roost-only\s+2\.0\.0\s+tool\s+the roost-only tool$/m);
    const fromFile = await runMur(['search', 'search', '--registry', index], { env });
    expect(fromFile.stdout).toMatch(/^indexed-search\s+0\.1\.0\s+tool\s+finds things$/m);
    expect(fromFile.stdout).toMatch(/^quiet\s+1\.0\.0\s+skill\s+—$/m);
    // Without --registry, the roost MURMUR_ROOST_URL names.
    expect((await runMur(['search', 'roost-only'], { env: { ...env, MURMUR_ROOST_URL: roost.url } })).stdout).toContain('roost-only');
  });

  it('says No results found and exits 0 for an empty global store', async () => {
    const result = await runMur(['search', 'git', '--registry', 'local'], { env: { MURMUR_HOME: path.join(scratch.dir, 'empty-home') } });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe('No results found.\n');
  });

  it('prints the header and exactly --limit rows', async () => {
    const result = await runMur(['search', 'tool', '--registry', 'local', '--limit', '1'], { env });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout.split('\n').filter((line) => line.trim() !== '')).toHaveLength(2);
  });

  it('fails naming the URL of an index it cannot fetch, never its query or a password', async () => {
    const url = 'http://127.0.0.1:9/artifacts-index.json';
    const result = await runMur(['search', 'git', '--registry', `${url}?signature=hunter2`], { env });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`error[E-IO-003]: failed to fetch artifact index from ${url}:`);
    expect(result.stderr).not.toContain('hunter2');
    const unparsable = await runMur(['search', 'git', '--registry', 'http://user:hunter2@127.0.0.1:99999/artifacts-index.json'], { env });
    expect(unparsable.stderr).toContain("error[E-IO-003]: 'http://127.0.0.1:99999/artifacts-index.json' is not a URL");
    expect(unparsable.stderr).not.toContain('hunter2');
    const credentialed = await runMur(['search', 'git', '--registry', 'http://user:hunter2@127.0.0.1:9/artifacts-index.json'], { env });
    expect(credentialed.code).toBe(1);
    expect(credentialed.stderr).toContain(`error[E-IO-003]: the index URL ${url} carries a user or password, which is never sent`);
    expect(credentialed.stderr).not.toContain('hunter2');
  });

  it('refuses an index it cannot read or does not know, and a bad limit, with E-IO-003', async () => {
    const absent = await runMur(['search', 'x', '--registry', path.join(scratch.dir, 'absent.json')], { env });
    expect(absent.code).toBe(1);
    expect(absent.stderr).toContain('error[E-IO-003]: failed to read artifact index from');
    const future = path.join(scratch.dir, 'future.json');
    await fs.writeFile(future, JSON.stringify({ schema_version: '2', artifacts: [] }));
    const unknown = await runMur(['search', 'x', '--registry', future], { env });
    expect(unknown.stderr).toContain(`error[E-IO-003]: unsupported artifact index schema version '2' from ${future} (expected 1)`);
    const partial = path.join(scratch.dir, 'partial.json');
    await fs.writeFile(partial, JSON.stringify({ schema_version: '1', artifacts: [{ name: 'x', runtime: 'tool' }] }));
    const incomplete = await runMur(['search', 'x', '--registry', partial], { env });
    expect(incomplete.stderr).toMatch(new RegExp(`error\\[E-IO-003\\]: failed to parse artifact index from ${partial}: artifacts\\[0\\]\\.version: .+`));
    expect(incomplete.stderr).toContain('hint: an artifact index is {"schema_version": "1"');
    const limit = await runMur(['search', 'x', '--registry', 'local', '--limit', '0'], { env });
    expect(limit.code).toBe(2);
    expect(limit.stderr).toContain("error[E-IO-003]: --limit must be a whole number of at least 1; got '0'");
  });

  it('refuses an answer that breaks off midway, naming what it was and how far it came, never as a bug of mur', async () => {
    // Declares 1 000 bytes, sends 5 and closes: what a server that crashed or a cut connection leaves.
    const server = net.createServer((socket) => {
      socket.once('data', () => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-murmur-sha256: 00\r\ncontent-length: 1000\r\n\r\n{"sch');
        socket.end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    try {
      const search = await runMur(['search', 'x', '--registry', `${url}/index.json`], { env });
      expect(search.code).toBe(1);
      expect(search.stderr).toContain(`error[E-IO-003]: the artifact index from ${url}/index.json broke off after 5 bytes`);
      expect(search.stderr).toContain('hint: the server stopped sending before the end of its answer');
      const install = await runMur(['install', '-g', 'cut@0.1.0', '--registry', url], { cwd: scratch.dir, env });
      expect(install.code).toBe(1);
      expect(install.stderr).toContain(`error[E-ROOST-001]: cut@0.1.0 from roost at ${url} broke off after 5 bytes`);
      for (const said of [search.stderr, install.stderr]) {
        expect(said).not.toContain('this is a bug');
        expect(said).not.toMatch(/\n\s+at /);
      }
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('names the configuration as where a bad index came from when no --registry was given', async () => {
    const configured = { ...env, MURMUR_HOME: path.join(scratch.dir, 'configured-home') };
    expect((await runMur(['config', 'set', '-g', 'registry.index_url', 'not-a-url'], { env: configured })).code).toBe(0);
    const result = await runMur(['search', 'x'], { env: configured });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-IO-003]: failed to read artifact index from not-a-url: ENOENT');
    expect(result.stderr).toContain(
      `hint: it is registry.index_url in ${path.join(scratch.dir, 'configured-home', 'config.yaml')}: correct it with mur config set -g registry.index_url <roost URL or index .json>, or pass --registry`,
    );
  });
});
