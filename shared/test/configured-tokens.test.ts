import { describe, expect, it } from 'vitest';
import { MurmurError } from '../src/errors.js';
import { configuredTokenRefusal } from '../src/node/bearer.js';
import { doorAuth } from '../../services/door/src/door-auth.js';
import { dashboardAccess } from '../../services/watcher/src/dashboard/access.js';

/** The refusal a setting's check throws, formatted as the user reads it. */
function refusalOf(check: () => unknown): string {
  try {
    check();
  } catch (error) {
    if (error instanceof MurmurError) return error.format();
    throw error;
  }
  throw new Error('the token was taken');
}

describe('a token a service is configured with', () => {
  // Curl sends these as UTF-8, Node's fetch refuses to send them, and a header is read as latin1:
  // such a token admitted some clients with the right token and refused others.
  const notAscii = ['token€token€token€token€', 'tökentökentökentöken', 'token token\ttoken-token', 'token-token-token-\u0000'];

  it('is refused when it holds a character outside visible ASCII, named by its setting and never shown', () => {
    for (const token of notAscii) {
      const refusal = configuredTokenRefusal(token, { setting: 'MURMUR_ROOST_TOKEN', what: 'publishing', hint: 'use a long random value' });
      expect(refusal?.code, JSON.stringify(token)).toBe('E-CFG-003');
      expect(refusal?.message).toMatch(/^MURMUR_ROOST_TOKEN holds a character that is not visible ASCII \(character \d+\)/);
      expect(refusal?.format()).not.toContain(token);
    }
    expect(configuredTokenRefusal('0123456789abcdef0123456789abcdef', { setting: 'MURMUR_ROOST_TOKEN', what: 'publishing', hint: 'h' })).toBeUndefined();
    expect(configuredTokenRefusal('A-Za-z0-9._~+/=!#$%&*?@^|', { setting: 'MURMUR_ROOST_TOKEN', what: 'publishing', hint: 'h' })).toBeUndefined();
  });

  it('stops a door and a dashboard from starting with such a token, as a short one does', () => {
    const door = refusalOf(() => doorAuth({ MURMUR_DOOR_AUTH: `session, 0123456789abcdef0123, ${notAscii[0]}` }));
    expect(door).toContain("error[E-CFG-003]: MURMUR_DOOR_AUTH's token 3 holds a character that is not visible ASCII (character 6)");
    expect(door).not.toContain('token€');
    expect(refusalOf(() => doorAuth({ MURMUR_DOOR_AUTH: 'xq9zv' }))).toContain(
      "MURMUR_DOOR_AUTH's token 1 is 5 characters long; a door token needs at least 16",
    );
    const dashboard = refusalOf(() => dashboardAccess({ MURMUR_DASHBOARD_TOKEN: notAscii[1] }));
    expect(dashboard).toContain('error[E-CFG-003]: MURMUR_DASHBOARD_TOKEN holds a character that is not visible ASCII (character 2)');
    expect(dashboard).not.toContain('tökentöken');
  });
});
