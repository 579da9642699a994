import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HostGuard } from '@murmur/shared';
import { requestedAuthority } from '@murmur/shared/service';

/**
 * Answers a request for a host the guard refuses with 421 Misdirected Request (RFC 9110: this
 * server does not answer for that authority), before anything of it is read. Returns whether it did.
 */
export function refuseForeignHost(guard: HostGuard | undefined, request: IncomingMessage, response: ServerResponse): boolean {
  const host = requestedAuthority(request);
  if (!guard || guard(host)) return false;
  const shown = (host ?? '').slice(0, 80);
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
