/**
 * Whether a request's `Host` names this machine's loopback: `localhost`, a name under
 * `.localhost`, `127.0.0.0/8` or `[::1]`. What a service on loopback checks to keep web pages
 * out: a page of any site can point a name it owns at 127.0.0.1 (DNS rebinding), and the browser
 * then treats the service as that site's own origin; only the `Host` it sends still names the site.
 */
const LOOPBACK_IPV4 = /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

export function isLoopbackName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost') || LOOPBACK_IPV4.test(name) || name === '[::1]';
}

/** The host name of a URL, lowercased, or undefined when it does not parse. */
export function hostnameOf(url: string): string | undefined {
  try {
    return new URL(url).hostname.toLowerCase();
  } catch {
    return undefined;
  }
}

/** The host name a `Host` header names (its port dropped), or undefined when it is none. */
export function hostHeaderName(host: string): string | undefined {
  return hostnameOf(`http://${host}`);
}

/**
 * Which `Host` a service listening on loopback answers (a door, roost): a loopback name
 * (`localhost`, a name under `.localhost`, `127.0.0.0/8`, `[::1]`), the name of its public URL,
 * and the names its operator adds.
 *
 * A service on loopback is reachable from a browser on the same machine, and a page of any site
 * can point a name it owns at 127.0.0.1 (DNS rebinding): the browser then treats the service as
 * that site's own origin and lets the page read what it answers — a door's card and sessions,
 * roost's registry. Only the `Host` the browser sends still names the attacker's site, so that is
 * what is checked. A request without a `Host` (HTTP/1.0) comes from no browser and is answered.
 *
 * A service that listens on another address but whose public URL names loopback (the stack's: it
 * listens on its container network, and compose publishes it on the host's 127.0.0.1) is reached
 * by a browser exactly as a loopback one is, and is guarded the same. A service given neither —
 * put on a network by an operator, to be reached by names it cannot know — is not guarded here;
 * its tokens are what keep strangers out. The extra names (`MURMUR_DOOR_HOSTS`,
 * `MURMUR_ROOST_HOSTS`, comma-separated) are names a guarded service answers for too: the one
 * other containers of the stack reach it by, say.
 */
export type HostGuard = (host: string | undefined) => boolean;

/**
 * The guard of a service listening at `listenerUrl` and reached at `publicUrl`, or undefined when
 * it is neither listening on nor published as loopback.
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
  const judge = (host: string): boolean => {
    const name = hostHeaderName(host);
    return name !== undefined && (isLoopbackName(name) || admitted.has(name.replace(/\.$/, '')));
  };
  // A client sends the same `Host` on every request of its connection, and most clients the same
  // one: the last verdict is kept, so a request for it costs a string comparison, not a URL parse.
  let last: { host: string; admitted: boolean } | undefined;
  return (host) => {
    if (host === undefined || host === '') return true;
    if (last?.host !== host) last = { host, admitted: judge(host) };
    return last.admitted;
  };
}
