import { describe, expect, it } from 'vitest';
import { numberSetting } from '@murmur/shared';
import { refusalOf } from '../../test/support/refusals.js';

const MS = { unit: 'milliseconds' };

describe('a number read from the environment', () => {
  it('is the default when unset or blank, and the number when it is one', () => {
    expect(numberSetting({}, 'MURMUR_X_MS', 250, MS)).toBe(250);
    expect(numberSetting({ MURMUR_X_MS: '  ' }, 'MURMUR_X_MS', 250, MS)).toBe(250);
    expect(numberSetting({ MURMUR_X_MS: ' 1500 ' }, 'MURMUR_X_MS', 250, MS)).toBe(1500);
    expect(numberSetting({}, 'MURMUR_X_MS', undefined, MS)).toBeUndefined();
    expect(numberSetting({ MURMUR_X_SECS: '0.5' }, 'MURMUR_X_SECS', 30, { unit: 'seconds', fractional: true })).toBe(0.5);
    expect(numberSetting({ MURMUR_POOL: '0' }, 'MURMUR_POOL', 2, { unit: 'hosts', zero: true })).toBe(0);
  });

  it('is refused with E-CFG-003 naming the variable, its value and what it should be, whenever it is anything else', () => {
    for (const value of ['8s', '64k', '-1', '1e3', '0x10', 'two', '1.5', '0', 'Infinity']) {
      const error = refusalOf(() => numberSetting({ MURMUR_X_MS: value }, 'MURMUR_X_MS', 250, MS));
      expect(error.code, value).toBe('E-CFG-003');
      expect(error.message).toBe(`invalid MURMUR_X_MS: '${value}' is not a whole number of milliseconds above 0`);
      expect(error.path).toBe('MURMUR_X_MS');
      expect(error.hint).toBe('give a whole number of milliseconds above 0, or leave it unset for 250');
    }
    expect(refusalOf(() => numberSetting({ MURMUR_X_SECS: '0' }, 'MURMUR_X_SECS', 30, { unit: 'seconds', fractional: true })).message).toBe(
      "invalid MURMUR_X_SECS: '0' is not a number of seconds above 0",
    );
    expect(refusalOf(() => numberSetting({ MURMUR_X_SECS: '.5' }, 'MURMUR_X_SECS', undefined, { unit: 'seconds', fractional: true })).hint).toBe(
      'give a number of seconds above 0, or leave it unset',
    );
    expect(refusalOf(() => numberSetting({ MURMUR_POOL: '-1' }, 'MURMUR_POOL', 2, { unit: 'hosts', zero: true })).message).toBe(
      "invalid MURMUR_POOL: '-1' is not a whole number of hosts",
    );
  });

  it('is refused as a duration longer than a timer can hold, which node would fire at once', () => {
    expect(numberSetting({ MURMUR_X_MS: String(2 ** 31 - 1) }, 'MURMUR_X_MS', 250, MS)).toBe(2 ** 31 - 1);
    const error = refusalOf(() => numberSetting({ MURMUR_X_MS: String(2 ** 31) }, 'MURMUR_X_MS', 250, MS));
    expect(error.code).toBe('E-CFG-003');
    expect(error.message).toBe("invalid MURMUR_X_MS: '2147483648' milliseconds is longer than a timer can hold (at most 2147483647, about 24 days)");
    expect(error.hint).toBe('give at most 2147483647 milliseconds, or leave it unset for 250');
    const seconds = { unit: 'seconds', fractional: true };
    expect(numberSetting({ MURMUR_X_SECS: '2147483' }, 'MURMUR_X_SECS', 30, seconds)).toBe(2147483);
    expect(refusalOf(() => numberSetting({ MURMUR_X_SECS: '2147483.9' }, 'MURMUR_X_SECS', 30, seconds)).code).toBe('E-CFG-003');
  });

  it('is refused as too large, not as no number, past what is counted exactly', () => {
    const huge = '99999999999999999999';
    expect(refusalOf(() => numberSetting({ MURMUR_X_BYTES: huge }, 'MURMUR_X_BYTES', 512, { unit: 'bytes' })).message).toBe(
      `invalid MURMUR_X_BYTES: '${huge}' bytes is more than can be counted exactly (at most ${Number.MAX_SAFE_INTEGER})`,
    );
    // A duration says the timer's bound, the tighter one.
    expect(refusalOf(() => numberSetting({ MURMUR_X_MS: huge }, 'MURMUR_X_MS', 250, MS)).message).toMatch(/longer than a timer can hold/);
    // So long that it is Infinity to JavaScript: too large all the same.
    const endless = '9'.repeat(400);
    expect(refusalOf(() => numberSetting({ MURMUR_X_HOURS: endless }, 'MURMUR_X_HOURS', undefined, { unit: 'hours', fractional: true })).message).toBe(
      `invalid MURMUR_X_HOURS: '${endless}' hours is more than can be counted exactly (at most ${Number.MAX_SAFE_INTEGER})`,
    );
  });

  it('is refused above the most a setting may be, saying what sets that bound', () => {
    const bytes = { unit: 'bytes', most: { value: 1024, because: 'one answer to a capsule host' } };
    expect(numberSetting({ MURMUR_X_BYTES: '1024' }, 'MURMUR_X_BYTES', 512, bytes)).toBe(1024);
    const error = refusalOf(() => numberSetting({ MURMUR_X_BYTES: '1025' }, 'MURMUR_X_BYTES', 512, bytes));
    expect(error.code).toBe('E-CFG-003');
    expect(error.message).toBe("invalid MURMUR_X_BYTES: '1025' bytes is more than one answer to a capsule host allows (at most 1024)");
    expect(error.hint).toBe('give at most 1024 bytes, or leave it unset for 512');
  });

  it('holds a duration to the tighter of its own bound and a timer’s, naming that one', () => {
    const generous = { unit: 'milliseconds', most: { value: 2 ** 32, because: 'the protocol' } };
    expect(refusalOf(() => numberSetting({ MURMUR_X_MS: '2147483648' }, 'MURMUR_X_MS', 250, generous)).message).toMatch(/longer than a timer can hold/);
    const tight = { unit: 'milliseconds', most: { value: 1000, because: 'the protocol' } };
    expect(refusalOf(() => numberSetting({ MURMUR_X_MS: '1001' }, 'MURMUR_X_MS', 250, tight)).message).toMatch(
      /more than the protocol allows \(at most 1000\)/,
    );
  });
});
