import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RoostRegistryClient } from '@murmur/shared/artifacts';
import { rejectionOf as rejection } from '../../test/support/refusals.js';

/** A client of a registry that is not what it should be: an HTTP server that answers without a digest. */
describe('a registry client', () => {
  let server: http.Server | undefined;

  afterEach(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
  });

  it('refuses bytes sent without their digest, saying the registry is at fault and where else to go', async () => {
    server = http.createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/zip' });
      response.end('PK not verifiable');
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const error = await rejection(new RoostRegistryClient(url, undefined).resolve('fake', '1.0.0', 'linux-x86_64'));
    expect(error.code).toBe('E-REG-002');
    expect(error.message).toBe(`roost at ${url} sent fake@1.0.0 without an x-murmur-sha256 header; refusing bytes that cannot be verified`);
    expect(error.hint).toContain(`check that ${url} is a roost`);
    expect(error.hint).not.toContain('republish');
  });

  it("gives roost's token with a publish alone, never with a read, which goes wherever a project's murmur.yaml says", async () => {
    const heard: Array<{ method: string; authorization: string | undefined }> = [];
    server = http.createServer((request, response) => {
      heard.push({ method: request.method ?? '', authorization: request.headers.authorization });
      request.resume();
      response.writeHead(request.method === 'POST' ? 401 : 404, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: 'no' }));
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const client = new RoostRegistryClient(url, { token: 'the-operators-token' });
    expect(await client.resolve('anything', '1.0.0', 'linux-x86_64')).toBeUndefined();
    await rejection(client.list());
    const meta = { name: 'x', version: '1.0.0', runtime: 'skill', artifact_runtime: 'skill', platforms: [] } as unknown as Parameters<
      RoostRegistryClient['publish']
    >[1];
    await rejection(client.publish(new Uint8Array([1]), meta));
    expect(heard).toEqual([
      { method: 'GET', authorization: undefined },
      { method: 'GET', authorization: undefined },
      { method: 'POST', authorization: 'Bearer the-operators-token' },
    ]);
    const withheld = await rejection(new RoostRegistryClient(url, { withheld: 'named by the project, not by you' }).publish(new Uint8Array([1]), meta));
    expect(withheld).toMatchObject({ code: 'E-ROOST-001', hint: 'named by the project, not by you' });
  });
});
