import { describe, expect, it } from 'vitest';
import { otelTracesUrl, shownUrl } from '../src/index.js';

describe('a URL as records and logs show it', () => {
  it('keeps its scheme, host, port and path, and none of its user, password, query or fragment', () => {
    expect(shownUrl('https://user:secret@api.example.com:8443/v1/messages?key=sk-123#frag')).toBe('https://api.example.com:8443/v1/messages');
    expect(shownUrl('http://127.0.0.1:4318/?token=t')).toBe('http://127.0.0.1:4318/');
  });

  it('says a URL that does not parse is one, without repeating it', () => {
    expect(shownUrl('htps//user:secret@x')).toBe('(a URL that does not parse)');
  });
});

describe("a collector's traces URL", () => {
  it('is the endpoint with /v1/traces on its path, whatever trailing slashes it was written with', () => {
    expect(otelTracesUrl('http://127.0.0.1:4318')).toBe('http://127.0.0.1:4318/v1/traces');
    expect(otelTracesUrl(' http://collector:4318/otlp// ')).toBe('http://collector:4318/otlp/v1/traces');
    expect(otelTracesUrl('collector:4318')).toBe('http://collector:4318/v1/traces');
  });

  it("keeps a collector's query a query: the path goes before it", () => {
    expect(otelTracesUrl('https://collector.example/ingest/?token=abc')).toBe('https://collector.example/ingest/v1/traces?token=abc');
  });
});
