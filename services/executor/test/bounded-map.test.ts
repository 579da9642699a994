import { describe, expect, it } from 'vitest';
import { HOST_KEYS_REMEMBERED, rememberBounded } from '../src/bounded-map.js';

describe('rememberBounded', () => {
  it('keeps at most its limit of entries, forgetting the oldest first', () => {
    const map = new Map<string, number>();
    for (let index = 0; index < HOST_KEYS_REMEMBERED * 4; index += 1) rememberBounded(map, `task-${index}`, index);
    expect(map.size).toBe(HOST_KEYS_REMEMBERED);
    expect(map.has('task-0')).toBe(false);
    expect(map.get(`task-${HOST_KEYS_REMEMBERED * 4 - 1}`)).toBe(HOST_KEYS_REMEMBERED * 4 - 1);
  });

  it('counts a key set again as the newest, so it outlives keys set before it', () => {
    const map = new Map<string, number>();
    rememberBounded(map, 'a', 1, 2);
    rememberBounded(map, 'b', 2, 2);
    rememberBounded(map, 'a', 3, 2);
    rememberBounded(map, 'c', 4, 2);
    expect([...map.entries()]).toEqual([
      ['a', 3],
      ['c', 4],
    ]);
  });
});
