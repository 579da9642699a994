/**
 * A NATS URL as `MURMUR_NATS_URL` gives it, credentials and all: `nats://<token>@host:4222` (a
 * stack whose nats-server requires a token, `MURMUR_NATS_TOKEN` in compose) or
 * `nats://<user>:<password>@host:4222`, as NATS clients write them; several servers separated by
 * commas, a scheme left out (`host:4222`). The client is given the credentials apart, and
 * everything that prints where the bus is (logs, errors, health) prints `shown`, which has none,
 * whatever the URL looks like: a token in a log line is a token anyone reading logs holds.
 */
export interface NatsEndpoint {
  /** Each server's URL without credentials: what the client dials. */
  servers: string[];
  /** What the URL carried (the first server that carried any): a token (a user name alone) or a user and a password. */
  credentials?: { token: string } | { user: string; pass: string };
  /** The servers, for anything a person reads. */
  shown: string;
}

export function natsEndpoint(url: string): NatsEndpoint {
  const servers: string[] = [];
  let credentials: NatsEndpoint['credentials'];
  for (const entry of url.split(',').map((part) => part.trim())) {
    if (entry === '') continue;
    const server = serverOf(entry);
    servers.push(server.url);
    credentials ??= server.credentials;
  }
  return { servers, shown: servers.join(','), ...(credentials ? { credentials } : {}) };
}

/** `url` as a person may read it: without whatever credentials it carries. */
export function shownNatsUrl(url: string | undefined): string | undefined {
  return url === undefined ? undefined : natsEndpoint(url).shown;
}

function serverOf(entry: string): { url: string; credentials?: NatsEndpoint['credentials'] } {
  const schemed = entry.includes('://');
  let parsed: URL;
  try {
    parsed = new URL(schemed ? entry : `nats://${entry}`);
  } catch {
    // Not a URL the client could dial either; shown without anything before an `@`, which may be a secret.
    return { url: entry.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^/@]*@/i, '$1') };
  }
  const user = decoded(parsed.username);
  const pass = decoded(parsed.password);
  parsed.username = '';
  parsed.password = '';
  const url = schemed ? (parsed.pathname === '/' && !entry.endsWith('/') ? parsed.href.slice(0, -1) : parsed.href) : parsed.host;
  if (user === '' && pass === '') return { url };
  return { url, credentials: pass === '' ? { token: user } : { user, pass } };
}

function decoded(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}
