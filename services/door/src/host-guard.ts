import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Which `Host` a door listening on loopback answers: a loopback name (`localhost`, a name under
 * `.localhost`, `127.0.0.0/8`, `[::1]`) or the name of its public URL (`MURMUR_DOOR_PUBLIC_URL`).
 *
 * A door on loopback is reachable from a browser on the same machine, and a page of any site can
 * point a name it owns at 127.0.0.1 (DNS rebinding): the browser then treats the door as that
 * site's own origin, lets the page read the card (the session id) and post to the session, which
 * may hold a shell. Only the `Host` the browser sends still names the attacker's site, so that is
 * what is checked. A request without a `Host` (HTTP/1.0) comes from no browser and is answered.
 *
 * A door listening on any other address (the stack's, on its container network) was put there by
 * an operator to be reached by names this door cannot know: it is not guarded here, and
 * `MURMUR_DOOR_AUTH` is what keeps strangers out of it.
 */
export type HostGuard = (host: string | undefined) => boolean;

const LOOPBACK_IPV4 = /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

function isLoopbackName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost') || LOOPBACK_IPV4.test(name) || name === '[::1]';
}

/** The guard of a door listening at `listenerUrl`, or undefined when it listens beyond loopback. */
export function loopbackHostGuard(listenerUrl: string, publicUrl: string | undefined): HostGuard | undefined {
  if (!isLoopbackName(new URL(listenerUrl).hostname)) return undefined;
  const publicName = publicUrl ? hostnameOf(publicUrl)?.replace(/\.$/, '') : undefined;
  return (host) => {
    if (host === undefined || host === '') return true;
    const name = hostnameOf(`http://${host}`);
    return name !== undefined && (isLoopbackName(name) || name.replace(/\.$/, '') === publicName);
  };
}

function hostnameOf(url: string): string | undefined {
  try {
    return new URL(url).hostname.toLowerCase();
  } catch {
    return undefined;
  }
}

/**
 * Answers a request for a host the guard refuses with 421 Misdirected Request (RFC 9110: this
 * server does not answer for that authority), before anything of it is read. Returns whether it did.
 */
export function refuseForeignHost(guard: HostGuard | undefined, request: IncomingMessage, response: ServerResponse): boolean {
  if (!guard || guard(request.headers.host)) return false;
  const shown = (request.headers.host ?? '').slice(0, 80);
  const body = {
    error: {
      code: 'E-DOOR-002',
      message: `this door listens on loopback and answers only for localhost; a request for '${shown}' is refused (a web page reaching it through a name of its own: DNS rebinding)`,
      hint: 'reach the door as localhost or 127.0.0.1; a door meant to be reached by another name is bound beyond loopback (--bind) or given that name in MURMUR_DOOR_PUBLIC_URL',
    },
  };
  response.writeHead(421, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify(body));
  return true;
}
