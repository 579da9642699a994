import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryIndexSchema } from '@murmur/shared';
import { readLockfile, sha256Hex, writeMurZip } from '@murmur/shared/artifacts';
import { capsuleProject, componentArtifact } from './support/artifacts.js';
import { listTree, tempDir } from './support/fs.js';
import { capsuleWat, toolWat } from './support/guests.js';
import { rawZip } from './support/raw-zip.js';
import { type ServiceProcess, runMur, startService } from './support/processes.js';

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
    expect(again.stderr).toContain('error[E-REG-003]');
    expect(await listTree(registryPath)).toEqual(stored);
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
  });

  it('refuses to publish without the token it was started with', async () => {
    const result = await runMur(['publish', toolZip, '--registry', roost.url], { env: { MURMUR_HOME: path.join(scratch.dir, 'anonymous') } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('error[E-ROOST-001]');
    expect(result.stderr).toContain('MURMUR_ROOST_TOKEN');
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
    const mislabelled = await post('name=other-tool&version=0.1.0', await fs.readFile(toolZip));
    expect(mislabelled).toMatchObject({ status: 422, body: { code: 'E-MAN-003' } });
    expect(await listTree(registryPath)).toEqual(before);
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
    expect(result.stdout.split('\n')[0]).toBe('NAME       VERSION  RUNTIME  PLATFORMS');
    expect(result.stdout).toContain('echo-tool  0.1.0    tool     —');
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
