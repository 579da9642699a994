import { MurmurError } from '@murmur/shared';
import { bearerOf, configuredTokenRefusal, tokenMatcher } from '@murmur/shared/node';

/**
 * Who may see the dashboard. It is for operators only: on the default bind (loopback) anyone who
 * can reach the port is on this machine already, so no token is asked — unless one is set, which
 * is then always asked. (A capsule an executor beside it runs is on this machine too, through its
 * egress: the executor refuses it the watcher's port, `own-endpoints.ts`.) Once the operator configures the bind (`MURMUR_WATCHER_HOST`, to any
 * address, loopback included: the default is what is known safe, a configured address is taken to
 * be reachable), `MURMUR_DASHBOARD_TOKEN` is required, and the watcher refuses to start without it.
 *
 * A request carries the token as `authorization: Bearer <token>`, or — for a browser, which cannot
 * set a header on a page or an `EventSource` — once as `?token=` on the page, which is exchanged for
 * an HttpOnly, SameSite=Strict cookie scoped to `/dashboard` (and the token dropped from the URL).
 * Tokens are compared by their SHA-256 in constant time, so neither the comparison's duration nor
 * a length check says how much of a guess was right.
 */

export const DASHBOARD_COOKIE = 'murmur_dashboard';

export interface DashboardAccess {
  /** Whether requests must carry the token. */
  readonly required: boolean;
  /** Whether `presented` is the token (always true when none is required). */
  admits(presented: string | undefined): boolean;
}

export function dashboardAccess(env: NodeJS.ProcessEnv): DashboardAccess {
  const configuredHost = env.MURMUR_WATCHER_HOST?.trim() ?? '';
  const token = env.MURMUR_DASHBOARD_TOKEN?.trim() ?? '';
  if (token === '' && configuredHost !== '') {
    throw new MurmurError(
      'E-DASH-001',
      `the watcher is configured to listen on ${configuredHost} (MURMUR_WATCHER_HOST), and its dashboard would be served there without a token: MURMUR_DASHBOARD_TOKEN is not set`,
      { path: 'MURMUR_DASHBOARD_TOKEN' },
    );
  }
  const refusal =
    token === ''
      ? undefined
      : configuredTokenRefusal(token, { setting: 'MURMUR_DASHBOARD_TOKEN', what: 'dashboard', hint: 'use a long random value, e.g. `openssl rand -hex 32`' });
  if (refusal) throw refusal;
  if (token === '') return { required: false, admits: () => true };
  const matcher = tokenMatcher([token]);
  return { required: true, admits: (presented) => matcher.admits(presented) };
}

/** The token a request presents: its bearer header, else the dashboard's cookie. */
export function presentedToken(headers: { authorization?: string | undefined; cookie?: string | undefined }): string | undefined {
  const bearer = bearerOf(headers.authorization);
  if (bearer !== undefined) return bearer;
  for (const part of (headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name !== DASHBOARD_COOKIE) continue;
    // Any page on this machine can plant a cookie for /dashboard: one that does not decode is no token.
    try {
      return decodeURIComponent(value.join('='));
    } catch {
      return undefined;
    }
  }
  return undefined;
}
