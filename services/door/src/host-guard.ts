import type { IncomingMessage, ServerResponse } from 'node:http';
import { hostHeaderName, hostnameOf, isLoopbackName } from '@murmur/shared';

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
 * A door that listens on another address but whose public URL names loopback (the stack's: it
 * listens on its container network, and compose publishes it on the host's 127.0.0.1) is reached
 * by a browser exactly as a loopback door is, and is guarded the same. A door given neither — put
 * on a network by an operator, to be reached by names it cannot know — is not guarded here, and
 * `MURMUR_DOOR_AUTH` is what keeps strangers out of it. `MURMUR_DOOR_HOSTS` (comma-separated
 * names) adds names a guarded door answers for too: another container's `door`, say.
 */
export type HostGuard = (host: string | undefined) => boolean;

/**
 * The guard of a door listening at `listenerUrl` and reached at `publicUrl`, or undefined when it
 * is neither listening on nor published as loopback. `extraNames`: `MURMUR_DOOR_HOSTS`.
 */
export function loopbackHostGuard(listenerUrl: string, publicUrl: string | undefined, extraNames = ''): HostGuard | undefined {
  const publicName = publicUrl ? hostnameOf(publicUrl)?.replace(/\.$/, '') : undefined;
  if (!isLoopbackName(new URL(listenerUrl).hostname) && !(publicName !== undefined && isLoopbackName(publicName))) return undefined;
  const admitted = new Set(
    extraNames
      .split(',')
      .map((name) => name.trim().toLowerCase().replace(/\.$/, ''))
      .filter((name) => name !== ''),
  );
  if (publicName !== undefined) admitted.add(publicName);
  return (host) => {
    if (host === undefined || host === '') return true;
    const name = hostHeaderName(host);
    return name !== undefined && (isLoopbackName(name) || admitted.has(name.replace(/\.$/, '')));
  };
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
      hint: 'reach the door as localhost or 127.0.0.1; a door meant to be reached by another name is given it in MURMUR_DOOR_HOSTS (or MURMUR_DOOR_PUBLIC_URL), or bound beyond loopback (--bind)',
    },
  };
  response.writeHead(421, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify(body));
  return true;
}
