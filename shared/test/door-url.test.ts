import { describe, expect, it } from 'vitest';
import { doorPublicUrl, sessionUrl } from '../src/door.js';

describe('the URL a door names itself by', () => {
  it.each([
    ['http://127.0.0.1:7730', 'http://localhost:7730'],
    ['http://127.0.0.2:7730', 'http://localhost:7730'],
    ['http://[::1]:7730', 'http://localhost:7730'],
  ])('names a loopback listener %s as localhost, as upstream does', (listener, named) => {
    expect(doorPublicUrl(listener)).toBe(named);
  });

  it.each(['http://10.0.0.5:7730', 'http://[fd00::1]:7730', 'http://door.internal:8080'])('keeps any other address %s as it is', (listener) => {
    expect(doorPublicUrl(listener)).toBe(listener);
  });

  it('gives a base a session path joins without a doubled slash', () => {
    expect(sessionUrl(doorPublicUrl('http://127.0.0.1:7730/'), 'ses_1')).toBe('http://localhost:7730/sessions/ses_1');
  });
});
