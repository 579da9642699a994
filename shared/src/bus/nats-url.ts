/**
 * A NATS URL as `MURMUR_NATS_URL` gives it, credentials and all: `nats://<token>@host:4222` (a
 * stack whose nats-server requires a token, `MURMUR_NATS_TOKEN` in compose) or
 * `nats://<user>:<password>@host:4222`, as NATS clients write them. The client is given the
 * credentials apart, and everything that prints where the bus is (logs, errors, health) prints
 * `shown`, which has none: a token in a log line is a token anyone reading logs holds.
 */
export interface NatsEndpoint {
  /** The server's URL without credentials: what the client dials. */
  servers: string;
  /** What the URL carried: a token (a user name alone) or a user and a password. */
  credentials?: { token: string } | { user: string; pass: string };
  /** `servers`, for anything a person reads. */
  shown: string;
}

export function natsEndpoint(url: string): NatsEndpoint {
  const trimmed = url.trim();
  let parsed: URL;
  try {
    parsed = new URL(trimmed);
  } catch {
    // Not a URL (`127.0.0.1:4222`, as the client also takes): nothing to take out of it.
    return { servers: trimmed, shown: trimmed };
  }
  const user = decodeURIComponent(parsed.username);
  const pass = decodeURIComponent(parsed.password);
  parsed.username = '';
  parsed.password = '';
  const servers = parsed.href.replace(/\/$/, '');
  if (user === '' && pass === '') return { servers, shown: servers };
  return { servers, shown: servers, credentials: pass === '' ? { token: user } : { user, pass } };
}

/** `url` as a person may read it: without whatever credentials it carries. */
export function shownNatsUrl(url: string | undefined): string | undefined {
  return url === undefined ? undefined : natsEndpoint(url).shown;
}
