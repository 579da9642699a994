import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { rawExchange } from '../../test/support/servers.js';
import { type HttpListener, httpReadTimeoutMs, listenHttp } from '../src/node/http.js';

async function serving(app: Hono, readTimeoutMs: number, use: (listener: HttpListener) => Promise<void>): Promise<void> {
  const listener = await listenHttp(app, { port: 0, readTimeoutMs });
  try {
    await use(listener);
  } finally {
    await listener.close();
  }
}

describe("a service's HTTP read timeout", () => {
  const app = new Hono();
  // A body cut short is the client's doing, not the app's: answered, not thrown.
  app.post('/echo', async (context) => context.text(await context.req.text().catch(() => 'cut')));
  app.get('/slow', async (context) => {
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    return context.text('late but whole');
  });

  it('answers a client that stops half-way through its body 408, and closes its connection', async () => {
    await serving(app, 300, async ({ port }) => {
      const { received, closed } = await rawExchange(port, 'POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nabc', 10_000);
      expect(closed).toBe(true);
      expect(received).toMatch(/^HTTP\/1\.1 408 /);
    });
  });

  it('answers a client that never ends its headers 408 as well', async () => {
    await serving(app, 300, async ({ port }) => {
      const { received, closed } = await rawExchange(port, 'GET /slow HTTP/1.1\r\nHost: local', 10_000);
      expect(closed).toBe(true);
      expect(received).toMatch(/^HTTP\/1\.1 408 /);
    });
  });

  it('bounds only the request: a response that takes longer than the bound is sent whole', async () => {
    await serving(app, 300, async ({ url }) => {
      const response = await fetch(`${url}/slow`);
      expect(response.status).toBe(200);
      expect(await response.text()).toBe('late but whole');
    });
  });

  it('is 30 s unless MURMUR_HTTP_READ_TIMEOUT_MS says otherwise, and a value that is no duration is refused by its name', () => {
    expect(httpReadTimeoutMs({})).toBe(30_000);
    expect(httpReadTimeoutMs({ MURMUR_HTTP_READ_TIMEOUT_MS: '5000' })).toBe(5_000);
    for (const bad of ['0', '-1', 'soon']) {
      expect(() => httpReadTimeoutMs({ MURMUR_HTTP_READ_TIMEOUT_MS: bad })).toThrow(/E-CFG-003|invalid MURMUR_HTTP_READ_TIMEOUT_MS/);
    }
  });
});
