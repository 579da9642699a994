import type { MurmurError } from '@murmur/shared';
import type { ContentfulStatusCode } from 'hono/utils/http-status';

/**
 * The one mapping from a refusal's code to roost's HTTP status, for the registry and the referee
 * alike: what names something that is not there is 404, what could not be taken as asked is 400
 * or 422, what roost's own bus could not do is 503, and anything unforeseen is 500.
 */
export function httpStatusOf(error: MurmurError): ContentfulStatusCode {
  if (error.code.startsWith('E-BUS-')) return 503;
  switch (error.code) {
    case 'E-REG-001':
      return 404;
    case 'E-REG-003':
      return 409;
    case 'E-CAP-001':
    case 'E-CAP-002':
      return 400;
    case 'E-REG-004':
    case 'E-REG-006':
    case 'E-ART-001':
    case 'E-ART-002':
    case 'E-ART-003':
    case 'E-MAN-001':
    case 'E-MAN-002':
    case 'E-MAN-003':
      return 422;
    default:
      return 500;
  }
}
