/**
 * `url` as it may be shown to whoever reads a record, a log or an error: its scheme, host, port
 * and path, none of its user, password, query or fragment — each of which may carry a credential
 * (`https://user:pass@…`, Google's `?key=`, a collector's `?token=`).
 */
export function shownUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
  } catch {
    return '(a URL that does not parse)';
  }
}

/**
 * What was given as a URL, shown back when it does not parse as one: as given, but for a user and
 * password before a host (`http://user:pass@x:99999/`), which `shownUrl` cannot find in what
 * does not parse.
 */
export function withoutUserinfo(given: string): string {
  return given.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#]*@/i, '$1');
}
