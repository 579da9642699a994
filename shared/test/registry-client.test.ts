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
});
