import { shownUrl } from '@murmur/shared';
import type { EgressFailure } from './contracts.js';

/**
 * One guest call's last request, when it got no answer (refused by the policy, or failed on its
 * way): what a driver's own failure cannot say (a JavaScript driver's fetch says `NetworkError`
 * and no more), kept for the driver call that made it (`CallRecord`). Only the last request
 * counts: one answered after a refused one (a retry) leaves nothing to tell.
 *
 * The URL is kept without what may be a credential (a user and password, a query, a fragment): it
 * is said in the run's error, which reaches the bus, the trace and a door's clients, where the
 * executor's own records never carry a path's query either.
 */
export class LastEgressFailure {
  private last: EgressFailure | undefined;

  failed(url: string, code: string, reason: string): void {
    const shown = shownUrl(url);
    // A reason may quote the URL it refused (`'…' is not an http(s) URL`): it is shown as the URL is.
    this.last = { url: shown, code, reason: reason.replaceAll(url, shown) };
  }

  answered(): void {
    this.last = undefined;
  }

  /**
   * Answered with a redirect, which is handed to the guest and never followed for it: a driver
   * that got one says only that the body was empty or ended early, so the call keeps what it was.
   */
  redirected(url: string, status: number, location: string | undefined): void {
    let to = 'no Location';
    try {
      if (location !== undefined) to = shownUrl(new URL(location, url).href);
    } catch {
      to = 'a Location that does not parse';
    }
    this.last = { url: shownUrl(url), code: 'HTTP-redirect', reason: `answered ${status}, a redirect to ${to}, which is not followed` };
  }

  /** The last failure, if the last request failed. */
  get failure(): EgressFailure | undefined {
    return this.last;
  }
}
