import { describe, expect, it } from 'vitest';
import { doorPublicUrl, sessionUrl } from '../src/door.js';

describe('the URL a door names itself by', () => {
  it.each([
    ['http://127.0.0.1:7730', 'http://localhost:7730'],
    ['http://[::1]:7730', 'http://localhost:7730'],
  ])('names a listener on %s as localhost, as upstream does', (listener, named) => {
    expect(doorPublicUrl(listener)).toBe(named);
  });

  it.each(['http://127.0.0.2:7730', 'http://10.0.0.5:7730', 'http://[fd00::1]:7730', 'http://door.internal:8080'])(
    'keeps any other address %s as it is: localhost need not reach it',
    (listener) => {
      expect(doorPublicUrl(listener)).toBe(listener);
    },
  );

  it.each([
    ['http://0.0.0.0:7730', '192.168.1.20', 'http://192.168.1.20:7730'],
    ['http://[::]:7730', 'fd00::5', 'http://[fd00::5]:7730'],
    ['http://0.0.0.0:7730', undefined, 'http://localhost:7730'],
  ])('names a listener on every interface (%s) by the machine’s own address, %s, which a client can reach', (listener, address, named) => {
    expect(doorPublicUrl(listener, () => address)).toBe(named);
  });

  it('gives a base a session path joins without a doubled slash', () => {
    expect(sessionUrl(doorPublicUrl('http://127.0.0.1:7730/'), 'ses_1')).toBe('http://localhost:7730/sessions/ses_1');
  });
});
