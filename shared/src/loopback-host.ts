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
