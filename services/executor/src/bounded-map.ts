/**
 * The most entries the executor keeps in bookkeeping keyed by what a capsule host chose (a task's
 * id, a context's): an honest host names a handful at a time, and a host is the capsule's to
 * break — one naming endless tasks that never end would grow the executor's memory until it
 * failed every session on it.
 */
export const HOST_KEYS_REMEMBERED = 256;

/** Sets `key` as the newest entry, forgetting the oldest once there are more than `limit`. */
export function rememberBounded<V>(map: Map<string, V>, key: string, value: V, limit = HOST_KEYS_REMEMBERED): void {
  map.delete(key);
  map.set(key, value);
  // One set adds at most one entry: at most the oldest goes. (A task forgotten while it still runs
  // is counted, when it ends, as if it had just begun.)
  if (map.size > limit) map.delete(map.keys().next().value as string);
}
